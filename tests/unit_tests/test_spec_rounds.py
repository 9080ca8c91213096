"""Speculative rounds in the scheduler and block manager: K+1 positions reserved, the accepted
prefix kept, the rest rolled back so that the KV bookkeeping equals a run that never proposed
the rejected tokens; n-gram prompt lookup; who falls back to one token per step."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hetc.batching import Scheduler, SchedulerConfig, inflight_depth
from hetc.kv_blocks import BlockManager
from hetc.sequence import SamplingParams, Sequence
from hetc.spec_rounds import UNDRAFTED, Fallback, SpecConfig, fallback, ngram_propose
from hetc.scheduling import Phase
from hetc.speculation import SpeculationMethod

BLOCK = 4


def _seq(i: int, prompt: list[int], max_tokens: int = 32, **kw) -> Sequence:
    return Sequence(i, list(prompt), len(prompt), SamplingParams(temperature=0, max_tokens=max_tokens, **kw), frozenset({0}))


def _sched(k: int | None, blocks: int = 64, method: SpeculationMethod = SpeculationMethod.NGRAM, **kw) -> Scheduler:
    spec = SpecConfig(method, k) if k else None
    return Scheduler(BlockManager(blocks, block_size=BLOCK), SchedulerConfig(max_batched_tokens=256, speculation=spec), **kw)


def _state(s: Scheduler, seq: Sequence) -> tuple:
    """What a run leaves behind that a later step reads: the sequence's tokens, computed KV,
    block count and prefix keys, and the manager's free, cached and keyed blocks."""
    bm = s.blocks
    return (
        seq.token_ids,
        seq.num_computed,
        len(seq.block_table),
        seq.num_keyed,
        seq.block_hashes[: seq.num_keyed],
        bm.num_free,
        bm.num_cached,
        sorted(bm._block_of),  # every prefix hash registered
        sorted(bm.refs(b) for b in range(bm.num_blocks)),
    )


def test_ngram_lookup_takes_the_tokens_after_the_latest_longest_match():
    toks = [5, 6, 7, 8, 9, 5, 6, 7, 1, 2, 5, 6, 7]
    assert ngram_propose(toks, 3) == [1, 2, 5]  # [5, 6, 7] last occurred at 5: 1, 2, 5 followed it
    assert ngram_propose(toks, 3, n_max=4, n_min=4) == []  # no 4-gram repeats
    assert ngram_propose([1, 2, 3, 1], 5) == [2, 3, 1]  # a 1-gram match; fewer than k follow it
    assert ngram_propose([1, 2, 3], 2) == [] and ngram_propose([4], 2) == [] and ngram_propose(toks, 0) == []


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 3), min_size=2, max_size=30), st.integers(1, 5))
def test_ngram_lookup_against_brute_force(toks, k):
    want: list[int] = []
    for n in range(min(4, len(toks) - 1), 0, -1):
        hits = [i for i in range(len(toks) - n) if toks[i : i + n] == toks[len(toks) - n :]]
        if hits:
            want = toks[hits[-1] + n : hits[-1] + n + k]
            break
    assert ngram_propose(toks, k) == want


def test_fallbacks_name_their_reason():
    assert fallback(SamplingParams()) is None
    assert fallback(SamplingParams(logprobs=2)) == Fallback.LOGPROBS
    assert fallback(SamplingParams(presence_penalty=0.5)) == Fallback.PENALTIES
    s = _sched(3)
    a = _seq(0, [1, 2, 1, 2, 1], logprobs=1)
    s.add(a)
    s.on_result(s.schedule(), [2])
    assert [it.draft for it in s.schedule().items] == [[]]  # it would propose [1, 2], but decodes one token


def test_a_round_reserves_k_plus_one_positions_and_keeps_the_accepted_prefix():
    s = _sched(3)
    a = _seq(0, [1, 2, 3, 1, 2, 3, 1])  # 7 tokens: 2 blocks
    s.add(a)
    s.on_result(s.schedule(), [2])  # prefill; samples 2 → 8 tokens
    b = s.schedule()
    (it,) = b.items
    assert (it.start, it.n_new, it.draft, it.tokens) == (7, 4, [3, 1, 2], [2, 3, 1, 2])
    assert len(a.block_table) == 3  # positions 7..10: blocks for 11 tokens
    keyed = s.blocks.num_cached, sorted(s.blocks._block_of)
    outs = s.on_result(b, [9], accepted=[[3]])  # proposal 3 accepted, 1 rejected: the target said 9
    assert a.token_ids[7:] == [2, 3, 9] and a.num_computed == 9 and len(a.block_table) == 3
    assert (outs[0].drafted, outs[0].accepted, outs[0].token) == (3, 1, 9) and (a.spec_drafted, a.spec_accepted) == (3, 1)
    assert keyed == (s.blocks.num_cached, sorted(s.blocks._block_of))  # no key for a proposal
    b = s.schedule()
    assert b.items[0].start == 9  # the next round starts at the target's token


def _replay(s: Scheduler, seq: Sequence, rounds: list[tuple[list[int], int]]) -> None:
    """Drive `seq` through rounds of (accepted proposals, target token) after its prefill."""
    s.add(seq)
    s.on_result(s.schedule(), [rounds[0][1]])
    for kept, tok in rounds[1:]:
        b = s.schedule()
        it = b.items[0]
        if it.draft:
            assert it.draft[: len(kept)] == kept
            s.on_result(b, [tok], accepted=[kept])
        else:
            assert not kept
            s.on_result(b, [tok])


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(1, 3), min_size=3, max_size=12), st.integers(1, 4), st.data())
def test_kv_after_rejections_equals_a_run_that_never_proposed(prompt, k, data):
    """Any sequence of rounds with any acceptance leaves the same bookkeeping as decoding its
    tokens one per step: block count, free and cached blocks, reference counts, prefix keys."""
    spec, plain = _sched(k, blocks=40), _sched(None, blocks=40)
    a, b = _seq(0, prompt, max_tokens=24), _seq(0, prompt, max_tokens=24)
    spec.add(a)
    plain.add(b)
    first = data.draw(st.integers(1, 3))
    spec.on_result(spec.schedule(), [first])
    plain.on_result(plain.schedule(), [first])
    while not a.is_finished:
        batch = spec.schedule()
        it = batch.items[0]
        n_acc = data.draw(st.integers(0, len(it.draft)))
        kept = it.draft[:n_acc]
        tok = data.draw(st.integers(1, 3))  # never EOS (0): runs end by length
        spec.on_result(batch, [tok], accepted=[kept] if it.draft else None)
        for t in [*kept, tok][: b.params.max_tokens - b.num_generated]:
            plain.on_result(plain.schedule(), [t])
        if not a.is_finished:
            assert _state(spec, a) == _state(plain, b)
    assert b.is_finished and a.token_ids == b.token_ids and spec.blocks.num_free == plain.blocks.num_free


def test_a_stop_among_accepted_tokens_ends_the_sequence_there():
    s = _sched(4)
    a = _seq(0, [3, 4, 0, 5, 3])  # after 3, 4: [0, 5, 3] follows (0 is EOS)
    s.add(a)
    s.on_result(s.schedule(), [4])  # prefill samples 4
    b = s.schedule()
    assert b.items[0].draft == [0, 5, 3, 4]
    (o,) = s.on_result(b, [7], accepted=[[0, 5]])
    assert a.token_ids[5:] == [4, 0] and o.finished and a.finish_reason == "stop" and s.blocks.num_free == s.blocks.capacity


def test_rounds_stay_within_max_tokens_and_blocks_and_are_not_looked_ahead():
    s = _sched(4)
    a = _seq(0, [1, 2, 1, 2, 1, 2, 1], max_tokens=3)
    s.add(a)
    s.on_result(s.schedule(lookahead=True), [2])
    b = s.schedule(lookahead=True)
    assert b.items[0].draft == [1]  # 1 generated, 3 allowed: one proposal, and the verify step's own token
    assert s.schedule(lookahead=True) is None  # a round's next input is unknown until its result
    s.on_result(b, [1], accepted=[[1]])
    assert a.finish_reason == "length" and a.num_generated == 3
    # a round that does not fit decodes one token instead of preempting anyone
    tight = _sched(4, blocks=3)  # 3 blocks of 4 tokens
    c = _seq(1, [1, 2] * 5 + [1])
    tight.add(c)
    tight.on_result(tight.schedule(), [2])  # 12 tokens, 11 computed: 3 blocks, all of them
    item = tight.schedule().items[0]
    assert item.draft == [] and item.n_new == 1 and tight.num_preemptions == 0


def test_steps_that_ask_are_marked_whether_or_not_lookup_proposes():
    s = _sched(3)
    hit, miss, plain = _seq(0, [1, 2, 1, 2, 1]), _seq(1, [7, 8, 9]), _seq(2, [1, 2, 1, 2, 1], logprobs=0)
    for q in (hit, miss, plain):
        s.add(q)
    s.on_result(s.schedule(), [2, 5, 2])
    batch = s.schedule()
    items = {it.seq.seq_id: it for it in batch.items}
    assert (items[0].draft, items[0].asked) == ([1, 2], True)  # what followed the latest earlier [2, 1, 2]
    assert (items[1].draft, items[1].asked) == ([], True)  # 5 never occurred before: asked, nothing proposed
    assert (items[2].draft, items[2].asked) == ([], False)  # logprobs: decodes one token, never asks
    outs = s.on_result(batch, [0, 0, 0], accepted=[[], [], []])
    assert [(o.seq.seq_id, o.asked) for o in outs] == [(0, True), (1, True), (2, False)]


def test_a_speculating_lane_keeps_one_micro_batch_per_stage():
    # looking ahead, a stage has a second micro-batch queued behind its own; a speculating lane cannot look
    # ahead, and a second micro-batch would only take the sequences not in flight: its batches would split
    spec = SpecConfig(SpeculationMethod.NGRAM, 3)
    assert [inflight_depth(n, Phase.BOTH) for n in (1, 3)] == [2, 6]
    assert [inflight_depth(n, Phase.BOTH, spec) for n in (1, 3)] == [1, 3]
    assert inflight_depth(2, Phase.PREFILL) == 2


def test_a_draft_model_round_sends_undrafted_slots_and_tracks_the_drafters_kv():
    s = _sched(3, method=SpeculationMethod.DRAFT)
    a = _seq(0, [1, 2, 3, 4, 5])
    s.add(a)
    p = s.schedule()
    assert p.items[0].draft_from == 0
    s.on_result(p, [6])
    assert a.num_draft_computed == 5
    b = s.schedule()
    it = b.items[0]
    assert it.draft == [UNDRAFTED] * 3 and it.tokens == [6, -1, -1, -1] and it.draft_from == 5
    s.on_result(b, [9], accepted=[[7, 8, 4]])  # all accepted: the drafter never ran its last proposal
    assert a.token_ids[5:] == [6, 7, 8, 4, 9] and a.num_computed == 9 and a.num_draft_computed == 8
    b = s.schedule()
    it = b.items[0]
    assert (it.start, it.draft_from) == (9, 8)  # it catches up on position 8 first
    s.on_result(b, [3], accepted=[[]])  # the first proposal rejected
    assert a.num_draft_computed == 10 and a.num_computed == 10


def test_spec_config_checks_k():
    with pytest.raises(ValueError, match="num_speculative_tokens"):
        SpecConfig(SpeculationMethod.NGRAM, 0)
    with pytest.raises(ValueError, match="num_speculative_tokens"):
        SpecConfig(SpeculationMethod.NGRAM, 17)


def test_serve_flags_resolve_against_the_plans_section():
    from hetc.errors import BadInput
    from hetc.plan import Speculation
    from hetc.spec_rounds import serve_speculation
    from hetc.speculation import AcceptanceSource, expected_tokens_per_round

    sec = Speculation(
        method=SpeculationMethod.NGRAM,
        num_speculative_tokens=5,
        acceptance=0.5,
        acceptance_source=AcceptanceSource.GIVEN,
        expected_tokens_per_round=expected_tokens_per_round(0.5, 5),
    )
    assert serve_speculation(sec, True, None, None) == SpecConfig(SpeculationMethod.NGRAM, 5)
    assert serve_speculation(sec, True, None, 2).k == 2  # --num-speculative-tokens sets the plan's K
    assert serve_speculation(sec, False, None, None) is None and serve_speculation(None, True, None, None) is None
    assert serve_speculation(None, True, "ngram", None) == SpecConfig(SpeculationMethod.NGRAM, 3)
    for args, flag in (
        ((sec, True, "ngram", None), "speculation"),  # the plan's section decides
        ((None, True, None, 4), "speculation"),  # K without any speculation
        ((None, False, "ngram", None), "--speculate"),  # contradicts --no-speculation
        ((None, True, "draft", None), "--speculate"),  # a drafter needs the planner's placement
        ((sec, True, None, 17), "--num-speculative-tokens"),
    ):
        with pytest.raises(BadInput) as e:
            serve_speculation(*args)
        assert e.value.field == flag
