"""Plan quality and planner speed over a table of heterogeneous scenarios.

For each scenario: the plan's figure for its objective (output tok/s, or ms TPOT, USD per M
output tokens), the bound in that unit and how close the plan is (plan/bound when maximising,
bound/plan when minimising: 1.0 is provably optimal), every
baseline, solver seconds and the whole `hetc plan` command's seconds (a fresh process), each
as wall time and as CPU time (a shared host stretches the first), the CPU seconds `--time-limit`
bounds (search + bound + the rest after the capture: plan.json `solver.time`, issue 31) against
the limit and the phases its deadline stopped, and the 1-minute load average after the run.

Usage: python benchmarks/solver_scenarios.py [--only NAME[,NAME…]] [--record] [--generated tune|tune-wide|explore|check]
[--plans DIR] [-- EXTRA hetc plan ARGS] (e.g. `-- --disaggregate off` to plan without prefill/decode pools).
`--record` stores each row in benchmarks/results/solver.json, which BENCHMARKS.md's solver table is
drawn from (tables.py). `--generated tune|tune-wide|explore|check` runs seeded random clusters instead of the
table (benchmarks/generated_clusters.py): `tune` and `tune-wide` are the blocks solver changes may be tuned on
(12 and 32 seeds), `explore` a pool of 1,000 more to draw one family's analogues from, `check` the block that is
only ever reported, never tuned on; `--seeds A,B` picks seeds of the block.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from generated_clusters import CHECK_SEEDS, EXPLORE_SEEDS, TUNE_SEEDS, TUNE_WIDE_SEEDS, Case, generate
from results import record

from hetc.cluster import load_profile
from hetc.engine import EngineName, load_engine

SCENARIOS = [
    # name, cluster, model, extra args
    ("8b-6dev-bf16", "examples/small-mixed.yaml", "llama-3.1-8b", []),
    ("70b-24dev-bf16", "examples/mixed-rack.yaml", "llama-3.1-70b", []),
    ("70b-24dev-fp8", "examples/mixed-rack.yaml", "llama-3.1-70b", ["--dtype", "fp8"]),
    ("qwen72b-24dev-bf16", "examples/mixed-rack.yaml", "qwen2.5-72b", []),
    ("mixtral-24dev-bf16", "examples/mixed-rack.yaml", "mixtral-8x7b", []),
    ("70b-legacy24-bf16", "examples/legacy-mix.yaml", "llama-3.1-70b", []),
    ("405b-42dev-bf16", "examples/big-mixed.yaml", "llama-3.1-405b", []),
    ("405b-64dev-fp8", "examples/fleet-64.yaml", "llama-3.1-405b", ["--dtype", "fp8"]),
    # many device types (issue 13): 4, 5, 6 and 8 types of 3 vendors, 8 devices each
    ("70b-types4-32", "benchmarks/clusters/types4-32.yaml", "llama-3.1-70b", []),
    ("70b-types5-40", "benchmarks/clusters/types5-40.yaml", "llama-3.1-70b", []),
    ("70b-types6-24", "benchmarks/clusters/types6-24.yaml", "llama-3.1-70b", []),
    ("70b-types6-48", "benchmarks/clusters/types6-48.yaml", "llama-3.1-70b", []),
    ("405b-types8-64", "benchmarks/clusters/types8-64.yaml", "llama-3.1-405b", ["--dtype", "fp8"]),
    # issue 31: 5 types over 7 nodes, two generations of NVIDIA and of AMD, composed from the catalog
    ("405b-types5-42-fp8", "benchmarks/clusters/types5-42.yaml", "llama-3.1-405b", ["--dtype", "fp8"]),
    # the latency and cost objectives (issue 13): their own figure and bound (ms TPOT, USD per M tokens)
    ("70b-24dev-latency", "examples/mixed-rack.yaml", "llama-3.1-70b", ["--objective", "latency"]),
    ("70b-24dev-latency-2k", "examples/mixed-rack.yaml", "llama-3.1-70b", ["--objective", "latency", "--min-tok-s", "2000"]),
    ("70b-24dev-cost", "examples/mixed-rack.yaml", "llama-3.1-70b", ["--objective", "cost"]),
    ("70b-24dev-cost-10k", "examples/mixed-rack.yaml", "llama-3.1-70b", ["--objective", "cost", "--min-tok-s", "10000"]),
    ("70b-types6-48-latency", "benchmarks/clusters/types6-48.yaml", "llama-3.1-70b", ["--objective", "latency"]),
    ("70b-types6-48-latency-4k", "benchmarks/clusters/types6-48.yaml", "llama-3.1-70b", ["--objective", "latency", "--min-tok-s", "4000"]),
    ("70b-types6-48-cost", "benchmarks/clusters/types6-48.yaml", "llama-3.1-70b", ["--objective", "cost"]),
    ("70b-types6-48-cost-20k", "benchmarks/clusters/types6-48.yaml", "llama-3.1-70b", ["--objective", "cost", "--min-tok-s", "20000"]),
]


class PlanFailed(Exception):
    """`hetc plan` exited non-zero; the message is its exit status and last stderr line."""


ENGINE = EngineName.VLLM  # the figures the solver tables were made with before engines were an input


def engine_for(case: Case) -> EngineName:
    """ENGINE where it serves every device of a generated case, else hetc (which serves every backend:
    vLLM's figures cover no OpenVINO device, and a case drawing one would fail to plan)."""
    backends = {load_profile(n["device"]).backend for n in case.cluster["nodes"]}
    return ENGINE if backends <= set(load_engine(ENGINE).backends) else EngineName.HETC


def run(cluster: str, model: str, extra: list[str], keep: Path | None = None) -> tuple[dict, float, float]:
    """plan.json, and the command's wall and CPU seconds (a fresh process).

    Args:
        keep: also write plan.json here (its solver notes say where the search stopped).

    Raises:
        PlanFailed: the command failed (a generated case the planner refuses is a finding, not a crash).
    """
    with tempfile.NamedTemporaryFile(suffix=".json") as f:
        t, cpu = time.perf_counter(), resource.getrusage(resource.RUSAGE_CHILDREN)
        done = subprocess.run(
            # extra may override the engine
            [sys.executable, "-m", "hetc.cli", "plan", "--profiles", cluster, model, "-o", f.name, "--engine", ENGINE.value, *extra],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        if done.returncode:
            raise PlanFailed(f"exit {done.returncode}: {(done.stderr.strip().splitlines() or [''])[-1]}")
        if keep is not None:
            keep.write_text(Path(f.name).read_text())
        wall, after = time.perf_counter() - t, resource.getrusage(resource.RUSAGE_CHILDREN)
        return json.load(open(f.name)), wall, after.ru_utime + after.ru_stime - cpu.ru_utime - cpu.ru_stime


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--only", help="scenario names to run, comma-separated (default: all)")
    ap.add_argument("--record", action="store_true", help="store each row in benchmarks/results/solver.json (BENCHMARKS.md's table)")
    ap.add_argument("--generated", choices=("tune", "tune-wide", "explore", "check"), help="run a block of generated clusters instead of the table")
    ap.add_argument("--seeds", help="with --generated: only these seeds of the block, comma-separated")
    ap.add_argument("--plans", type=Path, help="keep each plan.json in this folder, as SCENARIO.json")
    ap.add_argument("extra", nargs="*", help="more `hetc plan` arguments, after --")
    a = ap.parse_args()
    if a.plans:
        a.plans.mkdir(parents=True, exist_ok=True)
    scenarios = SCENARIOS
    tmp = tempfile.TemporaryDirectory()
    if a.generated:
        block = {"tune": TUNE_SEEDS, "tune-wide": TUNE_WIDE_SEEDS, "explore": EXPLORE_SEEDS, "check": CHECK_SEEDS}[a.generated]
        seeds = [int(s) for s in a.seeds.split(",")] if a.seeds else list(block)
        if not set(seeds) <= set(block):
            ap.error(f"--seeds {a.seeds}: not all in the {a.generated} block ({block.start}-{block.stop - 1})")
        cases = [generate(s) for s in seeds]
        scenarios = [(c.name, str(c.write(Path(tmp.name))), c.model, ["--dtype", c.dtype, "--engine", engine_for(c).value]) for c in cases]
    head = (
        "scenario",
        "devices",
        "plan",
        "bound",
        "plan/bound",
        "pools",
        "engine",
        "uniform",
        "mem-prop",
        "best-homog",
        "plan/mem-prop",
        "solver s",
        "solver CPU s",
        "command s",
        "command CPU s",
        "limited CPU s / limit",
        "stopped by limit",
        "load",
    )
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    closes: list[float] = []
    failed: list[str] = []
    for name, cluster, model, extra in scenarios:
        if a.only and name not in a.only.split(","):
            continue
        try:
            keep = a.plans / f"{name}.json" if a.plans else None
            plan, wall, cpu = run(cluster, model, extra + a.extra, keep)
        except PlanFailed as e:
            failed.append(name)
            print(f"| {name} | FAILED {e} |", flush=True)
            continue
        devices = sum(n["count"] for n in plan["cluster"]["nodes"])
        tok = plan["predicted"]["output_tok_s"]
        b = plan["baselines"]
        mp = b["memory_proportional"]["output_tok_s"]
        phases = [p["phase"] for p in plan["pipelines"] for _ in range(p["replicas"])]
        pools = f"{phases.count('prefill')}P+{phases.count('decode')}D" if "decode" in phases else "–"
        value, bound = plan["solver"]["objective"], plan["solver"]["bound"]
        close = value / bound if plan["objective"]["sense"] == "max" else bound / value
        closes.append(close)
        unit = {"throughput": "tok/s", "latency": "ms", "cost": "USD/M"}.get(plan["objective"]["name"], "")
        row = (
            name,
            str(devices),
            f"{value:,.4g} {unit}",
            f"{bound:,.4g}",
            f"{close:.3f}",
            pools,
            "/".join(sorted({n.get("engine", "–") for n in plan["cluster"]["nodes"]})),
            f"{b['uniform']['output_tok_s']:,.0f}",
            f"{mp:,.0f}",
            f"{b['best_homogeneous']['output_tok_s']:,.0f}",
            f"{tok / mp:.2f}" if mp else "∞ (infeasible)",
            f"{plan['solver']['seconds']:.1f}",
            f"{plan['solver']['cpu_seconds']:.1f}",
            f"{wall:.1f}",
            f"{cpu:.1f}",
            f"{t['cpu_s']:.1f} / {t['limit_cpu_s']:g}" if (t := plan["solver"].get("time")) else "–",
            ", ".join(t["stopped_by_limit"]) or "none" if t else "–",
            f"{os.getloadavg()[0]:.1f}",
        )
        print("| " + " | ".join(row) + " |", flush=True)
        if a.record and not a.extra and not a.generated:  # the table's rows are the scenarios as listed
            record(
                "solver",
                name,
                {
                    "types": len({n["device"] for n in plan["cluster"]["nodes"]}),
                    "dtype": plan["model"]["dtype"],
                    "objective": plan["objective"]["name"],
                    "min_tok_s": float(extra[extra.index("--min-tok-s") + 1]) if "--min-tok-s" in extra else None,
                    "unit": unit if unit != "ms" else "ms TPOT",
                    "plan": value,
                    "bound": bound,
                    "plan_over_bound": close,
                    "solver_s": plan["solver"]["seconds"],
                    "solver_cpu_s": plan["solver"]["cpu_seconds"],
                    "command_s": wall,
                    "record": None,
                },
            )
    if closes:
        hit = sum(c >= 0.97 for c in closes)
        median = sorted(closes)[len(closes) // 2]
        share = f"{hit} ({hit / len(closes):.0%})"
        print(f"\n{len(closes)} planned, {len(failed)} failed {failed or ''}: plan/bound >= 0.97 on {share}, min {min(closes):.3f}, median {median:.3f}")


if __name__ == "__main__":
    main()
