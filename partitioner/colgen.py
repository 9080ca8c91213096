"""Column generation over whole pipelines: a tight bound on output tok/s, and the pipelines to try.

A column is one pipeline: an ordered chain of stage kinds (device type × tp), the unit
range of each stage, its batch and phase. The master LP takes columns fractionally within
the device count of each type and the tp-group count of each kind (and, for disaggregated
pools, decode output within what prefill pools feed); its duals price one stage of each
kind, and pricing (pricing.py) finds the pipeline of best reduced cost.

The bound (Lagrangian): for duals π (devices per type), σ (tp groups per kind), μ (the
feed row) ≥ 0 and any plan, Σ τ ≤ π·n + σ·G + N·max(0, max_p rc_p / d_p), with N devices
and d_p the devices of pipeline p. Pricing with prices w + ε·tp gives an upper estimate u
of max_p (rc_p − ε·d_p), so the bound is z + N·(ε + max(0, u)), z the master's value.
Farley's: scaling π + ε and σ by θ (μ kept) stays dual-feasible when θ ≥ every column's
(worth · τ) / price, worth being 1, 1 − μ or μ for pipelines, decode and prefill pools;
the bound is then θ·(z + N·ε). The smaller of the two is reported.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from ortools.linear_solver import pywraplp

from hetc.cluster import Cluster
from hetc.partitioner.pricing import CERTIFY, SEARCH, Column, Pricer
from hetc.partitioner.tables import Kind, Tables

__all__ = ["ColumnBound", "column_bound", "METHOD"]

METHOD = ("column generation over whole pipelines (chain of stage kinds × unit ranges × shared batch), "
          "Lagrangian bound from the master LP's duals and a relaxed dynamic-programming pricing "
          "(loop term dropped, micro-batches of the shortest length in a class, fastest links)")

INF = np.inf
HELD_KEYS = 16  # (batch, class) pairs searched for pipelines the cluster holds
# Pricing is budgeted in DP cells (ladder levels × stages × kinds × units, and the counting
# DP's states), not seconds, so that a plan does not depend on the machine's load; this
# many take about a second on one core of the reference machine (BENCHMARKS.md).
WORK_PER_SECOND = 4e7


@dataclass(slots=True)
class ColumnBound:
    value: float  # upper bound on output tok/s
    lp: float  # the master LP's value over the pipelines the cluster holds, found so far
    columns: list[Column]  # pipelines the cluster can hold: the master's optimum first, then by tok/s per device
    iterations: int
    seconds: float
    work: float  # DP cells evaluated (the budget's unit)
    converged: bool  # the relaxed generation ended with no improving pipeline left, within its budget


def _master(cols: list[Column], kinds: list[Kind], types: list, type_of: np.ndarray, devices: list[int]):
    """The master LP over `cols`: (value, x per column, device duals per type, group duals per kind,
    the dual of decode pools' output against what prefill pools feed)."""
    s = pywraplp.Solver.CreateSolver("GLOP")
    x = [s.NumVar(0, s.infinity(), "") for _ in cols]
    dev_rows = []
    for t in range(len(types)):
        terms = [kinds[g].tp * xv for c, xv in zip(cols, x) for g in c.kinds if type_of[g] == t]
        dev_rows.append(s.Add(sum(terms) <= float(devices[t])) if terms else None)
    grp_rows = {}
    for g, k in enumerate(kinds):
        terms = [xv * c.kinds.count(g) for c, xv in zip(cols, x) if g in c.kinds]
        if k.tp > 1 and terms:
            grp_rows[g] = s.Add(sum(terms) <= k.groups)
    feed = [(c.tok_s if c.phase == "decode" else -c.tok_s) * xv for c, xv in zip(cols, x) if c.phase != "both"]
    feed_row = s.Add(sum(feed) <= 0) if feed else None
    s.Maximize(sum(c.tok_s * xv for c, xv in zip(cols, x) if c.phase != "prefill"))
    if s.Solve() != pywraplp.Solver.OPTIMAL:
        raise RuntimeError("the master LP did not solve to optimality")
    pi = np.array([max(0.0, r.dual_value()) if r else 0.0 for r in dev_rows])
    sigma = np.zeros(len(kinds))
    for g, r in grp_rows.items():
        sigma[g] = max(0.0, r.dual_value())
    mu = max(0.0, feed_row.dual_value()) if feed_row else 0.0
    return s.Objective().Value(), [xv.solution_value() for xv in x], pi, sigma, mu


def _ident(c: Column) -> tuple:
    """A column's pipeline, whatever its priced value: phase, kinds, cuts, batch."""
    return c.phase, c.kinds, c.cuts, c.batch


def _generate(pr: Pricer, *, counted: bool, seed: list[Column], deadline: float, hard: float, tolerance: float,
              progress: Callable[[str], None] | None, keys: list | None = None):
    """One column-generation run: (bound, master value, columns, their x, iterations, estimates,
    whether it ended for want of improving columns rather than of budget).

    counted=False: pricing counts no devices and the master takes every column (the LP over
    a relaxed set, fast); counted=True: the master only takes columns the cluster holds and
    pricing falls back to the counting DP where the free one's best can't be held.
    `keys` limits pricing to those (batch, class) pairs: then no bound comes out. New columns
    are sought until the pricer's work passes `deadline`; the last full pass refines its
    ladders until `hard` (work, not seconds: the same inputs give the same columns)."""
    n_dev = float(pr.devices.sum())
    cols = list(seed)
    seen = set(map(_ident, cols))
    best, z, x, it = INF, 0.0, [], 0
    w, pdev, mu = np.zeros(len(pr.kinds)), np.zeros(len(pr.types)), 0.5
    bounding = keys is None  # every pair is priced, so a full pass bounds every column
    every = keys or pr.keys()
    hot = every  # (batch, class) pairs worth searching: all at first, then the promising ones
    while True:
        it += 1
        if cols:
            z, x, pi, sigma, mu = _master(cols, pr.kinds, pr.types, pr.type_of, pr.devices)
            w, pdev = pi[pr.type_of] * pr.tp + sigma, pi
        eps = tolerance * z / n_dev if z > 0 else 0.0
        late = pr.work > deadline
        if late:  # one last full pass, refined, for the bound
            passes = [(every, CERTIFY)]
        elif not cols:  # the first columns: any will do
            passes = [(every, 0)]
        else:  # the promising pairs, then all, then all refined until certain
            passes = [(hot, SEARCH), (every, SEARCH), (every, CERTIFY)]
        for priced, rounds in passes:
            new, est = pr.price(w + eps * pr.tp, pdev + eps, mu, priced, rounds=rounds, counted=counted,
                                stop=hard if rounds == CERTIFY else deadline)
            new = [c for c in new if _ident(c) not in seen]
            if new:
                break
        if cols and bounding and priced is every:  # a full pass: its estimates hold for every column
            upper = max((u for u, _ in est.values()), default=-INF)
            theta = max([1.0] + [r for _, r in est.values()])
            best = min(best, z + n_dev * (eps + max(0.0, upper)), theta * (z + n_dev * eps))
        if progress:
            progress(f"column generation ({'counted' if counted else 'relaxed'}) {it}: LP {z:,.0f} tok/s, "
                     f"bound {best:,.0f}, {len(cols)} pipelines")
        if not new or late:
            return best, z, cols, x, it, est, not new and not late
        hot = sorted(est, key=lambda k: est[k][0], reverse=True)[: max(8, len(every) // 8)]
        seen.update(map(_ident, new))
        cols += new


def column_bound(tables: Tables, kinds: list[Kind], cluster: Cluster, max_stages: int, *,
                 time_limit: float = 20.0, tolerance: float = 0.002,
                 phases: tuple[str, ...] = ("both",), progress: Callable[[str], None] | None = None) -> ColumnBound:
    """The bound and the pipelines to try.

    First column generation over the relaxed set (pricing counts no devices): its last full
    pricing pass gives the bound, valid whether or not generation finished. Then, in the
    time left, generation over pipelines the cluster holds, for the most promising
    (batch, class) pairs: the columns the plan is built from.

    Args:
        tolerance: ε per device as a share of the master's value over the device count.
        phases: "both" (pipelines that prefill and decode), and/or "prefill" and "decode"
            (disaggregated pools; one-device stages, as the runtime serves them).
        progress: called with a line per iteration.
    """
    t0 = time.perf_counter()
    pr = Pricer(tables, kinds, cluster, max_stages, phases)
    work = time_limit * WORK_PER_SECOND
    bound, _, cols, _, it, est, converged = _generate(pr, counted=False, seed=[], deadline=0.6 * work, hard=0.8 * work,
                                           tolerance=tolerance, progress=progress)
    held = [c for c in cols if pr.holds(c)]
    promising = sorted(est, key=lambda k: est[k][0], reverse=True)[:HELD_KEYS]
    _, z, cols, x, it2, _, _ = _generate(pr, counted=True, seed=held, deadline=work, hard=work,
                                      tolerance=tolerance, progress=progress, keys=promising)
    weight = {_ident(c): v for c, v in zip(cols, x)}
    order = sorted(cols, key=lambda c: (-weight.get(_ident(c), 0.0),
                                        -c.tok_s / pr.tp[list(c.kinds)].sum()))
    return ColumnBound(bound if np.isfinite(bound) else 0.0, z, order, it + it2, time.perf_counter() - t0, pr.work,
                       converged)
