"""A flow relaxation of all plans: the lower bound on the cost objective (USD per hour per
output tok/s).

Any plan is a set of pipelines; a pipeline of n stages carries X tok/s through all U
units, and each of its stages (a device or tp group of kind g holding k units) carries
that same X, at most cap_g(n, k) = max_B B / busy_min_g(k) (tables.py: the stage's best
case at its own best batch that fits, batches.py's intervals). Summing stage flows y over all pipelines of n
stages, by kind and unit count:

    Σ_g,k y[g,n,k] = n·X_n          every pipeline has n stages carrying its flow
    Σ_g,k k·y[g,n,k] = U·X_n        the flow-weighted stage sizes cover the U units
    Σ_n X_n = 1;  minimise Σ price · tp · y / cap

Every plan scaled to one tok/s is a feasible point (links, the shared batch, integrality
and device counts relaxed). For each (g, n) only the points (cap, k·cap) on the convex
hull of the options matter, so only those enter. (The throughput bound is cell_bound.py's.)
"""

from __future__ import annotations

import math

import numpy as np
from ortools.linear_solver import pywraplp
from ortools.sat.python import cp_model

from hetc.cluster import Cluster
from hetc.partitioner.batches import MAX_BATCH, Regimes, octaves
from hetc.partitioner.cost_models.memory import stage_memory
from hetc.partitioner.simulate import Workload
from hetc.partitioner.tables import Kind, Tables, type_key
from hetc.partitioner.units import Unit
from hetc.scheduling import Phase

__all__ = ["cost_bound", "least_holding"]

MIP_SECONDS = 2.0  # with a floor: the whole-device MIP's time; its proven bound when it runs out


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


def cost_bound(tables: Tables, kinds: list[Kind], max_stages: int, price: dict[tuple[str, str], float],
               ceiling: int = MAX_BATCH, floor: float = 0.0) -> float:
    """Lower bound on USD per hour per output tok/s over all plans: variables y[g, n, k] (flow
    through stage groups of kind g holding k units in pipelines of n stages) with the
    per-length flow and cover equations, one tok/s in total, devices priced.

    Args:
        floor: with a floor F > 0, the bound is on (USD/h of any plan giving at least F tok/s) / F:
            the flow is F scaled to one, so each type's devices (and each kind's tp groups) are
            limited to count / F — y/cap is at most the groups a real plan's stages take (a stage
            carries at most cap; a point inside the hull is a convex mix of vertices, Σλ ≤ 1).
            inf where no plan in the relaxation reaches F. Without one, counts never bind (a
            ratio does not change with scale) and are left out.
    """
    u = len(tables.units)
    solver = pywraplp.Solver.CreateSolver("SCIP" if floor > 0 else "GLOP")
    y: dict[tuple, pywraplp.Variable] = {}
    caps: dict[tuple, float] = {}
    ks = np.arange(u + 1)
    regimes = Regimes(tables.wl, Phase.BOTH, ceiling)
    for gi, g in enumerate(kinds):
        batches = [(b, top) for b, top in octaves(ceiling) if tables.fits(g, b).any()]
        for n in range(1, max_stages + 1):
            cap = np.zeros(u + 1)
            for b, top in (run for lo, hi in batches for run in regimes.runs(n, lo, hi)):
                # every batch in [b, top]: at most top's tokens over top's cost (batches.py)
                busy = tables.busy_min(g, min(n, top), top, fit=b)
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
    if floor > 0:  # whole devices: a plan giving F uses at least F × the flow's devices of each type
        bought = {t: solver.IntVar(0, count[t], "") for t in usd_h}
        for t, terms in usd_h.items():
            solver.Add(floor * sum(terms) <= bought[t])
        for gi, terms in groups.items():
            solver.Add(floor * sum(terms) <= kinds[gi].groups)
        solver.Minimize(sum(price[t] * z for t, z in bought.items()) * (1 / floor))
        solver.SetTimeLimit(int(MIP_SECONDS * 1e3))
    else:
        solver.Minimize(sum(price[t] * sum(terms) for t, terms in usd_h.items()))
    status = solver.Solve()
    if floor > 0 and status == pywraplp.Solver.INFEASIBLE:
        return float("inf")
    if status == pywraplp.Solver.OPTIMAL:
        return solver.Objective().Value()
    if floor > 0 and status in (pywraplp.Solver.FEASIBLE, pywraplp.Solver.NOT_SOLVED):
        return max(0.0, solver.Objective().BestBound())  # the MIP's proven bound when its time ran out
    raise RuntimeError("the cost-bound LP did not solve to optimality")


def least_holding(units: list[Unit], wl: Workload, cluster: Cluster, cost: dict[tuple[str, str], float]) -> float:
    """The least `cost` (USD/h, or W) of any set of the cluster's devices whose usable memory
    holds the weights plus one sequence's KV and activations: every plan has a pipeline, which
    holds at least that (an integer knapsack, CP-SAT; its proven bound, so the
    answer stays a lower bound whether or not it finishes). 0 if nothing holds it."""
    need = stage_memory(units, batch=1, context=wl.context, prefill_chunk=min(wl.prefill_chunk, wl.input_len)).total
    count: dict[tuple[str, str], int] = {}
    memory: dict[tuple[str, str], float] = {}
    for n in cluster.nodes:
        count[type_key(n)] = count.get(type_key(n), 0) + n.count
        memory[type_key(n)] = n.profile.usable_memory
    types = list(count)
    m = cp_model.CpModel()
    x = [m.NewIntVar(0, count[t], "") for t in types]
    kib = [int(memory[t] // 1024) for t in types]  # memory rounded down, need up, costs down: still a bound
    m.Add(sum(k * v for k, v in zip(kib, x)) >= int(-(-need // 1024)))
    m.Minimize(sum(math.floor(cost[t] * 1e4) * v for t, v in zip(types, x)))
    s = cp_model.CpSolver()
    s.parameters.num_workers = 1
    s.parameters.max_time_in_seconds = 5.0
    if s.Solve(m) not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return 0.0
    return max(0.0, s.BestObjectiveBound() / 1e4)
