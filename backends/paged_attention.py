"""`hetc::paged_attention`: attention of packed variable-length tokens over a paged KV cache, as one
op a toolchain can map to its own kernel (OpenVINO: `PagedAttentionExtension`, which reads the
blocks where they are and writes the new rows into them).

Semantics (those of OpenVINO's op and vLLM's paged attention): the tokens of B sequences are packed
back to back; sequence b owns rows `subsequence_begins[b] : subsequence_begins[b + 1]`, has
`past_lens[b]` tokens cached, and its blocks are `block_indices[block_indices_begins[b] :
block_indices_begins[b + 1]]` in order. The new K/V rows are written into the cache at the
sequence's next positions, then each query attends causally to its sequence's context.

Declared functional for `torch.export` (its fake returns the output only), so that exporters see
one node; the eager implementation below is the reference, and it writes the new rows in place as
the toolchains' kernels do.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch.nn import functional as F

from hetc.scheduling import KV_BLOCK_TOKENS

__all__ = ["PagedMeta", "paged_attention"]


@dataclass(slots=True)
class PagedMeta:
    """One micro-batch in the `paged` form of hetc/stage.py: its tokens packed, no padding."""

    positions: torch.Tensor  # [T] int64
    past_lens: torch.Tensor  # [B] int32
    subsequence_begins: torch.Tensor  # [B + 1] int32
    block_indices: torch.Tensor  # [NBT] int32: each sequence's blocks covering its past and new tokens
    block_indices_begins: torch.Tensor  # [B + 1] int32
    max_context_len: torch.Tensor  # [] int32
    select: torch.Tensor  # [S] int64 packed rows whose next token is sampled

    @staticmethod
    def build(starts: list[int], n_new: list[int], block_tables: list[list[int]], sample: list[bool], block_size: int = KV_BLOCK_TOKENS) -> "PagedMeta":
        """Args: as AttnMeta.build."""
        pos: list[int] = []
        blocks: list[int] = []
        block_begins, ends = [0], []
        for t, s, n, smp in zip(block_tables, starts, n_new, sample):
            pos.extend(range(s, s + n))
            blocks.extend(t[: -(-(s + n) // block_size)])
            block_begins.append(len(blocks))
            if smp:
                ends.append(len(pos) - 1)
        i32 = torch.int32
        return PagedMeta(
            torch.tensor(pos),
            torch.tensor(starts, dtype=i32),
            torch.tensor([0, *n_new], dtype=i32).cumsum(0, dtype=i32),
            torch.tensor(blocks, dtype=i32),
            torch.tensor(block_begins, dtype=i32),
            torch.tensor(max(s + n for s, n in zip(starts, n_new)), dtype=i32),
            torch.tensor(ends),
        )

    def inputs(self) -> list[torch.Tensor]:
        """The signature's metadata inputs after x, in order (select apart)."""
        return [self.positions, self.past_lens, self.subsequence_begins, self.block_indices, self.block_indices_begins, self.max_context_len]


@torch.library.custom_op("hetc::paged_attention", mutates_args=())
def paged_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    past_lens: torch.Tensor,
    subsequence_begins: torch.Tensor,
    block_indices: torch.Tensor,
    block_indices_begins: torch.Tensor,
    max_context_len: torch.Tensor,
    scale: float,
    kv_heads: int,
    head_size: int,
) -> torch.Tensor:
    """Args:
        q: [T, Hq·D]; k, v: [T, KVH·D] the new tokens' (rotated) keys and values.
        k_cache, v_cache: [NB, KVH, BS, D], written at the new tokens' slots.
        past_lens: [B] int32; subsequence_begins, block_indices_begins: [B + 1] int32;
        block_indices: [sum of blocks] int32; max_context_len: [] int32 (the longest context).
        scale: the softmax scale; kv_heads, head_size: the caches' (constants for the toolchains' kernels).
    Returns:
        [T, Hq·D], packed like q.
    """
    kvh, bs, d = k_cache.shape[1:]
    assert (kvh, d) == (kv_heads, head_size), (k_cache.shape, kv_heads, head_size)
    out = torch.empty_like(q)
    begins, blocks_at = subsequence_begins.tolist(), block_indices_begins.tolist()
    for b, past in enumerate(past_lens.tolist()):
        t0, t1 = begins[b], begins[b + 1]
        if t1 == t0:
            continue
        blocks = block_indices[blocks_at[b] : blocks_at[b + 1]].long()
        pos = torch.arange(past, past + t1 - t0)
        where = blocks[pos // bs], pos % bs
        k_cache[where[0], :, where[1]] = k[t0:t1].view(-1, kvh, d).to(k_cache.dtype)
        v_cache[where[0], :, where[1]] = v[t0:t1].view(-1, kvh, d).to(v_cache.dtype)
        ctx = past + t1 - t0
        keys = k_cache[blocks].transpose(0, 1).reshape(kvh, -1, d)[:, :ctx].to(q.dtype)  # [KVH, L, D]
        vals = v_cache[blocks].transpose(0, 1).reshape(kvh, -1, d)[:, :ctx].to(q.dtype)
        qb = q[t0:t1].view(t1 - t0, -1, d).transpose(0, 1)  # [Hq, n, D]
        mask = torch.arange(ctx)[None, :] <= pos[:, None]  # [n, L]
        o = F.scaled_dot_product_attention(qb[None], keys[None], vals[None], attn_mask=mask, scale=scale, enable_gqa=qb.shape[0] != kvh)
        out[t0:t1] = o[0].transpose(0, 1).reshape(t1 - t0, -1)
    return out


@paged_attention.register_fake
def _(q, k, v, k_cache, v_cache, past_lens, subsequence_begins, block_indices, block_indices_begins, max_context_len, scale, kv_heads, head_size):
    return torch.empty_like(q)
