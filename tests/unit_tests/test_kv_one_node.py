"""A prefill pool's KV route inside a node counts only where every decode pool starts in that node
(kv_routes.feed_caps caps a pool at its slowest route to any decode pool): one node, so one type t
for the whole plan, and under t's route only decode pools holding t count (kv_feed.route_caps'
`admit`). Before, a decode pool holding t opened t's route for every prefill pool ending on t while
the other decode pools lay elsewhere (gen37 of the generated clusters: MI325X prefill pools fed
MI250X decode pools at Infinity Fabric's rate, bound 303,410 against 296,531 now, plan 294,238)."""

from __future__ import annotations

import numpy as np
import pytest

from hetc.cluster import TP_SIZES
from hetc.partitioner.bounds import kv_feed
from hetc.partitioner.bounds.cell_bound import cell_bound
from hetc.partitioner.bounds.cells import CountSpace
from hetc.partitioner.bounds.stage_costs import StageCosts
from hetc.partitioner.estimate.simulate import Workload
from hetc.partitioner.estimate.tables import Tables, kinds_of
from hetc.scheduling import Phase
from tests.fixtures.fleets import write_cluster
from tests.brute_force import optimum_with_kv

WL = Workload(32, 16, "fp32", "fp32", prefill_chunk=32)


@pytest.fixture
def slow(tmp_path, tiny):
    """Two fast devices in one PCIe node, two big ones alone, on a 1 Mbit/s network: a prompt's KV
    crosses the network far slower than the node's PCIe."""
    devices = {"fast": ("nvidia", "cuda", "16 GB", "40 GB/s", "4 TFLOP/s"), "big": ("nvidia", "cuda", "16 GB", "30 GB/s", "3 TFLOP/s")}
    nodes = (
        "  - {name: a, device: ./fast.yaml, count: 2, link: pcie4}\n  - {name: b, device: ./big.yaml, count: 1}\n  - {name: c, device: ./big.yaml, count: 1}\n"
    )
    cluster = write_cluster(tmp_path, nodes, engine=None, devices=devices, network="{bandwidth: 1 Mbit/s, latency: 10 us}")
    return cluster, StageCosts(Tables(tiny.units, WL), kinds_of(cluster, TP_SIZES), cluster)


def test_a_set_of_routes_per_type_decode_pools_start_on_and_one_for_several(slow):
    _, costs = slow
    space = CountSpace(costs.devices)
    fast = next(t for t, key in enumerate(costs.types) if key[0] == "fast")
    big = 1 - fast
    caps, admit, feeds = kv_feed.route_caps(costs, space)
    assert len(caps) == 3  # decode pools starting on the fast type, on the big one, on both
    assert (admit[fast] == (space.cells[:, fast] > 0)).all() and (admit[big] == (space.cells[:, big] > 0)).all() and admit[2].all()
    assert feeds[fast][fast] == costs.feed_inside[fast] > costs.feed_across[fast]  # inside the fast node
    assert feeds[big][fast] == costs.feed_to[fast, big] and feeds[2][fast] == costs.feed_across[fast]  # the network


def test_the_bound_holds_and_no_longer_feeds_other_types_decode_pools_inside_a_node(slow, tiny, monkeypatch):
    cluster, costs = slow
    phases = (Phase.PREFILL, Phase.DECODE)
    args = (Tables(tiny.units, WL), kinds_of(cluster, TP_SIZES), cluster, 4, 64)
    got = cell_bound(*args, phases=phases).value
    opt = optimum_with_kv(tiny.units, cluster, WL, 64, phases)
    assert 0 < opt <= got * (1 + 1e-9)
    route_caps = kv_feed.route_caps

    def any_decode(costs, space):  # every decode cell opens every set: the relaxation before
        caps, admit, feeds = route_caps(costs, space)
        return caps, np.ones_like(admit), feeds

    monkeypatch.setattr("hetc.partitioner.bounds.cell_bound.route_caps", any_decode)
    assert got < cell_bound(*args, phases=phases).value * (1 - 1e-3)
