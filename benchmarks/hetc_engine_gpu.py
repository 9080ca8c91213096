"""The `hetc` engine's cuda figures from `hetc serve`'s own steps on a lent H200 (no GPU needed here).

Reads the committed GPU results and fits, in order:
  kernel_overhead  device time per kernel of a replayed decode step: Llama-3.1-8B's graphed step on the
                   GPU alone (gpu_serve.py `dense8b`) against the cost model's, per kernel it counts
  step_overhead    the worker's host work around each replay: the served 8B step (`8b`, graphs on)
                   minus the graphed step alone
  experts          the grouped expert GEMMs (transformers' grouped_mm, as a cuda stage runs them) against
                   dense GEMMs at the same rows: one Qwen3-30B-A3B MoE block replayed alone (`moe30b`)
then prints every measured step beside its prediction under the fitted figures.

    .venv/bin/python benchmarks/hetc_engine_gpu.py
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path

from hetc.cluster import load_profile
from hetc.engine import Engine, EngineName, apply_engine, engine_figures
from hetc.partitioner.capture.capture import capture
from hetc.partitioner.cost_models.analytic import Step, units_time

HERE = Path(__file__).parent
MOE = HERE / "gpu_results" / "h200-moe-2026-11-30.json"
SERVED_8B = HERE / "gpu_results" / "h200-serve-graphs-2026-11-27.json"  # its run 2's `8b` check, graphs on
CTX, IMBALANCE = 576, 1.2  # gpu_serve.py's decode context; the plans' expert imbalance


def _profile(kernel_s: float, experts: float = 1.0, step_s: float | None = None):
    """h200-sxm as the hetc engine runs it, with these three figures in place of the entry's."""
    base = load_profile("h200-sxm")
    p = apply_engine(base, engine_figures(Engine(EngineName.HETC), "cuda"))
    ex = p.execution.model_copy(update={"kernel_overhead": kernel_s})
    eff = p.efficiency.model_copy(update={"experts": base.efficiency.experts * experts})
    return p.model_copy(update={"execution": ex, "efficiency": eff, **({"step_overhead": step_s} if step_s is not None else {})})


def _gpu_ms(units, profile, batch: int) -> float:
    """The cost model's decode step on the GPU (the host's step overhead left out)."""
    return units_time(units, profile, Step(batch, batch, CTX), dtype="bf16", kv_dtype="bf16", imbalance=IMBALANCE) * 1e3


def main() -> None:
    runs = json.loads(MOE.read_text())
    dense = {r["batch"]: r for r in runs["run3"]["dense8b"]["rows"]}
    moe_steps = {r["batch"]: r for r in runs["run3"]["moe30b"]["rows"]}
    blocks = {b: statistics.median(r["block_graphed_us"] for run in ("run2", "run3") for r in runs[run]["moe30b"]["layer"] if r["batch"] == b) for b in (8, 32)}
    run2 = next(v for k, v in json.loads(SERVED_8B.read_text())["runs"].items() if "run 2" in k)
    served = {r["batch"]: r["measured_decode_ms"] for r in run2["8b"]["graphs"]}
    u8 = capture("llama-3.1-8b", dtype="bf16", kv_dtype="bf16").units
    u30 = capture("qwen3-30b-a3b", dtype="bf16", kv_dtype="bf16").units
    moe_unit = [u for u in u30 if str(u.kind) == "moe"][:1]

    # kernel_overhead: the graphed 8B step is the model's GPU time at k = 0 plus k per kernel
    kernels = sum(u.kernels for u in u8)
    base = {b: _gpu_ms(u8, _profile(0.0), b) for b in dense}
    k_s = statistics.mean((dense[b]["graphed_ms"] - base[b]) / kernels for b in dense) / 1e3
    # step_overhead: served minus graphed, the same batches
    step_s = statistics.mean(served[b] - dense[b]["graphed_ms"] for b in dense) / 1e3
    # experts: bisect the factor that puts the model's MoE block on the measured one (mean of the batches)
    lo, hi = 0.05, 1.0
    for _ in range(40):
        f = (lo + hi) / 2
        err = statistics.mean(_gpu_ms(moe_unit, _profile(k_s, f), b) * 1e3 / blocks[b] for b in blocks)
        lo, hi = (lo, f) if err < 1 else (f, hi)
    print(f"kernel_overhead {k_s * 1e6:.2f} us (8B: {kernels} kernels by the model, {dense[8]['graph_kernels']['kernels']} in the graph)")
    host = ", ".join(f"b{b} {served[b] - dense[b]['graphed_ms']:.2f}" for b in dense)
    print(f"step_overhead {step_s * 1e3:.2f} ms (8B served − graphed: {host})")
    print(f"experts {f:.3f}")
    fitted = _profile(k_s, f, step_s)
    print("\n| step | measured ms | predicted ms | predicted ÷ measured |\n|---|---:|---:|---:|")
    for b in dense:
        p = _gpu_ms(u8, fitted, b)
        print(f"| 8B b{b} graphed (GPU) | {dense[b]['graphed_ms']:.2f} | {p:.2f} | {p / dense[b]['graphed_ms']:.2f} |")
        print(f"| 8B b{b} served | {served[b]:.2f} | {p + step_s * 1e3:.2f} | {(p + step_s * 1e3) / served[b]:.2f} |")
    for b in blocks:
        p = _gpu_ms(moe_unit, fitted, b) * 1e3
        print(f"| 30B MoE block b{b} graphed (µs) | {blocks[b]:.0f} | {p:.0f} | {p / blocks[b]:.2f} |")
    for b, r in moe_steps.items():
        p = _gpu_ms(u30, fitted, b)
        print(f"| 30B b{b} graphed (GPU) | {r['graphed_ms']:.2f} | {p:.2f} | {p / r['graphed_ms']:.2f} |")


if __name__ == "__main__":
    main()
