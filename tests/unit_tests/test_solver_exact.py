"""The solver against a brute-force enumerator on tiny instances, and the bound against both."""

import math

import pytest

from hetc.partitioner.search.baselines import run_baselines
from hetc.partitioner.estimate.batches import MAX_BATCH
from hetc.partitioner.estimate.simulate import Workload
from hetc.partitioner.search.solver import solve
from tests.brute_force import all_devices, best_per_set, options, packings
from tests.conftest import two_type_cluster as _cluster


def brute_force(units, cluster, wl, max_num_seqs=None) -> float:
    """Best total output tok/s over every set of disjoint ordered device chains, split and integer batch."""
    best = best_per_set(options(units, cluster, wl, max_num_seqs=max_num_seqs))
    return packings(best, all_devices(cluster))[frozenset(all_devices(cluster))]


@pytest.mark.parametrize("a_memory,b_memory", [("2 MB", "4 MB"), ("0.6 MB", "2 MB"), ("0.5 MB", "1 MB"), ("0.4 MB", "1.2 MB")])
def test_solver_matches_brute_force(tmp_path, tiny, a_memory, b_memory):
    cluster = _cluster(tmp_path, a_memory, b_memory)
    wl = Workload(32, 16, "fp32", "fp32", prefill_chunk=32)
    want = brute_force(tiny.units, cluster, wl)
    assert want > 0
    sol = solve(tiny.units, cluster, wl, tp="1", disaggregate="off")
    assert sol.output_tok_s == pytest.approx(want, rel=1e-9)
    assert sol.bound >= want * (1 - 1e-9)


def test_every_baseline_suboptimal_and_solver_optimal(tmp_path, tiny):
    """Memory too small for the fast devices alone, the big one slow: every simple split loses."""
    cluster = _cluster(tmp_path, "0.6 MB", "2 MB")
    wl = Workload(32, 16, "fp32", "fp32", prefill_chunk=32)
    want = brute_force(tiny.units, cluster, wl)
    sol = solve(tiny.units, cluster, wl, tp="1", disaggregate="off")
    assert sol.output_tok_s == pytest.approx(want, rel=1e-9)
    for name, b in run_baselines(tiny.units, cluster, wl, "throughput", sol.batch_ceiling).items():
        assert b.output_tok_s < want * 0.999, name


def test_bound_is_above_every_plan_the_solver_sees(tmp_path, tiny):
    cluster = _cluster(tmp_path, "1 MB", "3 MB", a_count=3)
    wl = Workload(32, 16, "fp32", "fp32", prefill_chunk=32)
    sol = solve(tiny.units, cluster, wl, disaggregate="off")
    assert sol.bound >= sol.output_tok_s * (1 - 1e-9)
    assert math.isfinite(sol.bound)


@pytest.mark.parametrize("cap", [1, 5, 23])
def test_max_num_seqs_caps_every_pipeline_and_the_bound_holds(tmp_path, tiny, cap):
    """With an engine's cap on sequences in flight, the plan is the brute-force optimum over
    batches up to the cap, no pipeline runs more, and the bound is above it."""
    cluster = _cluster(tmp_path, "2 MB", "4 MB")
    wl = Workload(32, 16, "fp32", "fp32", prefill_chunk=32)
    want = brute_force(tiny.units, cluster, wl, max_num_seqs=cap)
    sol = solve(tiny.units, cluster, wl, tp="1", disaggregate="off", max_num_seqs=cap)
    assert all(c.estimate.batch <= cap for c in sol.pipelines)
    assert sol.output_tok_s == pytest.approx(want, rel=1e-9)
    assert sol.bound >= want * (1 - 1e-9)
    assert sol.batch_ceiling == cap


def test_a_spent_template_budget_leaves_templates_out_and_says_so(tmp_path, tiny):
    """With almost no --time-limit only the first template (in order of promise) is evaluated: the
    plan is still a real one under the bound, the note says how many were left out, and a full
    limit finds a plan at least as good."""
    cluster = _cluster(tmp_path, "0.6 MB", "2 MB")
    wl = Workload(32, 16, "fp32", "fp32", prefill_chunk=32)
    short = solve(tiny.units, cluster, wl, tp="1", disaggregate="off", time_limit=1e-9)
    full = solve(tiny.units, cluster, wl, tp="1", disaggregate="off")
    left_out = [n for n in short.notes if "were not evaluated within --time-limit" in n]
    assert len(left_out) == 1 and f"of {short.explored} templates" in left_out[0]
    assert not any("were not evaluated" in n for n in full.notes)
    assert 0 < short.output_tok_s <= short.bound * (1 + 1e-9)
    assert full.output_tok_s >= short.output_tok_s


def test_baselines_keep_the_slos_the_plan_keeps(tmp_path, tiny):
    """With a TPOT limit, each baseline is at its best batch within it, so the solver (held to it too)
    is never below one: a baseline over the limit was printed beside plans held to it."""
    cluster = _cluster(tmp_path, "1 MB", "3 MB", a_count=3)
    wl = Workload(32, 16, "fp32", "fp32", prefill_chunk=32)
    free = run_baselines(tiny.units, cluster, wl, "throughput", MAX_BATCH)
    slo = 0.9 * max(b.tpot_ms for b in free.values() if b.feasible) / 1e3
    sol = solve(tiny.units, cluster, wl, tpot_slo_s=slo, disaggregate="off")
    held = run_baselines(tiny.units, cluster, wl, "throughput", sol.batch_ceiling, tpot_slo_s=slo)
    assert any(free[k].feasible and free[k].tpot_ms > slo * 1e3 for k in free)  # the limit binds one
    for name, b in held.items():
        assert not b.feasible or (b.tpot_ms <= slo * 1e3 and b.output_tok_s <= sol.output_tok_s * (1 + 1e-9)), name
