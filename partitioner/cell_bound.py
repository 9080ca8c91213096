"""The cell bound: an integer upper bound on output tok/s, and the pipelines that nearly attain it.

1. First pass (aggregate.py): for every phase and cell (devices per type), a quick upper
   bound on one pipeline's tok/s on exactly those devices, per operating point (batch, class
   of pipeline lengths).
2. The knapsack (cells.py) over those bounds gives an upper bound on every plan.
3. The cells of its optimum are refined (refine.py): their best pipeline per operating point,
   exactly, for each pipeline length; a refined cell takes the larger of its exact values and
   the first-pass bounds not yet refined. Then the knapsack again, until its optimum uses
   refined cells only, or the work budget is spent. Every knapsack value is a valid bound;
   the last one is reported, and the refined chains of its optimum become templates.
Work is counted in DP cells, not seconds, so the same inputs give the same bound and plan.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from hetc.cluster import Cluster
from hetc.partitioner.aggregate import first_pass
from hetc.partitioner.cells import CountSpace, closure, combine, decompose
from hetc.partitioner.refine import best_chain
from hetc.partitioner.stage_costs import StageCosts
from hetc.partitioner.tables import Kind, Tables
from hetc.scheduling import Phase

__all__ = ["CellBound", "Pipeline", "cell_bound", "METHOD", "WORK_PER_SECOND"]

# Refinement is budgeted in DP cells, not seconds, so that a plan does not depend on the
# machine's load; about this many take a second on one core of the reference machine.
WORK_PER_SECOND = 4e7
TEMPLATES = 32  # refined pipelines handed to the solver as templates

METHOD = ("integer knapsack over device-count vectors of a per-pipeline upper bound: an order-free "
          "relaxation (weighted unit coverage) refined by an exact chain DP on the cells the optimum uses "
          "(loop term and link choice relaxed)")


@dataclass(frozen=True, slots=True)
class Pipeline:
    phase: str
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

    def __init__(self, costs: StageCosts, space: CountSpace, phase: str, max_stages: int) -> None:
        self.costs, self.space, self.phase = costs, space, phase
        self.tp_groups = any(costs.tp > 1) and phase == Phase.BOTH
        self.keys, self.V = first_pass(costs, space, phase, max_stages)  # V [keys, cells]
        self.exact: dict[int, tuple[float, Pipeline | None]] = {}
        self.ub = self.V.max(axis=0) if len(self.keys) else np.zeros(len(space))

    def settled(self, c: int) -> bool:
        return self.ub[c] <= 0 or (c in self.exact and self.exact[c][0] >= self.V[:, c].max())

    def refine(self, c: int) -> float:
        """Refine cell c's best key not yet refined (its bound drops to what the chain DP finds);
        returns the work done (DP cells)."""
        ki = int(np.argmax(self.V[:, c]))
        v0, (_, batch, _, lo, hi) = self.V[ki, c], self.keys[ki]
        self.V[ki, c] = 0.0
        counts = self.space.cells[c]
        total = int(counts.sum())
        work, best = 0.0, self.exact.get(c, (0.0, None))
        rate = self.costs.tables.wl.output_len if self.phase == Phase.PREFILL else batch
        for n in ([total] if not self.tp_groups else range(lo, min(hi, total) + 1)):
            if not lo <= n <= hi:
                continue
            got, w = best_chain(self.costs, self.phase, batch, n, counts, self.tp_groups,
                                below=rate / best[0] if best[0] else np.inf)  # only a better chain matters
            work += w
            if got is None:
                continue
            R, (kinds, cuts) = got
            v = min(rate / R, v0)  # the first pass bounded it already
            if v > best[0]:
                best = (v, Pipeline(self.phase, kinds, cuts, n if self.phase == Phase.PREFILL else batch, v))
        self.exact[c] = best
        self.ub[c] = max(best[0], self.V[:, c].max())
        return work


def cell_bound(tables: Tables, kinds: list[Kind], cluster: Cluster, max_stages: int, *,
               phases: tuple[Phase, ...] = (Phase.BOTH,), budget: float = 4e8,
               progress: Callable[[str], None] | None = None) -> CellBound:
    """The knapsack bound over pipelines of `phases`, refined within `budget` DP cells.

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
        table[p] = _Cells(costs, space, p, max_stages)
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
        for p, c in todo:
            while not table[p].settled(c) and work < budget:
                work += table[p].refine(c)
    # the optimum's refined pipelines first, then every other refined one, best first
    refined = sorted(((v, p, c) for p in phases for c, (v, pipe) in table[p].exact.items() if pipe),
                     key=lambda e: -e[0])
    first = [(p, c) for p, c in items if c in table[p].exact and table[p].exact[c][1]]
    pipes = [table[p].exact[c][1] for p, c in dict.fromkeys(first + [(p, c) for _, p, c in refined])][:TEMPLATES]
    merged = [" + ".join(costs.types[t][0] for t in np.nonzero(costs.group_of == k)[0])
              for k in range(len(costs.devices)) if (costs.group_of == k).sum() > 1]
    return CellBound(value, pipes, merged)
