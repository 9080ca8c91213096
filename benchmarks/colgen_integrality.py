"""Is a generated cluster's column-generation bound loose by integrality? Plans seed SEED (generated_clusters.py)
and sets the master LP's last value beside an integer master over the same columns (SCIP), with the columns
the LP uses most and their devices per type against the fleet's.

usage: .venv/bin/python benchmarks/colgen_integrality.py SEED [--time-limit S] [--fitting] [--counted STATES] [--disaggregate auto|on|off]

The integer master over the bound's columns is no bound (pricing never enumerates every pipeline) and no
plan (columns are priced at their keys' relaxed costs); a wide gap between the two values, with the LP
running columns that need more devices of a type than the fleet has, says the LP's fractional pipelines are
what keeps the bound above the plan.

`--fitting` steers pricing to pipelines that fit the fleet (a priced chain that needs more devices of a type
than exist is priced again with those types dearer, up to STEER times) and keeps only those as columns. The
master LP then says what fractional copies of pipelines that do fit give: neither a bound nor a plan (the
steering is a heuristic, so it is a lower estimate of that LP), but against the plain master it measures how
much of the bound the impossible pipelines hold up (gen9, 2026-11-29: 31,072 against 36,817, plan 31,346).

`--counted STATES` sets `fitting.COUNT_STATES`: once column generation has converged over every chain, it
drops the columns that do not fit and prices on within each over-used type's devices (a valid bound,
partitioner/bounds/fitting.py), each key counting types up to STATES count states. Its master LP is then
over columns that fit, found by exact pricing within those counts.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path
from tempfile import TemporaryDirectory
from typing import Any

from generated_clusters import generate
from solver_scenarios import engine_for
import numpy as np
from ortools.linear_solver import pywraplp

import hetc.partitioner.bounds.colgen as colgen
from hetc.partitioner.bounds import fitting
from hetc.partitioner.bounds.pricing import KeyPricer, Priced
from hetc.partitioner.planner import PlanRequest, make_plan
from hetc.scheduling import Phase
from hetc.partitioner.search.templates import fits

STEER = 8  # re-pricings of a key whose best chain does not fit, each doubling the penalty on the types it over-uses


def integer_master(cols: list, N: Any, groups: dict[int, int], pools: bool) -> float:
    """The most tok/s of whole copies of `cols` within the devices and tp groups (pools: decode fed by prefill)."""
    s = pywraplp.Solver.CreateSolver("SCIP")
    x = [s.IntVar(0, s.infinity(), "") for _ in cols]
    for t, n in enumerate(N):
        s.Add(sum(float(c.devices[t]) * v for c, v in zip(cols, x) if c.devices[t]) <= float(n))
    for g, k in groups.items():
        s.Add(sum(float(c.stages[g]) * v for c, v in zip(cols, x) if c.stages[g]) <= float(k))
    terms = [c.pipe.tok_s * v for c, v in zip(cols, x) if c.pipe.phase == Phase.BOTH]
    if pools:
        fed = s.NumVar(0, s.infinity(), "fed")
        for phase in (Phase.DECODE, Phase.PREFILL):
            s.Add(fed <= sum(c.pipe.tok_s * v for c, v in zip(cols, x) if c.pipe.phase == phase))
        terms.append(fed)
    s.Maximize(sum(terms))
    s.SetTimeLimit(60_000)
    s.Solve()
    return s.Objective().Value()


def steered(price: Callable[..., Priced]) -> Callable[..., Priced]:
    """`KeyPricer.price` that returns only chains fitting the fleet (`templates.fits`): a chain needing more
    devices (or tp groups) of a type than exist is priced again with a penalty per device of those types,
    doubled each time, its reduced cost then taken at the real prices. Its `upper` is no longer a bound.

    Args:
        price: the unpatched `KeyPricer.price`.
    """

    def run(self: KeyPricer, prices: np.ndarray, worth: float, beat: float, tol: float) -> Priced:
        got = price(self, prices, worth, beat, tol)
        costs, penalty = self.costs, np.zeros(len(self.costs.types))
        groups = np.array([k.groups for k in costs.kinds])
        scale = float(np.median(prices[prices > 0])) if (prices > 0).any() else 1.0
        for step in range(STEER):
            if got.chain is None or fits(got.chain[0], costs.kinds):
                return got
            chain = np.array(got.chain[0])
            used = np.bincount(costs.type_of[chain], weights=costs.tp[chain], minlength=len(penalty))
            over = used > costs.devices
            over[costs.type_of[chain[np.bincount(chain)[chain] > groups[chain]]]] = True
            penalty += 0.5 * scale * 2**step * over
            again = price(self, prices + costs.tp * penalty[costs.type_of], worth, -np.inf, tol)
            if again.chain is None:
                break
            rc = worth * self.rate / again.R - float(prices[list(again.chain[0])].sum())
            got = Priced(got.upper, rc, again.chain, again.R, got.work + again.work)
        return Priced(got.upper, -np.inf, None, 0.0, got.work)

    return run


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("seed", type=int)
    ap.add_argument("--time-limit", type=float, default=30.0)
    ap.add_argument("--fitting", action="store_true", help="columns only of pipelines that fit the fleet (module docstring)")
    ap.add_argument("--counted", type=int, default=0, help="count states per key once converged (fitting.COUNT_STATES; 0: off)")
    ap.add_argument("--disaggregate", choices=("auto", "on", "off"), default="auto", help="as `hetc plan --disaggregate`")
    args = ap.parse_args()
    last: dict[str, Any] = {}
    master = colgen._master

    def recording(cols, N, groups, pools, spend=None, floor=0.0, routes=None):
        out = master(cols, N, groups, pools, spend, floor, routes)
        if len(cols) >= len(last.get("cols", ())):  # the master over every column (not one over those that fit, nor a later run's)
            last.update(cols=list(cols), N=N, groups=dict(groups), pools=pools, value=out[0], x=out[1])
        return out

    made = KeyPricer.__init__

    def remember(self: KeyPricer, costs: Any, key: Any, tp_groups: bool) -> None:  # the stage kinds, for `fits`
        last["kinds"] = costs.kinds
        made(self, costs, key, tp_groups)

    colgen._master = recording  # type: ignore[assignment]
    KeyPricer.__init__ = remember  # type: ignore[method-assign]
    fitting.COUNT_STATES = args.counted
    if args.fitting:
        KeyPricer.price = steered(KeyPricer.price)  # type: ignore[method-assign]
    case = generate(args.seed)
    with TemporaryDirectory() as tmp:
        where = str(case.write(Path(tmp)))  # the engine as solver_scenarios.py plans the case
        plan = make_plan(
            PlanRequest(
                model=case.model, profiles=where, dtype=case.dtype, time_limit=args.time_limit, engine=engine_for(case).value, disaggregate=args.disaggregate
            )
        )
    if not last:
        raise SystemExit(f"{case.name}: its bound is the cell bound (integer already), not column generation")
    sv = plan.solver
    steer = " (no bound: pricing steered)" if args.fitting else ""
    fit = sum(fits(c.pipe.kinds, last["kinds"]) for c in last["cols"])
    print(f"{case.name}: plan {sv.objective:,.0f} tok/s, bound {sv.bound:,.0f}{steer}, master LP {last['value']:,.0f} over {len(last['cols'])} columns")
    print(f"columns that fit the fleet: {fit} of {len(last['cols'])}")
    print(f"integer master over the same columns: {integer_master(last['cols'], last['N'], last['groups'], last['pools']):,.0f}")
    print(f"devices per type: {last['N'].astype(int).tolist()}")
    used = sorted(((v, c) for v, c in zip(last["x"], last["cols"]) if v > 1e-6), key=lambda t: -t[0] * t[1].pipe.tok_s)
    for v, c in used[:8]:
        over = "  (more than the fleet has)" if (c.devices > last["N"]).any() else ""
        print(f"  x {v:.3f}  {c.pipe.phase.value:7s} {c.pipe.tok_s:9,.0f} tok/s  devices {c.devices.astype(int).tolist()}{over}")


if __name__ == "__main__":
    main()
