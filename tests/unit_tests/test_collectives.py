"""Measured all-reduce on a named link (cost_models/collectives.py, links.allreduce_time): AMD's
rccl-tests figures at 8 ranks, the bound's monotonicity, other links untouched."""

import math

import pytest

from hetc.cluster import Node, load_profile, resolve_link
from hetc.partitioner.cost_models.analytic import Step, units_time
from hetc.partitioner.cost_models.collectives import MEASURED_ALLREDUCE, MeasuredAllReduce
from hetc.partitioner.cost_models.links import allreduce_time
from hetc.partitioner.estimate.simulate import Workload, stage_time

MIB = 2**20
XGMI = resolve_link("infinity-fabric", "test", "link")


def _alpha_beta(nbytes: float, tp: int, link) -> float:
    """The α–β model as links.py documents it, written out independently."""
    share = 2 * (tp - 1) / tp * nbytes
    if link.scope == "per_peer":
        return share / (link.bandwidth * (tp - 1)) + 2 * link.latency
    return share / link.bandwidth + 2 * (tp - 1) * link.latency


@pytest.mark.parametrize(
    "nbytes, graphs, us",
    [
        (16 * MIB, False, 148.8),
        (64 * MIB, False, 429.1),
        (1024 * MIB, False, 5970.6),
        (4 * MIB, False, 51.72),
        (MIB, True, 19.40),
        (16 * MIB, True, 149.1),
        (64 * 1024, True, 9.14),
    ],
)
def test_eight_mi300x_all_reduce_is_amds_rccl_tests_figure(nbytes, graphs, us):
    """At the measured sizes the time is the blog's out-of-place figure (eager: plain run; graph: -G 1)."""
    assert allreduce_time(nbytes, 8, XGMI, graphs=graphs) == pytest.approx(us * 1e-6, rel=1e-9)


def test_between_sizes_the_time_lies_between_its_neighbours_and_beyond_the_largest_bandwidth_holds():
    t = allreduce_time(24 * MIB, 8, XGMI)
    assert 148.8e-6 < t < 244.1e-6
    assert allreduce_time(32 * 2**30, 8, XGMI) == pytest.approx(2 * 94254e-6)
    # below the measured range: the smallest message's time (after the padding envelope: 13.09 µs eager)
    assert allreduce_time(1, 8, XGMI) == pytest.approx(13.09e-6)


def test_the_measurement_is_slower_than_the_links_nominal_bandwidth():
    """What the change is for: RCCL takes 3.4× the α–β time of seven 64 GB/s links at 1 MiB, 2.1× at
    16 MiB, 1.4× at 4 GiB — and never less."""
    ratios = [allreduce_time(mib * MIB, 8, XGMI) / _alpha_beta(mib * MIB, 8, XGMI) for mib in (1, 4, 16, 64, 256, 4096)]
    assert ratios == sorted(ratios, reverse=True)
    assert 3.3 < ratios[0] < 3.5 and 2.0 < ratios[2] < 2.2 and 1.35 < ratios[-1] < 1.45


@pytest.mark.parametrize("tp", [2, 4, 8])
@pytest.mark.parametrize("graphs", [False, True])
def test_time_never_falls_and_time_per_byte_never_rises_with_the_message(tp, graphs):
    """The solver's batch intervals need a step's cost per sequence never to grow with the batch."""
    sizes = [2 ** (k / 8) for k in range(0, 8 * 36)]  # 1 B … 64 GiB, 8 points per octave
    t = [allreduce_time(s, tp, XGMI, graphs=graphs) for s in sizes]
    assert all(b >= a * (1 - 1e-12) for a, b in zip(t, t[1:]))
    per_byte = [x / s for x, s in zip(t, sizes)]
    assert all(b <= a * (1 + 1e-12) for a, b in zip(per_byte, per_byte[1:]))


@pytest.mark.parametrize("tp", [2, 4])
def test_a_smaller_group_adds_what_its_fewer_links_cost(tp):
    for nbytes in (4096.0, 3 * MIB, 40 * MIB):
        extra = _alpha_beta(nbytes, tp, XGMI) - _alpha_beta(nbytes, 8, XGMI)
        assert allreduce_time(nbytes, tp, XGMI) == pytest.approx(allreduce_time(nbytes, 8, XGMI) + extra)
        assert extra > 0


@pytest.mark.parametrize("name, tp", [("nvlink4", 8), ("nvlink4", 2), ("gaudi2-roce", 8), ("nvlink5", 4)])
def test_links_without_a_measurement_keep_the_alpha_beta_model(name, tp):
    link = resolve_link(name, "test", "link")
    assert name not in MEASURED_ALLREDUCE
    for nbytes in (1024.0, 26 * MIB):
        for graphs in (False, True):
            assert allreduce_time(nbytes, tp, link, graphs=graphs) == pytest.approx(_alpha_beta(nbytes, tp, link))
    assert allreduce_time(26 * MIB, 1, link) == 0.0


def test_an_inline_link_of_the_same_figures_has_no_measurement():
    inline = resolve_link({"bandwidth": "64 GB/s", "latency": "2 us", "scope": "per_peer"}, "test", "link")
    assert allreduce_time(26 * MIB, 8, inline) == pytest.approx(_alpha_beta(26 * MIB, 8, inline))


def test_a_table_whose_time_per_byte_rises_is_refused():
    with pytest.raises(ValueError, match="time per byte"):
        MeasuredAllReduce(8, (1024.0, 2048.0, 4096.0), (10.0, 10.0, 40.0), (10.0, 10.0, 20.0), "test")


def test_stage_time_reads_the_graph_series_on_replayed_decode_steps(tiny):
    """A decode-only step on ROCm is replayed (graphs: decode): its all-reduces cost the -G 1 figures;
    a step with prompt tokens runs eager."""
    node = Node("a", load_profile("mi300x"), 8, XGMI)
    wl = Workload(64, 16, "fp32", "fp32")
    with_params = [u for u in tiny.units if u.params]
    for step, graphs in ((Step(4, 4, 70.0), True), (Step(64, 1, 32.0), False)):
        assert node.profile.execution.replays(step.decode_only) is graphs
        device = units_time(tiny.units, node.profile, step, dtype="fp32", kv_dtype="fp32", tp=8)
        want = sum(MEASURED_ALLREDUCE["infinity-fabric"].time(step.total_tokens * u.out_bytes_per_token, graphs) for u in with_params)
        assert stage_time(tiny.units, node, 8, step, wl) - device == pytest.approx(want, rel=1e-9)
        assert not math.isclose(
            want, sum(MEASURED_ALLREDUCE["infinity-fabric"].time(step.total_tokens * u.out_bytes_per_token, not graphs) for u in with_params)
        )
