"""Placement search: pipelines, stage boundaries and batch for an objective.

This first solver enumerates pipeline shapes — r identical replicas drawing devices from
a set of nodes, or each node serving its own replicas — and for each shape and batch finds
the stage boundaries that minimise the busiest stage exactly (binary search on the
bottleneck with a greedy fill, optimal for contiguous splits over an ordered chain).
The bound is a fluid relaxation of the whole decision space; the gap is reported as is.
"""

from __future__ import annotations

import itertools
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from hetc.cluster import Cluster, Node
from hetc.errors import Infeasible
from hetc.partitioner.cost_models.analytic import Step, compute_dtype, units_time
from hetc.partitioner.cost_models.links import hops, transfer_time
from hetc.partitioner.cost_models.memory import KV_BLOCK_TOKENS, stage_memory
from hetc.partitioner.simulate import PipelineEstimate, StagePlan, Workload, estimate_pipeline
from hetc.partitioner.units import Unit

__all__ = ["OBJECTIVES", "Candidate", "Found", "Solution", "solve", "fluid_bound", "batch_options", "best_batch",
           "split_chain"]

MAX_BATCH = 4096  # sequences in flight per pipeline considered

OBJECTIVES = {"throughput": ("max", "output tok/s"), "latency": ("min", "ms TPOT"), "cost": ("min", "USD per M output tokens")}


@dataclass(slots=True)
class Candidate:
    """Identical pipelines, `replicas` of them, each over `stages`."""

    stages: list[StagePlan]
    replicas: int
    estimate: PipelineEstimate


@dataclass(slots=True)
class Solution:
    pipelines: list[Candidate]
    output_tok_s: float
    seconds: float
    bound: float
    baselines: dict[str, dict] = field(default_factory=dict)
    explored: int = 0

    @property
    def devices_used(self) -> list[tuple[Node, int]]:
        return [(s.node, s.tp * c.replicas) for c in self.pipelines for s in c.stages]


def _per_unit(units: list[Unit], node: Node, step: Step, wl: Workload) -> list[float]:
    return [units_time([u], node.profile, step, dtype=wl.dtype, kv_dtype=wl.kv_dtype) for u in units]


def split_chain(units: list[Unit], chain: list[Node], cluster: Cluster, wl: Workload, batch: int) -> list[StagePlan] | None:
    """Contiguous unit ranges over the ordered device `chain` minimising the busiest stage.

    Devices may stay empty (then unused). Memory is checked per stage at `batch`.
    """
    n = len(chain)
    m = max(1, min(n, batch))
    b = batch / m
    chunks = math.ceil(wl.input_len / wl.prefill_chunk)
    chunk = wl.input_len / chunks
    per_round = batch / wl.output_len
    cache: dict[str, list[float]] = {}
    cost: list[list[float]] = []
    for node in chain:
        key = node.profile.name
        if key not in cache:
            dec = _per_unit(units, node, Step(b, b, wl.decode_ctx), wl)
            pre = _per_unit(units, node, Step(chunk, 1, wl.input_len / 2), wl)
            cache[key] = [m * d + per_round * chunks * p for d, p in zip(dec, pre)]
        cost.append(cache[key])
    fixed = [m * nd.profile.step_overhead + per_round * chunks * nd.profile.step_overhead for nd in chain]
    out = units[0].out_bytes_per_token
    link = []
    for i in range(n):
        path = hops(cluster, chain[i], chain[i + 1]) if i + 1 < n else []
        link.append(m * transfer_time(b * out, path) + per_round * chunks * transfer_time(chunk * out, path) if path else 0.0)

    # memory by prefix sums (tied weights in one stage are counted twice here: conservative;
    # estimate_pipeline counts them once)
    blocks = math.ceil(wl.context / KV_BLOCK_TOKENS) * KV_BLOCK_TOKENS
    step_tokens = max(min(wl.prefill_chunk, wl.input_len), batch)
    fixed_mem = [u.param_bytes + batch * blocks * u.kv_bytes_per_token for u in units]
    act = [step_tokens * u.act_bytes.per_token for u in units]

    def greedy(tau: float) -> list[StagePlan] | None:
        stages, u = [], 0
        for i, node in enumerate(chain):
            if u == len(units):
                break
            t, mem, peak, hi = fixed[i] + link[i], 0.0, 0.0, u - 1
            cap = node.profile.usable_memory
            while hi + 1 < len(units):
                nxt = hi + 1
                if t + cost[i][nxt] > tau or mem + fixed_mem[nxt] + max(peak, act[nxt]) > cap:
                    break
                hi, t, mem, peak = nxt, t + cost[i][nxt], mem + fixed_mem[nxt], max(peak, act[nxt])
            if hi >= u:
                stages.append(StagePlan(node, u, hi))
                u = hi + 1
        return stages if u == len(units) else None

    total = max(sum(c) + f + lk for c, f, lk in zip(cost, fixed, link))
    if greedy(total * 1.0001) is None:
        return None
    lo, hi = 0.0, total * 1.0001
    for _ in range(40):
        mid = (lo + hi) / 2
        if greedy(mid) is None:
            lo = mid
        else:
            hi = mid
    return greedy(hi)


@dataclass(slots=True)
class Found:
    estimate: PipelineEstimate
    stages: list[StagePlan]


def batch_options(units: list[Unit], chain: list[Node], cluster: Cluster, wl: Workload,
                  split: Callable[[int], list[StagePlan] | None] | None = None) -> list[Found]:
    """Every batch on the grid (powers of two) that fits, with its best split.

    Args:
        split: stage boundaries for a batch; default: `split_chain` (the best split).
    """
    split = split or (lambda batch: split_chain(units, chain, cluster, wl, batch))
    out: list[Found] = []
    batch = 1
    while batch <= MAX_BATCH:
        stages = split(batch)
        est = estimate_pipeline(units, stages, cluster, wl, batch) if stages else None
        if est is None:
            break
        out.append(Found(est, stages))
        batch *= 2
    return out


def best_batch(units: list[Unit], chain: list[Node], cluster: Cluster, wl: Workload, objective: str,
               *, split: Callable[[int], list[StagePlan] | None] | None = None) -> Found | None:
    """The batch best for `objective` on this chain, with no floors."""
    opts = batch_options(units, chain, cluster, wl, split)
    return max(opts, key=lambda f: _score(objective, f.estimate.output_tok_s, f.estimate.tpot_s, 1.0), default=None)


def _score(objective: str, tok_s: float, tpot_s: float, usd_h: float) -> float:
    if objective == "throughput":
        return tok_s
    if objective == "latency":
        return -tpot_s
    return tok_s / usd_h  # cost: tokens per dollar


def _shapes(cluster: Cluster) -> list[tuple[str, list[Node], int]]:
    """Pipeline shapes (label, chain of nodes, replicas): r identical pipelines, each with
    count/r devices of every node of a subset, in the cluster file's node order."""
    shapes = []
    for k in range(1, len(cluster.nodes) + 1):
        for group in itertools.combinations(cluster.nodes, k):
            low = min(n.count for n in group)
            for r in (d for d in range(1, low + 1) if low % d == 0):
                chain = [n for n in group for _ in range(n.count // r)]
                label = f"{r} × [{' + '.join(f'{n.count // r} {n.profile.name}' for n in group)}]"
                shapes.append((label, chain, r))
    return shapes


def fluid_bound(units: list[Unit], cluster: Cluster, wl: Workload) -> float:
    """Upper bound on output tok/s: every device's FLOPs and bandwidth pooled, no weights, no memory limit.

    Per output token the model needs its FLOPs for the token, its share of the prompt, and
    reads the KV of its context; a device spending a share of its time on that work cannot do
    it faster than its roofline. Summing each device's best rate bounds any placement.
    """
    flops = sum(u.matmul_flops.per_token * (1 + wl.input_len / wl.output_len)
                + u.attention_flops_per_ctx * (wl.decode_ctx + wl.input_len ** 2 / 2 / wl.output_len) for u in units)
    kv = sum(u.kv_bytes_per_token for u in units) * wl.decode_ctx
    total = 0.0
    for node in cluster.nodes:
        p = node.profile
        peak = p.peak_flops[compute_dtype(p, wl.dtype)] * p.efficiency.matmul
        rate = 1.0 / max(flops / peak, kv / (p.memory_bandwidth * p.efficiency.memory))
        total += rate * node.count
    return total


def solve(units: list[Unit], cluster: Cluster, wl: Workload, *, objective: str = "throughput",
          min_tok_s: float = 0.0, ttft_slo_s: float | None = None, tpot_slo_s: float | None = None,
          progress: Callable[[str], None] | None = None) -> Solution:
    """Search placements and return the best for `objective`.

    Raises:
        Infeasible: no pipeline shape holds the model, with the shortfall.
    """
    t0 = time.perf_counter()
    best: tuple[float, list[Candidate]] | None = None
    explored = 0

    def consider(cands: list[Candidate]) -> None:
        nonlocal best
        tok_s = sum(c.estimate.output_tok_s * c.replicas for c in cands)
        if not cands or tok_s < min_tok_s:
            return
        if ttft_slo_s and max(c.estimate.ttft_s for c in cands) > ttft_slo_s:
            return
        if tpot_slo_s and max(c.estimate.tpot_s for c in cands) > tpot_slo_s:
            return
        usd_h = sum(cluster.price(s.node.profile) * c.replicas for c in cands for s in c.stages)
        score = _score(objective, tok_s, max(c.estimate.tpot_s for c in cands), usd_h)
        if best is None or score > best[0]:
            best = (score, cands)

    for label, chain, r in _shapes(cluster):
        if progress:
            progress(label)
        explored += 1
        for found in batch_options(units, chain, cluster, wl):
            consider([Candidate(found.stages, r, found.estimate)])
    # each node on its own, replicated, all nodes at once (the same batch grid point everywhere)
    per_node = []
    for node in cluster.nodes:
        for r in (d for d in range(1, node.count + 1) if node.count % d == 0):
            explored += 1
            per_node.append((node, r, batch_options(units, [node] * (node.count // r), cluster, wl)))
    own_best: dict[str, Candidate] = {}  # every node at its own highest-throughput batch
    for node, r, opts in per_node:
        for f in opts:
            old = own_best.get(node.name)
            if old is None or f.estimate.output_tok_s * r > old.estimate.output_tok_s * old.replicas:
                own_best[node.name] = Candidate(f.stages, r, f.estimate)
    consider(list(own_best.values()))
    for i in range(int(math.log2(MAX_BATCH)) + 1):
        best_per_node: dict[str, Candidate] = {}
        for node, r, opts in per_node:
            if i < len(opts):
                c = Candidate(opts[i].stages, r, opts[i].estimate)
                old = best_per_node.get(node.name)
                if old is None or c.estimate.output_tok_s * r > old.estimate.output_tok_s * old.replicas:
                    best_per_node[node.name] = c
        consider(list(best_per_node.values()))
    if best is None:
        raise Infeasible(_why_infeasible(units, cluster, wl, min_tok_s, ttft_slo_s, tpot_slo_s))
    tok_s = sum(c.estimate.output_tok_s * c.replicas for c in best[1])
    return Solution(best[1], tok_s, time.perf_counter() - t0, fluid_bound(units, cluster, wl), explored=explored)


def _why_infeasible(units: list[Unit], cluster: Cluster, wl: Workload, min_tok_s: float,
                    ttft_slo_s: float | None, tpot_slo_s: float | None) -> str:
    params: dict[str, float] = {}
    for u in units:
        params.update(u.params)
    need = sum(params.values())
    free = sum(n.profile.usable_memory * n.count for n in cluster.nodes)
    one = stage_memory(units, batch=1, context=wl.context, prefill_chunk=min(wl.prefill_chunk, wl.input_len))
    if one.total > free:
        return (f"the model needs {one.total / 1e9:.1f} GB at {wl.dtype} (weights {need / 1e9:.1f} GB + KV and "
                f"activations for one sequence of {wl.context} tokens); all devices together have "
                f"{free / 1e9:.1f} GB free after reserved memory — short by {(one.total - free) / 1e9:.1f} GB. "
                "Add devices, or use a smaller --dtype.")
    if min_tok_s or ttft_slo_s or tpot_slo_s:
        return ("no placement meets the floors/SLOs given (--min-tok-s, --ttft-slo, --tpot-slo); "
                "relax them or add devices.")
    biggest = max(units, key=lambda u: u.param_bytes)
    return (f"no single unit placement fits: the largest unit needs {biggest.param_bytes / 1e9:.2f} GB and the "
            f"largest device has {max(n.profile.usable_memory for n in cluster.nodes) / 1e9:.1f} GB free.")


