"""Chains of tp groups of different degrees over several device types, for the search's templates.

Even mixes (templates.py) split the groups of one tp degree over two or three types, and fitted.py's
greedy takes the chain of least bottleneck on every device first: neither builds a short chain of wide
groups of different degrees on the best types beside another chain on the rest (gen17 of the generated
clusters, qwen3-235b-a22b: Gaudi2 TP-8 → H100 TP-4 → H200 beside a chain of the Max 1550 and MI300X).

Here a chain takes, for each of a set of at most MAX_TYPES device types, every group of one tp kind of it
(or an even share of them over r replicas), types one after another, wider groups first. Each is priced
by the chain DP's costs (stage_costs.py) at the largest batches of a ladder its memory holds: the least
bottleneck at which its stages, each as far as it reaches, cover the model (links at their cheapest
cut, the loop term left out: these are seeds, which the templates evaluate exactly). Per set of types the
kinds are chosen by descent (from each type's widest, one type's kind changed at a time while that gains),
not over every product of them. A set is worth its best chain times its replicas, and the fleet handed to
the templates is the best set of disjoint sets of types (a DP over subsets of the types; a type may stay
idle). Throughput only, where column generation's best pipeline does not fit (fitted.unfit_batches).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable

import numpy as np

from hetc.partitioner.bounds.cell_bound import Pipeline
from hetc.partitioner.bounds.refine import STEP, model_work
from hetc.partitioner.bounds.stage_costs import SLACK, Case, StageCosts
from hetc.scheduling import Phase

__all__ = ["degree_mixes"]

MAX_TYPES = 3  # device types one chain spans at most
LADDER = 2**0.5  # batches tried fall by this ratio from the seeds' largest (the templates climb between)
RUNGS = 2  # a chain is priced at the largest batch of the ladder it holds and the next one down (the step regimes: a smaller batch may run faster)
LEAST = 16  # the smallest batch a chain is priced at
STAGE = STEP / 2  # work of one stage's step through a vectorised cover (measured: ~2x cheaper than refine's numpy step)
# the cost model at a new operating point beyond refine.CASE, per unit of the model (measured: ~0.7 ms an evaluation
# of qwen3-235b-a22b's 94 units and ~0.9 ms of llama-3.1-405b's 126 on gen17 and gen25 of the generated clusters)
EVALUATION = 100.0
GRID = 32  # bottlenecks tried at once (geometric, from the least R a chain could have to twice it: within ~2%)


def _order(costs: StageCosts, picks: tuple[int, ...]) -> tuple[int, ...]:
    """The kinds of one chain (one per type), wider groups first, then the cluster's type order."""
    return tuple(sorted(picks, key=lambda g: (-int(costs.tp[g]), int(costs.type_of[g]))))


def _walk(case: Case, chain: np.ndarray, R: np.ndarray, units: int) -> tuple[np.ndarray, list[np.ndarray]]:
    """Per bottleneck in `R`, whether `chain`'s stages, each as far as it reaches within it and memory
    while leaving a unit to every stage after it, cover all `units`; and where each stage ends."""
    at = np.zeros(len(R), dtype=np.int64)
    ok = np.ones(len(R), dtype=bool)
    ends = []
    Rs = R * (1 + SLACK)
    for s, g in enumerate(chain):
        far = np.searchsorted(case.P[g], case.P[g, at] + (Rs - case.over[g]), side="right") - 1
        far = np.minimum(np.minimum(far, case.jfit[g, at]), units - (len(chain) - 1 - s))
        ok &= far > at
        at = np.maximum(far, at)
        ends.append(at)
    return ok & (at >= units), ends


class _Costs:
    """Each kind's cumulative unit costs at an operating point, only for the kinds a chain asks for (the
    tables cache them across chains; StageCosts.case would cost every kind at every chain's length),
    and the memory of every batch of the ladder stacked."""

    def __init__(self, costs: StageCosts, ladder: list[int]) -> None:
        self.costs, self.ladder = costs, ladder
        mems = [costs.memory(Phase.BOTH, b) for b in ladder]
        self.jfit = np.stack([mem.jfit for mem in mems])  # [batches, kinds, units]
        self.serves = np.stack([np.isfinite(mem.P[:, -1]) for mem in mems])  # [batches, kinds]
        self.rows: dict[tuple[int, int, int], tuple[np.ndarray, float]] = {}

    def row(self, g: int, m: int, batch: int) -> tuple[np.ndarray, float]:
        """(P[g] as StageCosts.case has it, over[g]) at `batch` sequences and m micro-batches."""
        key = (g, m, batch)
        if key not in self.rows:
            cost, over = self.costs.tables.unit_costs(self.costs.kinds[g], m, batch, Phase.BOTH)
            self.rows[key] = (np.concatenate(([0.0], np.cumsum(cost))), over)
        return self.rows[key]

    def largest(self, kk: np.ndarray) -> int | None:
        """The first batch of the ladder (falling) at which the chain's stages, each as far as memory
        lets it and leaving a unit to every stage after it, hold the model; None where none does."""
        U, n = self.costs.u, len(kk)
        at = np.zeros(len(self.ladder), dtype=np.int64)
        ok = self.serves[:, kk].all(axis=1)
        rungs = np.arange(len(self.ladder))
        for s, g in enumerate(kk):
            far = np.minimum(self.jfit[rungs, g, at], U - (n - 1 - s))
            ok &= far > at
            at = np.maximum(far, at)
        ok &= at >= U
        return int(np.argmax(ok)) if ok.any() else None


def _price(priced: _Costs, chain: tuple[int, ...]) -> tuple[float, int, float, tuple[int, ...]] | None:
    """(tok/s, batch, work, cuts) of one chain at the best of the RUNGS largest batches of the ladder its
    memory holds, or None where none does."""
    kk, n = np.array(chain), len(chain)
    rung = priced.largest(kk)
    work = STAGE * n
    if rung is None:
        return None
    best = None
    for r in range(rung, min(rung + RUNGS, len(priced.ladder))):
        got = _at(priced, chain, r)
        work += got[1]
        if got[0] is not None and (best is None or got[0][0] > best[0]):
            best = got[0]
    return None if best is None else (best[0], best[1], work, best[2])


def _at(priced: _Costs, chain: tuple[int, ...], rung: int) -> tuple[tuple[float, int, tuple[int, ...]] | None, float]:
    """((tok/s, batch, cuts) of one chain at the ladder's batch `rung`, None where it covers the model at no
    bottleneck), and the work it took."""
    costs, b = priced.costs, priced.ladder[rung]
    U, kk, n = costs.u, np.array(chain), len(chain)
    m = min(n, b)
    before = costs.tables.evaluations, costs.tables.step_costs
    rows = {g: priced.row(g, m, b) for g in set(chain)}
    work = model_work(costs, before) + EVALUATION * U * (costs.tables.evaluations - before[0])
    P = np.zeros((len(costs.kinds), U + 1))
    over = np.zeros(len(costs.kinds))
    for g, (row, o) in rows.items():
        P[g], over[g] = row, o
    _, cheapest = costs.links(Phase.BOTH, b, m)
    case = Case(P, over, priced.jfit[rung], np.zeros(0), cheapest)
    pairs = cheapest[costs.type_of[kk[:-1]], costs.type_of[kk[1:]]]
    whole = P[kk, -1] + over[kk]
    # the least R is at least each link's and the stages' shares in proportion to their speed (1 / Σ 1/whole);
    # a grid from there to twice it, then (memory or coarse units binding) to the slowest stage alone
    lo = max(float(pairs.max()) if len(pairs) else 0.0, 1.0 / float((1.0 / whole).sum()))
    for hi in (2 * lo, max(2 * lo, float(whole.max()))):
        R = lo * (hi / lo) ** np.linspace(0, 1, GRID)
        ok, ends = _walk(case, kk, R, U)
        work += STAGE * n
        if ok.any():
            k = int(np.argmax(ok))
            return (b / float(R[k]), b, (0, *(int(e[k]) for e in ends))), work
    return None, work


def _chain(costs: StageCosts, picks: tuple[int, ...], r: int) -> tuple[int, ...]:
    """One replica's chain: every group of each picked kind over r replicas, wider groups first."""
    return tuple(g for g in _order(costs, picks) for _ in range(int(costs.kinds[g].groups) // r))


def _kinds_per_type(costs: StageCosts) -> list[list[int]]:
    """Each type's kinds whose groups take at least half its devices (l4×tp8 once among 22 L4: the rest
    idle), widest first."""
    out = []
    for t in range(len(costs.types)):
        mine = [g for g in range(len(costs.kinds)) if costs.type_of[g] == t and 2 * costs.kinds[g].groups * costs.tp[g] >= costs.devices[t]]
        out.append(sorted(mine, key=lambda g: -int(costs.tp[g])))
    return out


def _descend(priced: _Costs, types: tuple[int, ...], kinds: list[list[int]], max_stages: int) -> tuple[tuple[float, Pipeline] | None, float]:
    """The best chain found over one set of types ((replicas × tok/s, one replica), or None), and the work it
    took: from each type's widest kind, one type's kind changed at a time while that gains (each type's
    kinds, not every product of them: 3-4 per type), then the replicas its groups split evenly into."""
    costs, work = priced.costs, 0.0
    seen: dict[tuple[tuple[int, ...], int], tuple[float, Pipeline] | None] = {}

    def value(picks: tuple[int, ...], r: int) -> tuple[float, Pipeline] | None:
        nonlocal work
        if (picks, r) not in seen:
            chain = _chain(costs, picks, r)
            got = _price(priced, chain) if len(chain) <= max_stages else None
            work += STAGE if got is None else got[2]
            seen[picks, r] = None if got is None else (r * got[0], Pipeline(Phase.BOTH, chain, got[3], got[1], got[0]))
        return seen[picks, r]

    def worth(v: tuple[float, Pipeline] | None) -> float:
        return -1.0 if v is None else v[0]

    picks = tuple(kinds[t][0] for t in types)
    best = value(picks, 1)
    moved = True
    while moved:
        moved = False
        for i, t in enumerate(types):
            for g in kinds[t]:
                other = picks[:i] + (g,) + picks[i + 1 :]
                got = value(other, 1)
                if worth(got) > worth(best):
                    picks, best, moved = other, got, True
    common = math.gcd(*(int(costs.kinds[g].groups) for g in picks))
    for r in range(2, common + 1):
        if common % r == 0:
            got = value(picks, r)
            if worth(got) > worth(best):
                best = got
    return best, work


def _fleet(best: dict[int, tuple[float, Pipeline]], T: int) -> list[int]:
    """The disjoint sets of types (bitmasks) whose chains give the most together, a set worth its best
    chain × replicas."""
    by_low: dict[int, list[int]] = {}
    for mask in best:
        by_low.setdefault(mask & -mask, []).append(mask)
    value, pick = [0.0] * (1 << T), [0] * (1 << T)
    for mask in range(1, 1 << T):
        low = mask & -mask
        value[mask], pick[mask] = value[mask ^ low], 0  # its lowest type idle
        for s in by_low.get(low, []):
            if s & mask == s and best[s][0] + value[mask ^ s] > value[mask]:
                value[mask], pick[mask] = best[s][0] + value[mask ^ s], s
    out, mask = [], (1 << T) - 1
    while mask:
        s = pick[mask]
        if s:
            out.append(s)
            mask ^= s
        else:
            mask ^= mask & -mask
    return sorted(out, key=lambda s: -best[s][0])


def degree_mixes(costs: StageCosts, batches: list[int], max_stages: int, budget: float, past: Callable[[], bool] = lambda: False) -> list[Pipeline]:
    """The chains of the best fleet of the module's family (best first), as seeds.

    Args:
        batches: the batches the bound's pipelines run at (the largest starts the ladder).
        max_stages: the most stages of a chain.
        budget: work in refine.STEP's unit; no further chain is priced past it.
        past: a CPU deadline; no further chain once it says so.
    """
    if not batches:
        return []
    ladder, b = [], float(max(batches))
    while b >= LEAST:
        if int(b) not in ladder:
            ladder.append(int(b))
        b /= LADDER
    if not ladder:  # every batch below the ladder's least (a tiny model's seeds at one sequence)
        return []
    priced = _Costs(costs, ladder)
    best: dict[int, tuple[float, Pipeline]] = {}
    work, kinds = 0.0, _kinds_per_type(costs)
    for size in range(1, MAX_TYPES + 1):
        for types in itertools.combinations(range(len(costs.types)), size):
            if work >= budget or past():
                break
            got, w = _descend(priced, types, kinds, max_stages)
            work += w
            if got is not None:
                best[sum(1 << t for t in types)] = got
    return [best[s][1] for s in _fleet(best, len(costs.types))]
