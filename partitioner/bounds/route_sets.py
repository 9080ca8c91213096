"""Column generation's bound over sets of KV routes, with the CPU the search leaves.

The master's feed rows (routes.py) let a type's KV route inside a node and decode pools of other
types hold at once, where a plan's route inside a node puts every decode pool in that node
(kv_routes.feed_caps caps a prefill pool at its slowest route to any decode pool). As the cell bound
does (kv_feed.py's sets), every plan's decode pools start on one type u, or on several: once the
passes converge, column generation runs again per set (`Routes.split`): decode pools on u alone, for
each of the ALONE types the master's optimum starts most decode tok/s on, and the rest; each from the
converged columns. Every full pass of a set bounds the plans in it, so the largest of the sets' best
bounds is valid once each set had one; until then the bound stays the first one. The sets run after
the search (a Pause.WORK, as the cell bound's refinement does), within the CPU left: plans do not
change. The sets run in order of their masters over the converged columns (each at most its bound),
the largest first, and a set stops once its bound is at most the largest of the sets before (it
cannot raise it); none run where one set's master already comes within CLOSE of the bound.
gen41 of the generated clusters (llama-3.1-8b, 25 GbE): 222,404 → 219,412 (MI250X alone 219,412, Gaudi 3
stopped at 218,830, the rest 219,227), in ~16 CPU s (the rest 12.7): at --time-limit 60, not 30.
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from dataclasses import replace

import numpy as np

from hetc.cluster import Cluster
from hetc.partitioner.bounds.cell_bound import Demand
from hetc.partitioner.bounds.colgen import ColumnBound, column_bound_rounds
from hetc.partitioner.bounds.master import master
from hetc.partitioner.bounds.stage_costs import StageCosts
from hetc.partitioner.budget import CpuBudget, Pause
from hetc.partitioner.estimate.tables import Kind, Tables
from hetc.scheduling import Phase

__all__ = ["ALONE", "CLOSE", "column_bound_sets"]

ALONE = 3  # types whose decode pools get a set of their own (each a column generation): the master's largest
CLOSE = 2e-3  # no sets where one's master already comes this close to the bound
Round = tuple[Callable[[], ColumnBound], Pause | bool]


def column_bound_sets(
    tables: Tables,
    kinds: list[Kind],
    cluster: Cluster,
    max_stages: int,
    ceiling: int,
    *,
    phases: tuple[Phase, ...] = (Phase.BOTH,),
    budget: float = 4e8,
    demand: Demand | None = None,
    progress: Callable[[str], None] | None = None,
    cpu: CpuBudget | None = None,
) -> Generator[Round, None, None]:
    """`column_bound_rounds`, then, where it converged with pools whose KV routes it priced, the sets'
    rounds: after a Pause.WORK (unless a pause came before: the search has run), until they end or
    pause at `cpu`'s deadline. Every round's bound is valid."""
    args = (tables, kinds, cluster, max_stages, ceiling)
    first = column_bound_rounds(*args, phases=phases, budget=budget, demand=demand, progress=progress, cpu=cpu)
    paused, last = False, None
    while True:
        try:
            last, pause = next(first)
        except StopIteration as stop:
            done = stop.value
            break
        paused = paused or bool(pause)
        yield last, pause
    if done is None or done.routes is None or cpu is None or last is None:
        return
    joint = last()
    if not paused:
        yield (lambda: joint), Pause.WORK  # the search first (the sets tighten the bound, not the seeds): nothing before it
    costs = StageCosts(tables, kinds, cluster)
    decode = np.zeros(len(costs.types))
    for c, x in zip(done.cols, done.x):
        if c.pipe.phase == Phase.DECODE and x > 1e-9:
            decode[costs.type_of[c.pipe.kinds[0]]] += x * c.pipe.tok_s
    alone = [int(t) for t in np.argsort(-decode)[:ALONE] if decode[t] > 0]
    if not alone:
        return
    sets = done.routes.split(costs, alone)
    starts = [[c for c in done.cols if c.pipe.phase != Phase.DECODE or r.starts is None or r.starts[costs.type_of[c.pipe.kinds[0]]]] for r in sets]
    groups = {g: k.groups for g, k in enumerate(kinds) if k.tp > 1}
    # each set's master over the columns so far: at most its bound, so the largest first (the rest may stop below it),
    # and none where one reaches the bound already
    lp = [master(cols, costs.devices.astype(float), groups, True, routes=r)[0] for r, cols in zip(sets, starts)]
    if max(lp) >= joint.value * (1 - CLOSE):
        return
    best = [np.inf] * len(sets)  # per set, its best bound so far

    def now() -> ColumnBound:
        return replace(joint, value=min(joint.value, max(best)))

    order = sorted(range(len(sets)), key=lambda k: -lp[k])
    for n, k in enumerate(order):
        routes, start = sets[k], starts[k]
        below = max((best[j] for j in order[:n]), default=-np.inf)
        for snap, pause in column_bound_rounds(*args, phases=phases, budget=np.inf, progress=progress, cpu=cpu, within=routes, columns=start):
            best[k] = min(best[k], snap().value)
            yield now, pause
            if best[k] <= below:  # at most a set before: it cannot raise the largest
                break
        if progress:
            progress(f"column generation over KV route sets: set {n + 1} of {len(sets)} {best[k]:,.0f}, bound {now().value:,.0f} tok/s")
