"""Paged-KV bookkeeping and continuous batching: chunked prefill, mixed lengths in one
micro-batch, micro-batches sized to fill the pipeline, preemption by recompute."""

import pytest

from hetc.kv_blocks import BlockManager
from hetc.batching import Scheduler, SchedulerConfig
from hetc.sequence import SamplingParams, Sequence, SeqStatus

BLOCK = 16  # tokens per block in these tests' arithmetic (the policy takes the manager's block size)


def _seq(i: int, prompt: int, max_tokens: int = 4) -> Sequence:
    # prompts of their own (1000·i + …): these tests are about one sequence's blocks, not the prefix cache's
    return Sequence(i, [1000 * i + t for t in range(1, prompt + 1)], prompt, SamplingParams(temperature=0, max_tokens=max_tokens), frozenset({0}))


def _run(s: Scheduler, batch, token: int = 7):
    """Pretend the pipeline ran `batch`: every sampling item gets `token`."""
    return s.on_result(batch, [token if it.sample else -1 for it in batch.items])


def test_blocks_allocated_on_demand_and_freed():
    bm = BlockManager(8, block_size=BLOCK)
    s = Scheduler(bm, SchedulerConfig(max_batched_tokens=64))
    a = _seq(0, 20, max_tokens=13)  # 20 prompt tokens: 2 blocks; grows to 33 tokens: 3 blocks
    s.add(a)
    b = s.schedule()
    assert [(i.start, i.n_new, i.sample) for i in b.items] == [(0, 20, True)]
    assert len(a.block_table) == 2 and bm.num_free == 6
    _run(s, b)
    for _ in range(12):
        _run(s, s.schedule())
    assert a.is_finished and a.finish_reason == "length" and a.num_generated == 13
    assert bm.num_free == 8 and a.block_table == []


def test_chunked_prefill_and_mixed_lengths_share_a_step():
    s = Scheduler(BlockManager(32, block_size=BLOCK), SchedulerConfig(max_batched_tokens=16))
    long, short = _seq(0, 40), _seq(1, 3)
    s.add(long)
    b1 = s.schedule()
    assert [(i.start, i.n_new, i.sample) for i in b1.items] == [(0, 16, False)]  # first chunk samples nothing
    assert _run(s, b1)[0].token is None
    s.add(short)
    b2 = s.schedule()  # the long prompt's next chunk takes the whole budget
    assert [(i.seq.seq_id, i.start, i.n_new) for i in b2.items] == [(0, 16, 16)]
    _run(s, b2)
    b3 = s.schedule()  # last 8 of the long prompt + the short prompt, one micro-batch
    assert [(i.seq.seq_id, i.start, i.n_new, i.sample) for i in b3.items] == [(0, 32, 8, True), (1, 0, 3, True)]
    _run(s, b3)
    b4 = s.schedule()  # both decode: one token each, at their own positions
    assert [(i.seq.seq_id, i.start, i.n_new) for i in b4.items] == [(0, 40, 1), (1, 3, 1)]


def test_micro_batches_split_to_fill_the_pipeline():
    s = Scheduler(BlockManager(64, block_size=BLOCK), SchedulerConfig(max_batched_tokens=256, n_stages=3))
    for i in range(6):
        s.add(_seq(i, 5))
    batches = [s.schedule() for _ in range(4)]
    assert [len(b.items) for b in batches[:3]] == [2, 2, 2] and batches[3] is None  # all 6 in flight
    ids = [i.seq.seq_id for b in batches[:3] for i in b.items]
    assert sorted(ids) == list(range(6))
    _run(s, batches[0])
    nxt = s.schedule()  # only the sequences whose micro-batch came back
    assert sorted(i.seq.seq_id for i in nxt.items) == sorted(i.seq.seq_id for i in batches[0].items)


def test_preemption_recomputes_and_keeps_generated_tokens():
    bm = BlockManager(3, block_size=BLOCK)  # 48 tokens for everyone
    s = Scheduler(bm, SchedulerConfig(max_batched_tokens=64))
    a, b = _seq(0, 16, max_tokens=20), _seq(1, 16, max_tokens=20)
    s.add(a)
    s.add(b)
    _run(s, s.schedule(), token=5)  # both prefilled: 2 blocks, one generated token each
    assert bm.num_free == 1 and a.num_tokens == b.num_tokens == 17
    batch = s.schedule()  # both need a 2nd block, one is free: the later one (b) is preempted
    assert [i.seq for i in batch.items] == [a]
    assert b.status is SeqStatus.WAITING and b.block_table == [] and b.num_computed == 0 and s.num_preemptions == 1
    assert b.token_ids[-1] == 5  # its generated token is kept and recomputed with the prompt
    _run(s, batch)
    while not a.is_finished:
        _run(s, s.schedule())
    batch = s.schedule()  # b comes back: prefill of prompt + generated token, then samples its 2nd token
    assert [(i.seq, i.start, i.n_new, i.sample) for i in batch.items] == [(b, 0, 17, True)]


def test_abort_in_flight_frees_on_return_and_eos_stops():
    bm = BlockManager(4, block_size=BLOCK)
    s = Scheduler(bm, SchedulerConfig())
    a = _seq(0, 4)
    s.add(a)
    batch = s.schedule()
    assert s.abort(a) is False and not a.is_finished  # in flight: finished when it comes back
    out = _run(s, batch)
    assert out[0].finished and a.finish_reason == "abort" and bm.num_free == 4
    c = _seq(1, 4)
    s.add(c)
    out = _run(s, s.schedule(), token=0)  # 0 is the EOS of _seq
    assert out[0].finished and c.finish_reason == "stop" and c.token_ids[-1] == 0


def test_waiting_queue_is_fcfs_when_blocks_run_out():
    s = Scheduler(BlockManager(2, block_size=BLOCK), SchedulerConfig(max_batched_tokens=64))
    big, small = _seq(0, 40), _seq(1, 2)  # big needs 3 blocks > 2: it waits, and small may not overtake
    s.add(big)
    s.add(small)
    with pytest.raises(RuntimeError):
        BlockManager(2, block_size=BLOCK).grow(big, 40)
    assert s.schedule() is None and s.num_waiting == 2


def test_prefill_pool_hands_off_after_the_first_token_and_decode_pool_requeues():
    pre = Scheduler(BlockManager(8, block_size=BLOCK), SchedulerConfig(max_batched_tokens=64, handoff=True))
    a, b = _seq(0, 20, max_tokens=5), _seq(1, 3, max_tokens=1)
    pre.add(a)
    pre.add(b)
    out = _run(pre, pre.schedule(), token=7)
    assert [o.finished for o in out] == [False, True]  # b wanted one token: done here
    assert pre.handoffs == [a] and a.status is SeqStatus.HANDOFF and a.num_computed == 20
    assert a.block_table and not pre.has_unfinished()  # blocks kept until its KV is sent
    src, a.block_table = a.block_table, []
    pre.blocks.free_blocks(src)
    assert pre.blocks.num_free == 8

    requeued = []
    dec = Scheduler(BlockManager(3, block_size=BLOCK), SchedulerConfig(), on_preempt=requeued.append)
    dec.blocks.grow(a, 0)  # blocks for the 20 positions whose KV arrives: 2
    dec.admit_running(a)
    c = _seq(2, 17, max_tokens=9)
    c.num_computed = 16
    dec.blocks.grow(c, 0)  # 1 block, the pool is full
    dec.admit_running(c)
    batch = dec.schedule()  # a decodes its handed-off token; c needs a 2nd block: none, so it leaves
    assert [(i.seq, i.start, i.n_new, i.sample) for i in batch.items] == [(a, 20, 1, True)]
    assert requeued == [c] and c.status is SeqStatus.WAITING and c.block_table == [] and not dec.waiting


def test_lookahead_schedules_the_next_decode_before_the_result():
    bm = BlockManager(8, block_size=BLOCK)
    s = Scheduler(bm, SchedulerConfig(max_batched_tokens=64))
    a = _seq(0, 16, max_tokens=3)
    s.add(a)
    b0 = s.schedule(lookahead=True)
    b1 = s.schedule(lookahead=True)  # a's next step goes before b0 is back: its token is b0's sample
    assert [(i.start, i.n_new, i.sample, i.ahead) for i in b1.items] == [(16, 1, True, True)]
    assert len(a.block_table) == 2 and a.in_flight == 2  # position 16 opened a second block
    assert s.schedule(lookahead=True) is None  # one step ahead at most
    _run(s, b0, token=5)
    b2 = s.schedule(lookahead=True)
    assert [(i.start, i.ahead) for i in b2.items] == [(17, True)]
    _run(s, b1, token=6)
    assert s.schedule(lookahead=True) is None  # b2's token is the 3rd and last: nothing to look ahead for
    _run(s, b2, token=7)
    assert a.finish_reason == "length" and a.token_ids[16:] == [5, 6, 7] and bm.num_free == 8


def test_lookahead_step_of_a_sequence_that_stopped_is_dropped():
    bm = BlockManager(8, block_size=BLOCK)
    s = Scheduler(bm, SchedulerConfig(max_batched_tokens=64))
    a = _seq(0, 4, max_tokens=8)
    s.add(a)
    b0, b1 = s.schedule(lookahead=True), s.schedule(lookahead=True)
    assert _run(s, b0, token=0)[0].finished and a.finish_reason == "stop"  # EOS: the looked-ahead row is wasted
    assert _run(s, b1) == [] and a.token_ids[-1] == 0 and bm.num_free == 8


def test_lookahead_keeps_micro_batches_in_turn_through_the_stages():
    s = Scheduler(BlockManager(64, block_size=BLOCK), SchedulerConfig(max_batched_tokens=256, n_stages=2))
    for i in range(4):
        s.add(_seq(i, 5, max_tokens=8))
    order = [{i.seq.seq_id for i in s.schedule(lookahead=True).items} for _ in range(4)]
    # a micro-batch's next step comes n_stages steps later: the first stage runs the other one meanwhile
    assert order == [{0, 1}, {2, 3}, {0, 1}, {2, 3}]
    assert s.schedule(lookahead=True) is None


def test_a_step_that_preempts_admits_no_one():
    """vLLM's rule: otherwise the sequence just preempted comes straight back into the blocks it freed
    and is preempted again next step, its prompt recomputed each time (6 prompts of 4 blocks in 11)."""
    s = Scheduler(BlockManager(12, block_size=BLOCK, reserved=1, caching=False), SchedulerConfig(max_batched_tokens=2 * BLOCK, n_stages=3))
    seqs = [_seq(i, 4 * BLOCK - 4, max_tokens=12) for i in range(6)]
    for q in seqs:
        s.add(q)
    in_flight: list = []
    preempting_steps = 0
    while not all(q.is_finished for q in seqs):
        waiting, before = set(map(id, s.waiting)), s.num_preemptions
        b = s.schedule(lookahead=True)
        if s.num_preemptions > before:
            preempting_steps += 1
            assert b is None or not any(id(i.seq) in waiting or i.start == 0 for i in b.items)
        in_flight.append(b)
        if len(in_flight) == 3 or b is None:
            done = in_flight.pop(0)
            if done is not None:
                _run(s, done)
    assert preempting_steps > 0, "the scenario was meant to preempt"
