"""Attention/expert disaggregation (MegaScale-Infer, ByteDance 2025) as an evaluated alternative.

One node's devices hold every layer's attention (and the dense layers, embedding and head)
data-parallel — weights whole, each device its own sequences and their K/V — and another node's
devices hold every MoE layer, the routed experts whole over them (E/n each). A step's
micro-batches ping-pong: while one runs its attention on the first node, another runs its experts on
the second, and each MoE layer sends its tokens over the network to their experts and back.

Per round (simulate.Round, with `PING_PONG` micro-batches in flight) the attention node is busy
for its steps, the expert node for theirs, the network for the dispatches and combines; a round
lasts as long as the busiest of the three, or as one micro-batch's pass through all of them
(`loop`), as estimate_pipeline counts a pipeline's. Memory: each side at the batch, as stage_memory
holds a data-parallel group's (hetc/experts.py `dp-ep`).

plan.json's stages hold contiguous units, so such a placement is not a plan hetc can write or serve
yet: the planner reports each pair of nodes' prediction beside what its plan runs on those nodes
(plan.json `experts.disaggregated`), so a reader sees whether it would pay.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from hetc.cluster import Cluster, Node
from hetc.experts import ExpertLayout
from hetc.partitioner.budget import CpuBudget
from hetc.partitioner.capture.units import Unit
from hetc.partitioner.cost_models.analytic import Step, units_time
from hetc.partitioner.cost_models.links import hops, transfer_time
from hetc.partitioner.cost_models.memory import logits_per_token, stage_memory
from hetc.partitioner.estimate.batches import search
from hetc.partitioner.estimate.simulate import Round, Workload
from hetc.partitioner.search.solver import Solution
from hetc.plan import Disaggregated
from hetc.scheduling import Phase

DISAGGREGATION = "disaggregation"  # plan.json stopped_by_limit: the node pairs past the deadline were not estimated

__all__ = ["DISAGGREGATION", "PING_PONG", "SplitEstimate", "best_split", "disaggregated", "disaggregation_note", "split_estimate"]

PING_PONG = 2  # micro-batches in flight between the two sides: MegaScale-Infer's ping-pong needs at least two


@dataclass(frozen=True, slots=True)
class SplitEstimate:
    """Attention on `attention` (every device), experts on `experts`, at `batch` sequences."""

    attention: Node
    experts: Node
    batch: int
    output_tok_s: float
    attention_s: float  # busy seconds per round of each side and of the network
    experts_s: float
    network_s: float
    round_s: float


def _sides(units: list[Unit]) -> tuple[list[Unit], list[Unit]]:
    return [u for u in units if not u.moe], [u for u in units if u.moe]


def split_estimate(units: list[Unit], cluster: Cluster, wl: Workload, attention: Node, experts: Node, batch: int) -> SplitEstimate | None:
    """The round of `batch` sequences with attention on node `attention` and the MoE layers on node
    `experts` (None where a side's memory does not hold it).

    Args:
        units: the model's units (MoE ones go to `experts`, the rest to `attention`).
        wl: the workload (its imbalance prices the experts' busiest device).
    """
    dense, moe = _sides(units)
    na, ne = attention.count, experts.count
    last = logits_per_token(units)  # fp32 logits on the attention side (it holds the head)
    dp = ExpertLayout.DP_EP
    ctx, chunk, shared = wl.kv_tokens(), min(wl.prefill_chunk, wl.input_len), wl.shared_tokens()
    held = stage_memory(
        dense, batch=batch, context=ctx, prefill_chunk=chunk, tp=na, logits_bytes_per_token=last, shared_tokens=shared, windowed=wl.windowed, layout=dp
    )
    if held.total > attention.profile.usable_memory:
        return None
    if stage_memory(moe, batch=batch, context=ctx, prefill_chunk=chunk, tp=ne, layout=dp).total > experts.profile.usable_memory:
        return None
    path = hops(cluster, attention, experts)
    sent = [u.moe["top_k"] * u.out_bytes_per_token for u in moe if u.moe]  # bytes per token each MoE layer sends out and back
    d, k, w = wl.dtype, wl.kv_dtype, wl.windowed

    def costs(step: Step) -> tuple[float, float, float]:
        a = units_time(dense, attention.profile, step, dtype=d, kv_dtype=k, windowed=w, dp=na) + attention.profile.step_overhead
        e = units_time(moe, experts.profile, step, dtype=d, kv_dtype=k, windowed=w, ep=ne, dp=ne, imbalance=wl.imbalance) + experts.profile.step_overhead
        # each MoE layer: its tokens to their experts and back, every attention device sending its own share at once
        c = sum(2 * transfer_time(step.total_tokens / na * b, path) for b in sent)
        return a, e, c

    r = Round.of(wl.ranked(na), batch, PING_PONG)  # each attention rank schedules its share (its own budget where the engine gives one)
    parts = [(n, costs(step)) for n, step in r.steps]
    a, e, c = (sum(n * t[i] for n, t in parts) for i in range(3))
    round_s = max(a, e, c, (a + e + c) / PING_PONG)
    return SplitEstimate(attention, experts, batch, batch / round_s, a, e, c, round_s)


def best_split(units: list[Unit], cluster: Cluster, wl: Workload, ceiling: int, cpu: CpuBudget | None = None) -> list[SplitEstimate]:
    """For every ordered pair of nodes (attention on one, experts on another), its best batch's
    estimate, best first (none for a dense model or a one-node cluster). Pairs alike (the same profiles,
    device counts and links between them) share one search; past `cpu`'s deadline the pairs not yet
    searched are left out (`cpu.stop`)."""
    if not any(u.moe for u in units) or len(cluster.nodes) < 2:
        return []
    out: list[SplitEstimate] = []
    alike: dict[tuple, list[SplitEstimate]] = {}
    for a in cluster.nodes:
        for e in cluster.nodes:
            if a is e:
                continue
            key = (id(a.profile), a.count, id(e.profile), e.count, tuple(hops(cluster, a, e)))
            if key not in alike:
                if cpu is not None and cpu.past():
                    cpu.stop(DISAGGREGATION)
                    return sorted(out, key=lambda s: -s.output_tok_s)
                alike[key] = _best(units, cluster, wl, a, e, ceiling)
            out += [replace(s, attention=a, experts=e) for s in alike[key]]
    return sorted(out, key=lambda s: -s.output_tok_s)


def _best(units: list[Unit], cluster: Cluster, wl: Workload, attention: Node, experts: Node, ceiling: int) -> list[SplitEstimate]:
    """The pair's estimate at its best batch ([] where no batch fits)."""

    def at(b: int) -> SplitEstimate | None:
        return split_estimate(units, cluster, wl, attention, experts, b)

    def rate(s: SplitEstimate) -> float:
        return s.output_tok_s

    got = search(at, rate, ceiling)
    return [max((s for _, s in got), key=rate)] if got else []


def disaggregated(units: list[Unit], cluster: Cluster, wl: Workload, sol: Solution, cpu: CpuBudget | None = None) -> list[Disaggregated]:
    """plan.json's `experts.disaggregated`: each pair of nodes' best disaggregated estimate beside the
    output of the plan's pipelines that lie on those two nodes alone (prefill and decode together)."""
    out = []
    for s in best_split(units, cluster, wl, sol.batch_ceiling, cpu):
        pair = {s.attention.name, s.experts.name}
        mine = sum(c.estimate.output_tok_s * c.replicas for c in sol.pipelines if c.phase == Phase.BOTH and {sp.node.name for sp in c.stages} <= pair)
        out.append(
            Disaggregated(
                attention_node=s.attention.name,
                experts_node=s.experts.name,
                batch=s.batch,
                output_tok_s=s.output_tok_s,
                attention_ms=s.attention_s * 1e3,
                experts_ms=s.experts_s * 1e3,
                network_ms=s.network_s * 1e3,
                plan_tok_s=mine,
            )
        )
    return out


def disaggregation_note(d: Disaggregated) -> str:
    """One line for the plan's notes: the best pair, what bounds its round, and the plan's own figure there."""
    sides = {"attention": d.attention_ms, "experts": d.experts_ms, "network": d.network_ms}
    limit = max(sides, key=sides.__getitem__)
    more = d.plan_tok_s >= d.output_tok_s
    verdict = "not placed: the plan's own pipelines there give more" if more else "it would give more, but plan.json cannot place it yet"
    return (
        f"attention on {d.attention_node}, experts on {d.experts_node} (MegaScale-Infer's disaggregation, evaluated): {d.output_tok_s:,.0f} "
        f"output tok/s, bound by the {limit} ({sides[limit]:.0f} ms per round; attention {d.attention_ms:.0f}, experts {d.experts_ms:.0f}, "
        f"network {d.network_ms:.0f}); the plan's pipelines on those nodes: {d.plan_tok_s:,.0f} — {verdict}"
    )
