"""hetc's GPU predictions against public measured throughput of other engines.

For each public figure below (engine, devices, model, dtype, input/output lengths, where it
came from), run hetc twice on the same devices and workload:
- at the public run's own configuration: `hetc plan --placement SPEC [--batch N]` (one pipeline,
  one tensor-parallel group of the devices the run used, the run's batch where the source
  states it or the engine's cap on running sequences, else the best batch that fits);
- as `hetc plan` would run it (its own choice of parallelism, pools and batch).
It prints a markdown table with pred/public − 1, then the median |error| over the figures held
to the target (gathered after the cost model was frozen), overall and per vendor, with the
figures of the first comparison (gathered before) reported beside. Every public figure is output
tokens per second of the whole system, all its devices together (`predicted.output_tok_s`).

The cost model and profiles were frozen at FROZEN (the commit recorded in BENCHMARKS.md) before
any figure held to the target was looked at; the script says if any of FROZEN_PATHS has moved
since. Nothing in the cost model is fitted to these figures and there are no per-case constants.

Usage: python benchmarks/gpu_public.py [--only NAME] [--no-plan]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CLUSTERS = "benchmarks/public_gpu"
FROZEN = "11b21d73de232c2e5dae1768ec76ff18e0294993"  # the cost-model commit, made before any held figure was looked at
# what a prediction reads: the profiles, the cost model, the saturation model and the scheduling numbers
FROZEN_PATHS = ("hardware_profiles", "partitioner/cost_models/analytic.py", "partitioner/cost_models/memory.py",
                "partitioner/cost_models/links.py", "partitioner/cost_models/curves.py", "partitioner/simulate.py",
                "partitioner/fusion.py", "partitioner/op_records.py", "partitioner/units.py", "partitioner/graph.py",
                "hetc/execution.py", "hetc/efficiency.py", "hetc/scheduling.py")

SOURCES = {
    "trt17": "TensorRT-LLM v0.17 perf overview (docs/source/performance/perf-overview.md @ NVIDIA/TensorRT-LLM "
             "258c7540): trtllm-bench throughput, infinite request rate, FP8 engines with FP8 KV (A100: FP16); "
             "'Token Throughput' = output tok/s of the system",
    "gaudi": "Intel, 'Model Performance Data for Intel Gaudi 2 AI Accelerators' (intel.com/content/www/us/en/"
             "developer/platform/gaudi/model-performance-gaudi2-inference.html), SynapseAI 1.18.0, fixed batch; "
             "⚠ metric not named on the page, read as output tok/s (optimum-habana run_generation: "
             "batch × new tokens / time)",
    "oci": "Oracle, 'Serving Llama 3.1 405B model with AMD Instinct MI300X Accelerators' (blogs.oracle.com/"
           "cloud-infrastructure, 2024-10-10): vLLM benchmark_throughput.py, 8×MI300X TP8, Llama 3.1 405B FP8, "
           "'Output throughput in TPS'; ⚠ KV dtype and max-num-seqs not stated: batch 256 = vLLM's "
           "default max_num_seqs assumed (the post's batch-256 latency run gives 1,846 tok/s at 128/128)",
}


@dataclass(frozen=True, slots=True)
class Case:
    """One public figure and the configuration it was measured at."""

    name: str
    cluster: str  # benchmarks/public_gpu/<cluster>.yaml: one node of the run's devices
    model: str  # a catalog name (hardware_profiles/models)
    dtype: str
    isl: int
    osl: int
    public: float  # output tok/s of the whole system
    source: str  # a SOURCES key
    vendor: str  # nvidia | amd | intel
    placement: str  # the run's parallelism as a --placement SPEC
    batch: int | None  # the run's batch (or the engine's cap on running sequences); None: the best that fits
    held: bool  # gathered after the freeze: held to the target
    note: str = ""


CASES = [
    Case("h100-8b-1000/1000", "1xh100", "llama-3.1-8b", "fp8", 1000, 1000, 15244.78, "trt17", "nvidia", "a:0", None, False),
    Case("h100-8b-128/2048", "1xh100", "llama-3.1-8b", "fp8", 128, 2048, 21109.38, "trt17", "nvidia", "a:0", None, False),
    Case("h100-8b-2048/128", "1xh100", "llama-3.1-8b", "fp8", 2048, 128, 3556.73, "trt17", "nvidia", "a:0", None, False),
    Case("h200-8b-1000/1000", "1xh200", "llama-3.1-8b", "fp8", 1000, 1000, 17537.96, "trt17", "nvidia", "a:0", None, False),
    Case("l40s-8b-1000/1000", "1xl40s", "llama-3.1-8b", "fp8", 1000, 1000, 4054.71, "trt17", "nvidia", "a:0", None, False),
    Case("a100-8b-1000/1000-fp16", "1xa100", "llama-3.1-8b", "fp16", 1000, 1000, 3786.83, "trt17", "nvidia", "a:0", None,
         False, "FP16"),
    Case("h200-70b-1000/1000", "1xh200", "llama-3.1-70b", "fp8", 1000, 1000, 2823.45, "trt17", "nvidia", "a:0", None, False),
    Case("2xh100-70b-1000/1000", "2xh100", "llama-3.1-70b", "fp8", 1000, 1000, 4390.53, "trt17", "nvidia", "a:0-1", None,
         False),
    Case("gaudi2-8b-128/2048", "1xgaudi2", "llama-3.1-8b", "fp8", 128, 2048, 11138, "gaudi", "intel", "a:0", 289, False),
    Case("gaudi2-8b-2048/2048", "1xgaudi2", "llama-3.1-8b", "fp8", 2048, 2048, 5511, "gaudi", "intel", "a:0", 155, False),
    Case("8xmi300x-405b-128/128", "8xmi300x", "llama-3.1-405b", "fp8", 128, 128, 1993, "oci", "amd", "a:0-7", 256, False,
         "batch ≤ 256 ⚠"),
    Case("8xmi300x-405b-128/2048", "8xmi300x", "llama-3.1-405b", "fp8", 128, 2048, 2794, "oci", "amd", "a:0-7", 256, False,
         "batch ≤ 256 ⚠"),
]


def frozen_state() -> str:
    """Whether the frozen paths still match FROZEN (working tree included)."""
    moved = subprocess.run(["git", "-C", str(ROOT), "diff", "--quiet", FROZEN, "--", *FROZEN_PATHS]).returncode
    return "unchanged" if moved == 0 else "CHANGED since the freeze"


def plan(case: Case, *extra: str) -> dict:
    """`hetc plan` of the case's cluster and workload (with `extra` flags), as plan.json."""
    with tempfile.NamedTemporaryFile(suffix=".json") as f:
        subprocess.run([sys.executable, "-m", "hetc.cli", "plan", "--profiles", f"{CLUSTERS}/{case.cluster}.yaml",
                        case.model, "--dtype", case.dtype, "--input-len", str(case.isl), "--output-len", str(case.osl),
                        "-o", f.name, *extra], check=True, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        return json.load(open(f.name))


def at_public_config(case: Case) -> dict:
    return plan(case, "--placement", case.placement, *(("--batch", str(case.batch)) if case.batch else ()))


def shape(p: dict) -> str:
    """The plan in brief: replicas × (stages × TP), batch per pipeline (pools marked P / D)."""
    mark = {"prefill": "P ", "decode": "D "}
    return ", ".join(f"{mark.get(pl['phase'], '')}{pl['replicas']}×[{'+'.join('tp' + str(s['tp']) for s in pl['stages'])}]"
                     f" b{pl['batch']}" for pl in p["pipelines"])


def medians(errs: list[tuple[Case, float]]) -> str:
    if not errs:
        return "no figures"
    e = [x for _, x in errs]
    return (f"median |pred/public − 1| = {statistics.median(abs(x) for x in e):.1%} over {len(e)} "
            f"(signed {statistics.median(e):+.1%}, range {min(e):+.0%} … {max(e):+.0%})")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--only", help="one case by name")
    ap.add_argument("--no-plan", action="store_true", help="skip hetc plan's own choice (the slower half)")
    a = ap.parse_args()
    print(f"cost model frozen at {FROZEN[:12]}: {frozen_state()}\n")
    cols = ("case", "vendor", "public out tok/s", "public run", "hetc at public config", "−1", "hetc plan", "−1",
            "hetc plan's choice", "held", "source")
    print("| " + " | ".join(cols) + " |")
    print("|---|---|---:|---|---:|---:|---:|---:|---|---|---|")
    at: list[tuple[Case, float]] = []
    own: list[tuple[Case, float]] = []
    for c in CASES:
        if a.only and a.only != c.name:
            continue
        cfg = at_public_config(c)["predicted"]["output_tok_s"]
        at.append((c, cfg / c.public - 1))
        mine, choice = "", ""
        if not a.no_plan:
            p = plan(c)
            mine, choice = f"{p['predicted']['output_tok_s']:,.0f} | {p['predicted']['output_tok_s'] / c.public - 1:+.0%}", shape(p)
            own.append((c, p["predicted"]["output_tok_s"] / c.public - 1))
        run = f"{c.placement}" + (f" b{c.batch}" if c.batch else "") + (f" ({c.note})" if c.note else "")
        print(f"| {c.name} | {c.vendor} | {c.public:,.0f} | {run} | {cfg:,.0f} | {cfg / c.public - 1:+.0%} | "
              f"{mine or '– | –'} | {choice or '–'} | {'yes' if c.held else 'before'} | {c.source} |", flush=True)
    print()
    held = [(c, e) for c, e in at if c.held]
    print(f"- at the public configuration, held figures: {medians(held)}")
    for v in ("nvidia", "amd", "intel"):
        print(f"  - {v}: {medians([(c, e) for c, e in held if c.vendor == v])}")
    print(f"- at the public configuration, the first comparison's figures: {medians([(c, e) for c, e in at if not c.held])}")
    if own:
        print(f"- hetc plan's own choice vs the public figure, held: {medians([(c, e) for c, e in own if c.held])}")
    if held:
        worst = max(held, key=lambda ce: abs(ce[1]))
        print(f"- worst held case: {worst[0].name} {worst[1]:+.1%}")
    print("\nSources:")
    for k, v in SOURCES.items():
        print(f"- {k}: {v}")


if __name__ == "__main__":
    main()
