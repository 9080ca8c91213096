"""`n` samples of one prompt through the scheduler (hetc/batching.py `Sequence.forks`): the prompt
is computed once, but for its last token; there the samples fork and share its KV blocks (block
counts against the same samples as independent sequences), each computing the last token and
sampling on its own; a prompt cached but for its last token forks at admission; samples whose
parent ends before forking go on as sequences of their own; a lane too small for all of them
admits the parent only with room for every sample."""

from __future__ import annotations

import pytest

from hetc.batching import Scheduler, SchedulerConfig
from hetc.kv_blocks import BlockManager
from hetc.sequence import SamplingParams, Sequence, SeqStatus

B = 4  # tokens per block


def _samples(n: int, prompt: list[int], first_id: int = 0, max_tokens: int = 3) -> list[Sequence]:
    return [Sequence(first_id + i, list(prompt), len(prompt), SamplingParams(temperature=0, max_tokens=max_tokens, ignore_eos=True)) for i in range(n)]


def _sched(caching: bool, max_num_seqs: int = 8, budget: int = 64) -> tuple[Scheduler, BlockManager]:
    bm = BlockManager(64, block_size=B, reserved=1, caching=caching)
    return Scheduler(bm, SchedulerConfig(max_num_seqs=max_num_seqs, max_batched_tokens=budget, prefix_caching=caching)), bm


def _run(s: Scheduler, token: int = 7) -> list[list[tuple[int, int, int]]]:
    """Every step's (seq id, start, n_new) until nothing is left; each sample gets `token`."""
    steps = []
    while s.has_unfinished():
        b = s.schedule()
        steps.append([(it.seq.seq_id, it.start, it.n_new) for it in b.items])
        s.on_result(b, [token if it.sample else -1 for it in b.items])
    return steps


@pytest.mark.parametrize("caching", [False, True])
def test_four_samples_compute_the_prompt_once_and_share_its_blocks(caching):
    prompt = list(range(1, 11))  # 10 tokens: 2 full blocks and a partial one
    s, bm = _sched(caching)
    parent, *kids = _samples(4, prompt)
    parent.forks = kids
    s.add(parent)
    first = s.schedule()
    assert [(it.seq.seq_id, it.start, it.n_new, it.sample) for it in first.items] == [(0, 0, 9, False)]  # all but the last prompt token
    s.on_result(first, [-1])
    step = s.schedule()  # the samples forked: the first computes the last prompt token and samples
    assert [(it.seq.seq_id, it.start, it.n_new, it.sample) for it in step.items] == [(0, 9, 1, True)]
    assert all(bm.refs(b) == 4 for b in parent.block_table[:2])
    s.on_result(step, [11])
    step = s.schedule()  # the others, a step later (they joined the running sequences after this step's order was set)
    assert sorted((it.seq.seq_id, it.start, it.n_new, it.sample) for it in step.items) == [(0, 10, 1, True), *((i, 9, 1, True) for i in (1, 2, 3))]
    assert len(step.copies) == 2 and bm.num_used == 2 + 4  # two full blocks shared by all four, a last block each
    assert all(bm.refs(b) == 4 for b in parent.block_table[:2])
    s.on_result(step, [21, 12, 13, 14])
    assert [x.token_ids[10] for x in (parent, *kids)] == [11, 12, 13, 14]
    _run(s)
    assert bm.num_used == 0 and all(x.num_generated == 3 and x.status is SeqStatus.FINISHED for x in (parent, *kids))
    # the same four as independent sequences: every prompt computed, blocks shared by the prefix cache only
    s2, bm2 = _sched(caching)
    for q in _samples(4, prompt, 10):
        s2.add(q)
    b = s2.schedule()
    assert sum(it.n_new for it in b.items) == (10 + 3 * 2 if caching else 40)  # cached: the 2 full blocks reused
    assert bm2.num_used == (2 + 4 if caching else 12)


def test_a_prompt_cached_but_for_its_last_token_forks_at_admission():
    prompt = list(range(1, 10))  # 9 tokens: 2 full blocks, then the last token
    s, bm = _sched(True)
    (warm,) = _samples(1, prompt, 100)
    s.add(warm)
    _run(s)
    parent, *kids = _samples(3, prompt)
    parent.forks = kids
    s.add(parent)
    b = s.schedule()
    assert [(it.seq.seq_id, it.start, it.n_new) for it in b.items] == [(0, 8, 1)]  # the parent at once; the forks next step
    assert bm.hit_tokens == 8 and all(k.status is SeqStatus.RUNNING and k.block_table[:2] == parent.block_table[:2] for k in kids)
    s.on_result(b, [5])
    assert [(i, st, n) for i, st, n in _run(s)[0]] == [(0, 9, 1), (1, 8, 1), (2, 8, 1)]


def test_samples_of_a_parent_aborted_before_forking_go_on_alone_and_aborted_samples_never_fork():
    prompt = list(range(1, 11))
    s, bm = _sched(False)
    parent, a, b = _samples(3, prompt)
    parent.forks = [a, b]
    s.add(parent)
    s.on_result(s.schedule(), [-1])
    assert s.abort(b)  # a sample not forked yet: finished at once
    parent.in_flight = 0
    s.abort(parent)
    assert a.status is SeqStatus.WAITING and list(s.waiting) == [a]
    _run(s)
    assert a.num_generated == 3 and b.status is SeqStatus.FINISHED and b.num_generated == 0 and bm.num_used == 0


def test_a_parent_waits_for_room_for_every_sample():
    s, _ = _sched(False, max_num_seqs=4)
    (busy,) = _samples(1, [1, 2, 3], 50, max_tokens=2)
    s.add(busy)
    s.on_result(s.schedule(), [9])
    parent, *kids = _samples(4, list(range(1, 11)))
    parent.forks = kids
    s.add(parent)
    b = s.schedule()
    assert [it.seq.seq_id for it in b.items] == [50]  # 1 running + 4 samples > 4 seats: the prompt waits
    s.on_result(b, [9])
    assert s.schedule().items[0].seq.seq_id == 0
