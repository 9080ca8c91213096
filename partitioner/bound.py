"""Flow relaxations of all plans: a quick upper bound on output tok/s, and a lower bound on
the cost objective (USD per hour per output tok/s).

Any plan is a set of pipelines; a pipeline of n stages carries X tok/s through all U
units, and each of its stages (a device or tp group of kind g holding k units) carries
that same X, at most cap_g(n, k) = max_B B / busy_min_g(k) (tables.py: the stage's best
case at its own best batch that fits). Summing stage flows y over all pipelines of n
stages, by kind and unit count:

    Σ_g,k y[g,n,k] = n·X_n          every pipeline has n stages carrying its flow
    Σ_g,k k·y[g,n,k] = U·X_n        the flow-weighted stage sizes cover the U units
    throughput: Σ tp · y / cap ≤ devices of each type, Σ y / cap ≤ tp groups of each kind;
                maximise Σ_n X_n
    cost:       Σ_n X_n = 1;  minimise Σ price · tp · y / cap

Every plan (for cost, scaled to one tok/s) is a feasible point (links, the shared batch
and integrality relaxed; for cost, device counts too). For each (g, n) only the points
(cap, k·cap) on the convex hull of the options matter, so only those enter. The solver's
throughput bound is colgen.py's, tighter; this one stands in when column generation runs
out of time before a tighter one.
"""

from __future__ import annotations

import numpy as np
from ortools.linear_solver import pywraplp

from hetc.partitioner.tables import BATCH_GRID, Kind, Tables

__all__ = ["cost_bound", "flow_bound", "FLOW_METHOD"]

FLOW_METHOD = ("LP relaxation of all plans: stage flows by pipeline length × stage kind × units held, each stage "
               "at its best memory-feasible batch; links, shared batch and integrality relaxed")


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


def _build(tables: Tables, kinds: list[Kind], max_stages: int, phases: tuple[str, ...] = ("both",)):
    """Variables y[phase, g, n, k] (flow through stage groups of kind g holding k units in
    pipelines of n stages; prefill pools: the output tok/s they feed) with the per-length
    flow and cover equations, per phase."""
    u = len(tables.units)
    solver = pywraplp.Solver.CreateSolver("GLOP")
    y: dict[tuple, pywraplp.Variable] = {}
    caps: dict[tuple, float] = {}
    ks = np.arange(u + 1)
    for phase in phases:
        for gi, g in enumerate(kinds):
            if phase != "both" and g.tp > 1:  # the runtime's pools are tp 1
                continue
            top = tables.max_fitting_batch(g)
            for n in range(1, max_stages + 1):
                cap = np.zeros(u + 1)
                for b in [n] if phase == "prefill" else (b for b in BATCH_GRID if b <= top):
                    busy = tables.busy_min(g, min(n, b), b, phase)
                    rate = tables.wl.output_len if phase == "prefill" else b
                    with np.errstate(divide="ignore"):
                        cap = np.maximum(cap, np.where(np.isfinite(busy), rate / busy, 0.0))
                ok = np.nonzero(cap[1:] > 0)[0] + 1
                for j in _hull(cap[ok], ks[ok] * cap[ok]) if len(ok) else []:
                    k = int(ok[j])
                    y[phase, gi, n, k] = solver.NumVar(0, solver.infinity(), "")
                    caps[phase, gi, n, k] = float(cap[k])
    xs = {(p, n): solver.NumVar(0, solver.infinity(), "") for p in phases for n in range(1, max_stages + 1)}
    for (phase, n), x in xs.items():
        here = [(key, var) for key, var in y.items() if key[0] == phase and key[2] == n]
        solver.Add(sum(var for _, var in here) == n * x)
        solver.Add(sum(key[3] * var for key, var in here) == u * x)
    return solver, y, caps, xs


def _devices_used(y, caps, kinds: list[Kind]) -> dict[tuple[str, str], list]:
    """Devices each type lends: tp for each stage group the flow y needs (y / cap groups)."""
    types: dict[tuple[str, str], list] = {}
    for key, var in y.items():
        g = kinds[key[1]]
        types.setdefault(g.type_key, []).append(g.tp / caps[key] * var)
    return types


def flow_bound(tables: Tables, kinds: list[Kind], max_stages: int, phases: tuple[str, ...] = ("both",)) -> float:
    """Upper bound on output tok/s over all plans: the same relaxation with the device count of
    each type and the tp groups of each kind (looser than colgen.py's, but one small LP). With
    prefill and decode pools in `phases`, decode flow is at most what prefill flow feeds."""
    solver, y, caps, xs = _build(tables, kinds, max_stages, phases)
    if not y:
        return 0.0
    for tkey, terms in _devices_used(y, caps, kinds).items():
        solver.Add(sum(terms) <= sum(nd.count for nd in next(g for g in kinds if g.type_key == tkey).nodes))
    per_kind: dict[int, list] = {}
    for key, var in y.items():
        per_kind.setdefault(key[1], []).append(var / caps[key])
    for gi, used in per_kind.items():
        if kinds[gi].tp > 1:
            solver.Add(sum(used) <= kinds[gi].groups)
    if "decode" in phases:
        solver.Add(sum(x for (p, _), x in xs.items() if p == "decode") <=
                   sum(x for (p, _), x in xs.items() if p == "prefill"))
    solver.Maximize(sum(x for (p, _), x in xs.items() if p != "prefill"))
    if solver.Solve() != pywraplp.Solver.OPTIMAL:
        raise RuntimeError("the flow-bound LP did not solve to optimality")
    return solver.Objective().Value()


def cost_bound(tables: Tables, kinds: list[Kind], max_stages: int, price: dict[tuple[str, str], float]) -> float:
    """Lower bound on USD per hour per output tok/s over all plans (the same relaxation,
    scale-free: one tok/s in total, devices priced, counts unlimited)."""
    solver, y, caps, xs = _build(tables, kinds, max_stages)
    if not y:
        return 0.0
    solver.Add(sum(xs.values()) == 1)
    solver.Minimize(sum(price[t] * sum(terms) for t, terms in _devices_used(y, caps, kinds).items()))
    if solver.Solve() != pywraplp.Solver.OPTIMAL:
        raise RuntimeError("the cost-bound LP did not solve to optimality")
    return solver.Objective().Value()
