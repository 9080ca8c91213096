"""`--warmup`/`--cooldown` (capacity/window.py): a closed loop's opening burst left out of the
figures, checked against the closed form of a closed loop with one seat, and the window's parsing."""

from __future__ import annotations

import numpy as np
import pytest

from hetc.capacity.evaluate import model_of
from hetc.capacity.lanes import lanes_of
from hetc.capacity.load import LengthDist, Load
from hetc.capacity.metrics import serving_metrics
from hetc.capacity.simulator import simulate
from hetc.capacity.window import Trim, Window
from hetc.cluster import Cluster
from hetc.errors import BadInput
from hetc.partitioner.estimate.simulate import Workload
from hetc.partitioner.planner import PlanRequest, make_plan
from hetc.requests import ServeLimits
from tests.conftest import FIXTURES, two_type_cluster


@pytest.fixture(scope="module")
def lanes(tmp_path_factory):
    """One fast device serving the tiny Llama (32-token prompts, 16 tokens out)."""
    d = tmp_path_factory.mktemp("window")
    two_type_cluster(d, "2 MB", "4 MB", a_count=1)
    plan = make_plan(
        PlanRequest(model=str(FIXTURES / "tiny-llama"), profiles=str(d / "c.yaml"), dtype="fp32", input_len=32, output_len=16, tp="1", placement="a:0", batch=8)
    )
    cluster = Cluster.from_json(plan.cluster)
    wl = Workload(32, 16, plan.model.dtype, plan.model.kv_dtype)
    return lanes_of(plan, model_of(plan, "plan.json").units, cluster, wl), cluster


def _closed(clients: int, n: int) -> Load:
    return Load.closed(clients, n, LengthDist.parse("32", "t"), LengthDist.parse("16", "t"))


def _ttft(o) -> np.ndarray:
    return np.array([r.token_times[0] - r.arrival for r in o.requests])


def test_one_seat_closed_loop_matches_its_closed_form(lanes):
    """C clients, one sequence served at a time: a cyclic queue with a deterministic service time T
    (a request's whole run, admission to last token) and t₁ from admission to its first token. The
    opening burst's k-th request waits k·T, so its TTFT is k·T + t₁ (mean (C−1)·T/2 + t₁); from then
    on every request comes back behind the other C−1 clients: TTFT = (C−1)·T + t₁ exactly. T and t₁
    are one lone client's. `--warmup C` reports the steady state; the whole run's mean does not."""
    sim_lanes, cluster = lanes
    one_seat = ServeLimits(max_num_seqs=1)
    lone = simulate(sim_lanes, cluster, _closed(1, 3), one_seat).requests
    period, first = lone[1].arrival - lone[0].arrival, lone[1].token_times[0] - lone[1].arrival
    c, n = 6, 60
    o = simulate(sim_lanes, cluster, _closed(c, n), one_seat)
    steady = (c - 1) * period + first
    np.testing.assert_allclose(_ttft(o), [k * period + first if k < c else steady for k in range(n)], rtol=1e-9)
    m = serving_metrics(o, window=Window(Trim(requests=c)))
    assert m["completed"] == n - c
    assert m["mean_ttft_ms"] == pytest.approx(steady * 1e3, rel=1e-9)
    whole = serving_metrics(o)["mean_ttft_ms"]
    assert whole == pytest.approx((c * (c - 1) / 2 * period + c * first + (n - c) * steady) / n * 1e3, rel=1e-9)
    assert whole < 0.96 * m["mean_ttft_ms"]


def test_warmup_leaves_out_the_opening_burst(lanes):
    """Continuous batching with chunked prefill (32-token budget, 8 clients): the burst's prompts
    queue behind each other, so its TTFTs climb; afterwards the clients arrive staggered and the
    loop repeats with period C. The window keeps exactly the requests after the burst (and before
    the drain), its mean TTFT is that periodic steady state's, and the whole run's is higher."""
    sim_lanes, cluster = lanes
    c, n = 8, 96
    o = simulate(sim_lanes, cluster, _closed(c, n), ServeLimits(max_num_seqs=c, max_batched_tokens=32))
    ttft = _ttft(o)
    np.testing.assert_allclose(ttft[c : n - 2 * c], ttft[2 * c : n - c], rtol=1e-9)  # periodic after the burst
    assert ttft[:c].mean() > 1.3 * ttft[c : 2 * c].mean()
    m = serving_metrics(o, window=Window(Trim(requests=c), Trim(requests=c)))
    assert m["completed"] == n - 2 * c
    assert m["mean_ttft_ms"] == pytest.approx(ttft[c : 2 * c].mean() * 1e3, rel=1e-9)
    kept = o.requests[c : n - c]
    assert m["duration_s"] == pytest.approx(max(r.token_times[-1] for r in kept) - kept[0].arrival)
    assert m["output_throughput"] == pytest.approx(16 * (n - 2 * c) / m["duration_s"])
    assert serving_metrics(o)["mean_ttft_ms"] > 1.02 * m["mean_ttft_ms"]


def test_no_window_is_the_whole_run_and_seconds_count_from_the_ends(lanes):
    sim_lanes, cluster = lanes
    o = simulate(sim_lanes, cluster, _closed(4, 40))
    whole = serving_metrics(o)
    assert whole == serving_metrics(o, window=Window.parse(None, "0"))
    assert whole["completed"] == 40
    assert whole["duration_s"] == pytest.approx(max(r.token_times[-1] for r in o.requests))
    arrivals = np.array([r.arrival for r in o.requests])
    t = float(np.median(arrivals))
    m = serving_metrics(o, window=Window.parse(f"{t}s", None))
    assert m["completed"] == int((arrivals >= t).sum())
    end = max(r.token_times[-1] for r in o.requests)
    m = serving_metrics(o, window=Window.parse(None, f"{end - t}s"))
    assert m["completed"] == int((arrivals <= t).sum())


@pytest.mark.parametrize(
    "text, want",
    [("64", Trim(requests=64)), ("2.5s", Trim(seconds=2.5)), ("10%", Trim(share=0.1)), (None, Trim()), ("0", Trim())],
)
def test_trim_parses_requests_seconds_and_shares(text, want):
    assert Trim.parse(text, "--warmup") == want


@pytest.mark.parametrize("text", ["ten", "-1", "100%", "-2s", "nans"])
def test_bad_trim_names_the_flag(text):
    with pytest.raises(BadInput) as e:
        Trim.parse(text, "--cooldown")
    assert e.value.field == "--cooldown"


def test_a_window_of_no_request_is_bad_input():
    with pytest.raises(BadInput) as e:
        Window.parse("50%", "50%").check(10)
    assert e.value.field == "--warmup"
    Window.parse("40%", "50%").check(10)
