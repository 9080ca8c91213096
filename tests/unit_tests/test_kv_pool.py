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


def test_paged_layout_is_what_the_attention_op_writes():
    """Rows the op writes for a prompt are the rows KVPool.read returns at the sequence's slots."""
    g = torch.Generator().manual_seed(1)
    pool = KVPool([0], 6, 2, 8, torch.float32, paged=True)
    table = [4, 1]  # non-contiguous blocks
    n = BS + 3
    meta = PagedMeta.build([0], [n], [table], [True])
    q, k, v = torch.randn(n, 4 * 8, generator=g), torch.randn(n, 2 * 8, generator=g), torch.randn(n, 2 * 8, generator=g)
    paged_attention(q, k, v, pool.k[0], pool.v[0], *meta.inputs()[1:], 8 ** -0.5, 2, 8)
    pos = torch.arange(n)
    slots = torch.tensor(table)[pos // BS] * BS + pos % BS
    got = pool.read(0, slots)
    assert torch.equal(got[0], k.view(n, 2, 8)) and torch.equal(got[1], v.view(n, 2, 8))
    assert meta.block_indices.tolist() == table and meta.select.tolist() == [n - 1]


@pytest.mark.parametrize("executor,backend,emulate,tp,want", [
    ("auto", "cpu", False, 1, "openvino"),  # the fastest CPU executor serves cpu stages
    ("auto", "cpu", True, 1, "openvino"),
    ("auto", "gaudi", True, 1, "openvino"),
    ("auto", "openvino", True, 1, "openvino"),
    ("auto", "rocm", True, 1, "iree"),
    ("auto", "cuda", True, 1, "inductor"),
    ("auto", "cuda", False, 1, "torch"),  # a real accelerator: torch on its device
    ("auto", "cpu", False, 2, "torch"),  # tensor parallel: no sharded lowering yet
    ("torch", "cpu", False, 1, "torch"),
])
def test_stage_executor(executor, backend, emulate, tp, want):
    assert stage_executor(executor, backend, emulate=emulate, tp=tp) == want
