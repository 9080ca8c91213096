"""`--experts auto` under throughput (layouts.bound_layouts): every layout's plan first, then the bound
rounds where the plan's bound needs them. The plan's bound is the largest of the layouts' bounds, so a
layout whose bound falls below the best plan of any layout stops there (said in its option's note) and
the layout whose bound is the plan's gets the rest of the limit. Rounds here are stand-ins on a CPU
clock the test moves: one CPU second a round."""

from __future__ import annotations

import math

from hetc.experts import ExpertLayout
from hetc.partitioner.bounds.cell_bound import CellBound
from hetc.partitioner.budget import CpuBudget
from hetc.partitioner.estimate.simulate import Workload
from hetc.partitioner.search.layouts import LayoutRun, bound_layouts
from hetc.partitioner.search.solver import BOUND, TAIL_RESERVE, Solution

WL = Workload(128, 32, "bf16", "bf16")


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def _run(layout: ExpertLayout, plan: float, bounds: list[float], cpu: CpuBudget, clock: Clock, log: list[str]) -> LayoutRun:
    """A layout whose search gave `plan` and whose bound rounds give `bounds` in turn (each one CPU second;
    paused at its part's deadline, as cell_bound_rounds pauses)."""
    part = cpu.part(0.0)

    def rounds():
        for v in bounds:
            clock.t += 1.0
            log.append(layout.value)
            yield (lambda v=v: CellBound(v)), part.left() <= 0

    sol = Solution([], plan, 0.0, math.inf, "stand-in", "FEASIBLE", rounds=rounds())
    return LayoutRun(layout, WL, sol, cpu=part)


def test_the_bound_goes_to_the_layout_whose_bound_is_the_plans():
    clock, log = Clock(), []
    cpu = CpuBudget(30.0, clock=clock, wall=clock)
    best = _run(ExpertLayout.DP_EP, 100.0, [150.0 - k for k in range(45)], cpu, clock, log)  # never below its plan
    lesser = _run(ExpertLayout.TP, 60.0, [200.0, 120.0, 90.0, 80.0, 70.0], cpu, clock, log)
    bound_layouts([lesser, best], cpu)
    assert log[0] == "tp"  # the lesser plan's first round first: it can show its bound below the best plan at once
    assert log.count("tp") == 3  # stopped at 90 < 100: two more rounds could not raise the plan's bound
    assert lesser.solution.bound == 90.0 and "below the best plan" in lesser.note
    end = 30.0 * (1 - TAIL_RESERVE)
    assert end - 1.0 <= clock.t <= end + 1.0  # the rest of the limit, less the plan's tail, went to dp-ep
    assert log.count("dp-ep") == clock.t - 3
    assert best.solution.bound == 150.0 - (log.count("dp-ep") - 1)
    assert max(lesser.solution.bound, best.solution.bound) >= best.solution.output_tok_s  # a bound on every plan
    assert BOUND in cpu.stopped and "--time-limit" in best.note  # the limit cut dp-ep's bound: named in stopped_by_limit and its note


def test_a_bound_that_ends_is_kept_and_the_rest_goes_to_the_others():
    """A layout whose rounds end (its work budget) keeps its last bound; the other then gets the time."""
    clock, log = Clock(), []
    cpu = CpuBudget(30.0, clock=clock, wall=clock)
    a = _run(ExpertLayout.DP_EP, 100.0, [130.0, 110.0, 104.0], cpu, clock, log)
    b = _run(ExpertLayout.TP, 95.0, [160.0, 150.0, 140.0, 130.0, 120.0, 99.0, 98.0], cpu, clock, log)
    bound_layouts([b, a], cpu)
    assert a.solution.rounds is None and a.solution.bound == 104.0 and not a.note  # ended: its own bound
    assert b.solution.bound == 99.0 and "below the best plan" in b.note  # 99 < 100: stopped, the 98 not run
    assert log.count("tp") == 6 and log.count("dp-ep") == 3
    assert BOUND not in cpu.stopped
