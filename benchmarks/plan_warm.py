"""Whole `hetc plan` command, cold capture vs warm capture cache, run alternately (paired).

    .venv/bin/python benchmarks/plan_warm.py [--runs 5] [--profiles examples/mixed-rack.yaml] [MODEL]

Cold: an empty cache directory each run (capture + solve + baselines). Warm: the cache filled by
a first run. Prints each run's wall seconds, the medians and the median of the paired ratios.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HETC = str(Path(sys.executable).with_name("hetc"))


def _run(model: str, profiles: str, cache: str, out: str) -> float:
    env = {**os.environ, "HETC_CACHE_DIR": cache}
    t0 = time.perf_counter()
    subprocess.run([HETC, "plan", "--profiles", profiles, model, "-o", out], env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model", nargs="?", default="llama-3.1-70b")
    ap.add_argument("--profiles", default="examples/mixed-rack.yaml")
    ap.add_argument("--runs", type=int, default=5)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        warm_dir, out = f"{tmp}/warm", f"{tmp}/plan.json"
        _run(a.model, a.profiles, warm_dir, out)  # fills the warm cache
        cold, warm = [], []
        for i in range(a.runs):
            cold_dir = f"{tmp}/cold{i}"
            cold.append(_run(a.model, a.profiles, cold_dir, out))
            shutil.rmtree(cold_dir, ignore_errors=True)
            warm.append(_run(a.model, a.profiles, warm_dir, out))
            print(f"run {i + 1}: cold {cold[-1]:.2f} s, warm {warm[-1]:.2f} s", flush=True)
    ratios = [w / c for w, c in zip(warm, cold)]
    print(
        f"{a.model} on {a.profiles}, {os.cpu_count()} cores: cold median {statistics.median(cold):.2f} s, "
        f"warm median {statistics.median(warm):.2f} s, warm/cold median {statistics.median(ratios):.2f}"
    )


if __name__ == "__main__":
    main()
