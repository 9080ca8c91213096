"""The cost objective's bound with a floor, in whole devices (bound.py takes the larger of this
and its per-signature LP).

A flow relaxation counted in units, not signatures: a pipeline of n stages carries X tok/s
through all U units, and each of its stages (a device or tp group of kind g holding k units)
carries that same X, at most cap_g(n, k) = max_B B / busy_min_g(k) (tables.py: the stage's
best case at its own best batch that fits, batches.py's intervals). Summing stage flows y over
all pipelines of n stages, by kind and unit count:

    Σ_g,k y[g,n,k] = n·X_n          every pipeline has n stages carrying its flow
    Σ_g,k k·y[g,n,k] = U·X_n        the flow-weighted stage sizes cover the U units
    Σ_n X_n = 1

For each (g, n) only the points (cap, k·cap) on the convex hull of the options matter. With a
floor F the flow is F scaled to one and every type's devices are bought whole: a plan giving F
uses at least F × the flow's devices of each type (a MIP over a handful of integers, within
MIP_SECONDS; its proven bound if it runs out). Looser than bound.py's LP in what a stage costs,
exact on small clusters where whole devices decide.
"""

from __future__ import annotations

import numpy as np
from ortools.linear_solver import pywraplp

from hetc.partitioner.budget import CpuBudget
from hetc.partitioner.estimate.batches import Regimes, octaves
from hetc.partitioner.estimate.tables import Kind, Tables
from hetc.scheduling import Phase

__all__ = ["whole_devices_bound"]

MIP_SECONDS = 2.0  # the whole-device MIP's time; its proven bound when it runs out


def _hull(cap: np.ndarray, cover: np.ndarray) -> list[int]:
    """Indices of the vertices of the convex hull of the points (cap, cover) and the origin."""
    pts = sorted([(0.0, 0.0, -1)] + [(float(a), float(b), j) for j, (a, b) in enumerate(zip(cap, cover))])

    def cross(o, a, b):
        return (a[0] - o[0]) * (b[1] - o[1]) - (a[1] - o[1]) * (b[0] - o[0])

    lower: list = []
    upper: list = []
    for p in pts:
        while len(lower) >= 2 and cross(lower[-2], lower[-1], p) <= 0:
            lower.pop()
        lower.append(p)
    for p in reversed(pts):
        while len(upper) >= 2 and cross(upper[-2], upper[-1], p) <= 0:
            upper.pop()
        upper.append(p)
    return sorted({j for _, _, j in lower + upper if j >= 0})


def whole_devices_bound(
    tables: Tables, kinds: list[Kind], max_stages: int, price: dict[tuple[str, str], float], ceiling: int, floor: float, cpu: CpuBudget | None = None
) -> float:
    """Lower bound on (USD/h of any plan giving at least `floor` tok/s) / floor (module
    docstring): y/cap is at most the groups a real plan's stages take (a stage carries at most
    cap; a point inside the hull is a convex mix of vertices, Σλ ≤ 1); inf where no plan in the
    relaxation reaches the floor. With `cpu`, OutOfTime past its deadline while the MIP is built,
    and the MIP's proven bound at the CPU left where that is less than MIP_SECONDS."""
    u = len(tables.units)
    solver = pywraplp.Solver.CreateSolver("SCIP")
    y: dict[tuple, pywraplp.Variable] = {}
    caps: dict[tuple, float] = {}
    ks = np.arange(u + 1)
    regimes = Regimes(tables.wl, Phase.BOTH, ceiling)
    for gi, g in enumerate(kinds):
        batches = [(b, top) for b, top in octaves(ceiling) if tables.fits(g, b).any()]
        for n in range(1, max_stages + 1):
            if cpu is not None:
                cpu.check()
            cap = np.zeros(u + 1)
            for b, top in (run for lo, hi in batches for run in regimes.runs(n, lo, hi)):
                # every batch in [b, top]: at most top's tokens over top's cost (batches.py)
                busy = tables.busy_min(g, min(n, top), top, fit=b, floor=True)
                with np.errstate(divide="ignore"):
                    cap = np.maximum(cap, np.where(np.isfinite(busy), top / busy, 0.0))
            ok = np.nonzero(cap[1:] > 0)[0] + 1
            for j in _hull(cap[ok], ks[ok] * cap[ok]) if len(ok) else []:
                k = int(ok[j])
                y[gi, n, k] = solver.NumVar(0, solver.infinity(), "")
                caps[gi, n, k] = float(cap[k])
    if not y:
        return 0.0
    here: dict[int, list] = {}  # the stages of pipelines of n stages
    for (gi, n, k), var in y.items():
        here.setdefault(n, []).append((gi, k, var))
    xs = {n: solver.NumVar(0, solver.infinity(), "") for n in here}
    count = {g.type_key: sum(n.count for n in g.nodes) for g in kinds}
    for n, x in xs.items():
        solver.Add(sum(var for _, _, var in here[n]) == n * x)
        solver.Add(sum(k * var for _, k, var in here[n]) == u * x)
        # one pipeline's stages fit the cluster: per type, tp·stages ≤ its devices; per kind, stages ≤ its groups
        for t, c in count.items():
            solver.Add(sum(kinds[gi].tp * var for gi, _, var in here[n] if kinds[gi].type_key == t) <= c * x)
        for gi, g in enumerate(kinds):
            solver.Add(sum(var for gj, _, var in here[n] if gj == gi) <= g.groups * x)
    solver.Add(sum(xs.values()) == 1)
    usd_h: dict[tuple[str, str], list] = {}  # per type: tp devices for each stage group the flow needs
    groups: dict[int, list] = {}
    for key, var in y.items():
        g = kinds[key[0]]
        usd_h.setdefault(g.type_key, []).append(g.tp / caps[key] * var)
        groups.setdefault(key[0], []).append(var / caps[key])
    bought = {t: solver.IntVar(0, count[t], "") for t in usd_h}
    for t, terms in usd_h.items():
        solver.Add(floor * sum(terms) <= bought[t])
    for gi, terms in groups.items():
        solver.Add(floor * sum(terms) <= kinds[gi].groups)
    solver.Minimize(sum(price[t] * z for t, z in bought.items()) * (1 / floor))
    seconds = MIP_SECONDS if cpu is None else min(MIP_SECONDS, cpu.wall_left())  # SCIP stops on wall time (budget.wall_left)
    solver.SetTimeLimit(int(seconds * 1e3))
    status = solver.Solve()
    if status == pywraplp.Solver.INFEASIBLE:
        return float("inf")
    if status == pywraplp.Solver.OPTIMAL:
        return solver.Objective().Value()
    if status in (pywraplp.Solver.FEASIBLE, pywraplp.Solver.NOT_SOLVED):
        return max(0.0, solver.Objective().BestBound())  # the MIP's proven bound when its time ran out
    raise RuntimeError("the whole-device MIP did not solve")
