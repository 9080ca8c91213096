"""Cold `hetc inspect MODEL` wall time (a fresh process each run, capture cache off), median of several runs.

Usage: python benchmarks/inspect_speed.py [MODEL ...] [--runs N] [--record]
(`--record`: store each row in benchmarks/results/planning.json, BENCHMARKS.md's planning-speed table)
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time

from results import record


def cold_seconds(args: list[str]) -> float:
    t = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "hetc.cli", *args], check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env={**os.environ, "HETC_CACHE_DIR": "off"}
    )
    return time.perf_counter() - t


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("models", nargs="*", default=["llama-3.1-70b", "llama-3.1-405b", "mixtral-8x7b"])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--record", action="store_true", help="store each row in benchmarks/results/planning.json")
    a = ap.parse_args()
    print(f"{'command':72s} {'median s':>9s} {'min s':>7s} {'max s':>7s}")
    for m in a.models:
        for cmd in (["inspect", m, "--json"], ["plan", "--profiles", "examples/mixed-rack.yaml", m, "-o", "/tmp/hetc-bench-plan.json"]):
            times = [cold_seconds(cmd) for _ in range(a.runs)]
            label = "hetc " + " ".join(c for c in cmd if not c.startswith("/tmp"))
            print(f"{label:72s} {statistics.median(times):9.2f} {min(times):7.2f} {max(times):7.2f}")
            if a.record:
                command = f".venv/bin/python benchmarks/inspect_speed.py --runs {a.runs}"
                row = {"median_s": statistics.median(times), "min_s": min(times), "max_s": max(times), "runs": a.runs, "command": command, "record": None}
                record("planning", label, row)


if __name__ == "__main__":
    main()
