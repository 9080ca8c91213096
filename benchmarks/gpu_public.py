"""hetc's GPU predictions against public measured throughput of other engines.

For each public figure below (engine, devices, model, dtype, input/output lengths, the
metric it reports, where it came from), run `hetc plan` on the same devices and workload
and print the matching predicted figure beside it: a markdown table with pred/public − 1,
then the median |error|. Every public figure is output tokens/s of the whole system
(all its GPUs together), which is what `predicted.output_tok_s` is.

`hetc plan` chooses its own parallelism and batch (the best that fits), which need not be
the public run's. So two more columns run hetc's cost model, unchanged, in the public run's
configuration (one pipeline, one tensor-parallel group of all the devices, the public batch
where the source states it, else the largest that fits): once as frozen, once with the
profile's per-kernel `launch_overhead` set to 0 — a diagnostic of how much of the error
that one term explains for engines that replay CUDA/HPU graphs, not a correction.

The profiles were frozen at FROZEN before any public figure was looked at; the script
prints the current commit of hardware_profiles/ and says so if it has moved since.

Usage: python benchmarks/gpu_public.py [--only CASE]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from dataclasses import replace
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CLUSTERS = "benchmarks/public_gpu"
FROZEN = "4a6e0e36af7edb92081426d504c7ab40e67dd667"  # `git log -1 --format=%H -- hardware_profiles` before comparing

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

CASES = [
    # case, cluster, model, dtype, input, output, public output tok/s, source, public run (TP = all devices;
    # batch if the source fixed one: None = the largest that fits)
    ("h100-8b-1000/1000", "1xh100", "llama-3.1-8b", "fp8", 1000, 1000, 15244.78, "trt17", "TP1", None),
    ("h100-8b-128/2048", "1xh100", "llama-3.1-8b", "fp8", 128, 2048, 21109.38, "trt17", "TP1", None),
    ("h100-8b-2048/128", "1xh100", "llama-3.1-8b", "fp8", 2048, 128, 3556.73, "trt17", "TP1", None),
    ("h200-8b-1000/1000", "1xh200", "llama-3.1-8b", "fp8", 1000, 1000, 17537.96, "trt17", "TP1", None),
    ("l40s-8b-1000/1000", "1xl40s", "llama-3.1-8b", "fp8", 1000, 1000, 4054.71, "trt17", "TP1", None),
    ("a100-8b-1000/1000-fp16", "1xa100", "llama-3.1-8b", "fp16", 1000, 1000, 3786.83, "trt17", "TP1, FP16", None),
    ("h200-70b-1000/1000", "1xh200", "llama-3.1-70b", "fp8", 1000, 1000, 2823.45, "trt17", "TP1", None),
    ("2xh100-70b-1000/1000", "2xh100", "llama-3.1-70b", "fp8", 1000, 1000, 4390.53, "trt17", "TP2", None),
    ("gaudi2-8b-128/2048", "1xgaudi2", "llama-3.1-8b", "fp8", 128, 2048, 11138, "gaudi", "batch 289", 289),
    ("gaudi2-8b-2048/2048", "1xgaudi2", "llama-3.1-8b", "fp8", 2048, 2048, 5511, "gaudi", "batch 155", 155),
    ("8xmi300x-405b-128/128", "8xmi300x", "llama-3.1-405b", "fp8", 128, 128, 1993, "oci", "TP8, batch ≤ 256 ⚠", 256),
    ("8xmi300x-405b-128/2048", "8xmi300x", "llama-3.1-405b", "fp8", 128, 2048, 2794, "oci", "TP8, batch ≤ 256 ⚠", 256),
]


def profiles_commit() -> tuple[str, bool]:
    """Last commit touching hardware_profiles/, and whether the working tree differs from it."""
    git = ["git", "-C", str(ROOT)]
    head = subprocess.run([*git, "log", "-1", "--format=%H", "--", "hardware_profiles"],
                          capture_output=True, text=True).stdout.strip()
    dirty = subprocess.run([*git, "status", "--porcelain", "--", "hardware_profiles"],
                           capture_output=True, text=True).stdout.strip()
    return head, bool(dirty)


def plan(cluster: str, model: str, dtype: str, isl: int, osl: int) -> dict:
    with tempfile.NamedTemporaryFile(suffix=".json") as f:
        subprocess.run([sys.executable, "-m", "hetc.cli", "plan", "--profiles", f"{CLUSTERS}/{cluster}.yaml", model,
                        "--dtype", dtype, "--input-len", str(isl), "--output-len", str(osl), "-o", f.name],
                       check=True, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        return json.load(open(f.name))


@cache
def units(model: str, dtype: str):
    from hetc.partitioner.capture import capture
    return capture(model, dtype=dtype)


def same_config(cluster: str, model: str, dtype: str, isl: int, osl: int, batch: int | None) -> tuple[float, float]:
    """Output tok/s of the cost model in the public run's configuration: as frozen, and with
    launch_overhead 0 (in-memory copy of the profile; the YAML is untouched)."""
    from hetc.cluster import load_cluster
    from hetc.partitioner.simulate import StagePlan, Workload, estimate_pipeline, max_batch
    m = units(model, dtype)
    wl = Workload(isl, osl, dtype, m.kv_dtype)
    cl = load_cluster(str(ROOT / CLUSTERS / f"{cluster}.yaml"))
    out = []
    for no_launch in (False, True):
        node = cl.nodes[0]
        if no_launch:
            node = replace(node, profile=node.profile.model_copy(update={"launch_overhead": 0.0}))
        stages = [StagePlan(node, 0, len(m.units) - 1, node.count)]
        est = estimate_pipeline(m.units, stages, replace(cl, nodes=[node]), wl, batch or max_batch(m.units, stages, wl))
        out.append(est.output_tok_s if est else float("nan"))
    return out[0], out[1]


def shape(p: dict) -> str:
    """The plan in brief: replicas × (stages × TP), batch per pipeline."""
    return ", ".join(f"{pl['replicas']}×[{'+'.join('tp' + str(s['tp']) for s in pl['stages'])}] b{pl['batch']}"
                     for pl in p["pipelines"])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--only")
    a = ap.parse_args()
    head, dirty = profiles_commit()
    print(f"profiles frozen at {FROZEN[:12]}; hardware_profiles/ now at {head[:12]}"
          + (" (same)" if head == FROZEN and not dirty else " — CHANGED since the freeze" + (" (uncommitted edits)" if dirty else "")))
    print()
    cols = ("case", "public out tok/s", "hetc plan out tok/s", "pred/public − 1", "hetc plan", "public run",
            "hetc at public config", "−1", "same, launch 0", "−1", "source")
    print("| " + " | ".join(cols) + " |")
    print("|---|---:|---:|---:|---|---|---:|---:|---:|---:|---|")
    errs: dict[str, list[float]] = {"hetc plan": [], "hetc at public config": [], "same, launch_overhead 0": []}
    for name, cluster, model, dtype, isl, osl, public, src, note, batch in CASES:
        if a.only and a.only != name:
            continue
        p = plan(cluster, model, dtype, isl, osl)
        pred = p["predicted"]["output_tok_s"]
        cfg, nolaunch = same_config(cluster, model, dtype, isl, osl, batch)
        for k, v in zip(errs, (pred, cfg, nolaunch)):
            errs[k].append(v / public - 1)
        print(f"| {name} | {public:,.0f} | {pred:,.0f} | {pred / public - 1:+.0%} | {shape(p)} | {note} "
              f"| {cfg:,.0f} | {cfg / public - 1:+.0%} | {nolaunch:,.0f} | {nolaunch / public - 1:+.0%} | {src} |",
              flush=True)
    print()
    for k, e in errs.items():
        if e:
            print(f"- {k}: median |pred/public − 1| = {statistics.median(abs(x) for x in e):.0%}, "
                  f"median signed {statistics.median(e):+.0%}, range {min(e):+.0%} … {max(e):+.0%} ({len(e)} cases)")
    print()
    print("Sources:")
    for k, v in SOURCES.items():
        print(f"- {k}: {v}")


if __name__ == "__main__":
    main()
