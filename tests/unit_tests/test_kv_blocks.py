"""Shared KV blocks (hetc/kv_blocks.py): the prefix-cache key chain, reference counts, LRU eviction
of free cached blocks, copy-on-write, fork — and, driven through the runtime's scheduler with
hypothesis, that every sequence's KV is its own tokens' (a fake pool records which prefix wrote
each slot) under sharing, eviction, preemption, lookahead and forks."""

from collections import deque

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hetc.batching import Scheduler, SchedulerConfig, route
from hetc.kv_blocks import BlockManager, prefix_hashes
from hetc.sequence import SamplingParams, Sequence, SeqStatus

B = 4  # tokens per block in these tests


def _seq(i: int, tokens: list[int], max_tokens: int = 8) -> Sequence:
    return Sequence(i, list(tokens), len(tokens), SamplingParams(temperature=0, max_tokens=max_tokens, ignore_eos=True))


def _admit(bm: BlockManager, seq: Sequence) -> int:
    hit = bm.cached_prefix(seq)
    assert bm.can_admit(seq, hit, seq.num_tokens - len(hit) * B)
    got = bm.admit(seq, hit)
    bm.grow(seq, seq.remaining)
    bm.key_full(seq, seq.num_tokens)
    seq.num_computed = seq.num_tokens
    return got


def test_keys_chain_over_the_prefix_and_skip_the_partial_block():
    a = prefix_hashes([1, 2, 3, 4, 5, 6, 7, 8, 9], B)
    assert len(a) == 2  # the 9th token's block is not full
    assert prefix_hashes([1, 2, 3, 4, 5, 6, 7, 8, 0, 0], B) == a
    # the same block of tokens after another prefix is another key: a key names the whole prefix
    b = prefix_hashes([9, 9, 9, 9, 5, 6, 7, 8], B)
    assert b[1] != a[1] and b[0] != a[0]
    # extending a known chain gives the one-shot chain
    known = prefix_hashes([1, 2, 3, 4], B)
    assert prefix_hashes([1, 2, 3, 4, 5, 6, 7, 8], B, known) == a and known == a


def test_a_shared_prefix_is_held_once_and_counted_per_holder():
    bm = BlockManager(16, block_size=B, reserved=1)
    a, b = _seq(0, list(range(10))), _seq(1, list(range(8)) + [50, 51, 52])
    assert _admit(bm, a) == 0
    assert bm.num_used == 3
    assert _admit(bm, b) == 8  # two full blocks from a
    assert b.block_table[:2] == a.block_table[:2] and b.block_table[2] != a.block_table[2]
    assert [bm.refs(x) for x in a.block_table] == [2, 2, 1] and bm.num_used == 4
    assert bm.queried_tokens == 21 and bm.hit_tokens == 8
    bm.free(a)
    assert [bm.refs(x) for x in b.block_table] == [1, 1, 1] and bm.num_used == 3
    bm.free(b)
    assert bm.num_used == 0 and bm.num_cached == 2  # the full blocks stay cached while free
    c = _seq(2, list(range(12)))
    assert _admit(bm, c) == 8  # found while free: taken out of the free list
    assert bm.num_cached == 0 and bm.num_used == 3


def test_a_fully_cached_prompt_recomputes_its_last_token():
    bm = BlockManager(16, block_size=B)
    _admit(bm, _seq(0, list(range(8))))
    again = _seq(1, list(range(8)))
    assert bm.cached_prefix(again) == bm.cached_prefix(_seq(2, list(range(5))))  # one block: the last token's block is recomputed
    assert len(bm.cached_prefix(again)) == 1


def test_caching_off_shares_nothing():
    bm = BlockManager(16, block_size=B, caching=False)
    _admit(bm, _seq(0, list(range(10))))
    b = _seq(1, list(range(10)))
    assert _admit(bm, b) == 0 and bm.num_used == 6 and bm.queried_tokens == 0


def test_free_cached_blocks_are_evicted_least_recently_used_last_blocks_first():
    bm = BlockManager(7, block_size=B)  # 7 blocks
    a, b = _seq(0, [1] * 8 + [0]), _seq(1, [2] * 8 + [0])
    _admit(bm, a)
    _admit(bm, b)
    a_full, b_full = a.block_table[:2], b.block_table[:2]
    bm.free(a)  # a first: its blocks are older
    bm.free(b)
    assert bm.num_free == 7 and bm.num_cached == 4
    c = _seq(2, list(range(100, 112)))  # 3 blocks: the 3 never-keyed blocks go first, nothing evicted
    _admit(bm, c)
    assert bm.num_cached == 4
    d = _seq(3, list(range(200, 207)))  # 2 blocks: evicts a's second block, then a's first
    _admit(bm, d)
    assert sorted(d.block_table) == sorted(a_full) and bm.num_cached == 2
    assert bm.cached_blocks(prefix_hashes([1] * 8, B)) == 0  # a's prefix is gone
    assert bm.cached_blocks(prefix_hashes([2] * 8, B)) == 2  # b's is still there
    assert set(b_full).isdisjoint(d.block_table)


def test_fork_shares_every_block_and_copies_on_write():
    bm = BlockManager(16, block_size=B)
    parent = _seq(0, list(range(6)))
    _admit(bm, parent)  # one full block, one partial
    child = _seq(1, parent.token_ids)
    bm.fork(parent, child)
    assert child.block_table == parent.block_table and child.num_computed == 6
    assert [bm.refs(x) for x in parent.block_table] == [2, 2] and bm.num_used == 2
    child.token_ids.append(40)
    assert bm.blocks_needed(child, 1) == 1  # its write lands in the shared partial block: a copy
    bm.grow(child, 1)
    shared, own = parent.block_table[1], child.block_table[1]
    assert own != shared and child.block_table[0] == parent.block_table[0]
    assert bm.take_copies() == [(shared, own)] and bm.take_copies() == []
    assert bm.refs(shared) == 1 and bm.refs(child.block_table[0]) == 2
    parent.token_ids.append(41)
    assert bm.blocks_needed(parent, 1) == 0  # the parent holds its block alone now: written in place
    bm.grow(parent, 1)
    assert parent.block_table[1] == shared and bm.take_copies() == []
    bm.free(parent)
    bm.free(child)
    assert bm.num_used == 0


def test_four_samples_of_one_prompt_share_its_blocks_through_the_scheduler():
    """`n` = 4: the prompt computed but for its last token, three forks; each sample computes that
    token into its own copy of the shared partial block (three copies) and samples on its own."""
    bm = BlockManager(32, block_size=B, reserved=1)
    s = Scheduler(bm, SchedulerConfig(max_num_seqs=8, max_batched_tokens=9))
    parent = _seq(0, list(range(10)), max_tokens=3)
    s.add(parent)
    s.on_result(first := s.schedule(), [-1])  # 9 of 10 prompt tokens: nothing sampled yet
    assert first.items[0].n_new == 9 and parent.num_computed == 9 and bm.num_used == 3
    kids = [_seq(i, parent.token_ids, max_tokens=3) for i in (1, 2, 3)]
    for k in kids:
        s.fork(parent, k)
    assert bm.num_used == 3 and all(bm.refs(b) == 4 for b in parent.block_table)
    step = s.schedule()
    assert sorted(it.seq.seq_id for it in step.items) == [0, 1, 2, 3] and all(it.n_new == 1 and it.sample for it in step.items)
    assert len(step.copies) == 3  # the last writer keeps the original
    assert bm.num_used == 2 + 4  # two full blocks shared by all four, a last block each (12 without sharing)
    assert all(bm.refs(b) == 4 for b in parent.block_table[:2])
    s.on_result(step, [11, 12, 13, 14])
    while s.has_unfinished():
        s.on_result(b := s.schedule(), [7] * len(b.items))
    assert bm.num_used == 0 and all(x.num_generated == 3 for x in [parent, *kids])


def test_fork_refuses_a_parent_in_flight_or_a_child_with_blocks():
    bm = BlockManager(16, block_size=B)
    parent = _seq(0, list(range(6)))
    _admit(bm, parent)
    parent.in_flight = 1
    with pytest.raises(ValueError, match="in flight"):
        bm.fork(parent, _seq(1, parent.token_ids))
    parent.in_flight = 0
    other = _seq(2, [9] * 6)
    with pytest.raises(ValueError, match="begin with"):
        bm.fork(parent, other)


def test_unkeyed_blocks_of_a_failed_sequence_are_not_served_again():
    bm = BlockManager(16, block_size=B)
    a = _seq(0, list(range(10)))
    _admit(bm, a)
    b = _seq(1, list(range(10)))
    _admit(bm, b)  # shares a's two full blocks
    scrub = bm.unkey(a)
    assert len(scrub) == 1 and scrub[0] not in b.block_table  # only its own block waits for the scrub
    assert bm.cached_prefix(_seq(2, list(range(10)))) == []  # the shared blocks serve no new prefix
    assert bm.num_used == 4  # b's three, the scrubbed one until reclaimed
    bm.reclaim(scrub)
    bm.free(b)
    assert bm.num_used == 0 and bm.num_cached == 0


def test_route_prefers_the_longest_cached_prefix_unless_its_queue_is_twice_the_shortest():
    assert route([3, 1], [0, 0]) == 1  # no hit: least loaded
    assert route([2, 1], [4, 0]) == 0  # the hit wins: 2 ≤ 2 · 1
    assert route([3, 1], [4, 0]) == 1  # 3 > 2 · 1: too busy
    assert route([2, 0], [4, 0]) == 0  # an idle lane counts as 1
    assert route([1, 1, 1], [2, 5, 5]) == 1


# ---- the scheduler and the block manager together, against a fake pool ---------------------------
PREFIXES = [[7] * 9, [8] * 4 + [9] * 5, []]


def _drive(ops, blocks: int, lookahead: bool, budget: int) -> None:
    """Run the scheduler on requests made of shared prefixes; every step writes, into a fake pool,
    which prefix each slot's KV stands for, and checks that every position a sequence attends holds
    its own prefix's KV (copy-on-write copies applied in order before their step)."""
    bm = BlockManager(blocks, block_size=B, reserved=1)
    s = Scheduler(bm, SchedulerConfig(max_num_seqs=4, max_batched_tokens=budget, n_stages=2))
    pool: dict[tuple[int, int], tuple[int, ...]] = {}
    inflight: deque = deque()
    seqs: list[Sequence] = []
    ops = deque(ops)
    for _ in range(400):
        if ops:
            kind, a, b = ops.popleft()
            if kind == "add":
                tokens = PREFIXES[a % len(PREFIXES)] + [100 + len(seqs)] * (1 + b % 6)
                seq = _seq(len(seqs), tokens, max_tokens=1 + b % 7)
                seqs.append(seq)
                s.add(seq)
            elif kind == "fork":  # a running sequence with nothing in flight gets a twin
                parents = [x for x in s.running if not x.in_flight and x.num_computed == x.num_tokens - 1]
                if parents:
                    parent = parents[a % len(parents)]
                    child = _seq(len(seqs), parent.token_ids, parent.params.max_tokens)
                    child.num_prompt_tokens = parent.num_prompt_tokens
                    seqs.append(child)
                    s.fork(parent, child)
        while len(inflight) < 2 and (mb := s.schedule(lookahead)) is not None:
            inflight.append(mb)
        if not inflight:
            if not ops and not s.has_unfinished():
                break
            continue
        mb = inflight.popleft()
        for src, dst in mb.copies:  # the stages copy before the step runs
            for o in range(B):
                if (src, o) in pool:
                    pool[(dst, o)] = pool[(src, o)]
                else:
                    pool.pop((dst, o), None)
        for it in mb.items:
            seq, table = it.seq, it.seq.block_table
            for p in range(it.start, it.start + it.n_new):  # the step writes its new tokens' KV
                assert p < len(seq.token_ids), "a step wrote past the known tokens"
                pool[(table[p // B], p % B)] = tuple(seq.token_ids[: p + 1])
            for p in range(it.start + it.n_new):  # and attends everything before
                assert pool.get((table[p // B], p % B)) == tuple(seq.token_ids[: p + 1]), f"seq {seq.seq_id} position {p} holds another prefix's KV"
        s.on_result(mb, [1 + mb.step_id % 3 if it.sample else -1 for it in mb.items])
        held = [x for x in seqs if x.block_table]
        for blk in range(1, blocks):  # every hold is a sequence's
            assert bm.refs(blk) == sum(x.block_table.count(blk) for x in held)
        assert bm.num_used == len({blk for x in held for blk in x.block_table})
    assert all(x.status is SeqStatus.FINISHED for x in seqs), "a sequence never finished"
    assert bm.num_used == 0


OPS = st.lists(st.tuples(st.sampled_from(["add", "add", "add", "fork"]), st.integers(0, 5), st.integers(0, 20)), min_size=1, max_size=14)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=OPS, blocks=st.integers(8, 14), lookahead=st.booleans(), budget=st.sampled_from([3, 8, 64]))
def test_every_sequence_attends_its_own_kv_under_sharing_eviction_preemption_and_forks(ops, blocks, lookahead, budget):
    _drive(ops, blocks, lookahead, budget)
