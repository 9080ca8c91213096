"""The OpenVINO kernels `hetc profile` times, checked against the eager reference of the op a served
stage runs (hetc::paged_attention), and the profile's attention cases built as a stage runs them:
a chain of nodes, one cache each, in one inference (the inference's fixed cost shared out)."""

from __future__ import annotations

import pytest
import torch

from hetc.backends.paged_attention import PagedMeta, paged_attention
from hetc.scheduling import KV_BLOCK_TOKENS as BS

pytest.importorskip("openvino")

HEADS, KV_HEADS, D = 4, 2, 16


def _caches(n: int, blocks: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    g = torch.Generator().manual_seed(n)
    return [(torch.randn(blocks, KV_HEADS, BS, D, generator=g), torch.randn(blocks, KV_HEADS, BS, D, generator=g)) for _ in range(n)]


@pytest.mark.parametrize("starts,new", [([40, 3, 70], [1, 1, 1]), ([0, 0], [20, 7])])
def test_chained_paged_attention_is_its_nodes_one_after_another(starts, new):
    """Each node attends over its own cache with the previous node's output as its query and writes
    the new K/V rows into its own cache: the eager reference applied node by node gives the same."""
    from hetc.backends.openvino.kernels import paged_attention_step

    per = -(-(max(starts) + max(new)) // BS)
    tables = [list(range(b * per, (b + 1) * per)) for b in range(len(starts))]
    meta = PagedMeta.build(starts, new, tables, [True] * len(starts))
    g = torch.Generator().manual_seed(0)
    t = sum(new)
    q, k, v = torch.randn(t, HEADS * D, generator=g), torch.randn(t, KV_HEADS * D, generator=g), torch.randn(t, KV_HEADS * D, generator=g)
    caches = _caches(3, len(starts) * per)
    reference = [(kc.clone(), vc.clone()) for kc, vc in caches]
    step = paged_attention_step(heads=HEADS, kv_heads=KV_HEADS, head_dim=D, scale=D**-0.5, caches=caches, threads=1)
    out = torch.from_numpy(next(iter(step(q, k, v, *meta.inputs()[1:]).values())).copy())

    x = q
    for kc, vc in reference:
        x = paged_attention(x, k, v, kc, vc, *meta.inputs()[1:], D**-0.5, KV_HEADS, D)
    torch.testing.assert_close(out, x, atol=1e-4, rtol=1e-4)
    # every node wrote its new rows in place into its own cache (OpenVINO may clear a block's slots past
    # the context: those hold nothing)
    for (kc, vc), (rk, rv) in zip(caches, reference):
        for table, s, n in zip(tables, starts, new):
            pos = torch.arange(s + n)
            at = torch.tensor(table)[pos // BS], pos % BS
            torch.testing.assert_close(kc[at[0], :, at[1]], rk[at[0], :, at[1]])
            torch.testing.assert_close(vc[at[0], :, at[1]], rv[at[0], :, at[1]])


def test_profile_times_attention_per_node_of_a_chain_whose_caches_leave_the_cache():
    from hetc.partitioner.profiling.microbench import AttnShape, attention_cases

    evict = 8 << 20
    shapes = [AttnShape(4, HEADS, KV_HEADS, D, 1, 300, False), AttnShape(1, HEADS, KV_HEADS, D, 64, 64, True)]
    decode, prefill = attention_cases(shapes, dtype="fp32", device="cpu", evict=evict, executor="openvino", threads=1)
    per = -(-300 // BS)
    node_bytes = 2 * 4 * per * KV_HEADS * BS * D * 4
    assert decode.per_call * node_bytes > evict  # each node finds its blocks out of cache, as a layer does
    assert 1 < prefill.per_call <= 64  # tiny work: many nodes share one inference's fixed cost
    for c in (decode, prefill):
        c.fn()


def test_openvino_matmul_weights_are_out_of_cache_when_timed_even_where_the_pool_is_capped():
    """OpenVINO chains hold at most 128 MiB of weights; where they cannot exceed the cache (small weights, a large
    last-level cache) each timed call is preceded by an untimed read of `evict` bytes."""
    from hetc.partitioner.profiling.microbench import matmul_cases

    evict = 96 << 20  # as 2× a 48 MiB cache: 64 weights of 256×256 (16 MiB) cannot leave it by themselves
    small, large = matmul_cases([(8, 256, 256), (8, 2048, 4096)], dtype="fp32", device="cpu", evict=evict, executor="openvino", threads=1)
    assert small.reset is not None and small.reset.numel * 4 >= evict
    # OpenVINO holds each chain's weights twice (constants, packed): chains stay small, always evicted
    assert large.reset is small.reset and large.per_call * 2048 * 4096 * 4 <= 128 << 20
    small.reset()
    small.fn()
    large.fn()


def test_torch_matmuls_stream_a_pool_past_the_cache_back_to_back():
    """Every torch matmul's pool exceeds `evict` however small its weight, and a timed call runs a chain of
    calls over successive weights (as a stage streams its layers), no flush between them."""
    from hetc.partitioner.profiling import microbench

    evict = 96 << 20
    small, large = microbench.matmul_cases([(8, 256, 256), (8, 2048, 4096)], dtype="fp32", device="cpu", evict=evict)
    assert small.reset is None and large.reset is None
    pool = small.fn.args[1]  # the cycle over the shape's pool
    ptrs = [pool().data_ptr() for _ in range(small.per_call + 1)]
    # a chain is the whole pool of 256×256 weights (385: past 96 MiB), each read once; the next chain starts over
    assert small.per_call * 256 * 256 * 4 > evict and len(set(ptrs[:-1])) == small.per_call and ptrs[-1] == ptrs[0]
    assert large.per_call == 4  # 32 MiB weights: four to a 128 MiB chain
    small.fn()
    large.fn()
