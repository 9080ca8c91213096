"""Speculative planning on the catalog: llama-3.1-8b drafting llama-3.1-70b on mixed clusters.

For each scenario, `hetc plan --draft llama-3.1-8b --acceptance A` as a fresh process, `--runs` times:
whether the plan speculates and where the drafter sits, the predicted gain over the plan without
speculation on the same cluster (output tok/s and tok/s per user = 1000 / TPOT), plan/bound (bound/plan
when minimising), the solver's seconds (both searches) and the whole command's; medians over the runs,
and the 1-minute load average after them (the host is shared).

Usage: python benchmarks/speculation_planning.py [--runs 3] [--only NAME[,NAME…]]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

SCENARIOS = [
    # name, cluster, extra hetc plan args
    ("h200-drafts-cap8", "benchmarks/clusters/h100x2-h200-sxm.yaml", ["--max-num-seqs", "8"]),
    ("l40s-drafts-cap8", "benchmarks/clusters/h100x2-l40s.yaml", ["--max-num-seqs", "8"]),
    ("h200-drafts-latency", "benchmarks/clusters/h100x2-h200-sxm.yaml", ["--objective", "latency"]),
    ("h200-drafts-throughput", "benchmarks/clusters/h100x2-h200-sxm.yaml", []),
    ("24dev-cap16", "examples/mixed-rack.yaml", ["--max-num-seqs", "16"]),
]


def run(cluster: str, extra: list[str], alpha: float) -> dict:
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "plan.json")
        cmd = [sys.executable, "-m", "hetc.cli", "plan", "llama-3.1-70b", "--profiles", cluster, "--draft", "llama-3.1-8b", "--acceptance", str(alpha)]
        t0 = time.perf_counter()
        subprocess.run([*cmd, "-o", out, *extra], check=True, capture_output=True)
        wall = time.perf_counter() - t0
        p = json.load(open(out))
    s, base = p["speculation"], p["baselines"]
    other = base.get("no_speculation") or base["speculation"]
    with_, without = (p["predicted"], other) if s else (other, p["predicted"])
    sense = p["objective"]["sense"]
    ratio = p["solver"]["objective"] / p["solver"]["bound"] if sense == "max" else p["solver"]["bound"] / p["solver"]["objective"]
    drafters = [s["drafter"], *s["drafters"]] if s else []
    target = [t["devices"] for pl in p["pipelines"] for t in pl["stages"]]
    where = [f"{st['profile']}×{st['tp']}" + (" beside target" if st["devices"] in target else " alone") for d in drafters for st in d["stages"]]
    return {
        "speculates": bool(s),
        "drafter": ", ".join(where),
        "gain_tok_s": with_["output_tok_s"] / without["output_tok_s"],
        "gain_per_user": without["tpot_ms"] / with_["tpot_ms"],
        "plan_over_bound": ratio,
        "solver_s": p["solver"]["seconds"],
        "command_s": wall,
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--alpha", type=float, default=0.7)
    ap.add_argument("--only", default="")
    a = ap.parse_args()
    only = set(a.only.split(",")) - {""}
    print("| scenario | speculates | drafter | gain tok/s | gain tok/s per user | plan/bound | solver s | command s |")
    print("|---|---|---|---|---|---|---|---|")
    for name, cluster, extra in SCENARIOS:
        if only and name not in only:
            continue
        rows = [run(cluster, extra, a.alpha) for _ in range(a.runs)]
        med = {k: statistics.median(r[k] for r in rows) for k in ("gain_tok_s", "gain_per_user", "plan_over_bound", "solver_s", "command_s")}
        r0 = rows[0]
        print(
            f"| {name} | {'yes' if r0['speculates'] else 'no'} | {r0['drafter'] or '—'} | {med['gain_tok_s']:.2f}× | {med['gain_per_user']:.2f}× | "
            f"{med['plan_over_bound']:.3f} | {med['solver_s']:.2f} | {med['command_s']:.1f} |"
        )
    print(f"load average (1 min) after: {os.getloadavg()[0]:.2f}; α {a.alpha}, K 4, {a.runs} runs each (medians)")


if __name__ == "__main__":
    main()
