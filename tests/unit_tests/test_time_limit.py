"""`--time-limit` in process CPU seconds (partitioner/budget.py): the deadlines, CP-SAT held to the
CPU left, the bounds paused and resumed with valid values, and plans unchanged where the limit
does not bind."""

from __future__ import annotations

import math
import random
import time

import pytest
from ortools.sat.python import cp_model

from hetc.cluster import load_cluster
from hetc.partitioner.bounds.cell_bound import cell_bound, cell_bound_rounds
from hetc.partitioner.bounds.colgen import column_bound, column_bound_rounds
from hetc.partitioner.bounds.bound import cost_bound
from hetc.partitioner.bounds import latency_bound
from hetc.partitioner.bounds.latency_bound import tpot_floor_bound
from hetc.partitioner.budget import CPSAT_FLOOR, OBJECTIVE_BOUND, STRETCH_SLACK, CpuBudget, OutOfTime, Pause
from hetc.partitioner.estimate.batches import batch_ceiling
from hetc.partitioner.estimate.tables import type_key
from hetc.partitioner.estimate.simulate import Workload
from hetc.partitioner.estimate.tables import Tables, kinds_of
from hetc.partitioner.search import mix
from hetc.partitioner.search.solver import BOUND, SEARCH, SEEDS_ONLY_SHARE, solve
from hetc.scheduling import Objective, Phase
from tests.fixtures.cpu_clock import Ticks
from tests.conftest import PROFILE

WL = Workload(32, 16, "fp32", "fp32", prefill_chunk=32)


@pytest.fixture
def cluster(tmp_path):
    """Three device types (two of them several devices with tp groups): a search with real work."""
    types = [
        ("fast", "nvidia", "cuda", "0.8 MB", "40 GB/s", "4 TFLOP/s", 3),
        ("big", "amd", "rocm", "2 MB", "10 GB/s", "0.5 TFLOP/s", 2),
        ("mid", "intel", "gaudi", "1.2 MB", "20 GB/s", "1 TFLOP/s", 2),
    ]
    lines = []
    for i, (name, vendor, backend, memory, bw, flops, count) in enumerate(types):
        (tmp_path / f"{name}.yaml").write_text(PROFILE.format(name=name, vendor=vendor, backend=backend, memory=memory, bw=bw, flops=flops))
        lines.append(f"  - {{name: n{i}, device: ./{name}.yaml, count: {count}, link: pcie4}}")
    (tmp_path / "c.yaml").write_text("nodes:\n" + "\n".join(lines) + "\nnetwork: {default: ethernet-10g}\n")
    return load_cluster(tmp_path / "c.yaml")


def test_budget_deadlines_and_phases():
    clock = Ticks(1.0)
    b = CpuBudget(10.0, clock=clock)  # start at 1
    b.deadline(1.0, reserve=2.5)
    assert b.until == pytest.approx(1 + 10 - 2.5)
    with b.phase("bound"):  # reads 2 and 3
        pass
    assert b.spent == {"bound": pytest.approx(1.0)}
    assert b.left() == pytest.approx(8.5 - 4) and not b.past()
    clock.t = 9.0
    assert b.past() and b.seconds_for_cpsat() == CPSAT_FLOOR
    assert math.isinf(CpuBudget().left()) and not CpuBudget().past()


def test_cpsat_stops_at_the_cpu_left():
    """CP-SAT's `max_time_in_seconds` is wall time; with one worker a wall second holds at most one
    CPU second, so giving it the CPU left holds the process's CPU: a subset sum it cannot prove in
    time stops within the budget (plus a scheduler tick), with its deterministic limit far away;
    a loaded host stops it on wall time before its CPU is spent, never after."""
    rng = random.Random(7)
    weights = [rng.randrange(10**9, 2 * 10**9) for _ in range(80)]
    m = cp_model.CpModel()
    x = [m.NewBoolVar(f"x{i}") for i in range(len(weights))]
    m.Add(sum(w * v for w, v in zip(weights, x)) <= sum(weights) // 2 - 1)
    m.Maximize(sum(w * v for w, v in zip(weights, x)))
    budget = CpuBudget(0.6)
    given = budget.seconds_for_cpsat(workers=1)  # the wall seconds CP-SAT gets (a little under 0.6: CPU spent since)
    t0, w0 = time.process_time(), time.perf_counter()
    chosen = mix._solve(m, x, 1e6, budget)
    cpu, wall = time.process_time() - t0, time.perf_counter() - w0
    assert cpu <= 0.6 + 0.3, (cpu, wall)
    if budget.stopped:  # it says the limit stopped it: only after running to the limit
        assert budget.stopped == ["cp-sat"] and wall >= 0.98 * given, (wall, given)
    else:  # only a proven optimum ends it early: here, a subset at the capacity exactly
        assert sum(weights[j] for j in chosen) == sum(weights) // 2 - 1


@pytest.mark.parametrize("rounds, full", [(cell_bound_rounds, cell_bound), (column_bound_rounds, column_bound)])
def test_bounds_pause_at_the_deadline_with_a_valid_bound(tiny, cluster, rounds, full):
    """Past its deadline a bound pauses at its first chance (the cell bound after a round, column
    generation after a full pass: a valid bound either way), above the bound the full run reaches;
    resumed with no deadline it goes on to no higher than it paused at."""
    tables = Tables(tiny.units, WL)
    args = (tables, kinds_of(cluster), cluster, len(tiny.units), 4096)
    whole = full(*args, phases=tuple(Phase))
    late = CpuBudget(0.0)
    gen = rounds(*args, phases=tuple(Phase), cpu=late)
    snap, pause = next(gen)
    assert pause
    first = snap()
    assert math.isfinite(first.value) and first.value >= whole.value * (1 - 1e-9)
    assert first.pipelines or rounds is cell_bound_rounds  # the cell bound's first round has refined nothing yet
    late.until = math.inf
    last = first
    for snap, pause in gen:
        assert not pause
        last = snap()
    assert last.value <= first.value * (1 + 1e-9) and last.value >= whole.value * (1 - 1e-9) * 0.999


def test_a_limit_that_does_not_bind_leaves_the_plan_as_the_work_budgets_make_it(tiny, cluster):
    a = solve(tiny.units, cluster, WL, time_limit=2, cpu=CpuBudget())  # no CPU limit: the work budgets alone
    cpu = CpuBudget(60.0)
    b = solve(tiny.units, cluster, WL, time_limit=2, cpu=cpu)
    assert cpu.stopped == [] and cpu.used < 60
    assert (b.output_tok_s, b.bound) == (a.output_tok_s, a.bound)
    assert [(c.template, c.replicas, c.estimate.batch) for c in b.pipelines] == [(c.template, c.replicas, c.estimate.batch) for c in a.pipelines]
    assert set(cpu.spent) == {BOUND, SEARCH}


def test_a_binding_limit_stops_phases_and_says_so(tiny, cluster):
    """A clock that runs out during the bound's rounds: the bound pauses with the search's reserve
    left, the search still finds a fleet, and the plan under the bound says which phases stopped."""
    cpu = CpuBudget(0.02, clock=Ticks(1e-3))  # the bound's deadline after 15 reads, the search's after 19
    sol = solve(tiny.units, cluster, WL, time_limit=30, cpu=cpu)
    assert sol.pipelines and 0 < sol.output_tok_s <= sol.bound * (1 + 1e-9)
    assert cpu.stopped[:2] == [BOUND, "templates"]
    assert any("were not evaluated within --time-limit (its CPU seconds)" in n for n in sol.notes)


def test_a_part_keeps_its_own_deadline_and_the_whole_record():
    clock = Ticks(1.0)
    whole = CpuBudget(10.0, clock=clock, wall=lambda: 0.0)
    part = whole.part(4.0)  # from now (2): the plain search of a speculating plan
    assert part.until == pytest.approx(2 + 4) and whole.until == pytest.approx(1 + 10)
    with part.phase(BOUND):
        pass
    part.stop(BOUND)
    assert whole.spent == part.spent and whole.stopped == [BOUND]


def test_wall_left_stretches_by_the_cpu_rate_within_the_slack():
    cpu, wall = Ticks(1.0), Ticks(3.0)  # the process gets a third of a core
    b = CpuBudget(100.0, clock=cpu, wall=wall)
    left = b.until - (cpu.t + 1.0)  # the CPU left at wall_left's own read
    assert b.wall_left() == pytest.approx(left + STRETCH_SLACK)  # stretched, but by at most the slack
    same = CpuBudget(100.0, clock=Ticks(1.0), wall=Ticks(1.0))
    assert same.wall_left() == pytest.approx(same.until - 2.0)  # a whole core: the CPU left as it is
    assert CpuBudget(0.0).wall_left() <= STRETCH_SLACK


def _latency_inputs(tiny, cluster):
    tables, kinds = Tables(tiny.units, WL), kinds_of(cluster, (1, 2))
    return tables, kinds, batch_ceiling(tiny.units, cluster, WL, None)


def test_the_latency_bound_cut_by_the_deadline_stays_a_bound(tiny, cluster):
    """Past the deadline before its LPs: OutOfTime (the planner keeps the bound of one pipeline);
    during the bisection: a TPOT between that and the whole bound, and the stop recorded."""
    tables, kinds, ceiling = _latency_inputs(tiny, cluster)
    one = tpot_floor_bound(tables, kinds, cluster, 0.0, ceiling)
    floor = 0.5 / one  # half of what one pipeline at its least TPOT gives per sequence: a floor that binds
    whole = tpot_floor_bound(tables, kinds, cluster, floor, ceiling)
    assert whole >= one
    with pytest.raises(OutOfTime):
        tpot_floor_bound(tables, kinds, cluster, floor, ceiling, CpuBudget(0.0))
    reads = 0

    def counting() -> float:
        nonlocal reads
        reads += 1
        return float(reads)

    probe = CpuBudget(math.inf, clock=counting)
    tpot_floor_bound(tables, kinds, cluster, floor, ceiling, probe)
    n = reads
    paused = []
    for stop_at in range(2, n, max(1, n // 12)):  # the deadline at every stage of the computation
        reads = 0
        cpu = CpuBudget(stop_at - 1.0, clock=counting)
        try:
            cut = tpot_floor_bound(tables, kinds, cluster, floor, ceiling, cpu)
        except OutOfTime:
            continue
        assert one * (1 - 1e-9) <= cut <= whole * (1 + 1e-9)
        assert cut == whole or OBJECTIVE_BOUND in cpu.stopped
        paused += [cut] if OBJECTIVE_BOUND in cpu.stopped else []
    assert paused, "no deadline fell in the bisection"


def test_the_cost_bound_past_the_deadline_raises(tiny, cluster):
    tables, kinds, ceiling = _latency_inputs(tiny, cluster)
    price = {type_key(n): 1.0 + i for i, n in enumerate(cluster.nodes)}
    with pytest.raises(OutOfTime):
        cost_bound(tables, kinds, 4, price, ceiling, floor=1.0, cpu=CpuBudget(0.0))
    assert cost_bound(tables, kinds, 4, price, ceiling, floor=1.0, cpu=CpuBudget(60.0)) == cost_bound(tables, kinds, 4, price, ceiling, floor=1.0)


def test_a_deadline_while_the_stage_flows_lp_is_built_keeps_the_pipelines_bound(tiny, cluster, monkeypatch):
    """The stage flows' LP is built after the pipelines' bisection: cut there, the bound is the pipelines'."""
    tables, kinds, ceiling = _latency_inputs(tiny, cluster)
    one = tpot_floor_bound(tables, kinds, cluster, 0.0, ceiling)
    floor = 0.5 / one
    whole = tpot_floor_bound(tables, kinds, cluster, floor, ceiling)

    class CutWhenStages(latency_bound._FloorLP):
        def __init__(self, seats, blocks, *args, **kwargs):
            if not blocks:  # the stage flows' LP (no pipeline columns)
                raise OutOfTime
            super().__init__(seats, blocks, *args, **kwargs)

    monkeypatch.setattr(latency_bound, "_FloorLP", CutWhenStages)
    cpu = CpuBudget(math.inf)
    cut = tpot_floor_bound(tables, kinds, cluster, floor, ceiling, cpu)
    assert one < cut <= whole * (1 + 1e-9) and OBJECTIVE_BOUND in cpu.stopped


def test_latency_runs_the_throughput_bound_for_its_seeds_only(tiny, cluster):
    """Latency: the solver's tok/s bound is not the objective's; its rounds stop at SEEDS_ONLY_SHARE of the
    limit (no 'bound' stop recorded) and do not resume after the search, which gets the CPU."""
    limit = 2.0
    cpu = CpuBudget(limit, clock=Ticks(1e-3))
    sol = solve(tiny.units, cluster, WL, objective=Objective.LATENCY, time_limit=30, cpu=cpu)
    assert sol.pipelines
    assert cpu.spent[BOUND] <= SEEDS_ONLY_SHARE * limit + 5e-3 and BOUND not in cpu.stopped
    throughput = CpuBudget(limit, clock=Ticks(1e-3))
    solve(tiny.units, cluster, WL, time_limit=30, cpu=throughput)
    assert throughput.spent[BOUND] > 2 * SEEDS_ONLY_SHARE * limit  # the same rounds run longer for throughput


def test_the_cell_bound_refines_past_its_work_budget_with_the_cpu_left(tiny, cluster):
    """Its work budget spent with cells left to refine, the cell bound pauses (Pause.WORK: the plan before it is
    the budget's); resumed, it goes on refining with the CPU left, tighter than the budget's bound and still
    above the converged one. Without a CPU budget the work budget ends it, as before."""
    tables = Tables(tiny.units, WL)
    args = (tables, kinds_of(cluster), cluster, len(tiny.units), 4096)
    converged = cell_bound(*args, phases=tuple(Phase))
    small = 2e4  # a few DP cells: refinement far from done
    spent = cell_bound(*args, phases=tuple(Phase), budget=small)
    assert spent.value > converged.value * (1 + 1e-6)
    gen = cell_bound_rounds(*args, phases=tuple(Phase), budget=small, cpu=CpuBudget(60.0))
    snap, pause = next((s, p) for s, p in gen if p)
    assert pause == Pause.WORK and snap().value == pytest.approx(spent.value)
    last = None
    for snap, pause in gen:  # resumed after the search: no deadline falls within 60 CPU s here
        assert pause == Pause.NO
        last = snap()
    assert last is not None and converged.value * (1 - 1e-9) <= last.value < spent.value * (1 - 1e-6)
