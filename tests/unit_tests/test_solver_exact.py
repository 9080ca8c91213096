"""The solver against a brute-force enumerator on tiny instances, and the bound against both."""

import itertools
import math

import pytest

from hetc.partitioner.baselines import run_baselines
from hetc.partitioner.capture import capture
from hetc.partitioner.simulate import StagePlan, Workload, estimate_pipeline
from hetc.partitioner.solver import solve
from tests.conftest import FIXTURES, two_type_cluster as _cluster

def brute_force(units, cluster, wl) -> float:
    """Best total output tok/s over every set of disjoint ordered device chains, every split, every batch."""
    devices = [(n, i) for n in cluster.nodes for i in range(n.count)]
    best_chain = {}
    for size in range(1, len(devices) + 1):
        for chain in itertools.permutations(range(len(devices)), size):
            best = 0.0
            for cuts in itertools.combinations(range(1, len(units)), size - 1):
                bounds = (0, *cuts, len(units))
                stages = [StagePlan(devices[d][0], a, b - 1) for d, a, b in zip(chain, bounds, bounds[1:])]
                for batch in (2**i for i in range(13)):
                    est = estimate_pipeline(units, stages, cluster, wl, batch)
                    if est is None:
                        break
                    best = max(best, est.output_tok_s)
            key = frozenset(chain)
            best_chain[key] = max(best_chain.get(key, 0.0), best)
    everything = frozenset(range(len(devices)))
    memo = {frozenset(): 0.0}

    def best_set(s: frozenset) -> float:  # devices in s split into chains (or left idle)
        if s not in memo:
            first = min(s)
            rest = s - {first}
            val = best_set(rest)  # the first device idle
            for size in range(len(rest) + 1):
                for others in itertools.combinations(sorted(rest), size):
                    chain = frozenset((first, *others))
                    val = max(val, best_chain.get(chain, 0.0) + best_set(s - chain))
            memo[s] = val
        return memo[s]

    return best_set(everything)


@pytest.fixture(scope="module")
def tiny():
    return capture(str(FIXTURES / "tiny-llama"), dtype="fp32")


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
    for name, b in run_baselines(tiny.units, cluster, wl, "throughput").items():
        assert b["output_tok_s"] < want * 0.999, name


def test_bound_is_above_every_plan_the_solver_sees(tmp_path, tiny):
    cluster = _cluster(tmp_path, "1 MB", "3 MB", a_count=3)
    wl = Workload(32, 16, "fp32", "fp32", prefill_chunk=32)
    sol = solve(tiny.units, cluster, wl, disaggregate="off")
    assert sol.bound >= sol.output_tok_s * (1 - 1e-9)
    assert math.isfinite(sol.bound)
