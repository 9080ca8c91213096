"""An upper bound on output tok/s over the whole placement space, by linear relaxation.

Any plan is a set of pipelines; a pipeline of n stages carries X tok/s through all U
units, and each of its stages (a device or tp group of kind g holding k units) carries
that same X, at most cap_g(n, k) = max_B B / busy_min_g(k) (tables.py: the stage's best
case at its own best batch that fits). Summing stage flows y over all pipelines of n
stages, by kind and unit count:

    Σ_g,k y[g,n,k] = n·X_n          every pipeline has n stages carrying its flow
    Σ_g,k k·y[g,n,k] = U·X_n        the flow-weighted stage sizes cover the U units
    Σ tp·y/cap ≤ devices of each type;  Σ y/cap ≤ tp groups of each kind
    maximise Σ_n X_n

Every plan is a feasible point (links, inter-stage overheads, the shared batch and
integrality are relaxed), so the optimum bounds every plan. For each (g, n) only the
points (cap, k·cap) on the convex hull of the options matter, so only those enter.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
from ortools.linear_solver import pywraplp

from hetc.partitioner.tables import BATCH_GRID, Kind, Tables

__all__ = ["Bound", "throughput_bound", "cost_bound", "METHOD"]

METHOD = ("LP relaxation of all plans: stage flows by pipeline length × stage kind (device type × tp) × "
          "units held, each stage at its best memory-feasible batch; links, shared batch and integrality relaxed")


@dataclass(slots=True)
class Bound:
    value: float  # output tok/s
    method: str
    seconds: float
    pipelines: dict[int, float]  # n -> tok/s of pipelines with n stages in the LP optimum
    stages: dict[tuple[str, int, int], float]  # (kind, n, k) -> stage groups in the LP optimum


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


def _build(tables: Tables, kinds: list[Kind], max_stages: int, integer: bool = False):
    """Variables y[g, n, k] (flow through stage groups of kind g holding k units in
    pipelines of n stages) with the per-length flow and cover equations."""
    u = len(tables.units)
    solver = pywraplp.Solver.CreateSolver("SCIP" if integer else "GLOP")
    y: dict[tuple, pywraplp.Variable] = {}
    caps: dict[tuple, float] = {}
    ks = np.arange(u + 1)
    for gi, g in enumerate(kinds):
        top = tables.max_fitting_batch(g)
        for n in range(1, max_stages + 1):
            cap = np.zeros(u + 1)
            for b in (b for b in BATCH_GRID if b <= top):
                busy = tables.busy_min(g, min(n, b), b)
                with np.errstate(divide="ignore"):
                    cap = np.maximum(cap, np.where(np.isfinite(busy), b / busy, 0.0))
            ok = np.nonzero(cap[1:] > 0)[0] + 1
            for j in _hull(cap[ok], ks[ok] * cap[ok]) if len(ok) else []:
                k = int(ok[j])
                y[gi, n, k] = solver.NumVar(0, solver.infinity(), "")
                caps[gi, n, k] = float(cap[k])
    xs = {n: solver.NumVar(0, solver.infinity(), "") for n in range(1, max_stages + 1)}
    groups_z: dict[int, list] = {}  # stage-group variables per kind (whole-pipeline form only)
    for n, x in xs.items():
        here = [(key, var) for key, var in y.items() if key[1] == n]
        solver.Add(sum(var for _, var in here) == n * x)
        solver.Add(sum(key[2] * var for key, var in here) == u * x)
        if integer and here:  # whole pipelines: exactly n stage groups each, every group within its capacity
            zs = []
            for key, var in here:
                zv = solver.NumVar(0, solver.infinity(), "")
                solver.Add(var <= caps[key] * zv)
                zs.append((key, zv))
            solver.Add(sum(zv for _, zv in zs) == n * solver.IntVar(0, max_stages // n, ""))
            for key, zv in zs:
                groups_z.setdefault(key[0], []).append(zv)
    return solver, y, caps, xs, groups_z


def _devices_used(y, caps, kinds: list[Kind]) -> dict[tuple[str, str], list]:
    """Devices each type lends: tp for each stage group the flow y needs (y / cap groups)."""
    types: dict[tuple[str, str], list] = {}
    for key, var in y.items():
        g = kinds[key[0]]
        types.setdefault(g.type_key, []).append(g.tp / caps[key] * var)
    return types


def throughput_bound(tables: Tables, kinds: list[Kind], max_stages: int, *, integer: bool = True,
                     time_limit: float = 10.0) -> Bound:
    """The bound; `integer` counts whole pipelines (a MILP, tighter; its dual bound is used
    when the time limit stops it), otherwise the plain LP."""
    t0 = time.perf_counter()
    solver, y, caps, xs, groups_z = _build(tables, kinds, max_stages, integer)
    if not y:
        return Bound(0.0, METHOD, time.perf_counter() - t0, {}, {})
    if integer:
        types: dict[tuple[str, str], list] = {}
        for gi, zs in groups_z.items():
            types.setdefault(kinds[gi].type_key, []).extend(kinds[gi].tp * z for z in zs)
        per_kind = {gi: sum(zs) for gi, zs in groups_z.items()}
    else:
        types = _devices_used(y, caps, kinds)
        per_kind = {}
        for key, var in y.items():
            per_kind[key[0]] = per_kind.get(key[0], 0) + var / caps[key]
    for tkey, terms in types.items():
        devices = sum(nd.count for nd in next(g for g in kinds if g.type_key == tkey).nodes)
        solver.Add(sum(terms) <= devices)
    for gi, used in per_kind.items():
        if kinds[gi].tp > 1:
            solver.Add(used <= kinds[gi].groups)
    solver.Maximize(sum(xs.values()))
    solver.SetTimeLimit(int(time_limit * 1000))
    status = solver.Solve()
    if status not in (pywraplp.Solver.OPTIMAL, pywraplp.Solver.FEASIBLE):
        raise RuntimeError(f"the bound program ended with status {status}")
    value = solver.Objective().BestBound() if integer else solver.Objective().Value()
    return Bound(
        value=value, method=METHOD, seconds=time.perf_counter() - t0,
        pipelines={n: x.solution_value() for n, x in xs.items() if x.solution_value() > 1e-9},
        stages={(kinds[gi].name, n, k): var.solution_value() / caps[gi, n, k] for (gi, n, k), var in y.items()
                if var.solution_value() > 1e-9},  # groups the flow needs (≤ the groups counted when integer)
    )


def cost_bound(tables: Tables, kinds: list[Kind], max_stages: int, price: dict[tuple[str, str], float]) -> float:
    """Lower bound on USD per hour per output tok/s over all plans (the same relaxation,
    scale-free: one tok/s in total, devices priced, counts unlimited)."""
    solver, y, caps, xs, _ = _build(tables, kinds, max_stages)
    if not y:
        return 0.0
    solver.Add(sum(xs.values()) == 1)
    solver.Minimize(sum(price[t] * sum(terms) for t, terms in _devices_used(y, caps, kinds).items()))
    if solver.Solve() != pywraplp.Solver.OPTIMAL:
        raise RuntimeError("the cost-bound LP did not solve to optimality")
    return solver.Objective().Value()
