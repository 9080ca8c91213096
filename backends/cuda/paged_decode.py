"""Decode attention over the runtime's paged KV, read in place: a Triton kernel.

One program per (sequence, KV head) walks the sequence's blocks through its block table, keeping
an online softmax (FlashAttention's running max and sum) for the group of query heads that share
the KV head; nothing is gathered or copied. Why our own: torch's SDPA takes no block table, and
flex_attention's paged form would need a block mask rebuilt each step and its own compile on the
GPU host; this kernel is small, capturable in a CUDA graph (fixed grid, lengths read on the device),
and checked against SDPA over the gathered context (tests, and benchmarks/gpu_serve.py on the GPU).
Its grid has B · KVH programs: contexts of many thousands of tokens at small batches would want
the context split across programs as well (not done: the served decode steps here are short).
"""

from __future__ import annotations

import os

import torch
import triton
import triton.language as tl

__all__ = ["paged_decode"]


@triton.jit
def _attend_block(i, q, m_i, l_i, acc, k_ptr, v_ptr, table_row, n, g, scale, stride_ks, stride_kh, D: tl.constexpr, BS: tl.constexpr, PRECISION: tl.constexpr):
    """One block of the context: the online softmax's running max, sum and output updated."""
    offs = tl.arange(0, BS)
    block = tl.load(table_row + i).to(tl.int64)
    valid = i * BS + offs < n
    at = (block * BS + offs)[:, None] * stride_ks + g * stride_kh + tl.arange(0, D)[None, :]
    k = tl.load(k_ptr + at, mask=valid[:, None], other=0.0).to(q.dtype)  # [BS, D]
    v = tl.load(v_ptr + at, mask=valid[:, None], other=0.0).to(q.dtype)
    s = tl.dot(q, tl.trans(k), input_precision=PRECISION) * scale  # [GROUP_PAD, BS] fp32
    s = tl.where(valid[None, :], s, float("-inf"))
    m_new = tl.maximum(m_i, tl.max(s, 1))
    p = tl.exp(s - m_new[:, None])
    alpha = tl.exp(m_i - m_new)
    return m_new, l_i * alpha + tl.sum(p, 1), acc * alpha[:, None] + tl.dot(p.to(v.dtype), v, input_precision=PRECISION)


@triton.jit
def _paged_decode_kernel(
    q_ptr,
    k_ptr,
    v_ptr,
    table_ptr,
    lens_ptr,
    o_ptr,
    scale,
    stride_qb,
    stride_qh,
    stride_ks,
    stride_kh,
    stride_tb,
    stride_ob,
    stride_oh,
    GROUP: tl.constexpr,
    GROUP_PAD: tl.constexpr,
    D: tl.constexpr,
    BS: tl.constexpr,
    MAX_BLOCKS: tl.constexpr,
    LOOP_TO_LENGTH: tl.constexpr,
    PRECISION: tl.constexpr,
):
    b = tl.program_id(0)
    g = tl.program_id(1)
    rows = tl.arange(0, GROUP_PAD)
    dims = tl.arange(0, D)
    heads = g * GROUP + rows
    real = rows < GROUP
    q = tl.load(q_ptr + b * stride_qb + heads[:, None] * stride_qh + dims[None, :], mask=real[:, None], other=0.0)
    n = tl.load(lens_ptr + b)
    table_row = table_ptr + b * stride_tb
    m_i = tl.full([GROUP_PAD], float("-inf"), tl.float32)
    l_i = tl.zeros([GROUP_PAD], tl.float32)
    acc = tl.zeros([GROUP_PAD, D], tl.float32)
    if LOOP_TO_LENGTH:  # the sequence's own blocks
        for i in range(0, tl.cdiv(n, BS)):
            m_i, l_i, acc = _attend_block(i, q, m_i, l_i, acc, k_ptr, v_ptr, table_row, n, g, scale, stride_ks, stride_kh, D, BS, PRECISION)
    else:  # Triton's CPU interpreter cannot loop to a loaded bound: every row walks the table, masked past its length
        for i in range(0, MAX_BLOCKS):
            m_i, l_i, acc = _attend_block(i, q, m_i, l_i, acc, k_ptr, v_ptr, table_row, n, g, scale, stride_ks, stride_kh, D, BS, PRECISION)
    out = acc / l_i[:, None]
    tl.store(o_ptr + b * stride_ob + heads[:, None] * stride_oh + dims[None, :], out.to(o_ptr.dtype.element_ty), mask=real[:, None])


def paged_decode(
    q: torch.Tensor, k_pool: torch.Tensor, v_pool: torch.Tensor, block_table: torch.Tensor, context_lens: torch.Tensor, scale: float, block_size: int
) -> torch.Tensor:
    """Each sequence's one query attends to its context, read from the pools through its blocks.

    Args:
        q: [B, H, D] queries (rotated).
        k_pool, v_pool: [NB · BS, KVH, D] flat slots (slot = block · BS + offset), the new tokens' rows written.
        block_table: [B, MB] int32 block ids per sequence (past its blocks: any valid id).
        context_lens: [B] int32 tokens each sequence attends (≥ 1).
        scale: the softmax scale.
    Returns:
        [B, H, D] in q's dtype.
    """
    b, h, d = q.shape
    kvh = k_pool.shape[1]
    group = h // kvh
    q = q.contiguous()
    out = torch.empty_like(q)
    # tl.dot takes ≥ 16 rows: a group of query heads is padded to 16 (a 4-head GQA group wastes rows, not bytes)
    _paged_decode_kernel[(b, kvh)](
        q,
        k_pool,
        v_pool,
        block_table,
        context_lens,
        out,
        scale,
        q.stride(0),
        q.stride(1),
        k_pool.stride(0),
        k_pool.stride(1),
        block_table.stride(0),
        out.stride(0),
        out.stride(1),
        GROUP=group,
        GROUP_PAD=max(16, triton.next_power_of_2(group)),
        D=d,
        BS=block_size,
        MAX_BLOCKS=block_table.shape[1],
        LOOP_TO_LENGTH=os.environ.get("TRITON_INTERPRET") != "1",
        PRECISION="ieee" if q.dtype == torch.float32 else "tf32",
    )  # fp32 stays fp32
    return out
