"""The loop DP's min-plus step over a stage's valid starts (loop_dp.py): windows [lo_j, j) whose ends
do not fall, each read off a table of power-of-two spans, so a step costs states × units × log(units),
not states × units² (gen22's 8-stage chain of 19 devices: 19.5 → 1.25 CPU s, the same round)."""

import numpy as np

from hetc.partitioner.bounds import loop_dp
from hetc.partitioner.bounds.cells import CountSpace
from hetc.partitioner.bounds.stage_costs import StageCosts
from hetc.partitioner.estimate.simulate import Workload
from hetc.partitioner.estimate.tables import Tables, kinds_of
from hetc.scheduling import Phase
from tests.conftest import two_type_cluster


def test_window_minimum_matches_a_scan():
    """Every window of a random nondecreasing `reach` (and one that falls: its running maximum, a
    superset of starts) against the minimum over the starts that reach each end."""
    rng = np.random.default_rng(7)
    for U in (1, 2, 5, 17, 64):
        for falls in (False, True):
            reach = np.maximum(np.arange(U), np.sort(rng.integers(0, U + 1, U)) if not falls else rng.integers(0, U + 1, U))
            val = rng.normal(size=(3, U))
            val[0, rng.integers(0, U)] = np.inf
            ends, lo, level = loop_dp._windows(reach, U)
            got = loop_dp._window_min(val, ends, lo, level)
            top = np.maximum.accumulate(reach)
            for k, j in enumerate(ends):
                starts = [i for i in range(j) if top[i] >= j]
                assert starts and lo[k] == starts[0]
                np.testing.assert_array_equal(got[:, k], val[:, starts].min(axis=1))
            assert set(ends) == {j for j in range(1, U + 1) if any(top[i] >= j for i in range(j))}


def test_least_sum_work_grows_with_units_times_their_log(tmp_path, tiny):
    """The work least_sum reports (its cost, charged to the refinement budget) is at most states ×
    units × (log2 units + 2) per step and kind, where the scan over every start was units² (fails
    on the scan: 3 stages of the tiny model cost it more)."""
    cluster = two_type_cluster(tmp_path, "0.8 MB", "2 MB", a_count=3)
    costs = StageCosts(Tables(tiny.units, Workload(32, 16, "fp32", "fp32", prefill_chunk=32)), kinds_of(cluster), cluster)
    case = costs.case(Phase.BOTH, 4, 3)
    kinds = [g for g in range(len(costs.kinds)) if np.isfinite(case.P[g, -1])]
    counts = costs.devices
    f, work = loop_dp.least_sum(costs, case, float(case.P[:, -1][np.isfinite(case.P[:, -1])].max()), counts, 3, kinds)
    U, states = costs.u, len(CountSpace(counts))
    assert np.isfinite(f) and 0 < work <= 2 * len(costs.types) * len(kinds) * states * U * (np.log2(U) + 2)
    assert work < 2 * states * U * (U + 1)
