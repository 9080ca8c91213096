"""Stage boundaries over an ordered chain of stage slots, and the batch search.

A slot is one device or a tensor-parallel group of tp devices on one node. For a chain
and a batch, `split_chain` finds contiguous unit ranges minimising the busiest slot
(binary search on the bottleneck with a greedy fill: optimal for contiguous ranges over
an ordered chain when costs and memory grow with the range). Slots may stay empty.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from dataclasses import dataclass

from hetc.cluster import Cluster, Node
from hetc.partitioner.cost_models.links import hops
from hetc.partitioner.cost_models.memory import KV_BLOCK_TOKENS
from hetc.partitioner.simulate import PipelineEstimate, Round, StagePlan, Workload, estimate_pipeline, unit_round_costs
from hetc.partitioner.units import Unit

__all__ = ["Slot", "Found", "split_chain", "batch_options", "best_batch", "score", "MAX_BATCH"]

MAX_BATCH = 4096  # sequences in flight per pipeline considered


@dataclass(frozen=True, slots=True)
class Slot:
    node: Node
    tp: int = 1


@dataclass(slots=True)
class Found:
    estimate: PipelineEstimate
    stages: list[StagePlan]


def score(objective: str, tok_s: float, tpot_s: float, usd_h: float) -> float:
    """Larger is better for every objective."""
    if objective == "throughput":
        return tok_s
    if objective == "latency":
        return -tpot_s
    return tok_s / usd_h  # cost: tokens per dollar


EXHAUSTIVE = 120  # up to this many ways to split, every one is evaluated exactly


def _all_splits(units: list[Unit], chain: list[Slot], cluster: Cluster, wl: Workload,
                batch: int, phase: str) -> list[StagePlan] | None:
    """Every split with each slot non-empty, scored by the saturation model itself."""
    best, best_x = None, -1.0
    for cuts in itertools.combinations(range(1, len(units)), len(chain) - 1):
        bounds = (0, *cuts, len(units))
        stages = [StagePlan(s.node, a, b - 1, s.tp) for s, a, b in zip(chain, bounds, bounds[1:])]
        est = estimate_pipeline(units, stages, cluster, wl, batch, phase)
        if est is not None and est.output_tok_s > best_x:
            best, best_x = stages, est.output_tok_s
    return best


def split_chain(units: list[Unit], chain: list[Slot], cluster: Cluster, wl: Workload,
                batch: int, phase: str = "both") -> list[StagePlan] | None:
    """Contiguous unit ranges over `chain` minimising the busiest stage at `batch` (for a
    prefill pool: per prompt, one prompt per stage in flight); None if none fits.

    Small cases (at most EXHAUSTIVE splits) are searched exhaustively against the full
    saturation model, so tiny instances are solved exactly.
    """
    n = len(chain)
    if n <= len(units) and math.comb(len(units) - 1, n - 1) <= EXHAUSTIVE:
        return _all_splits(units, chain, cluster, wl, batch, phase)
    if phase == "prefill":
        batch = n
    r = Round.of(wl, batch, max(1, min(n, batch)), phase)
    cache: dict[tuple, tuple[list[float], float]] = {}
    cost: list[list[float]] = []
    fixed: list[float] = []
    for s in chain:
        key = (s.node.profile.name, s.tp, repr(s.node.link))
        if key not in cache:
            cache[key] = unit_round_costs(units, s.node, s.tp, wl, r)
        cost.append(cache[key][0])
        fixed.append(cache[key][1])
    out = units[0].out_bytes_per_token
    link = []
    for i in range(n):
        path = hops(cluster, chain[i].node, chain[i + 1].node) if i + 1 < n else []
        link.append(r.link_time(out, path) if path else 0.0)
    # memory by prefix sums (tied weights in one stage counted twice here: conservative;
    # estimate_pipeline counts them once)
    blocks = math.ceil((wl.input_len if phase == "prefill" else wl.context) / KV_BLOCK_TOKENS) * KV_BLOCK_TOKENS
    step_tokens = max(min(wl.prefill_chunk, wl.input_len), batch)
    fixed_mem = [u.param_bytes + batch * blocks * u.kv_bytes_per_token for u in units]
    act = [step_tokens * u.act_bytes.per_token for u in units]

    def greedy(tau: float) -> list[StagePlan] | None:
        stages, u = [], 0
        for i, s in enumerate(chain):
            if u == len(units):
                break
            t, mem, peak, hi = fixed[i] + link[i], 0.0, 0.0, u - 1
            cap = s.node.profile.usable_memory
            while hi + 1 < len(units):
                nxt = hi + 1
                if t + cost[i][nxt] > tau or (mem + fixed_mem[nxt]) / s.tp + max(peak, act[nxt]) > cap:
                    break
                hi, t, mem, peak = nxt, t + cost[i][nxt], mem + fixed_mem[nxt], max(peak, act[nxt])
            if hi >= u:
                stages.append(StagePlan(s.node, u, hi, s.tp))
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


def batch_options(units: list[Unit], chain: list[Slot], cluster: Cluster, wl: Workload,
                  split: Callable[[int], list[StagePlan] | None] | None = None, phase: str = "both") -> list[Found]:
    """Every batch on the grid (powers of two) that fits, with its best split (a prefill
    pool has one option: a prompt per stage).

    Args:
        split: stage boundaries for a batch; default: `split_chain` (the best split).
    """
    split = split or (lambda batch: split_chain(units, chain, cluster, wl, batch, phase))
    out: list[Found] = []
    batch = 1
    while batch <= (1 if phase == "prefill" else MAX_BATCH):
        stages = split(batch)
        est = estimate_pipeline(units, stages, cluster, wl, batch, phase) if stages else None
        if est is None:
            break
        out.append(Found(est, stages))
        batch *= 2
    return out


def best_batch(units: list[Unit], chain: list[Slot], cluster: Cluster, wl: Workload, objective: str,
               *, split: Callable[[int], list[StagePlan] | None] | None = None) -> Found | None:
    """The batch best for `objective` on this chain, with no floors."""
    opts = batch_options(units, chain, cluster, wl, split)
    return max(opts, key=lambda f: score(objective, f.estimate.output_tok_s, f.estimate.tpot_s, 1.0), default=None)
