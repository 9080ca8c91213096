"""The latency and cost objectives' bounds against brute force on tiny instances: every ordered
chain of devices and tensor-parallel groups, every split, every integer batch
(tests/brute_force.py). A bound that some pipeline beats is wrong. (Latency: the objective's
bound is a TPOT floor, one token through every unit on its fastest device alone.)"""

import pytest

from hetc.partitioner.batches import batch_ceiling
from hetc.partitioner.planner import _bound
from hetc.partitioner.simulate import Workload
from hetc.scheduling import Objective
from tests.brute_force import options
from tests.conftest import two_type_cluster

WL = Workload(32, 16, "fp32", "fp32", prefill_chunk=32)


@pytest.mark.parametrize("tp", [False, True])
def test_latency_bound_is_below_every_pipelines_tpot(tmp_path, tiny, tp):
    cluster = two_type_cluster(tmp_path, "0.6 MB", "2 MB")
    best = min(o.estimate.tpot_s for o in options(tiny.units, cluster, WL, tp=tp))
    bound_ms = _bound(tiny, cluster, WL, None, Objective.LATENCY, "auto" if tp else "1", batch_ceiling(tiny.units, cluster, WL))
    assert bound_ms <= best * 1e3 * (1 + 1e-9)


@pytest.mark.parametrize("tp", [False, True])
def test_cost_bound_is_below_every_pipelines_usd_per_token(tmp_path, tiny, tp):
    """A plan's USD per token is its pipelines' USD/h over their tok/s: at least its best pipeline's."""
    cluster = two_type_cluster(tmp_path, "0.6 MB", "2 MB")
    best = min(o.usd_h(cluster) / 3600 / o.estimate.output_tok_s * 1e6 for o in options(tiny.units, cluster, WL, tp=tp))
    bound = _bound(tiny, cluster, WL, None, Objective.COST, "auto" if tp else "1", batch_ceiling(tiny.units, cluster, WL))
    assert 0 < bound <= best * (1 + 1e-9)  # valid; loose (0.41× the best here: the LP counts no devices)
