"""Stage boundaries over an ordered chain of stage slots, and the batch search.

A slot is one device or a tensor-parallel group of tp devices on one node. For a chain
and a batch, `split_chain` finds contiguous unit ranges minimising the busiest slot
(binary search on the bottleneck with a greedy fill: optimal for contiguous ranges over
an ordered chain when costs and memory grow with the range), filled once by busy time plus
the link out and once by busy time alone, keeping the split of the lesser round as
estimate_pipeline counts it (busiest stage, busiest link, the loop). Slots may stay empty.
"""

from __future__ import annotations

import bisect
import collections
import itertools
import math
from collections.abc import Callable
from dataclasses import dataclass

from hetc.cluster import Cluster, Node
from hetc.partitioner.estimate.batches import MAX_BATCH, search
from hetc.partitioner.cost_models.links import hops
from hetc.partitioner.cost_models.memory import logits_per_token, step_tokens
from hetc.partitioner.estimate.simulate import PipelineEstimate, Round, StagePlan, Workload, estimate_pipeline, unit_round_costs
from hetc.partitioner.capture.units import Unit
from hetc.scheduling import Objective, Phase

__all__ = ["Slot", "Found", "split_chain", "batch_options", "best_batch", "score", "slo_filter"]


@dataclass(frozen=True, slots=True)
class Slot:
    node: Node
    tp: int = 1


@dataclass(slots=True)
class Found:
    estimate: PipelineEstimate
    stages: list[StagePlan]


def score(objective: str, tok_s: float, tpot_s: float, usd_h: float, watts: float = 1.0) -> float:
    """Larger is better for every objective."""
    if objective == Objective.THROUGHPUT:
        return tok_s
    if objective == Objective.LATENCY:
        return -tpot_s
    if objective == Objective.ENERGY:
        return tok_s / watts  # tokens per joule
    return tok_s / usd_h  # cost: tokens per dollar


EXHAUSTIVE = 120  # up to this many ways to split, every one is evaluated exactly
FLOOR_SLACK = 1e-9  # relative: a split's floor against the best round, for rounding in the sums


def _all_splits(
    units: list[Unit], chain: list[Slot], cluster: Cluster, wl: Workload, batch: int, phase: Phase, memo: dict | None = None
) -> list[StagePlan] | None:
    """Every split with each slot non-empty, scored by the saturation model itself: the split of most
    tok/s, the first in combination order among equals. Splits are evaluated by a floor under
    estimate_pipeline's round from their stages' busy times (unit_round_costs' prefix sums, as it sums
    them): the busiest stage, and the micro-batches' loop without the links; least first, until the floor passes the best round found:
    tok/s = batch / round, so no split left can beat or tie it. A two-stage chain of a 7B model was 58
    estimates a batch (~90% of the template search's CPU on gen20 and gen37 of the generated clusters)."""
    every = list(itertools.combinations(range(1, len(units)), len(chain) - 1))
    floor = [0.0] * len(every)
    if phase != Phase.PREFILL:  # a prefill pool's one batch: every split (estimate_pipeline sets its prompts)
        ranked = wl.ranked(min(s.tp for s in chain))  # as estimate_pipeline ranks and rounds it
        m = max(1, min(len(chain), batch))
        r = Round.of(ranked, batch, m, phase)
        memo = {} if memo is None else memo
        sums = [_prefix_costs(units, s, ranked, r, memo) for s in chain]
        for j, cuts in enumerate(every):
            bounds = (0, *cuts, len(units))
            busy = [P[b] - P[a] + fixed for (P, fixed), a, b in zip(sums, bounds, bounds[1:])]
            floor[j] = max(max(busy), sum(busy) / m)  # the busiest stage, and the loop without its links
    best, best_x, best_j, best_round = None, -1.0, -1, math.inf
    for j in sorted(range(len(every)), key=floor.__getitem__):
        if floor[j] > best_round * (1 + FLOOR_SLACK):
            break
        bounds = (0, *every[j], len(units))
        stages = [StagePlan(s.node, a, b - 1, s.tp) for s, a, b in zip(chain, bounds, bounds[1:])]
        est = estimate_pipeline(units, stages, cluster, wl, batch, phase)
        if est is not None and (est.output_tok_s > best_x or (est.output_tok_s == best_x and j < best_j)):
            best, best_x, best_j, best_round = stages, est.output_tok_s, j, est.round_s
    return best


def _prefix_costs(units: list[Unit], s: Slot, wl: Workload, r: Round, memo: dict) -> tuple[list[float], float]:
    """A slot's prefix sums of its units' busy seconds per round `r`, and its fixed seconds per round (memoised)."""
    key = (_slot_key(s), r)
    if key not in memo:
        cost, fixed = unit_round_costs(units, s.node, s.tp, wl, r)
        memo[key] = list(itertools.accumulate(cost, initial=0.0)), fixed
    return memo[key]


def split_chain(
    units: list[Unit], chain: list[Slot], cluster: Cluster, wl: Workload, batch: int, phase: Phase = Phase.BOTH, memo: dict | None = None
) -> list[StagePlan] | None:
    """Contiguous unit ranges over `chain` minimising the busiest stage at `batch` (for a
    prefill pool: per prompt, one prompt per stage in flight); None if none fits.

    Small cases (at most EXHAUSTIVE splits) are searched exhaustively against the full
    saturation model, so tiny instances are solved exactly.

    Args:
        memo: per-slot-kind costs and memory reach, kept across calls over the same units,
            cluster and workload (the solver splits many chains of the same kinds).
    """
    n = len(chain)
    if n <= len(units) and math.comb(len(units) - 1, n - 1) <= EXHAUSTIVE:  # estimate_pipeline ranks the workload itself
        return _all_splits(units, chain, cluster, wl, batch, phase, memo)
    if phase == Phase.PREFILL:
        batch = n
    wl = wl.ranked(min(s.tp for s in chain))  # a micro-step's budget: the narrowest slot's ranks
    memo = {} if memo is None else memo
    n_units = len(units)
    reaches, to_end = [], []  # per slot: its memory reach, and from which units it holds the rest with the logits
    for s in chain:
        key: tuple = (_slot_key(s), batch, phase)
        if key not in memo:
            cap = s.node.profile.usable_memory
            # the stage holding the last unit also keeps the step's fp32 logits (simulate._stage_memory): without
            # them a split's last stage could overflow, and the batch search's bisection skip batches that fit
            memo[key] = (
                _memory_reach(units, wl, batch, phase, s.tp, cap, memo),
                _memory_reach(units, wl, batch, phase, s.tp, cap - _logits_bytes(units, wl, batch, s.tp), memo),
            )
        reach, last = memo[key]
        reaches.append(reach)
        to_end.append([r >= n_units - 1 for r in last])
    u = 0
    for reach in reaches:  # memory alone, each slot as far as it holds: no split fits if this does not
        u = max(u, reach[u] + 1) if u < n_units else u
    if u < n_units:
        return None
    m = max(1, min(n, batch))
    r = Round.of(wl, batch, m, phase)
    slots = []  # per slot: prefix sums of its unit costs, its memory reach, whether it may end at the last unit, fixed time
    for s, reach, ends in zip(chain, reaches, to_end):
        prefix, fixed = _prefix_costs(units, s, wl, r, memo)
        slots.append((prefix, reach, ends, fixed, s))

    def link(i: int, j: int, last: int) -> float:
        """Busy seconds per round of the link from slot i's stage (ending at unit `last`) to slot j's."""
        return r.link_time(units[last].out_bytes_per_token, hops(cluster, chain[i].node, chain[j].node))

    ahead = [link(i, i + 1, 0) for i in range(n - 1)] + [0.0]  # to the next slot, at the embedding's width (as if every slot ran)

    def greedy(tau: float, links: bool) -> list[tuple[int, StagePlan]] | None:
        """Each slot in turn takes as many units as fit within `tau` and its memory (with `links`, its busy
        time and its link out to the next slot together within `tau`)."""
        stages, u = [], 0
        for i, (P, reach, ends, fixed, s) in enumerate(slots):
            if u == n_units:
                break
            base = fixed + (ahead[i] if links else 0.0)
            hi = min(bisect.bisect_right(P, P[u] + (tau - base)) - 2, reach[u])  # P[hi+1] − P[u] ≤ tau − base
            if hi == n_units - 1 and not ends[u]:
                hi -= 1  # the logits do not fit beside the rest: a later slot ends the chain
            if hi >= u:
                stages.append((i, StagePlan(s.node, u, hi, s.tp)))
                u = hi + 1
        return stages if u == n_units else None

    def round_of(stages: list[tuple[int, StagePlan]]) -> float:
        """The round estimate_pipeline gives a split: its busiest stage, its busiest link and (not in a prefill
        pool) its micro-batches' loop through every stage and link."""
        busy = [slots[i][0][sp.last + 1] - slots[i][0][sp.first] + slots[i][3] for i, sp in stages]
        outs = [link(i, j, sp.last) for (i, sp), (j, _) in zip(stages, stages[1:])]
        loop = 0.0 if phase == Phase.PREFILL else (sum(busy) + sum(outs)) / m
        return max(busy + outs + [loop])

    def bisected(links: bool) -> list[tuple[int, StagePlan]] | None:
        """The split of least `tau` at which `greedy` covers every unit."""
        total = max(P[-1] + fixed for P, _, _, fixed, _ in slots) + (max(ahead) if links else 0.0)
        if greedy(total * 1.0001, links) is None:
            return None
        lo, hi = 0.0, total * 1.0001
        while hi - lo > 1e-7 * hi:  # the bottleneck to 1e-7 of itself
            mid = (lo + hi) / 2
            if greedy(mid, links) is None:
                lo = mid
            else:
                hi = mid
        return greedy(hi, links)

    # a stage's busy time and its link out are separate terms of the round: filling stages by their sum leaves the
    # fast stages before a slow link short (4% below the round's own least on a 10 GbE chain); by busy time alone,
    # the loop may bind instead. Both are tried, and the one of the lesser round kept.
    found = [x for x in (bisected(True), bisected(False)) if x is not None]
    if not found:
        return None
    return [sp for _, sp in min(found, key=round_of)]


def _logits_bytes(units: list[Unit], wl: Workload, batch: int, tp: int) -> float:
    """The last stage's fp32 logits of one step on a device (as simulate._stage_memory sizes them)."""
    return step_tokens(min(wl.prefill_chunk, wl.input_len), batch, tp, wl.layout(tp)) * logits_per_token(units)


def _slot_key(s: Slot) -> tuple:
    return s.node.profile.name, s.tp, id(s.node.link)  # within one solve: links are the cluster's objects


def _unit_memory(units: list[Unit], wl: Workload, phase: str, tp: int) -> tuple[list[float], list[float], list[float], list[int], list[float]]:
    """Per unit: weight bytes on a device of a group of `tp`, its own K/V bytes per sequence, the shared K/V
    bytes, the devices its K/V splits over and its activation bytes per token (_memory_reach's terms that do
    not depend on the batch)."""
    own, shared = wl.kv_tokens(Phase(phase)), wl.shared_tokens(Phase(phase))
    lay = wl.layout(tp)
    return (
        [u.device_weights(tp, lay) for u in units],
        [u.kv_bytes(own, wl.windowed) for u in units],
        [u.kv_bytes(shared, wl.windowed) for u in units],
        [u.kv_ways(tp, lay) for u in units],
        [u.act_bytes.per_token for u in units],
    )


def _memory_reach(units: list[Unit], wl: Workload, batch: int, phase: str, tp: int, cap: float, memo: dict | None = None) -> list[int]:
    """reach[u]: the last unit a stage starting at unit u holds within `cap` bytes (u − 1 if
    none): weights and KV split over tp (an MLA latent kept whole; data-parallel layouts: Unit.device_weights), activations
    at their peak (tied weights counted per unit: conservative; estimate_pipeline counts them once). Nondecreasing in u: two
    pointers, a running sum and a sliding-window max. With `memo` (split_chain's: one set of units and workload) the
    per-unit terms are kept per (phase, tp) and the reach per (cap, batch, phase, tp): kinds of one device over
    different links share it (a third of the search's CPU on gen3143 of the generated clusters was this, recomputed)."""
    at = ("reach", tp, cap, batch, phase, wl.dp_ranks)
    if memo is not None and at in memo:
        return memo[at]
    per = ("unit memory", tp, phase)
    if memo is None or per not in memo:
        terms = _unit_memory(units, wl, phase, tp)
        if memo is None:
            memo = {}
        memo[per] = terms
    weights, kv, kv_shared, ways, act_per = memo[per]
    lay = wl.layout(tp)
    tokens = step_tokens(min(wl.prefill_chunk, wl.input_len), batch, tp, lay)
    mem_of = [w + (batch * k + sh) / d for w, k, sh, d in zip(weights, kv, kv_shared, ways)]
    act = [tokens * a for a in act_per]
    peak: collections.deque[int] = collections.deque()  # indices, act decreasing
    n, out, hi, mem = len(units), [], -1, 0.0
    for u in range(n):
        if hi < u - 1:
            hi, mem = u - 1, 0.0
        while peak and peak[0] < u:
            peak.popleft()
        while hi + 1 < n and mem + mem_of[hi + 1] + max(act[peak[0]] if peak else 0.0, act[hi + 1]) <= cap:
            hi += 1
            mem += mem_of[hi]
            while peak and act[peak[-1]] <= act[hi]:
                peak.pop()
            peak.append(hi)
        out.append(hi)
        if hi >= u:
            mem -= mem_of[u]
    memo[at] = out
    return out


def batch_options(
    units: list[Unit],
    chain: list[Slot],
    cluster: Cluster,
    wl: Workload,
    split: Callable[[int], list[StagePlan] | None] | None = None,
    phase: Phase = Phase.BOTH,
    memo: dict | None = None,
    ceiling: int = MAX_BATCH,
    objective: str = Objective.THROUGHPUT,
    hints: tuple[int, ...] = (),
) -> list[Found]:
    """Batches up to `ceiling` that fit, each with its best split (batches.search says which are
    tried); a prefill pool has one option: a prompt per stage, if the ceiling allows that many.

    Args:
        split: stage boundaries for a batch; default: `split_chain` (the best split).
        memo: passed on to `split_chain`.
        ceiling: the most sequences in flight (batches.batch_ceiling).
        objective: what the search for the best batch between tried ones aims at.
        hints: batches to try as well (batches.search).
    """
    split = split or (lambda batch: split_chain(units, chain, cluster, wl, batch, phase, memo))

    def evaluate(batch: int) -> Found | None:
        stages = split(batch)
        est = estimate_pipeline(units, stages, cluster, wl, batch, phase) if stages else None
        return Found(est, stages) if est is not None and stages is not None else None

    if phase == Phase.PREFILL:
        one = evaluate(1) if len(chain) <= ceiling else None
        return [one] if one else []
    return [f for _, f in search(evaluate, lambda f: score(objective, f.estimate.output_tok_s, f.estimate.tpot_s, 1.0), ceiling, hints)]


def slo_filter(ttft_slo_s: float | None, tpot_slo_s: float | None) -> Callable[[Found], bool]:
    """Whether a pipeline at its batch keeps the TTFT and TPOT limits (None: no limit)."""

    def within(f: Found) -> bool:
        e = f.estimate
        return not ((ttft_slo_s and e.ttft_s > ttft_slo_s) or (tpot_slo_s and e.tpot_s > tpot_slo_s))

    return within


def best_batch(
    units: list[Unit],
    chain: list[Slot],
    cluster: Cluster,
    wl: Workload,
    objective: str,
    *,
    split: Callable[[int], list[StagePlan] | None] | None = None,
    ceiling: int = MAX_BATCH,
    admits: Callable[[Found], bool] | None = None,
) -> Found | None:
    """The batch best for `objective` on this chain, with no floors, among those `admits` (e.g. the SLOs)."""
    opts = [f for f in batch_options(units, chain, cluster, wl, split, ceiling=ceiling, objective=objective) if admits is None or admits(f)]
    return max(opts, key=lambda f: score(objective, f.estimate.output_tok_s, f.estimate.tpot_s, 1.0), default=None)
