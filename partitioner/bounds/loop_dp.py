"""The chain DP's loop term: a pipeline's round is at least its micro-batches' loop.

simulate.estimate_pipeline prices a pipeline of n stages at m = min(n, B) micro-batches by
round = max(busiest stage, busiest link, (Σ busy + Σ links) / m): each micro-batch passes every
stage and link in turn. The chain DP (refine.py) bounds the first two only. Here, for a bound R
on them, f(R) is the least Σ busy + Σ links over n-stage chains within a cell's devices whose
stages take ≤ R and whose links are feasible as the DP counts them (the fastest path at its
cheapest cut ≤ R), each link charged at its own cut on the fastest path between the two types.
Every chain X is feasible at R_X = its DP bottleneck, which is a candidate (a stage time or a
cheapest link), so its round is ≥ max(R_X, f(R_X)/m) ≥ min over candidates R of
max(R, f(R)/m): what `loop_round` returns. f does not grow with R, so one bisection finds it.
The bound stays valid for every batch of a refined piece (costs at its top, batches.py): the
loop per sequence, Σ (busy_i(b) + link_i(b)) / (b · m(b)), does not grow with b where
busy_i(b)/b and link_i(b)/b do not, m(b) = min(n, b) not falling.
"""

from __future__ import annotations

import numpy as np

from hetc.partitioner.bounds.cells import CountSpace
from hetc.partitioner.bounds.stage_costs import SLACK, Case, StageCosts

__all__ = ["loop_round"]

CHUNK = 1 << 22  # values of one min-plus step at most (32 MiB): rows of a large cell go in parts


def _windows(reach: np.ndarray, U: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The valid starts of a stage of one kind per end j, as windows [lo_j, j): (ends j, lo_j, level
    ⌊log2(j − lo_j)⌋), ends with an empty window left out. A start i may end at j ≤ reach[i]; reach
    does not fall with i (a stage from a later unit reaches at least as far), and where it would its
    running maximum stands in: a superset of starts, so f(R) only falls (still a lower bound)."""
    top = np.maximum.accumulate(reach)
    j = np.arange(1, U + 1)
    lo = np.searchsorted(top, j, side="left")  # the first start that reaches j
    keep = lo < j
    j, lo = j[keep], lo[keep]
    return j, lo, np.floor(np.log2(j - lo)).astype(np.int64)


def _window_min(val: np.ndarray, ends: np.ndarray, lo: np.ndarray, level: np.ndarray) -> np.ndarray:
    """min over i in [lo_k, ends_k) of val[:, i], per row and window k (a sparse table over i:
    each window is two overlapping power-of-two spans), as [rows, windows]."""
    out = np.empty((len(val), len(ends)))
    span = val
    for k in range(int(level.max(initial=0)) + 1):
        if k:
            h = 1 << (k - 1)  # span k at i: min of span k − 1 at i and at i + 2^(k − 1)
            span = np.minimum(span[:, :-h], span[:, h:])
        at = np.nonzero(level == k)[0]
        if len(at):
            out[:, at] = np.minimum(span[:, lo[at]], span[:, ends[at] - (1 << k)])
    return out


def least_sum(costs: StageCosts, case: Case, R: float, counts: np.ndarray, n: int, kinds: list[int]) -> tuple[float, float]:
    """f(R) (module docstring; inf if no chain is feasible) and the work it took (states × units
    × sparse-table levels touched: each stage's valid starts per end are a window whose ends do not
    fall, so its minimum over them is two lookups in a table of power-of-two spans)."""
    T, U = len(costs.types), costs.u
    grid = CountSpace(counts)  # the device vectors a chain may have used so far
    dims, strides, cells = np.array(grid.dims), grid.strides, grid.cells
    reach = costs.reach(case, R)
    win = {g: _windows(reach[g], U) for g in kinds}  # stage [i, j): i in [lo_j, j)
    link_ok = case.cheapest <= R * (1 + SLACK)
    levels = 1 + int(np.log2(U)) + 1
    chunk = max(1, CHUNK // (U * levels))
    E = np.full((T, len(grid), U + 1), np.inf)  # least Σ busy + links of s + 1 stages ending at unit j
    for g in kinds:
        t, k, gr = costs.type_of[g], int(costs.tp[g]), costs.group[g]
        ends = np.arange(1, int(reach[g][0]) + 1)
        if k <= counts[gr] and len(ends):
            row = E[t, k * strides[gr]]
            row[ends] = np.minimum(row[ends], case.P[g, ends] + case.over[g])
    work = 0.0
    for s in range(1, n + 1):
        E[:, :, U - (n - s) + 1 :] = np.inf  # every stage still to come keeps a unit
        if s == n:
            break
        F = np.full_like(E, np.inf)
        for t2 in range(T):
            live = np.nonzero(np.isfinite(E[t2, :, :U]).any(axis=1))[0]
            if not len(live):
                continue
            for g in kinds:
                t, k, gr = costs.type_of[g], int(costs.tp[g]), costs.group[g]
                ends, lo, level = win[g]
                if not link_ok[t2, t] or not len(ends):
                    continue
                rows = live[cells[live, gr] + k < dims[gr]]
                if not len(rows):
                    continue
                for part in np.array_split(rows, -(-len(rows) // chunk)):  # [rows, U] per level at most ~CHUNK values
                    # leaving unit i into a stage of kind g: the link at cut i, then P[g, j] − P[g, i] + over
                    val = E[t2, part, :U] + case.link[t2, t, :U] - case.P[g, :U] + case.over[g]
                    best = _window_min(val, ends, lo, level) + case.P[g, ends]
                    dst = part + k * strides[gr]
                    F[t, dst[:, None], ends[None, :]] = np.minimum(F[t, dst[:, None], ends[None, :]], best)
                work += len(rows) * U * (int(level.max()) + 2)
        E = F
    return float(E[:, :, U].min()), work


def loop_round(costs: StageCosts, case: Case, R0: float, cand: np.ndarray, counts: np.ndarray, n: int, kinds: list[int], m: int) -> tuple[float, float]:
    """The least round any n-stage chain within `counts` can have, loop term included: min over
    candidates R ≥ R0 of max(R, f(R)/m), where R0 is the chain DP's bottleneck and `cand` the
    sorted values it can take (stage times, cheapest links); and the work it took."""
    f0, work = least_sum(costs, case, R0, counts, n, kinds)
    if f0 / m <= R0:
        return R0, work
    C = cand[(cand >= R0) & (cand <= f0 / m)]
    vals: dict[int, float] = {}

    def f(k: int) -> float:
        nonlocal work
        if k not in vals:
            vals[k], w = least_sum(costs, case, float(C[k]), counts, n, kinds)
            work += w
        return vals[k]

    lo, hi = 0, len(C)  # the first candidate whose loop fits within it (len(C): none)
    while lo < hi:
        mid = (lo + hi) // 2
        if f(mid) / m <= C[mid]:
            hi = mid
        else:
            lo = mid + 1
    below = f0 / m if lo == 0 else f(lo - 1) / m  # the candidates before lo: their loop binds
    return min(float(C[lo]) if lo < len(C) else np.inf, below), work
