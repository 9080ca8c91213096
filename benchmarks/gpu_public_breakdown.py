"""Where hetc's predicted time goes for one case of benchmarks/gpu_public.py, at the public run's
configuration: one round of the pipeline (every sequence in flight generates one token), split
into the cost model's components — weight GEMMs, attention, the other (memory-bound) ops, kernel
overheads, the tensor-parallel all-reduces and the per-step host overhead — per step kind (decode-only
steps and mixed prefill + decode steps), in milliseconds per round and as shares of it.

Read-only: it calls the same cost-model functions `hetc plan` does (`Round.of`, `op_time`,
`allreduce_time`) and prints what they return; it fits nothing. Used to explain the worst cases in
BENCHMARKS.md ("GPU predictions vs public measurements").

Usage: python benchmarks/gpu_public_breakdown.py CASE_NAME [CASE_NAME ...]
"""

from __future__ import annotations

import sys
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import gpu_public  # noqa: E402  (the run batch and the cluster files)
from public_figures import CASES  # noqa: E402
from public_figures.case import Case  # noqa: E402

from hetc.partitioner.capture.capture import capture  # noqa: E402
from hetc.partitioner.cost_models.analytic import cost_params, op_time  # noqa: E402
from hetc.partitioner.cost_models.links import allreduce_time  # noqa: E402
from hetc.partitioner.estimate.simulate import Round, Workload  # noqa: E402
from hetc.placement import parse_placement  # noqa: E402

KINDS = {"matmul": "GEMMs", "moe": "GEMMs", "conv": "GEMMs", "attention": "attention"}


def breakdown(case: Case) -> tuple[dict[str, float], int, float]:
    """Seconds per round by component for one replica of `case` at its run batch, the batch, and
    the replica's output tok/s (batch / round)."""
    m = capture(case.model, dtype=case.dtype, kv_dtype=case.kv_dtype)
    cluster = gpu_public.cluster_of(case, case.engine)
    stage = parse_placement(case.placement, cluster, m.num_layers)[0].stages[0]
    node = next(n for n in cluster.nodes if n.name == stage.node)
    wl = Workload(case.isl, case.osl, case.dtype, m.kv_dtype)
    batch = gpu_public.run_batch(case)
    cp = cost_params(node.profile, wl.dtype, stage.tp)
    ex = node.profile.execution
    out: dict[str, float] = defaultdict(float)
    for n, step in Round.of(wl, batch, 1).steps:
        kind = "decode" if step.decode_only else "mixed"
        replayed = ex.replays(step.decode_only)
        for u in m.units:
            ops = u.fused_records if ex.fusion == "engine" else u.op_records
            kernels = u.fused_kernels if ex.fusion == "engine" else u.kernels
            kv_ops = sum(o.kv_bytes_per_token * o.count for o in ops if o.kind == "attention")
            device = 0.0
            for o in ops:
                kv = u.kv_bytes_per_token * o.kv_bytes_per_token / kv_ops if o.kind == "attention" and kv_ops else 0.0
                t = n * o.count * op_time(o, cp, step, kv)
                out[f"{kind}: {KINDS.get(o.kind, 'other ops')}"] += t
                device += o.count * op_time(o, cp, step, kv)
            device += kernels * ex.kernel_overhead
            out[f"{kind}: kernel overheads"] += n * kernels * ex.kernel_overhead
            if not replayed:  # host launches: async launch hides them under the device time
                launches = kernels * cp.launch
                extra = max(0.0, launches - device) if ex.launch == "async" else launches
                out[f"{kind}: launches"] += n * extra
            if stage.tp > 1 and u.params:
                out[f"{kind}: TP all-reduce"] += n * allreduce_time(step.total_tokens * u.out_bytes_per_token, stage.tp, node.link, replayed) * ex.collective
        out[f"{kind}: step overhead"] += n * node.profile.step_overhead
    return dict(out), batch, batch / sum(out.values())


def main() -> None:
    names = sys.argv[1:]
    cases = {c.name: c for c in CASES}
    for name in names:
        c = cases[name]
        parts, batch, tok_s = breakdown(c)
        total = sum(parts.values())
        print(
            f"{name}: {c.cluster} {c.placement} {c.model} {c.dtype} {c.isl}/{c.osl} b{batch}: round {total * 1e3:,.1f} ms, "
            f"{tok_s * replicas(c):,.0f} output tok/s (public {c.public:,.0f})"
        )
        for k, v in sorted(parts.items(), key=lambda kv: -kv[1]):
            if v > 0:
                print(f"  {k:28s} {v * 1e3:10.1f} ms  {v / total:6.1%}")


def replicas(case: Case) -> int:
    """The run's replicas: every pipeline of its placement, each as many times as it is repeated."""
    cluster = gpu_public.cluster_of(case, case.engine)
    return sum(p.replicas for p in parse_placement(case.placement, cluster, 80))


if __name__ == "__main__":
    main()
