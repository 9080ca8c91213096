"""The cell bound: an integer upper bound on output tok/s, and the pipelines that nearly attain it.

1. First pass (aggregate.py): for every phase and cell (devices per type), a quick upper
   bound on one pipeline's tok/s on exactly those devices, per operating point (batch, class
   of pipeline lengths).
2. The knapsack (cells.py) over those bounds gives an upper bound on every plan.
3. The cells of its optimum are refined (refine.py): their best pipeline per operating point,
   exactly, for each pipeline length, halving the intervals of batches the first pass bounds
   together (batches.py) down to single batches; a refined cell takes the largest of its
   exact values, its open intervals and the first-pass bounds not yet refined. Then the knapsack again, until its optimum uses
   refined cells only, or the work budget is spent. Every knapsack value is a valid bound;
   the last one is reported, and the refined chains of its optimum become templates.
Work is counted in DP cells, not seconds, so the same inputs give the same bound and plan.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from hetc.cluster import Cluster
from hetc.partitioner.aggregate import FirstPass, first_pass
from hetc.partitioner.cells import CountSpace, closure, combine, decompose
from hetc.partitioner.refine import CASE, best_chain
from hetc.partitioner.stage_costs import StageCosts
from hetc.partitioner.tables import Kind, Tables
from hetc.scheduling import Phase

__all__ = ["CellBound", "Pipeline", "cell_bound", "METHOD", "WORK_PER_SECOND"]

# Refinement is budgeted in DP cells, not seconds, so that a plan does not depend on the
# machine's load; about this many take a second on one core of the reference machine.
WORK_PER_SECOND = 4e7
TEMPLATES = 32  # refined pipelines handed to the solver as templates
TOLERANCE = 1e-3  # a cell is settled when its exact value is within this of its bound
ROW, ROW_CELL = 1e6, 1500.0  # work of one first-pass row: fixed, and per cell (same unit as WORK_PER_SECOND)

METHOD = ("integer knapsack over device-count vectors of a per-pipeline upper bound: an order-free "
          "relaxation (weighted unit coverage) refined by an exact chain DP on the cells the optimum uses "
          "(loop term and link choice relaxed)")


@dataclass(frozen=True, slots=True)
class Pipeline:
    phase: Phase
    kinds: tuple[int, ...]
    cuts: tuple[int, ...]
    batch: int
    tok_s: float  # the bound's value for it (prefill pools: output tok/s they feed)


@dataclass(slots=True)
class CellBound:
    value: float
    pipelines: list[Pipeline] = field(default_factory=list)  # refined pipelines: the optimum's first
    merged: list[str] = field(default_factory=list)  # device types counted together (too many to count apart)


class _Cells:
    """Per phase: each cell's first-pass bound per key, and what refinement found."""

    def __init__(self, costs: StageCosts, space: CountSpace, phase: Phase, max_stages: int, ceiling: int) -> None:
        self.costs, self.space, self.phase = costs, space, phase
        self.tp_groups = any(costs.tp > 1) and phase == Phase.BOTH
        self.first = FirstPass(costs, space, phase)
        self.keys, self.V, _ = first_pass(costs, space, phase, max_stages, ceiling)  # V [keys, cells]
        self.chained = np.zeros(self.V.shape, dtype=bool)  # whether the chain DP refined a key on a cell
        self.exact: dict[int, tuple[float, Pipeline | None]] = {}
        self.ub = self.V.max(axis=0) if len(self.keys) else np.zeros(len(space))

    def settled(self, c: int) -> bool:
        return self.ub[c] <= 0 or (c in self.exact and self.exact[c][0] * (1 + TOLERANCE) >= self.V[:, c].max())

    def refine(self, c: int) -> float:
        """Refine cell c's best key: first by the chain DP at the key's batch, which finds the cell's
        best chain of each length (exact for a single batch; for an interval, tokens at its top over
        the R at its first batch); an interval refined so that stays best is halved, for every
        cell (two first-pass rows). Returns the work done (DP cells)."""
        ki = int(np.argmax(self.V[:, c]))
        key = self.keys[ki]
        before = self.costs.tables.evaluations
        single = key.batch == key.top or self.phase == Phase.PREFILL
        if self.chained[ki, c] and not single:  # halve the interval, for every cell
            mid = (key.batch + key.top) // 2
            others = np.delete(self.V, ki, axis=0).max(axis=0)
            halves = [key._replace(top=mid), key._replace(batch=mid + 1, m=min(key.lo, mid + 1))]
            self.V[ki] = 0.0
            self.V = np.vstack([self.V] + [self.first.row(h, others)[0][None] for h in halves])
            self.chained = np.vstack([self.chained, np.zeros((2, len(self.space)), dtype=bool)])
            self.keys += halves
            self.ub = np.maximum(self.V.max(axis=0), [self.exact.get(j, (0.0,))[0] for j in range(len(self.space))])
            return 2 * (ROW + ROW_CELL * len(self.space)) + CASE * (self.costs.tables.evaluations - before)
        v0 = self.V[ki, c]
        counts = self.space.cells[c]
        total = int(counts.sum())
        work, best, bound = 0.0, self.exact.get(c, (0.0, None)), 0.0
        rate = key.rate(self.costs.tables.wl.output_len)
        for n in ([total] if not self.tp_groups else range(key.lo, min(key.hi, total) + 1)):
            if not key.lo <= n <= key.hi:
                continue
            got, w = best_chain(self.costs, self.phase, key.batch, n, counts, self.tp_groups,
                                below=rate / best[0] if best[0] else np.inf)  # only a better chain matters
            work += w
            if got is None:
                continue
            R, (kinds, cuts) = got
            v = min(rate / R, v0)  # the first pass bounded it already
            if single and v > best[0]:
                best = (v, Pipeline(self.phase, kinds, cuts, n if self.phase == Phase.PREFILL else key.batch, v))
            bound = max(bound, v)
        self.V[ki, c] = 0.0 if single else bound
        self.chained[ki, c] = True
        self.exact[c] = best
        self.ub[c] = max(best[0], self.V[:, c].max())
        return work + CASE * (self.costs.tables.evaluations - before)


def cell_bound(tables: Tables, kinds: list[Kind], cluster: Cluster, max_stages: int, ceiling: int, *,
               phases: tuple[Phase, ...] = (Phase.BOTH,), budget: float = 4e8,
               progress: Callable[[str], None] | None = None) -> CellBound:
    """The knapsack bound over pipelines of `phases` at any batch up to `ceiling`, refined within
    `budget` DP cells.

    Args:
        phases: "both" (pipelines that prefill and decode) and/or "prefill", "decode" (pools).
        budget: refinement work, in DP cells (deterministic, unlike seconds).
        progress: called with a line per round.
    """
    costs = StageCosts(tables, kinds, cluster)
    space = CountSpace(costs.devices)
    table = {}
    for p in phases:
        if progress:
            progress(f"cell bound: first pass, {p} pipelines over {len(space):,} device-count vectors")
        table[p] = _Cells(costs, space, p, max_stages, ceiling)
    zero = np.zeros(len(space))
    work, rounds = 0.0, 0
    while True:
        rounds += 1
        work += (len(phases) + 1) * space.closure_work
        K = {p: closure(space, table[p].ub) for p in phases}
        value, (c1, c2, c3) = combine(space, K.get(Phase.BOTH, zero), K.get(Phase.DECODE, zero), K.get(Phase.PREFILL, zero))
        items = [(p, c) for p, top in ((Phase.BOTH, c1), (Phase.DECODE, c2), (Phase.PREFILL, c3)) if p in phases
                 for c in decompose(space, table[p].ub, K[p], top)]
        todo = sorted({(p, c) for p, c in items if not table[p].settled(c)})
        if progress:
            progress(f"cell bound round {rounds}: {value:,.0f} tok/s, {len(todo)} cells to refine")
        if not todo or work >= budget:
            break
        for p, c in todo:  # one step each, then the knapsack again: it says which cells still matter
            if work < budget and not table[p].settled(c):
                work += table[p].refine(c)
    # the optimum's refined pipelines first, then every other refined one, best first
    refined = sorted(((v, p, c) for p in phases for c, (v, pipe) in table[p].exact.items() if pipe),
                     key=lambda e: -e[0])
    first = [(p, c) for p, c in items if c in table[p].exact and table[p].exact[c][1]]
    pipes = [table[p].exact[c][1] for p, c in dict.fromkeys(first + [(p, c) for _, p, c in refined])][:TEMPLATES]
    merged = [" + ".join(costs.types[t][0] for t in np.nonzero(costs.group_of == k)[0])
              for k in range(len(costs.devices)) if (costs.group_of == k).sum() > 1]
    return CellBound(value, pipes, merged)
