"""Baselines, given the same cost model and the same batch search as the solver.

- uniform: every device of the cluster in one pipeline, units split evenly (vLLM's default);
- memory_proportional: the same chain, units split in proportion to free memory (exo, OpenVINO HETERO);
- best_homogeneous: the best pipeline set using one device type only;
- chain_dp: every device in one pipeline with the best contiguous split (PipeDream/Alpa-style
  min-bottleneck partition over a fixed device order).
"""

from __future__ import annotations

from hetc.cluster import Cluster, Node
from hetc.plan import Baseline
from hetc.partitioner.estimate.simulate import StagePlan, Workload
from hetc.partitioner.estimate.split import Slot, best_batch, slo_filter
from hetc.partitioner.estimate.tables import type_key
from hetc.partitioner.capture.units import Unit

__all__ = ["run_baselines"]

INFEASIBLE = Baseline(feasible=False, output_tok_s=0.0)


def _split_by_weight(units: list[Unit], chain: list[Node], weights: list[float]) -> list[StagePlan]:
    """Contiguous ranges with unit counts proportional to `weights` (largest remainder)."""
    n = len(units)
    total = sum(weights)
    exact = [w / total * n for w in weights]
    counts = [int(x) for x in exact]
    for i in sorted(range(len(chain)), key=lambda i: exact[i] - counts[i], reverse=True)[: n - sum(counts)]:
        counts[i] += 1
    stages, u = [], 0
    for node, c in zip(chain, counts):
        if c:
            stages.append(StagePlan(node, u, u + c - 1))
            u += c
    return stages


def _entry(found, replicas: int = 1, device: str | None = None) -> Baseline:
    if found is None:
        return INFEASIBLE
    e = found.estimate
    return Baseline(
        feasible=True,
        output_tok_s=e.output_tok_s * replicas,
        batch=e.batch,
        ttft_ms=e.ttft_s * 1e3,
        tpot_ms=e.tpot_s * 1e3,
        stages=len(found.stages) * replicas,
        device=device,
        replicas=replicas if device else None,
    )


def run_baselines(
    units: list[Unit], cluster: Cluster, wl: Workload, objective: str, ceiling: int, ttft_slo_s: float | None = None, tpot_slo_s: float | None = None
) -> dict[str, Baseline]:
    """Each baseline at its best batch up to `ceiling` sequences per pipeline within the SLOs the plan
    was given (a baseline over them would be compared with a plan held to them)."""
    nodes = [n for n in cluster.nodes for _ in range(n.count)]
    chain = [Slot(n) for n in nodes]
    within = slo_filter(ttft_slo_s, tpot_slo_s)
    out = {}
    for name, weights in (("uniform", [1.0] * len(nodes)), ("memory_proportional", [n.profile.usable_memory for n in nodes])):
        stages = _split_by_weight(units, nodes, weights)
        out[name] = _entry(
            best_batch(
                units,
                chain,
                cluster,
                wl,
                objective,
                split=lambda _b, s=stages: s,  # type: ignore[misc]
                ceiling=ceiling,
                admits=within,
            )
        )
    out["chain_dp"] = _entry(best_batch(units, chain, cluster, wl, objective, ceiling=ceiling, admits=within))
    homo = INFEASIBLE
    by_type: dict[tuple, list[Node]] = {}
    for n in cluster.nodes:
        by_type.setdefault(type_key(n), []).append(n)
    for nodes_of_type in by_type.values():  # one device type, its devices in r equal pipelines
        count = sum(n.count for n in nodes_of_type)
        pool = [n for n in nodes_of_type for _ in range(n.count)]
        for r in (d for d in range(1, count + 1) if count % d == 0):
            found = best_batch(units, [Slot(n) for n in pool[: count // r]], cluster, wl, objective, ceiling=ceiling, admits=within)
            e = _entry(found, r, nodes_of_type[0].profile.name)
            if e.feasible and (not homo.feasible or e.output_tok_s > homo.output_tok_s):
                homo = e
    out["best_homogeneous"] = homo
    return out
