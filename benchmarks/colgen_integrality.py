"""Is a generated cluster's column-generation bound loose by integrality? Plans seed SEED (generated_clusters.py)
and sets the master LP's last value beside an integer master over the same columns (SCIP), with the columns
the LP uses most and their devices per type against the fleet's.

usage: .venv/bin/python benchmarks/colgen_integrality.py SEED [--time-limit S]

The integer master over the bound's columns is no bound (pricing never enumerates every pipeline) and no
plan (columns are priced at their keys' relaxed costs); a wide gap between the two values, with the LP
running columns that need more devices of a type than the fleet has, says the LP's fractional pipelines are
what keeps the bound above the plan.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from tempfile import TemporaryDirectory
from typing import Any

from generated_clusters import generate
from ortools.linear_solver import pywraplp

import hetc.partitioner.bounds.colgen as colgen
from hetc.partitioner.planner import PlanRequest, make_plan
from hetc.scheduling import Phase


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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("seed", type=int)
    ap.add_argument("--time-limit", type=float, default=30.0)
    args = ap.parse_args()
    last: dict[str, Any] = {}
    master = colgen._master

    def recording(cols, N, groups, pools, spend=None, floor=0.0):
        out = master(cols, N, groups, pools, spend, floor)
        last.update(cols=list(cols), N=N, groups=dict(groups), pools=pools, value=out[0], x=out[1])
        return out

    colgen._master = recording  # type: ignore[assignment]
    case = generate(args.seed)
    with TemporaryDirectory() as tmp:
        plan = make_plan(PlanRequest(model=case.model, profiles=str(case.write(Path(tmp))), dtype=case.dtype, time_limit=args.time_limit))
    if not last:
        raise SystemExit(f"{case.name}: its bound is the cell bound (integer already), not column generation")
    sv = plan.solver
    print(f"{case.name}: plan {sv.objective:,.0f} tok/s, bound {sv.bound:,.0f}, master LP {last['value']:,.0f} over {len(last['cols'])} columns")
    print(f"integer master over the same columns: {integer_master(last['cols'], last['N'], last['groups'], last['pools']):,.0f}")
    print(f"devices per type: {last['N'].astype(int).tolist()}")
    used = sorted(((v, c) for v, c in zip(last["x"], last["cols"]) if v > 1e-6), key=lambda t: -t[0] * t[1].pipe.tok_s)
    for v, c in used[:8]:
        over = "  (more than the fleet has)" if (c.devices > last["N"]).any() else ""
        print(f"  x {v:.3f}  {c.pipe.phase.value:7s} {c.pipe.tok_s:9,.0f} tok/s  devices {c.devices.astype(int).tolist()}{over}")


if __name__ == "__main__":
    main()
