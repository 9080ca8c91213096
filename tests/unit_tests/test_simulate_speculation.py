"""Speculative rounds in the serving simulator (capacity/speculation.py): the measured mean tokens
per round matches hetc/speculation.expected_tokens_per_round within sampling error, a trace of
accepted counts is replayed, each round is priced as a step of K+1 positions, and `hetc evaluate`
reports acceptance, tokens per round and the run without speculation."""

import math

import numpy as np
import pytest

from hetc.capacity.evaluate import NO_SPEC, evaluate_plan, model_of
from hetc.capacity.lanes import lanes_of, step_of
from hetc.capacity.load import LengthDist, Load
from hetc.capacity.metrics import serving_metrics
from hetc.capacity.simulator import simulate
from hetc.capacity.speculation import SimSpeculation, sim_speculation
from hetc.cluster import Cluster
from hetc.partitioner.estimate.simulate import Workload
from hetc.partitioner.planner import PlanRequest, make_plan
from hetc.plan import Speculation
from hetc.spec_rounds import SpecConfig
from hetc.speculation import AcceptanceSource, SpeculationMethod, expected_tokens_per_round
from tests.conftest import FIXTURES, two_type_cluster

MODEL = str(FIXTURES / "tiny-llama")


@pytest.fixture(scope="module")
def plan(tmp_path_factory):
    d = tmp_path_factory.mktemp("simspec")
    two_type_cluster(d, "2 MB", "4 MB", a_count=2)
    kw = dict(model=MODEL, profiles=str(d / "c.yaml"), dtype="fp32", input_len=32, output_len=16, time_limit=2, tp="1")
    return make_plan(PlanRequest(**kw, placement="a:0", batch=8))


def _lanes(plan):
    model = model_of(plan, "plan.json")
    wl = Workload(plan.workload.input_len, plan.workload.output_len, plan.model.dtype, plan.model.kv_dtype)
    cluster = Cluster.from_json(plan.cluster)
    return lanes_of(plan, model.units, cluster, wl), cluster


def _load(n: int, out: int) -> Load:
    return Load.closed(4, n, LengthDist.parse("32", "t"), LengthDist.parse(str(out), "t"))


@pytest.mark.parametrize("alpha,k", [(0.3, 2), (0.7, 4), (0.9, 3)])
def test_measured_tokens_per_round_match_the_acceptance_formula(plan, alpha, k):
    lanes, cluster = _lanes(plan)
    spec = SimSpeculation(SpecConfig(SpeculationMethod.NGRAM, k), alpha=alpha, seed=3)
    o = simulate(lanes, cluster, _load(24, 400), spec=spec)
    assert all(r.done and len(r.token_times) == 400 for r in o.requests)
    want = expected_tokens_per_round(alpha, k)
    # per-round tokens: 1 + a, a truncated geometric; its variance from the same distribution
    p = [(1 - alpha) * alpha**a if a < k else alpha**k for a in range(k + 1)]
    var = sum(pa * (1 + a - want) ** 2 for a, pa in enumerate(p))
    got = (o.spec_accepted + o.spec_rounds) / o.spec_rounds
    # rounds near a request's end propose fewer than K: at most one per request
    assert abs(got - want) < 4 * math.sqrt(var / o.spec_rounds) + 24 / o.spec_rounds
    assert o.spec_drafted <= k * o.spec_rounds and o.spec_accepted / o.spec_drafted == pytest.approx(serving_metrics(o)["spec_acceptance"])


@pytest.mark.parametrize("rate", [0.2, 0.6])
def test_a_proposal_rate_leaves_the_other_steps_single_tokens(plan, rate):
    lanes, cluster = _lanes(plan)
    spec = SimSpeculation(SpecConfig(SpeculationMethod.NGRAM, 3), alpha=0.8, proposal_rate=rate, seed=5)
    o = simulate(lanes, cluster, _load(24, 200), spec=spec)
    assert all(r.done and len(r.token_times) == 200 for r in o.requests)
    got = o.spec_rounds / o.spec_steps  # binomial: rounds among the steps that asked
    assert abs(got - rate) < 4 * math.sqrt(rate * (1 - rate) / o.spec_steps)
    assert serving_metrics(o)["spec_proposal_rate"] == pytest.approx(got)
    # a step that asked gains one token and its accepted proposals; the first token is the prefill's, and a
    # sequence's last has no room for a proposal
    assert 24 * 198 - o.preemptions - 24 <= o.spec_steps + o.spec_accepted <= 24 * 198


def test_a_trace_of_accepted_counts_is_replayed(plan):
    lanes, cluster = _lanes(plan)
    spec = SimSpeculation(SpecConfig(SpeculationMethod.NGRAM, 3), trace=(3, 0, 1, 5))  # 5 is capped at K
    o = simulate(lanes, cluster, Load.closed(1, 1, LengthDist.parse("32", "t"), LengthDist.parse("200", "t")), spec=spec)
    rounds = o.spec_rounds
    full, rest = divmod(rounds - 1, 4)  # the last round may be short of K
    assert o.spec_accepted >= full * 7
    assert serving_metrics(o)["spec_tokens_per_round"] == pytest.approx((o.spec_accepted + rounds) / rounds)


def test_all_accepted_rounds_are_faster_and_nothing_accepted_is_slower(plan):
    lanes, cluster = _lanes(plan)
    load = _load(16, 64)
    base = serving_metrics(simulate(lanes, cluster, load))
    hi = serving_metrics(simulate(lanes, cluster, load, spec=SimSpeculation(SpecConfig(SpeculationMethod.NGRAM, 4), alpha=1.0)))
    lo = serving_metrics(simulate(lanes, cluster, load, spec=SimSpeculation(SpecConfig(SpeculationMethod.NGRAM, 4), alpha=0.0)))
    assert 4.5 < hi["spec_tokens_per_round"] <= 5 and lo["spec_tokens_per_round"] == 1  # a request's last round may propose fewer than K
    assert hi["median_tpot_ms"] < base["median_tpot_ms"] < lo["median_tpot_ms"]


def test_a_round_is_priced_as_k_plus_one_positions(plan):
    from hetc.batching import BatchItem, MicroBatch
    from hetc.sequence import SamplingParams, Sequence

    seq = Sequence(0, list(range(40)), 39, SamplingParams())
    shape = step_of(MicroBatch(0, [BatchItem(seq, 39, 4, True, draft=[1, 2, 3])]))
    assert (shape.step.tokens, shape.sampled, shape.tokens) == (4, 4, 4)


def test_evaluate_reports_acceptance_tokens_per_round_and_the_run_without(plan):
    spec = Speculation(
        method=SpeculationMethod.NGRAM,
        num_speculative_tokens=3,
        acceptance=0.6,
        acceptance_source=AcceptanceSource.GIVEN,
        acceptance_from="--acceptance",
        expected_tokens_per_round=expected_tokens_per_round(0.6, 3),
    )
    p = plan.model_copy(update={"speculation": spec})
    assert sim_speculation(plan) is None and sim_speculation(p).alpha == 0.6
    m = evaluate_plan(p, "plan.json", _load(12, 48)).metrics
    assert m["spec_expected_tokens_per_round"] == pytest.approx(2.176)
    # accepted over drafted is E[a] / K = α(1 − α^K) / ((1 − α) K) for full rounds, the per-token estimate α
    assert m["spec_acceptance"] == pytest.approx(0.6 * (1 - 0.6**3) / 0.4 / 3, abs=0.06)
    assert m["spec_alpha"] == pytest.approx(0.6, abs=0.06) and m[f"{NO_SPEC}output_throughput"] > 0
    assert m["speculation_gain"] == pytest.approx(m["output_throughput"] / m[f"{NO_SPEC}output_throughput"])
    assert np.isfinite(m["median_tpot_ms"])
