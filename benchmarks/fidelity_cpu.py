"""Cost-model fidelity on this machine's CPU: fit a profile, then compare its predictions with
held-out measurements (`hetc profile --device cpu --validate`), printed as markdown for
BENCHMARKS.md.

Usage: python benchmarks/fidelity_cpu.py [--threads N] [--quick] [--executor auto|openvino|torch] [-o out/profile-cpu.yaml]
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import time
from pathlib import Path


def _lscpu() -> tuple[str, str]:
    try:
        text = subprocess.run(["lscpu"], capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return "unknown", "?"
    model = re.search(r"^Model name:\s*(.+)$", text, re.M)
    cpus = re.search(r"^CPU\(s\):\s*(\d+)$", text, re.M)
    return (model.group(1).strip() if model else "unknown"), (cpus.group(1) if cpus else "?")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=None, help="threads to measure with (default: all cores)")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument(
        "--executor",
        choices=("auto", "openvino", "torch"),
        default="auto",
        help="what runs the measured ops and steps (hetc profile --executor; auto: what serves cpu stages)",
    )
    ap.add_argument("-o", "--output", default="out/profile-cpu.yaml")
    a = ap.parse_args()
    Path(a.output).parent.mkdir(parents=True, exist_ok=True)
    cmd = ["hetc", "profile", "--device", "cpu", "--validate", "-o", a.output, "--json"]
    cmd += ["--threads", str(a.threads)] if a.threads else []
    cmd += ["--quick"] if a.quick else []
    cmd += ["--executor", a.executor] if a.executor != "auto" else []
    t0 = time.perf_counter()
    r = subprocess.run([sys.executable, "-m", "hetc.cli", *cmd[1:]], capture_output=True, text=True)
    if r.returncode != 0:
        sys.stderr.write(r.stderr)
        return r.returncode
    doc = json.loads(r.stdout)["fidelity"]
    model, cpus = _lscpu()
    m = doc["model"]
    print(f"Command: `{' '.join(cmd)}` ({time.perf_counter() - t0:.0f} s, fit and report)  ")
    print(f"Machine: {model} (`lscpu`), {cpus} cores, {doc['machine']['threads']} thread(s) measured, torch {doc['machine']['torch']}  ")
    load = doc["machine"].get("foreign_load")
    if load is not None:
        print(f"Other processes' share of the CPU while the report measured: {load:.0%}  ")
    print(
        f"Whole steps: transformers Llama, hidden {m['hidden_size']}, {m['num_hidden_layers']} layers, "
        f"{m['num_attention_heads']}/{m['num_key_value_heads']} heads, intermediate {m['intermediate_size']}, "
        f"vocab {m['vocab_size']}, fp32, random weights\n"
    )
    print("| class | cases | median \\|pred/meas − 1\\| | max | target | |")
    print("|---|---:|---:|---:|---:|---|")
    for cls, v in doc["classes"].items():
        print(f"| {cls} | {v['cases']} | {v['median_error']:.1%} | {v['max_error']:.1%} | ≤ {v['target']:.0%} | {'ok' if v['ok'] else 'over'} |")
    print("\n| step | predicted ms | measured ms | pred/meas |")
    print("|---|---:|---:|---:|")
    for row in doc["rows"]:
        if row["class"].endswith("step"):
            print(f"| {row['class']} {row['case']} | {row['predicted_ms']:.1f} | {row['measured_ms']:.1f} | {row['ratio']:.3f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
