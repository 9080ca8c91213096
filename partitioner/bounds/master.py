"""Column generation's master LP (colgen.py): pipelines taken fractionally within the devices of each
type and the tp groups of each kind, its optimum and duals; with a demand, the least spend giving a floor."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from ortools.linear_solver import pywraplp

from hetc.partitioner.bounds.cell_bound import Pipeline
from hetc.partitioner.bounds.routes import Routes
from hetc.scheduling import Phase

__all__ = ["Column", "master", "no_ends", "SHORT"]

SHORT = 10.0  # cost master: tok/s short of the floor cost this many times all devices' spend over the floor


@dataclass(frozen=True, slots=True)
class Column:
    pipe: Pipeline  # batch: the most sequences it runs within its key; tok_s: as pricing valued it at the key's costs
    devices: np.ndarray  # per type
    stages: np.ndarray  # per kind


def master(
    cols: list[Column], N: np.ndarray, groups: dict[int, int], pools: bool, spend: np.ndarray | None = None, floor: float = 0.0, routes: Routes | None = None
):
    """(value, x, π per type, σ per kind, μ_d and μ_p, ρ and β per type) of the master LP over `cols`
    (pools within their KV `routes`: routes.py). With `spend` (per device of each type), the cost master:
    the least spend giving `floor` tok/s, short tok/s bought at a price no column beats (so it is feasible
    before any column); μ_d is then the floor row's dual λ."""
    s = pywraplp.Solver.CreateSolver("GLOP")
    inf = s.infinity()
    x = [s.NumVar(0, inf, "") for _ in cols]
    dev = [s.Constraint(-inf, float(n)) for n in N]
    grp = {g: s.Constraint(-inf, float(k)) for g, k in groups.items()}
    for c, v in zip(cols, x):
        for t in np.nonzero(c.devices)[0]:
            dev[t].SetCoefficient(v, float(c.devices[t]))
        for g, ct in grp.items():
            if c.stages[g]:
                ct.SetCoefficient(v, float(c.stages[g]))
    if spend is not None:
        return _cost_master(s, cols, x, dev, grp, N, spend, floor)
    obj = s.Objective()
    F = s.NumVar(0, inf, "F") if pools else None
    feed = {p: s.Constraint(-inf, 0.0) for p in (Phase.DECODE, Phase.PREFILL)} if pools else {}
    if F is not None:
        obj.SetCoefficient(F, 1.0)
        for ct in feed.values():
            ct.SetCoefficient(F, 1.0)
    rho, beta, node = routes.rows(s, [c.pipe for c in cols], x, feed[Phase.PREFILL]) if routes is not None and pools else ({}, {}, None)
    for c, v in zip(cols, x):
        if c.pipe.phase == Phase.BOTH:
            obj.SetCoefficient(v, c.pipe.tok_s)
        elif c.pipe.phase == Phase.DECODE or routes is None:
            feed[c.pipe.phase].SetCoefficient(v, -c.pipe.tok_s)
    obj.SetMaximization()
    if not _solved(s):
        raise RuntimeError("the column-generation master LP did not solve to optimality")
    pi = np.array([max(0.0, ct.dual_value()) for ct in dev])
    sigma = {g: max(0.0, ct.dual_value()) for g, ct in grp.items()}
    mu = {p: max(0.0, ct.dual_value()) for p, ct in feed.items()}
    if pools:
        mu[Phase.PREFILL] = max(mu[Phase.PREFILL], 1.0 - mu[Phase.DECODE])  # μ_d + μ_p ≥ 1: the bound needs it
    ends = [np.array([max(0.0, rows[t].dual_value()) if t in rows else 0.0 for t in range(len(N))]) for rows in (rho, beta)]
    ends.append(np.array([max(0.0, node.dual_value()) if node is not None else 0.0]))
    return obj.Value(), [v.solution_value() for v in x], pi, sigma, mu, ends


def no_ends(T: int) -> list[np.ndarray]:
    """ρ, β per type and [κ] where no pools' routes are counted."""
    return [np.zeros(T), np.zeros(T), np.zeros(1)]


def _solved(s: pywraplp.Solver) -> bool:
    """Solve the master; where GLOP's presolve ends it ABNORMAL (gen13, 193 columns), again without presolve."""
    if s.Solve() == pywraplp.Solver.OPTIMAL:
        return True
    s.SetSolverSpecificParametersAsString("use_preprocessing: false")
    return s.Solve() == pywraplp.Solver.OPTIMAL


def _cost_master(s, cols: list[Column], x: list, dev: list, grp: dict, N: np.ndarray, spend: np.ndarray, floor: float):
    """The cost master over `master`'s device and group rows: min Σ spend·devices·x + SHORT·short,
    Σ tok/s·x + short ≥ floor."""
    obj = s.Objective()
    short = s.NumVar(0, s.infinity(), "short")
    row = s.Constraint(float(floor), s.infinity())
    row.SetCoefficient(short, 1.0)
    obj.SetCoefficient(short, SHORT * float(spend @ N) / floor)  # a real fleet giving the floor spends ≤ spend·N
    for c, v in zip(cols, x):
        obj.SetCoefficient(v, float(spend @ c.devices))
        row.SetCoefficient(v, c.pipe.tok_s)
    obj.SetMinimization()
    if not _solved(s):
        raise RuntimeError("the column-generation cost master LP did not solve to optimality")
    pi = np.array([max(0.0, -ct.dual_value()) for ct in dev])  # ≤ rows of a minimisation: duals ≤ 0
    sigma = {g: max(0.0, -ct.dual_value()) for g, ct in grp.items()}
    return obj.Value(), [v.solution_value() for v in x], pi, sigma, {Phase.DECODE: max(0.0, row.dual_value())}, no_ends(len(N))
