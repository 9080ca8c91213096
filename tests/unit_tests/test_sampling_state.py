"""The last stage's per-sequence sampling state (runtime/sampling_state.py), against hand
computations of each definition: OpenAI's presence and frequency penalties (over generated
tokens), vLLM's repetition penalty (over prompt and generated tokens), logit_bias, min_tokens;
the frontend's setup/release bookkeeping; log-probabilities of the raw logits."""

import math

import pytest
import torch

from hetc.batching import BatchItem
from hetc.runtime.sampling_state import LaneSampling, SamplingStates, SeqState, decode_logprobs, sample_step
from hetc.runtime.transport import StepMeta
from hetc.sequence import SamplingParams, Sequence

V = 12
PROMPT = [1, 2, 2, 3]
GENERATED = [3, 5, 5, 5, 7]
SETUP = {"n": 0, "hist": [], "pres": 0.0, "freq": 0.0, "rep": 1.0, "bias": [], "min": 0, "stops": []}  # a setup record that changes nothing


def _state(**kw) -> SeqState:
    return SeqState.from_setup({**SETUP, "n": len(PROMPT), "hist": PROMPT + GENERATED, **kw})


def _logits() -> torch.Tensor:
    return torch.linspace(-3, 3, V)  # negative and positive logits, 0 excluded


def _applied(st: SeqState, position: int | None = None) -> list[float]:
    row = _logits()
    st.apply(row, len(PROMPT) + len(GENERATED) if position is None else position)
    return row.tolist()


def test_frequency_and_presence_penalties_are_openais_over_generated_tokens():
    counts = {t: GENERATED.count(t) for t in set(GENERATED)}
    want = [x - 0.5 * counts.get(j, 0) - 0.25 * (j in counts) for j, x in enumerate(_logits().tolist())]
    assert _applied(_state(freq=0.5, pres=0.25)) == pytest.approx(want, abs=1e-6)
    # prompt tokens (1, 2) are not penalised; 3 is generated once (and in the prompt)
    got = _applied(_state(freq=1.0))
    assert got[1] == pytest.approx(_logits()[1].item()) and got[3] == pytest.approx(_logits()[3].item() - 1)


def test_repetition_penalty_is_vllms_over_prompt_and_generated_tokens():
    seen = set(PROMPT) | set(GENERATED)
    want = [(x / 1.7 if x > 0 else x * 1.7) if j in seen else x for j, x in enumerate(_logits().tolist())]
    assert _applied(_state(rep=1.7)) == pytest.approx(want, abs=1e-6)


def test_logit_bias_then_min_tokens_then_penalties_in_vllms_order():
    st = _state(bias=[[5, 2.0], [0, -1.5]], rep=2.0, min=7, stops=[11, 4])
    base = _logits().tolist()
    b = list(base)
    b[5] += 2.0
    b[0] -= 1.5
    seen = set(PROMPT) | set(GENERATED)
    want = [(x / 2 if x > 0 else x * 2) if j in seen else x for j, x in enumerate(b)]
    want[11] = want[4] = -math.inf  # 5 generated < min_tokens 7
    assert _applied(st) == pytest.approx(want, abs=1e-6)
    # at 7 generated the stops are free again
    after = _applied(_state(min=7, stops=[11, 4]), position=len(PROMPT) + 7)
    assert after == pytest.approx(base)


def test_counts_follow_the_tokens_each_step_brings():
    states = SamplingStates()
    rec = {**SETUP, "n": 3, "freq": 1.0}
    # a prompt in two chunks, then two decode steps whose inputs are the generated tokens 6 and 6
    for start, toks, extras in (
        (0, [1, 2], {"setup": [[0, rec]]}),
        (2, [6], {}),  # the last prompt token is 6: not generated
        (3, [6], {}),
        (4, [6], {}),
    ):
        states.begin(StepMeta([9], [start], [len(toks)], [True], [[1]], toks, [(0.0, 1.0, 0, 0)], extras))
    row = torch.zeros(V)
    states.seqs[9].apply(row, 5)
    assert row[6] == -2 and row[1] == 0 and row[2] == 0
    states.begin(StepMeta([3], [0], [1], [True], [[1]], [4], [(0.0, 1.0, 0, 0)], {"release": [9]}))
    assert 9 not in states.seqs


def _seq(sid: int, params: SamplingParams, prompt=(1, 2, 3, 4, 5)) -> Sequence:
    return Sequence(sid, list(prompt), len(prompt), params, frozenset({0}))


def test_the_frontend_sets_a_state_up_once_per_admission_and_releases_it():
    lane = LaneSampling()
    s = _seq(1, SamplingParams(frequency_penalty=0.5, min_tokens=2, stop_token_ids=frozenset({7})))
    plain = _seq(2, SamplingParams())
    ex = lane.extras([BatchItem(s, 0, 3, sample=False), BatchItem(plain, 0, 5, sample=True)], [s, plain])
    assert [i for i, _ in ex["setup"]] == [0] and ex["setup"][0][1]["stops"] == [0, 7] and ex["setup"][0][1]["hist"] == []
    assert "setup" not in lane.extras([BatchItem(s, 3, 2, sample=True)], [s, plain])  # held
    s.preemptions += 1  # recomputed elsewhere, back here: set up again with its tokens so far
    s.token_ids += [9, 9]
    ex = lane.extras([BatchItem(s, 6, 1, sample=True)], [s])
    assert ex["setup"][0][1]["hist"] == [1, 2, 3, 4, 5, 9]
    assert lane.extras([BatchItem(plain, 5, 1, sample=True)], [plain])["release"] == [1]
    assert lane.held == {}


def test_log_probabilities_are_of_the_raw_logits_and_the_sampler_sees_the_adjusted_ones():
    g = torch.Generator().manual_seed(0)
    # two sequences: seq 4 computes prompt log-probabilities (every row of its 3-token chunk kept) and samples;
    # seq 5 samples with a bias that makes token 2 win
    y = torch.randn(4, V, generator=g)
    meta = StepMeta(
        [4, 5],
        [0, 6],
        [3, 1],
        [True, True],
        [[1], [2]],
        [8, 1, 10, 3],
        [(0.0, 1.0, 0, 0), (0.0, 1.0, 0, 0)],
        {"plp": [[0, 2, -1, 3]], "lp": [[0, 3], [1, 1]], "setup": [[1, {**SETUP, "n": 2, "hist": [0] * 6, "bias": [[2, 50]]}]]},
    )
    states = SamplingStates()
    states.begin(meta)
    items, positions, picked, m, s = sample_step(y, meta, states, lambda t: t)
    assert items == [0, 1] and positions == [3, 7]
    assert picked == [int(y[2].argmax()), 2]
    ls = torch.log_softmax(y, -1)
    recs = {(i, pos): lp for i, pos, lp in decode_logprobs(m, s)}
    assert set(recs) == {(0, 1), (0, 2), (0, 3), (1, 7)}
    for (i, pos), row, tok in (((0, 1), 0, 1), ((0, 2), 1, 10), ((0, 3), 2, picked[0]), ((1, 7), 3, 2)):
        lp = recs[(i, pos)]
        assert lp.token == tok and lp.logprob == pytest.approx(ls[row, tok].item(), abs=1e-6)  # raw: without the bias of 50
        k = 2 if pos < 3 else (3 if i == 0 else 1)
        top = ls[row].topk(k)
        assert [t for t, _ in lp.top] == top.indices.tolist() and [v for _, v in lp.top] == pytest.approx(top.values.tolist(), abs=1e-6)


def test_step_extras_round_trip_through_the_message():
    m = StepMeta([1], [0], [2], [True], [[3]], [5, -1], [(1.0, 1.0, 0, 7)], {"lp": [[0, 2]], "release": [4]})
    assert StepMeta.decode(*m.encode()) == m
