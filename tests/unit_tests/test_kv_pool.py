"""The KV pool's two layouts hold the same rows at the same slots (what moving a prompt's KV
between pools relies on), the paged layout is the one the paged-attention op reads and writes,
and each stage's executor is chosen as documented."""

import pytest
import torch

from hetc.backends.paged_attention import PagedMeta, paged_attention
from hetc.runtime.compiled_stage import stage_executor
from hetc.runtime.kv_cache import KVPool
from hetc.scheduling import KV_BLOCK_TOKENS as BS


def test_both_layouts_read_back_what_was_written():
    g = torch.Generator().manual_seed(0)
    slots = torch.tensor([3 * BS + 5, 0, BS - 1, 2 * BS + BS // 2])
    kv = torch.randn(2, len(slots), 2, 8, generator=g)
    for paged in (False, True):
        pool = KVPool([0, 4], 5, 2, 8, torch.float32, paged=paged)
        pool.write(4, slots, kv)
        assert torch.equal(pool.read(4, slots), kv)
        assert not pool.read(0, slots).any()  # another layer untouched
        other = torch.tensor([1, BS + 1])
        assert not pool.read(4, other).any()


def test_copy_and_zero_whole_blocks_in_both_layouts():
    """Copy-on-write copies a block's every row in every layer; a scrub zeroes whole blocks, nothing else."""
    g = torch.Generator().manual_seed(2)
    all_slots = torch.arange(5 * BS)
    for paged in (False, True):
        pool = KVPool([0, 4], 5, 2, 8, torch.float32, paged=paged)
        for layer in (0, 4):
            pool.write(layer, all_slots, torch.randn(2, 5 * BS, 2, 8, generator=g))
        before = {layer: pool.read(layer, all_slots).clone() for layer in (0, 4)}
        pool.copy_blocks([(1, 3), (4, 0)])
        for layer in (0, 4):
            got = pool.read(layer, all_slots).view(2, 5, BS, 2, 8)
            want = before[layer].view(2, 5, BS, 2, 8).clone()
            want[:, 3], want[:, 0] = want[:, 1], want[:, 4]
            assert torch.equal(got, want)
        pool.zero_blocks([2])
        for layer in (0, 4):
            got = pool.read(layer, all_slots).view(2, 5, BS, 2, 8)
            assert not got[:, 2].any() and got[:, [0, 1, 3, 4]].abs().sum() > 0


def test_paged_layout_is_what_the_attention_op_writes():
    """Rows the op writes for a prompt are the rows KVPool.read returns at the sequence's slots."""
    g = torch.Generator().manual_seed(1)
    pool = KVPool([0], 6, 2, 8, torch.float32, paged=True)
    table = [4, 1]  # non-contiguous blocks
    n = BS + 3
    meta = PagedMeta.build([0], [n], [table], [True])
    q, k, v = torch.randn(n, 4 * 8, generator=g), torch.randn(n, 2 * 8, generator=g), torch.randn(n, 2 * 8, generator=g)
    paged_attention(q, k, v, pool.k[0], pool.v[0], *meta.inputs()[1:], 8**-0.5, 2, 8)
    pos = torch.arange(n)
    slots = torch.tensor(table)[pos // BS] * BS + pos % BS
    got = pool.read(0, slots)
    assert torch.equal(got[0], k.view(n, 2, 8)) and torch.equal(got[1], v.view(n, 2, 8))
    assert meta.block_indices.tolist() == table and meta.select.tolist() == [n - 1]


@pytest.mark.parametrize(
    "executor,backend,emulate,tp,want",
    [
        ("auto", "cpu", False, 1, "openvino"),  # the fastest CPU executor serves cpu stages
        ("auto", "cpu", True, 1, "openvino"),
        ("auto", "gaudi", True, 1, "openvino"),
        ("auto", "openvino", True, 1, "openvino"),
        ("auto", "rocm", True, 1, "iree"),
        ("auto", "cuda", True, 1, "inductor"),
        ("auto", "cuda", False, 1, "torch"),  # a real accelerator: torch on its device
        ("auto", "cpu", False, 2, "torch"),  # tensor parallel: no sharded lowering yet
        ("torch", "cpu", False, 1, "torch"),
    ],
)
def test_stage_executor(executor, backend, emulate, tp, want):
    assert stage_executor(executor, backend, emulate=emulate, tp=tp) == want


def test_a_lane_holds_its_plans_own_batch():
    """The plan budgets KV for its batch in whole blocks per sequence; the padding block the runtime
    reserves comes on top, so the plan's batch at its full length runs without a preemption (taken
    from the budget, one b8 sequence was preempted and recomputed alone: 94 decode steps, not 64)."""
    from types import SimpleNamespace

    from hetc.batching import Scheduler, SchedulerConfig
    from hetc.kv_blocks import PADDING_BLOCKS, BlockManager, blocks_for
    from hetc.runtime.launch import size_kv
    from hetc.runtime.topology import Lane, StageSpec
    from hetc.sequence import SamplingParams, Sequence

    batch, prompt, output, layers, kvh, hd = 8, 32, 64, 2, 2, 8
    per_seq = blocks_for(prompt + output)
    budget = batch * per_seq * BS * layers * 2 * kvh * hd * 4  # the planner's: batch × whole blocks, fp32
    stage = StageSpec(
        lane=0,
        index=0,
        n_stages=1,
        devices=("h:0",),
        ranks=(1,),
        prev_rank=0,
        next_rank=0,
        backend="cpu",
        profile="p",
        node="h",
        units=(0, layers - 1),
        layers=(0, layers - 1),
        kv_budget=budget,
        weight_bytes=0.0,
        predicted_ms=(1.0, 1.0),
    )
    c = SimpleNamespace(
        o=SimpleNamespace(max_num_seqs=batch, num_kv_blocks=None, emulate=False, plan="plan.json"),
        lanes=[Lane(id=0, pipeline=0, replica=0, batch=batch, stages=(stage,))],
        units=[SimpleNamespace(kind="attention")] * layers,
        blocks={},
        hf_cfg=SimpleNamespace(num_attention_heads=kvh, num_key_value_heads=kvh, hidden_size=kvh * hd, head_dim=hd, max_position_embeddings=512),
        plan=SimpleNamespace(model=SimpleNamespace(kv_dtype="fp32")),
    )
    size_kv(c)
    assert c.blocks[0] == batch * per_seq + PADDING_BLOCKS
    sched = Scheduler(BlockManager(c.blocks[0], reserved=PADDING_BLOCKS), SchedulerConfig(batch, 512, 64, 1))
    for i in range(batch):
        sched.add(Sequence(i, list(range(prompt)), prompt, SamplingParams(max_tokens=output, ignore_eos=True), frozenset()))
    steps = 0
    while sched.has_unfinished():  # one stage, a step at a time: every sequence to its full length
        mb = sched.schedule()
        sched.on_result(mb, [7] * len(mb.items))
        steps += 1
    assert sched.num_preemptions == 0 and steps == output  # one prefill step, then output - 1 decode steps
