"""Speculative decoding in the planner: the verify step's shape, the acceptance a plan reads from a served
run's metrics, and the solver and its bounds against brute force over a draft + target chain."""

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hetc.partitioner.bounds.latency_bound import tpot_bound, tpot_floor_bound
from hetc.partitioner.capture.capture import capture
from hetc.partitioner.capture.draft import DRAFT_PREFIX, TOKEN_ID_BYTES, draft_chain, target_part
from hetc.partitioner.cost_models.analytic import Step
from hetc.partitioner.estimate.simulate import Round, Workload, draft_steps, estimate_pipeline
from hetc.partitioner.estimate.tables import Tables, kinds_of
from hetc.partitioner.search.solver import solve
from hetc.partitioner.search.speculate import speculative_workload
from hetc.scheduling import Phase
from hetc.speculation import alpha_from_share, expected_tokens_per_round, expected_tokens_per_step, mean_accepted_share, measured_acceptance
from tests.brute_force import all_devices, best_per_set, options, packings
from tests.conftest import tiny_llama_with_layers
from tests.conftest import two_type_cluster as _cluster

K = 3


@pytest.fixture(scope="module")
def chain(tiny, tmp_path_factory):
    """The tiny model (3 layers) drafted by a one-layer copy of itself."""
    draft = capture(str(tiny_llama_with_layers(tmp_path_factory.mktemp("draft"), 1)), dtype="fp32")
    return draft_chain(draft.units, tiny.units, K)


def _wl(alpha: float = 0.6, input_len: int = 32) -> Workload:
    return speculative_workload(Workload(input_len, 16, "fp32", "fp32", prefill_chunk=32), K, alpha)


def test_the_workload_gains_the_formulas_tokens_per_round():
    for alpha in (0.0, 0.3, 0.8, 1.0):
        assert _wl(alpha).spec_yield == expected_tokens_per_round(alpha, K)
    # n-gram lookup proposing on 30% of the steps: the others gain one token, every step priced as a round
    wl = speculative_workload(Workload(32, 16, "fp32", "fp32"), K, 0.8, proposal_rate=0.3)
    assert (wl.spec_tokens, wl.spec_yield) == (K, pytest.approx(1 + 0.3 * (expected_tokens_per_round(0.8, K) - 1)))
    with pytest.raises(ValueError):
        Workload(32, 16, "fp32", "fp32", spec_tokens=2, spec_yield=3.5)  # more than K + 1 per round


def test_a_verify_step_holds_k_plus_one_rows_per_sequence_and_tpot_divides_by_the_yield():
    wl = _wl()
    step = wl.decode_step(4)
    assert (step.tokens, step.seqs, step.spec) == (4 * (K + 1), 4, K)
    assert step.decode_only  # a uniform query length: replayed as a graph, as vLLM captures it
    r = Round.of(wl, 8, 2, Phase.DECODE)
    assert r.tpot_share == pytest.approx(1 / wl.spec_yield)
    assert all(s.tokens == s.seqs * (K + 1) for _, s in r.steps)


def test_the_drafter_runs_k_single_token_steps_and_prefills_the_prompt_once():
    verify = Step.mixed(6, 100.0, 32, 1, 16.0, spec=K)
    steps = draft_steps(verify)
    assert sum(n for n, _ in steps) == K
    assert steps[0][1].prefill == verify.prefill and steps[0][1].tokens == 6
    assert all(s.tokens == s.seqs == 6 for _, s in steps)
    assert draft_steps(Step(32, 1, 16.0)) == ((1, Step(32, 1, 16.0)),)  # a prompt alone: the drafter prefills it too


def test_the_chain_puts_the_draft_first_with_its_own_weights_and_ids_on_its_cut(chain, tiny):
    d = len(chain) - len(tiny.units)
    assert all(u.draft for u in chain[:d]) and not any(u.draft for u in chain[d:])
    assert [u.index for u in chain] == list(range(len(chain)))
    assert all(name.startswith(DRAFT_PREFIX) for u in chain[:d] for name in u.params)
    assert chain[d - 1].out_bytes_per_token * (K + 1) == pytest.approx(K * TOKEN_ID_BYTES)
    assert target_part(chain, 0, d - 1) is None
    assert target_part(chain, 2, d + 3) == (0, 3)


def test_without_speculation_nothing_changes(tiny):
    wl = Workload(32, 16, "fp32", "fp32", prefill_chunk=32)
    assert wl.decode_step(3) == Step(3, 3, wl.decode_ctx)
    assert wl.decode_steps == 15 and wl.decode_rows == 1


def test_a_speculative_pipeline_at_no_acceptance_is_slower(tmp_path, tiny):
    """α = 0 gains one token per round for K + 1 positions' work: never faster than plain decoding."""
    cluster = _cluster(tmp_path, "2 MB", "4 MB")
    plain = Workload(32, 16, "fp32", "fp32", prefill_chunk=32)
    node = cluster.nodes[0]
    from hetc.partitioner.estimate.simulate import StagePlan

    stages = [StagePlan(node, 0, len(tiny.units) - 1)]
    for batch in (1, 4, 16):
        a = estimate_pipeline(tiny.units, stages, cluster, plain, batch)
        b = estimate_pipeline(tiny.units, stages, cluster, _wl(0.0), batch)
        assert a is not None and b is not None
        assert b.output_tok_s <= a.output_tok_s * (1 + 1e-12)


def _brute(units, cluster, wl, max_num_seqs=None):
    best = best_per_set(options(units, cluster, wl, max_num_seqs=max_num_seqs))
    return packings(best, all_devices(cluster))[frozenset(all_devices(cluster))]


@pytest.mark.parametrize(("a_memory", "b_memory", "alpha"), [("2 MB", "4 MB", 0.7), ("0.6 MB", "2 MB", 0.9), ("0.7 MB", "1.5 MB", 0.4)])
def test_solver_and_bound_against_brute_force(tmp_path, chain, a_memory, b_memory, alpha):
    """Every split of the draft + target chain over the devices (the drafter alone, beside target
    units, or split) and every batch: the solver finds the best, and the bound — which counts the
    drafter's devices and work — is above it."""
    cluster = _cluster(tmp_path, a_memory, b_memory)
    wl = _wl(alpha)
    want = _brute(chain, cluster, wl, max_num_seqs=24)
    assert want > 0
    sol = solve(chain, cluster, wl, tp="1", disaggregate="off", max_num_seqs=24)
    assert sol.bound >= want * (1 - 1e-9)
    assert sol.output_tok_s == pytest.approx(want, rel=1e-6)


@pytest.mark.parametrize(("alpha", "a_memory", "input_len"), [(0.3, "2 MB", 32), (0.8, "2 MB", 32), (0.6, "0.6 MB", 32), (0.7, "2 MB", 80)])
def test_latency_bound_against_brute_force(tmp_path, chain, alpha, a_memory, input_len):
    """No pipeline of the chain, at any batch, has a TPOT below the latency bound."""
    cluster = _cluster(tmp_path, a_memory, "4 MB")
    wl = _wl(alpha, input_len)  # 80: prompts in three chunks, steps of a prompt alone
    least = min(o.estimate.tpot_s for o in options(chain, cluster, wl, max_num_seqs=6))
    tables, kinds = Tables(chain, wl), kinds_of(cluster, (1,))
    one = tpot_bound(tables, kinds, cluster)
    bound = tpot_floor_bound(tables, kinds, cluster, 0.0, 6)  # each interval of seats with its own round
    assert 0 < one <= bound <= least * (1 + 1e-9)


# -------------------------------------------------------------------- acceptance from a served run


@given(st.floats(0, 1), st.integers(1, 16))
def test_alpha_from_share_inverts_the_accepted_share(alpha, k):
    assert alpha_from_share(mean_accepted_share(alpha, k), k) == pytest.approx(alpha, abs=1e-9)


def _metrics(accepted: float, drafted: float, drafts: float | None, steps: float | None = None) -> str:
    rows = [
        "# HELP vllm:spec_decode_num_accepted_tokens_total Accepted tokens.",
        "# TYPE vllm:spec_decode_num_accepted_tokens_total counter",
        f'vllm:spec_decode_num_accepted_tokens_total{{model_name="m",lane="0"}} {accepted / 2}',
        f'vllm:spec_decode_num_accepted_tokens_total{{model_name="m",lane="1"}} {accepted / 2}',
        "# TYPE vllm:spec_decode_num_draft_tokens_total counter",
        f'vllm:spec_decode_num_draft_tokens_total{{model_name="m"}} {drafted}',
    ]
    if drafts is not None:
        rows += ["# TYPE vllm:spec_decode_num_drafts_total counter", f'vllm:spec_decode_num_drafts_total{{model_name="m"}} {drafts}']
    if steps is not None:
        rows += ["# TYPE hetc_spec_decode_steps_total counter", f'hetc_spec_decode_steps_total{{model="m"}} {steps}']
    return "\n".join(rows) + "\n"


def test_measured_acceptance_reads_vllms_counters():
    alpha, k = 0.75, 4
    share = mean_accepted_share(alpha, k)
    m = measured_acceptance(_metrics(share * 4000, 4000, 1000), k=2)  # K from drafts: 4, not the 2 given
    assert (m.k, m.share, m.proposal_rate) == (4, pytest.approx(share), 1.0)  # no steps exported: every step proposed
    assert m.alpha == pytest.approx(alpha, abs=1e-9)
    m = measured_acceptance(_metrics(500, 1000, None), k=1)  # no rounds exported: K as given; at K = 1 α is the share
    assert (m.alpha, m.k) == (pytest.approx(0.5), 1)
    assert measured_acceptance(_metrics(500, 1000, 250, steps=1000), k=4).proposal_rate == pytest.approx(0.25)  # rounds over the steps that asked


@pytest.mark.parametrize("alpha,k", [(0.0, 3), (0.6, 4), (1.0, 2)])
def test_tokens_per_step_mix_rounds_and_single_tokens(alpha, k):
    assert expected_tokens_per_step(alpha, k) == pytest.approx(expected_tokens_per_round(alpha, k))
    # a quarter of the steps are rounds, the rest yield exactly one token
    assert expected_tokens_per_step(alpha, k, 0.25) == pytest.approx(0.25 * expected_tokens_per_round(alpha, k) + 0.75)
    with pytest.raises(ValueError):
        expected_tokens_per_step(alpha, k, 0.0)


@pytest.mark.parametrize("text", ["", _metrics(0, 0, 0), "vllm:spec_decode_num_draft_tokens_total 10\n"])
def test_measured_acceptance_refuses_what_it_cannot_read(text):
    with pytest.raises(ValueError):
        measured_acceptance(text, 4)


def test_expected_tokens_is_finite_everywhere():
    assert all(math.isfinite(expected_tokens_per_round(a / 10, k)) for a in range(11) for k in range(17))
