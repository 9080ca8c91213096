"""Chains that fit: pipelines within the cluster's device and tp-group counts, for the search's templates.

Column generation (bounds/colgen.py) prices chains without counting devices per type (the master LP
does), so the pipelines it hands the search may need more devices of a type than exist (ten H100 tp-2
stages where there are four H100): `templates.fits` drops those, and no other template family builds
long mixed chains with tp groups. Here the search gets chains that fit, a fleet at a time.

A fleet is built greedily at one batch B: the chain of at most n stages within the resources left
(each device type's devices; each tp kind's groups where they bind before its devices do) of least
bottleneck R, as refine.py's chain DP counts it but links left out (the templates price the real
ones), fewest devices among those; its resources are taken and the next chain is sought in what is
left (at B, or B halved where nothing left holds B), until none fits. The greedy takes the best devices
first, where a type may do better alone (gen9 of the generated clusters: its node of eight H200 gives
14,900 tok/s alone, and the 21 devices of five other types 16,200 as one chain of 14 stages with tp
groups, against 12,100 as the two chains the search found without it): so fleets are also built with
each device type left out in turn, and the search mixes them with the homogeneous templates.

The DP is refine.py's cover with a vector of resources for state: for the resources used, the
furthest unit reached within R (a cell that a cell of one resource fewer reaches as far is dropped:
its chains are never needed). A cluster whose resource vectors are too many (past STATES) is capped
type by type: a chain is then sought within a sub-cluster, and the rest of the fleet in what it leaves.
Every stage is costed at the micro-batches of the longest chain allowed (m = min(n, B)): the chains are
seeds, and the templates evaluate them exactly (split, batch, micro-batches, the loop term, real links).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from hetc.partitioner.bounds.cell_bound import Pipeline
from hetc.partitioner.bounds.refine import STEP, chain_round
from hetc.partitioner.bounds.stage_costs import Case, StageCosts
from hetc.partitioner.search.templates import fits
from hetc.scheduling import Phase

__all__ = ["Resources", "fleet", "fitted", "unfit_batches", "unfit_lengths"]

STATES = 40_000  # resource vectors one DP counts apart at most (gen9's whole cluster: 174,960, its tp-4 A100 group apart)
BATCHES = 2  # distinct batches of the seeds fleets are built at
LEAST = 16  # a fleet's batch is halved where what is left holds no chain at it, down to this
GRID = 1.04  # the least bottleneck is bisected over a geometric grid of this ratio (a seed, not a bound: no need to be exact)


@dataclass(frozen=True, slots=True)
class Resources:
    """What stages draw on: per resource its count (`caps`), per kind what one stage takes (`use`
    [K, D]); the first T resources are the device types' devices."""

    caps: np.ndarray
    use: np.ndarray
    types: int

    @staticmethod
    def of(costs: StageCosts, counts: np.ndarray) -> Resources:
        """Each type's devices (`counts`) and each tp kind's groups where they are fewer than the
        type's devices allow (e.g. one node of four A100 among nodes of two: one tp-4 group).

        Args:
            counts: devices per type (StageCosts.types' order).
        """
        T = len(costs.types)
        caps, cols = list(map(int, counts)), []
        for g, kind in enumerate(costs.kinds):
            t, tp = int(costs.type_of[g]), int(costs.tp[g])
            if tp > 1 and kind.groups < int(counts[t]) // tp:
                caps.append(int(kind.groups))
                cols.append(g)
        use = np.zeros((len(costs.kinds), len(caps)), dtype=np.int64)
        use[np.arange(len(costs.kinds)), costs.type_of] = costs.tp
        for d, g in enumerate(cols):
            use[g, T + d] = 1
        return Resources(np.array(caps, dtype=np.int64), use, T)

    def left(self, chain: tuple[int, ...]) -> Resources:
        """What is left once one replica of a chain takes its resources.

        Args:
            chain: the chain's stage kinds (indices into StageCosts.kinds).
        """
        return Resources(self.caps - self.use[list(chain)].sum(axis=0), self.use, self.types)

    def capped(self, states: int) -> Resources:
        """The same with the largest device counts lowered one at a time until the resource
        vectors number at most `states` (a sub-cluster to seek one chain in).

        Args:
            states: the most resource vectors (STATES).
        """
        caps = self.caps.copy()
        while int(np.prod(caps + 1)) > states and caps[: self.types].max() > 1:
            caps[int(np.argmax(caps[: self.types]))] -= 1
        return Resources(np.minimum(caps, self.caps), self.use, self.types)


def _layers(
    costs: StageCosts, case: Case, R: float, res: Resources, n: int, kinds: list[int], stop: bool = False
) -> tuple[list[np.ndarray], np.ndarray, float]:
    """Per stage count s = 1 … n, E_s [S]: the furthest unit a chain of s stages reaches within R by
    the resources it used (mixed radix over `res.caps`; −1 where none, links not counted); the
    strides; and the work (refine.STEP's unit)."""
    U = costs.u
    dims = res.caps + 1
    size = int(np.prod(dims))
    strides = np.array([int(np.prod(dims[d + 1 :])) for d in range(len(dims))], dtype=np.int64)
    cells = (np.arange(size)[:, None] // strides) % dims  # [S, D]
    kk = np.array(kinds)
    use = res.use[kk]  # [K, D]
    step = use @ strides  # index offset of one stage of each kind
    reach = costs.reach(case, R)[kk]  # [K, U]
    head = res.caps - cells  # [S, D]: what is left at each cell
    E = np.full(size, -1, dtype=np.int64)
    for one in np.nonzero((use <= res.caps).all(axis=1))[0]:
        E[step[one]] = max(E[step[one]], reach[one, 0])
    E = _undominated(E, dims)
    needs = [[(d, int(use[i, d])) for d in np.nonzero(use[i])[0]] for i in range(len(kk))]  # the resources each kind takes
    layers, work = [E], STEP
    for _ in range(1, n):
        live = np.nonzero((E > 0) & (E < U))[0]
        if not len(live):
            break
        at, left, F = E[live], head[live], np.full(size, -1, dtype=np.int64)
        for i in range(len(kk)):
            nxt = reach[i, at]
            ok = nxt > at
            for d, k in needs[i]:
                ok &= left[:, d] >= k
            dst = live[ok] + step[i]
            F[dst] = np.maximum(F[dst], nxt[ok])
        work += STEP * len(kk) + len(live) * len(kk)
        E = _undominated(F, dims)
        work += STEP * len(dims)
        layers.append(E)
        if stop and (E >= U).any():
            break
    return layers, strides, work


def _undominated(E: np.ndarray, dims: np.ndarray) -> np.ndarray:
    """E with −1 at every cell that a cell of one resource fewer reaches as far: a chain through it
    is never needed (the other costs no more at any price ≥ 0), nor are its successors."""
    A = M = E.reshape(tuple(dims))
    below = np.full(A.shape, -1, dtype=np.int64)
    for d in range(len(dims)):
        if dims[d] > 1:
            cut = [slice(None)] * len(dims)
            cut[d] = slice(1, None)
            prev = [slice(None)] * len(dims)
            prev[d] = slice(None, -1)
            np.maximum(below[tuple(cut)], M[tuple(prev)], out=below[tuple(cut)])
    return np.where(A > below, A, -1).ravel()


def _backtrack(costs: StageCosts, case: Case, R: float, res: Resources, layers: list[np.ndarray], strides: np.ndarray, s: int, c: int, kinds: list[int]):
    """A chain (kinds, cuts) of s stages at resource cell c that reaches the last unit within R."""
    reach = costs.reach(case, R)
    dims = res.caps + 1
    target, chain, cuts = costs.u, [], [costs.u]
    for k in range(s - 1, -1, -1):
        for g in kinds:
            prev = c - int(res.use[g] @ strides)
            if prev < 0 or ((prev // strides) % dims + res.use[g] != (c // strides) % dims).any():
                continue
            i = 0 if k == 0 else int(layers[k - 1][prev])
            if (prev == 0 if k == 0 else 0 < i < target) and reach[g, i] >= target:
                chain.append(g)
                cuts.append(i)
                c, target = prev, i
                break
        else:
            raise AssertionError("no predecessor found while backtracking a fitted chain")
    return tuple(reversed(chain)), tuple(reversed(cuts))


def _best(costs: StageCosts, batch: int, n: int, res: Resources) -> tuple[Any, float]:
    """(the chain that prefills and decodes, of at most n stages within `res`, of least bottleneck
    (within GRID) and fewest devices, or None), and the work it took."""
    use: np.ndarray = np.asarray((res.use <= res.caps).all(axis=1), dtype=bool)
    case = costs.case(Phase.BOTH, batch, min(n, batch), use, fit=batch)
    if case is None:
        return None, STEP
    kinds = [g for g in range(len(costs.kinds)) if np.isfinite(case.P[g, -1]) and use[g]]
    if not kinds:
        return None, STEP
    work, U = 0.0, costs.u
    cand: Any = [case.P[g][jj] - case.P[g][ii] + case.over[g] for g in kinds for ii, jj in [costs.ranges(case, g)]]
    cand = np.concatenate(cand)
    cand = cand[np.isfinite(cand) & (cand > 0)]
    if not len(cand):
        return None, STEP
    grid = cand.min() * GRID ** np.arange(int(np.ceil(np.log(cand.max() / cand.min()) / np.log(GRID))) + 1)

    def reached(R: float, stop: bool = True) -> tuple[list[np.ndarray], np.ndarray] | None:
        nonlocal work
        layers, strides, w = _layers(costs, case, R, res, n, kinds, stop)
        work += w
        return (layers, strides) if any((E >= U).any() for E in layers) else None

    if reached(grid[-1]) is None:
        return None, work
    lo, hi = 0, len(grid) - 1
    while lo < hi:
        mid = (lo + hi) // 2
        if reached(grid[mid]) is not None:
            hi = mid
        else:
            lo = mid + 1
    R = float(grid[lo])
    got = reached(R, stop=False)
    assert got is not None
    layers, strides = got
    dims = res.caps + 1
    devices = ((np.arange(int(np.prod(dims)))[:, None] // strides) % dims)[:, : res.types].sum(axis=1)  # per cell
    ends = [(s, int(np.argmin(np.where(E >= U, devices, np.iinfo(np.int64).max)))) for s, E in enumerate(layers) if (E >= U).any()]
    s, c = min(ends, key=lambda sc: devices[sc[1]])
    return _grouped(costs, case, _backtrack(costs, case, R, res, layers, strides, s + 1, c, kinds), grid[lo:]), work


def _grouped(costs: StageCosts, case: Case, chain: tuple, grid: np.ndarray) -> tuple:
    """`chain`'s stages reordered so that each device type's come together (types in the order they
    first appear, tp groups first), which the allocation can keep inside a node where the DP's
    order crossed the network at every stage; with cuts at the least R of `grid` it covers the units in."""
    kinds, U = chain[0], costs.u
    first = {int(costs.type_of[g]): i for i, g in reversed(list(enumerate(kinds)))}
    order = tuple(sorted(kinds, key=lambda g: (first[int(costs.type_of[g])], -int(costs.tp[g]), g)))
    for R in grid:
        reach, cuts = costs.reach(case, float(R)), [0]
        for i, g in enumerate(order):  # each stage as far as it reaches, leaving a unit to each after it
            cuts.append(min(int(reach[g, cuts[-1]]), U - (len(order) - 1 - i)))
            if cuts[-1] <= cuts[-2]:
                break
        if len(cuts) == len(order) + 1 and cuts[-1] == U:
            return order, tuple(cuts)
    return chain  # the DP's own order (it covers the units at grid[0])


def fleet(costs: StageCosts, batch: int, n: int, counts: np.ndarray, budget: float, past: Callable[[], bool] = lambda: False) -> tuple[list[Pipeline], float]:
    """Chains that prefill and decode and fit together in `counts`, found one after another (the
    module's greedy), and the work it took.

    Args:
        batch: sequences in flight the first chain is costed and fitted at.
        n: the most stages of a chain.
        counts: devices per type (StageCosts.types' order).
        budget: work (refine.STEP's unit) past which no further chain is sought.
        past: a CPU deadline; no further chain once it says so.
    """
    res, out, work = Resources.of(costs, counts), [], 0.0
    while work < budget and not past() and res.caps[: res.types].sum():
        sub = res.capped(STATES)
        chain, w = _best(costs, batch, min(n, int(sub.caps[: res.types].sum())), sub)
        work += w
        if chain is None:  # what is left holds no chain at this batch: a smaller one
            if batch <= LEAST:
                break
            batch //= 2
            continue
        out.append(Pipeline(Phase.BOTH, chain[0], chain[1], batch, batch / chain_round(costs, Phase.BOTH, batch, chain)))
        res = res.left(chain[0])
    return out, work


def unfit_batches(costs: StageCosts, seeds: list[Pipeline]) -> list[int]:
    """The batches of the seeds that prefill and decode and do not fit the cluster, in their order; none
    where the best such seed fits (its pipelines are templates already: an 8B model's 1–2-device chains).

    Args:
        seeds: the bound's pipelines, best first (colgen.ColumnBound.pipelines).
    """
    return list(dict.fromkeys(b for b, _ in unfit_lengths(costs, seeds)))


def unfit_lengths(costs: StageCosts, seeds: list[Pipeline]) -> list[tuple[int, int | None]]:
    """`unfit_batches`, each with the most stages its fleets' chains get: its first unfit seed's number
    where that seed is within each type's devices and only its tp groups are more than the nodes hold
    (the cell bound's chain DP counts no groups per node), else None (any number: column generation's
    seeds may take more devices of a type than exist, and a chain that fits may need other lengths;
    capped there, explore 3050 and 3143 fell 1-3%). The DP chose that length, costing its stages at as
    many micro-batches; a fleet allowed every device as a stage costs each at that many (decode reads
    each stage's weights once a micro-batch) and takes longer, slower chains (explore gen3119, 405b on
    30 devices: its best fitting chain 5,036 tok/s at 22 stages of up to 30, 6,055 at 12 of up to 12 as
    the search evaluates it)."""
    both = [p for p in seeds if p.phase == Phase.BOTH]
    if not both or fits(both[0].kinds, costs.kinds):
        return []
    out: dict[int, int | None] = {}
    for p in both:
        if not fits(p.kinds, costs.kinds):
            out.setdefault(p.batch, len(p.kinds) if (costs.devices_of(p.kinds) <= costs.devices).all() else None)
    return list(out.items())


def fitted(costs: StageCosts, seeds: list[Pipeline], max_stages: int, budget: float, past: Callable[[], bool] = lambda: False) -> list[Pipeline]:
    """Fleets of chains that fit the cluster (the module's greedy: on every device, then with each
    type left out), at the batches of the seeds that do not fit it; none where the best seed that
    prefills and decodes fits (its pipelines are templates already: an 8B model's 1–2-device chains).

    Args:
        seeds: the bound's pipelines, best first (colgen.ColumnBound.pipelines).
        max_stages: the most stages a chain may have.
        budget: work in all (refine.STEP's unit); each fleet gets a share of what is left.
        past: a CPU deadline.
    """
    batches = unfit_lengths(costs, seeds)
    if not batches:
        return []
    leave = [None] + sorted(range(len(costs.types)), key=lambda t: -int(costs.devices[t]))  # the largest types first
    jobs = [(b, n, t) for t in leave for b, n in batches[:BATCHES]]  # each left-out type at every batch before the next type
    out: dict[tuple, Pipeline] = {}
    work = 0.0
    for i, (b, n, t) in enumerate(jobs):
        if work >= budget or past():
            break
        counts = costs.devices.copy()
        if t is not None:
            counts[t] = 0
        got, w = fleet(costs, b, max_stages if n is None else min(n, max_stages), counts, (budget - work) / (len(jobs) - i) * 2, past)
        work += w
        for p in got:
            out.setdefault(p.kinds, p)
    return list(out.values())
