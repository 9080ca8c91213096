"""What the latency bound rests on (latency_bound.py): every step of every round — any batch,
pipeline length, prompt chunks beside decode tokens — costs each unit at least one decode step
of one sequence (latency_bound.least_step) in the profile made flat (envelope.flat_node), on every catalog profile and a
fitted one whose curves fall; and the profile's own one-sequence step is no such floor."""

import numpy as np
import pytest

from hetc.cluster import Cluster, Node, load_profile, profile_names, resolve_link
from hetc.partitioner.capture.capture import capture
from hetc.partitioner.cost_models.envelope import flat_node
from hetc.partitioner.bounds.latency_bound import _Ranges, _Seats, _seat_intervals, _seats, _times, least_step
from hetc.partitioner.estimate.simulate import Round, Workload, stage_time, unit_round_costs
from hetc.partitioner.estimate.tables import Tables, kinds_of
from hetc.scheduling import Phase
from tests.conftest import FIXTURES, falling_cluster

BATCHES = list(range(1, 70)) + [127, 128, 129, 200, 511, 512, 513, 3000]
WORKLOADS = [Workload(96, 40, "bf16", "bf16", prefill_chunk=64), Workload(1024, 256, "bf16", "bf16"), Workload(8, 300, "bf16", "bf16", prefill_chunk=16)]


@pytest.fixture(scope="module")
def tiny():
    return capture(str(FIXTURES / "tiny-llama"), dtype="bf16")


def _least_ratio(units, node, tp, wl, flat: bool = True) -> float:
    """min over units, steps of rounds, of (the step's time) / (latency_bound's least step's, flat)."""
    ((_, one),) = least_step(wl).steps
    floor = [stage_time([u], flat_node(node) if flat else node, tp, one, wl) for u in units]
    least = float("inf")
    for n in (1, 2, 3, 8):
        for b in BATCHES:
            for _, step in Round.of(wl, b, min(n, b)).steps + Round.of(wl, b, min(n, b), Phase.DECODE).steps:
                least = min(least, min(stage_time([u], node, tp, step, wl) / f for u, f in zip(units, floor)))
    return least


@pytest.mark.parametrize("name", profile_names())
@pytest.mark.parametrize("wl", WORKLOADS)
def test_no_step_costs_less_than_the_flat_one_sequence_decode_step(tiny, name, wl):
    node = Node("a", load_profile(name), 8, resolve_link("nvlink4", "test", "link"))
    for tp in (1, 4):
        assert _least_ratio(tiny.units, node, tp, wl) >= 1 - 1e-12, (name, tp)


def test_a_fitted_profile_whose_curves_fall_too(tmp_path):
    tiny32 = capture(str(FIXTURES / "tiny-llama"), dtype="fp32")
    node = falling_cluster(tmp_path).nodes[0]
    assert _least_ratio(tiny32.units, node, 1, Workload(32, 16, "fp32", "fp32", prefill_chunk=32)) >= 1 - 1e-12


def test_the_profiles_own_one_sequence_step_is_no_floor(tiny):
    """Why the flat profile: on H100's own GEMM curve some step of more sequences costs less."""
    node = Node("a", load_profile("h100-sxm"), 8, resolve_link("nvlink4", "test", "link"))
    assert _least_ratio(tiny.units, node, 1, WORKLOADS[0], flat=False) < 0.99


@pytest.mark.parametrize("name", profile_names())
@pytest.mark.parametrize("wl", WORKLOADS)
def test_the_floor_bounds_seats_intervals_hold_every_mean_micro_step(tiny, name, wl):
    """What tpot_floor_bound rests on: for s seats per micro-step in an interval (lo, hi], a
    stage's mean micro-step in the profile itself (busy per round / passes, simulate.Round.of) is
    at least the interval's least (the flat profile's at lo, lo/hi of the envelope's at hi), here
    for the whole model on one stage, at fine steps of s through the first 120 intervals and every
    tenth after."""
    node = Node("a", load_profile(name), 8, resolve_link("nvlink4", "test", "link"))
    cluster = Cluster(name="c", nodes=[node], network=None)
    tables = Tables(tiny.units, wl)
    u = len(tiny.units)
    ranges = _Ranges.of(tables)
    intervals = _seat_intervals(wl, 4096)
    for lo, hi in intervals[:120] + intervals[120::10]:
        for g in kinds_of(cluster, (1, 4)):
            least = _seats(*_times(tables, [g], ranges, lo, hi), ranges, lo, hi).least[0]
            assert np.isfinite(least[u])
            for s in np.linspace(lo, hi, 6)[1:] if lo > 1 else np.linspace(1, hi, 6):
                r = Round.of(wl, float(s), 1)
                cost, over = unit_round_costs(tiny.units, node, g.tp, wl, r)
                assert (sum(cost) + over) * r.tpot_share >= least[u] * (1 - 1e-9), (g.name, lo, hi, s)


def _unrepresented(seats: _Seats, t: float) -> list[tuple[int, int]]:
    """(kind, k) of the stages ready at t (some pipeline through them within t) that no LP column
    usable at t stands for (a column of k' units stands for k units where a'/k' ≤ a/k)."""
    cols = [(g, a / k) for g, k, a, ready in seats.stages() if ready <= t]
    return [
        (g, k)
        for g, (least, ready) in enumerate(zip(seats.least, seats.ready))
        for k in range(1, len(least))
        if ready[k] <= t and not any(h == g and per <= least[k] / k * (1 + 1e-12) for h, per in cols)
    ]


def test_every_stage_ready_at_t_has_a_usable_column():
    """The LP's columns (_Seats.stages) relax every stage some pipeline within T can use. A stage
    of one unit (a 5, ready 5) beside one of two (a 6, per unit 3): at T = 5.5 only the first is
    ready — a column kept for the lower convex hull with the origin (the two-unit stage alone) and
    usable where its own a ≤ T (the rule before) leaves it out; and on random figures."""
    inf = np.inf
    two = _Seats(1.0, 1.02, 1.0, [np.array([inf, 5.0, 6.0])], [np.array([inf, 5.0, 6.0])])
    assert _unrepresented(two, 5.5) == []
    assert [(k, t) for _, k, _, t in two.stages()] == [(1, 5.0), (2, 6.0)]
    rng = np.random.default_rng(0)
    for _ in range(300):
        u = int(rng.integers(2, 30))
        least = np.concatenate([[inf], np.cumsum(rng.uniform(0.1, 2.0, u)) + rng.uniform(0, 3)])
        least[rng.random(u + 1) < 0.1] = inf  # ranges that fit no device
        ready = least + rng.uniform(0, 5, u + 1) * (rng.random(u + 1) < 0.7)
        seats = _Seats(1.0, 1.02, 1.0, [least], [ready])
        for t in np.quantile(ready[np.isfinite(ready)], [0.1, 0.3, 0.5, 0.8, 1.0]) if np.isfinite(ready).any() else []:
            assert _unrepresented(seats, float(t)) == []
