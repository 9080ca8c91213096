"""Second pass of the cell bound: one pipeline's best bottleneck on a given set of devices, exactly.

For a cell c (devices per type, see stage_costs.py), a phase, a batch B and an
exact pipeline length n, a dynamic program over chains of stages finds the least R at which
n stages, in some order of kinds and within c's devices, cover every unit: state (stages so
far, type of the last stage, devices used per type), value the furthest unit reached
(reaching further is never worse: a stage reaches at least as far from a later start),
capped so that every stage still to come keeps a unit. A link between two stages must carry
its activations within R at its cheapest cut (the fastest path between the two types).
Costs are those of the pipeline's own m = min(n, B) micro-batches. R comes from a bisection
over the stage and link times that can occur, so it is exact. With `loop` (the cell bound's
refinement, every objective) the round counts the loop term too (loop_dp.py) for chains of at
most `loop_stages` (LOOP_STAGES under throughput): where the chain found already passes its micro-batches within R, no
chain's loop binds and its DP is skipped. Links stay relaxed to the fastest path between two types.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from hetc.partitioner.bounds.loop_dp import loop_round
from hetc.partitioner.bounds.stage_costs import SLACK, Case, StageCosts
from hetc.scheduling import Phase

__all__ = ["Chain", "best_chain", "chain_most", "chain_round", "model_work"]

Chain = tuple  # (kinds per stage, cuts: stage s holds units [cuts[s], cuts[s+1]))
STEP = 1200.0  # work of one numpy step, in the refinement budget's unit (cell_bound.WORK_PER_SECOND)
LOOP = 0.12  # work of one state × unit × sparse-table level of the loop DP (loop_dp.py; ~3 ns each measured), same unit
# the cost model at a new operating point: one kind's unit costs, and each unit's stage time at a step not met before
# (tables.py: rounds of other batches share steps), same unit. Measured as colgen.EVALUATION and STEP_COST are (0.14 ms
# an evaluation, steps included, on gen39 of the wide tuning block); a flat 2.5 ms an evaluation before, 18x its CPU, spent
# most of the refinement budget on phantom work
CASE = 4.4e3
CASE_STEP = 1.2e3
LOOP_STAGES = 4  # the loop term counted for chains of at most this many (tune block gen8 at 30 CPU s: 0.991, 0.940 at every length)


def _cover(costs: StageCosts, case: Case, R: float, counts: np.ndarray, n: int, kinds: list[int], keep: bool = False):
    """Furthest unit reached by n-stage chains within `counts` (per layer, when `keep`), and the
    work it took (numpy steps and the states × kinds they touched)."""
    T, U = len(costs.types), costs.u
    dims = np.array([int(x) + 1 for x in counts])  # per device group
    size = int(np.prod(dims))
    strides = np.array([int(np.prod(dims[k + 1 :])) for k in range(len(dims))], dtype=np.int64)
    cells = np.indices(tuple(dims)).reshape(len(dims), -1).T
    kk = np.array(kinds)
    ty, gr, tp = costs.type_of[kk], costs.group[kk], costs.tp[kk]
    full = costs.reach(case, R)  # [kinds, U]
    reach = full[kk]
    link_ok = case.cheapest <= R  # [T', T]
    E = np.full((T, size), -1, dtype=np.int64)
    first = tp <= counts[gr]
    np.maximum.at(E, (ty[first], (tp * strides[gr])[first]), np.minimum(reach[first, 0], U - n + 1))
    layers: Any = [E] if keep else None
    work = STEP
    for s in range(1, n):
        F = np.full(T * size, -1, dtype=np.int64)
        for t2 in range(T):
            live = np.nonzero((E[t2] > 0) & (E[t2] < U))[0]
            if not len(live):
                continue
            at = E[t2, live]
            work += STEP + len(live) * len(kk)
            nxt = reach[:, at]  # [K, L]
            ok = (cells[live][:, gr].T + tp[:, None] < dims[gr][:, None]) & link_ok[t2, ty][:, None] & (nxt > at)
            dst = ty[:, None] * size + live[None, :] + (tp * strides[gr])[:, None]
            np.maximum.at(F, dst[ok], np.minimum(nxt[ok], U - n + 1 + s))
        E = F.reshape(T, size)
        if keep:
            layers.append(E)
    return (E, layers, cells, strides, full) if keep else (E, work)


def model_work(costs: StageCosts, before: tuple[int, int]) -> float:
    """The cost model's work since `before` (the tables' evaluations and new step costs then)."""
    return CASE * (costs.tables.evaluations - before[0]) + CASE_STEP * (costs.tables.step_costs - before[1])


def best_chain(
    costs: StageCosts,
    phase: Phase,
    batch: int,
    n: int,
    counts: np.ndarray,
    tp_groups: bool,
    below: float = np.inf,
    fit: int | None = None,
    above: float = 0.0,
    loop: bool = False,
    loop_stages: int = LOOP_STAGES,
    last: np.ndarray | None = None,
) -> tuple[tuple[float, Chain] | None, float]:
    """(least bottleneck R, a chain attaining it) over n-stage pipelines of `phase` on at most
    `counts` devices per type, None if none fits within R ≤ `below`; and the work it took.

    Args:
        batch: sequences in flight the stages are costed at (prefill pools: ignored, one
            prompt per stage).
        tp_groups: whether stages may be tensor-parallel groups (never in pools).
        below: only bottlenecks up to this matter (a caller that knows a better chain).
        fit: the sequences every stage must hold in memory (default `batch`).
        above: no chain's round is below this (a bound the caller has): the bisection starts
            there (without the loop term, where the round is the bottleneck).
        loop: the least round with the loop term counted too (loop_dp.py; not in prefill pools,
            which have none); the chain returned is one attaining the DP's bottleneck.
        loop_stages: with `loop`, the longest chains it is counted for (longer ones: relaxed).
        last: per type, whether the last stage may be of it (default: every type; prefill
            pools: the types whose KV route feeds a decode pool fast enough).
    """
    b, m = (n, 1) if phase == Phase.PREFILL else (batch, min(n, batch))
    use = counts[costs.group] >= costs.tp  # the kinds this cell can form
    before = costs.tables.evaluations, costs.tables.step_costs
    case = costs.case(phase, b, m, use, fit=b if phase == Phase.PREFILL or fit is None else fit)
    work = model_work(costs, before)  # the cost model run at a new operating point
    if case is None:
        return None, work + STEP
    kinds = [g for g in range(len(costs.kinds)) if np.isfinite(case.P[g, -1]) and (tp_groups or costs.tp[g] == 1)]
    if not kinds:
        return None, work + STEP
    ends = np.ones(len(costs.types), dtype=bool) if last is None else last
    spent = 0.0

    def reaches(R: float) -> bool:
        nonlocal work, spent
        E, spent = _cover(costs, case, R, counts, n, kinds)
        work += spent
        return bool((E[ends] >= costs.u).any())

    cand: Any = [case.cheapest.ravel()]  # every link time and stage time that can bind
    for g in kinds:
        ii, jj = costs.ranges(case, g)
        cand.append(case.P[g][jj] - case.P[g][ii] + case.over[g])
    cand = np.unique(np.concatenate(cand))
    # `above` bounds the round; with the loop counted the round can exceed the bottleneck, so a chain's
    # bottleneck may lie below it (a round of stage 2.3036 ms and loop 2.3040 ms: starting the bisection
    # at 2.3040 skipped that chain and bounded the cell by the next stage time, 2.3446 ms: below a real plan)
    cand = cand[(cand <= below) & (cand >= (0.0 if loop and phase != Phase.PREFILL else above) * (1 - 1e-6))]
    if not len(cand) or not reaches(cand[-1]):
        return None, work
    lo, hi = 0, len(cand) - 1
    while lo < hi:
        mid = (lo + hi) // 2
        if reaches(cand[mid]):
            hi = mid
        else:
            lo = mid + 1
    R = float(cand[lo])
    chain = _backtrack(costs, case, R, counts, n, kinds, ends)
    work += spent  # backtracking: one more pass
    # the chain found bounds f(R) (loop_dp.py): where its own loop fits within R no chain's loop binds, and the DP is not needed;
    # past loop_stages stages the loop is left out (a relaxation): its DP grows with them, and over m = n micro-batches it rarely binds
    if loop and phase != Phase.PREFILL and n <= loop_stages and _loop_sum(costs, case, chain) / m > R * (1 + SLACK):
        R, w = loop_round(costs, case, R, cand, counts, n, kinds, m)
        work += w * LOOP
        if R > below:
            return None, work
    return (R, chain), work


def _loop_sum(costs: StageCosts, case: Case, chain: Chain) -> float:
    """Σ busy + Σ links at their cuts of `chain` at `case` (what loop_dp.least_sum minimises)."""
    kinds, cuts = chain
    busy = sum(float(case.P[g, j] - case.P[g, i] + case.over[g]) for g, i, j in zip(kinds, cuts, cuts[1:]))
    types = [int(costs.type_of[g]) for g in kinds]
    return busy + sum(float(case.link[a, b, i]) for a, b, i in zip(types, types[1:], cuts[1:-1]))


def _backtrack(costs: StageCosts, case: Case, R: float, counts: np.ndarray, n: int, kinds: list[int], ends: np.ndarray) -> Chain:
    E, layers, cells, strides, reach = _cover(costs, case, R, counts, n, kinds, keep=True)
    U = costs.u
    link_ok = case.cheapest <= R
    t, c = map(int, np.argwhere((E >= U) & ends[:, None])[0])
    target, chain, cuts = U, [], [U]
    for s in range(n - 1, -1, -1):
        for g in (g for g in kinds if costs.type_of[g] == t):
            k, grp = int(costs.tp[g]), int(costs.group[g])
            if cells[c, grp] < k:
                continue
            prev = c - k * strides[grp]
            if s == 0:
                if prev == 0 and reach[g, 0] >= target:
                    chain.append(g)
                    break
                continue
            done = False
            for t2 in range(len(costs.types)):
                i = int(layers[s - 1][t2, prev])
                if 0 < i < target and reach[g, i] >= target and link_ok[t2, t]:
                    chain.append(g)
                    cuts.append(i)
                    t, c, target, done = t2, prev, i, True
                    break
            if done:
                break
        else:
            raise AssertionError("no predecessor found while backtracking a covering chain")
    cuts.append(0)
    return tuple(reversed(chain)), tuple(reversed(cuts))


def chain_most(costs: StageCosts, phase: Phase, chain: Chain) -> int:
    """The most sequences every stage of `chain` holds in memory (Tables.most, closed form)."""
    kinds, cuts = chain
    return int(min(costs.tables.most(costs.kinds[g], phase)[a, b - a] for g, a, b in zip(kinds, cuts, cuts[1:])))


def chain_round(costs: StageCosts, phase: Phase, batch: int, chain: Chain, loop: bool = False) -> float:
    """The bottleneck of `chain` at `batch` sequences as the chain DP counts it: its busiest
    stage, or a link between two of its stages' types at its cheapest cut; with `loop`, at least
    its m micro-batches' loop too (Σ stages + Σ links at their cuts, over m: loop_dp.py)."""
    kinds, cuts = chain
    n = len(kinds)
    b, m = (n, 1) if phase == Phase.PREFILL else (batch, min(n, batch))
    stages = []
    for g, i, j in zip(kinds, cuts, cuts[1:]):
        cost, over = costs.tables.unit_costs(costs.kinds[g], m, b, phase)
        stages.append(float(cost[i:j].sum()) + over)
    link, cheapest = costs.links(phase, b, m)
    pairs = [(costs.type_of[x], costs.type_of[y]) for x, y in zip(kinds, kinds[1:])]
    R = max(stages + [float(cheapest[t, u]) for t, u in pairs])
    if loop and phase != Phase.PREFILL:
        R = max(R, (sum(stages) + sum(float(link[t, u, i]) for (t, u), i in zip(pairs, cuts[1:]))) / m)
    return R
