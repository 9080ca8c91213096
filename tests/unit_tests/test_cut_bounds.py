"""Bounds a CPU deadline cuts mid-pass stay bounds (partitioner/budget.py): the cell bound's first
pass with the keys left bounded by `FirstPass.rest`, and a column-generation pass whose unpriced keys
pay their certificate per device — above every pipeline and plan that brute force finds."""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import pytest

from hetc.partitioner.bounds import pricing
from hetc.partitioner.bounds.aggregate import Rows, keys
from hetc.partitioner.bounds.cell_bound import cell_bound, cell_bound_rounds
from hetc.partitioner.bounds.cells import CountSpace
from hetc.partitioner.bounds.colgen import column_bound, column_bound_rounds
from hetc.partitioner.bounds.stage_costs import StageCosts
from hetc.partitioner.budget import CpuBudget
from hetc.partitioner.estimate.batches import Regimes
from hetc.partitioner.estimate.tables import Tables, kinds_of
from hetc.partitioner.planner import PlanRequest, make_plan
from hetc.scheduling import Phase
from tests.brute_force import best_per_set, best_with_pools, options, rows_bound_every_option
from tests.fixtures.cpu_clock import Ticks
from tests.conftest import two_type_cluster
from tests.fixtures.fleets import WL, many_type_cluster

ROOT = Path(__file__).resolve().parents[2]


def _counting(monkeypatch, owner, name: str) -> list:
    """Wrap owner.name so that each call is recorded (the test checks the cut path ran)."""
    calls: list = []
    real = getattr(owner, name)

    def wrapped(*a, **k):
        calls.append(1)
        return real(*a, **k)

    monkeypatch.setattr(owner, name, wrapped)
    return calls


@pytest.mark.parametrize("a_memory,b_memory,phase", [("0.8 MB", "2 MB", Phase.BOTH), ("2 MB", "1 MB", Phase.BOTH), ("2 MB", "1 MB", Phase.DECODE)])
def test_rest_bounds_every_pipeline_on_exactly_its_cell(tmp_path, tiny, phase, a_memory, b_memory):
    """Every key bounded by `rest` alone (the first pass cut before its first row): at every key
    covering a brute-forced pipeline's batch and length, the row is at least its tok/s on the cell of
    its devices."""
    cluster = two_type_cluster(tmp_path, a_memory, b_memory, a_count=3)
    costs = StageCosts(Tables(tiny.units, WL), kinds_of(cluster), cluster)
    space = CountSpace(costs.devices)
    rows = Rows(costs, space, phase, max_stages=4, ceiling=40)
    rows.cut_here()
    assert rows_bound_every_option(tiny.units, cluster, WL, costs, space, phase, rows) > 100


@pytest.mark.parametrize("a_memory,b_memory", [("0.8 MB", "2 MB"), ("2 MB", "1 MB")])
@pytest.mark.parametrize("step", [1e-4, 3e-3])
def test_a_cut_first_pass_bounds_the_best_plan(tmp_path, tiny, monkeypatch, a_memory, b_memory, step):
    """The cell bound with the deadline early in its first pass (the rest of the keys by `rest`):
    every round above the brute-force best plan (pools and tp groups included) until it pauses, and
    resumed to the end (the cut rows made exact), no higher than it paused at."""
    cluster = two_type_cluster(tmp_path, a_memory, b_memory, a_count=2)
    want = best_with_pools(best_per_set(options(tiny.units, cluster, WL, tp=True, phases=tuple(Phase))))
    assert want > 0
    args = (Tables(tiny.units, WL), kinds_of(cluster), cluster, len(tiny.units), 4096)
    whole = cell_bound(*args, phases=tuple(Phase))
    cuts = _counting(monkeypatch, Rows, "cut_here")
    cpu = CpuBudget(0.02, clock=Ticks(step))
    gen = cell_bound_rounds(*args, phases=tuple(Phase), cpu=cpu)
    paused = None
    for snap, pause in gen:
        assert want * (1 - 1e-9) <= snap().value < 20 * want  # a bound, and not a useless one
        if pause:
            paused = snap().value
            break
    assert cuts and paused is not None
    cpu.until = float("inf")
    last = paused
    for snap, _ in gen:
        last = snap().value
    assert want * (1 - 1e-9) <= last <= paused * (1 + 1e-9)
    assert last <= whole.value * 1.05  # the cut rows made exact again: close to the uncut run's


@pytest.mark.parametrize("types,first_count,reads", [(2, 2, 3), (3, 2, 40), (4, 1, 3), (4, 1, 400)])
def test_a_cut_pricing_pass_bounds_the_best_plan(tmp_path, tiny, monkeypatch, types, first_count, reads):
    """Column generation whose deadline passes mid-pass (after `reads` clock reads: in its first pass
    or a later one): the pass stops there, its unpriced keys bounded by their certificate per device,
    and the bound it pauses with lies above the brute-force best; resumed, it ends no higher."""
    cluster = many_type_cluster(tmp_path, types, first_count)
    want = best_with_pools(best_per_set(options(tiny.units, cluster, WL, tp=True, phases=tuple(Phase))))
    assert want > 0
    devices = sum(n.count for n in cluster.nodes)
    args = (Tables(tiny.units, WL), kinds_of(cluster), cluster, min(len(tiny.units), devices), 4096)
    whole = column_bound(*args, phases=tuple(Phase))
    cut = _counting(monkeypatch, pricing.KeyPricer, "per_device")
    cpu = CpuBudget(reads * 1e-3, clock=Ticks(1e-3))
    paused = None
    gen = column_bound_rounds(*args, phases=tuple(Phase), cpu=cpu)
    for snap, pause in gen:
        if pause:
            paused = snap().value
            break
    assert paused is not None
    assert paused >= want * (1 - 1e-9)
    if reads == 3:
        assert cut  # the first pass itself was cut
    cpu.until = float("inf")
    last = paused
    for snap, _ in gen:
        last = snap().value
    assert want * (1 - 1e-9) <= last <= paused * (1 + 1e-9)
    assert last <= whole.value * 3


@pytest.mark.parametrize("phase", [Phase.BOTH, Phase.DECODE, Phase.PREFILL])
def test_per_device_certificate_bounds_every_chain(tmp_path, tiny, phase):
    """Against every chain of every key of short pipelines (each length of the class, every cut that
    fits memory), at prices under which some chains pay and others don't: `per_device` is at least
    each chain's reduced cost over its devices (busiest stage as its bottleneck: links only lower it)."""
    cluster = many_type_cluster(tmp_path, 3)
    costs = StageCosts(Tables(tiny.units, WL), kinds_of(cluster), cluster)
    rng = np.random.default_rng(7)
    U, paying = costs.u, 0
    for key in keys(phase, 3, 40, Regimes(WL, phase, 40)):
        pricer = pricing.KeyPricer(costs, key, tp_groups=phase == Phase.BOTH)
        if not len(pricer.cand):
            continue
        case = pricer.case
        for _ in range(2):
            prices = rng.uniform(0.05, 0.6, len(costs.kinds)) * pricer.rate / pricer.cand[0] * costs.tp
            best = -np.inf
            for n in range(key.lo, min(key.hi, U) + 1):
                for ks in itertools.product(pricer.kinds.tolist(), repeat=n):
                    for cuts in itertools.combinations(range(1, U), n - 1):
                        bd = (0, *cuts, U)
                        if any(bd[s + 1] > case.jfit[g, bd[s]] for s, g in enumerate(ks)):
                            continue
                        R = max(case.P[g, bd[s + 1]] - case.P[g, bd[s]] + case.over[g] for s, g in enumerate(ks))
                        best = max(best, (0.7 * pricer.rate / R - sum(prices[g] for g in ks)) / sum(costs.tp[g] for g in ks))
            assert pricer.per_device(prices, 0.7) >= best - 1e-9 * abs(best), key
            paying += best > 0
    assert paying >= 2


@pytest.mark.slow  # ~8 s of CPU; held to CPU seconds, so load stretches its wall time
def test_a_short_limit_holds_on_64_devices():
    """llama-3.1-405b fp8 on examples/fleet-64.yaml (9,537 count vectors: a first pass of ~20 CPU s
    on this host) under --time-limit 8: the plan's solver and bound work stay within the limit + 1
    CPU second, the first pass cut, and the bound still above the plan. (At 5 the least work — the
    baselines, `rest` over 1,600 keys, a knapsack round, one search — reads 4.5–5.9 CPU s here: the
    plan's notes say so.)"""
    req = PlanRequest(model="llama-3.1-405b", profiles=str(ROOT / "examples" / "fleet-64.yaml"), dtype="fp8", engine="vllm", time_limit=8.0)
    plan = make_plan(req)
    t = plan.solver.time
    assert t is not None and t.cpu_s <= t.limit_cpu_s + 1.0, t
    assert "bound" in t.stopped_by_limit
    assert plan.solver.bound >= plan.solver.objective


@pytest.mark.slow  # ~5 s of CPU
def test_a_limit_below_the_least_work_is_said():
    """Under --time-limit 0.5 the same plan needs more than its limit (baselines, `rest` over every key, a
    knapsack round, a search: 2.4 CPU s on the fastest host it has run on, 4.5–5.9 on slower ones): it
    still plans, with a bound, and its notes say the limit was too short."""
    req = PlanRequest(model="llama-3.1-405b", profiles=str(ROOT / "examples" / "fleet-64.yaml"), dtype="fp8", engine="vllm", time_limit=0.5)
    plan = make_plan(req)
    t = plan.solver.time
    assert t is not None and t.cpu_s > t.limit_cpu_s + 0.5, t
    assert any("shorter than this fleet's least planning work" in n for n in plan.solver.notes), plan.solver.notes
    assert plan.solver.bound >= plan.solver.objective
