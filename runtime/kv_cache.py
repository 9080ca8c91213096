"""Paged KV on a stage: one pool of blocks per attention layer, and attention over it.

A micro-batch packs the new tokens of all its sequences into one [T, D] tensor (sequence
after sequence). Each sequence brings its own start position and block table, so
sequences of different lengths — a prompt chunk beside single decode tokens — share a step.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch.nn import functional as F

from hetc.runtime.block_manager import BLOCK_SIZE

__all__ = ["AttnMeta", "KVPool", "paged_attention"]


@dataclass(slots=True)
class AttnMeta:
    """Index tensors of one micro-batch, built once per step and shared by every layer."""

    positions: torch.Tensor  # [T] position of each new token in its sequence
    slots: torch.Tensor  # [T] flat KV slot (block * BLOCK_SIZE + offset) each new token writes
    ctx_slots: torch.Tensor  # [B, L] flat KV slots of each sequence's context, padded with 0
    mask: torch.Tensor  # [B, 1, Q, L] True where query i of sequence b may attend key j
    q_index: torch.Tensor  # [B, Q] packed row of query i of sequence b (0 for padding)
    q_valid: torch.Tensor  # [B, Q] real queries (row-major order = packed order)
    sample_rows: torch.Tensor  # [S] packed rows whose next token is sampled (last of a finishing chunk)

    @staticmethod
    def build(starts: list[int], n_new: list[int], block_tables: list[list[int]], sample: list[bool],
              block_size: int = BLOCK_SIZE) -> "AttnMeta":
        """Args:
            starts: per sequence, position of its first new token (= tokens already cached).
            n_new: per sequence, new tokens this step.
            block_tables: per sequence, its KV block ids (covering start + n_new tokens).
            sample: per sequence, whether its last new token's next token is sampled.
        """
        b = len(starts)
        q_max = max(n_new)
        ctx = [s + n for s, n in zip(starts, n_new)]
        l_max = max(ctx)
        pos = torch.cat([torch.arange(s, s + n) for s, n in zip(starts, n_new)])  # [T]
        n_blocks = -(-l_max // block_size)
        tables = torch.zeros(b, n_blocks, dtype=torch.long)
        for i, t in enumerate(block_tables):
            k = min(len(t), n_blocks)
            tables[i, :k] = torch.tensor(t[:k], dtype=torch.long)
        seq_of_tok = torch.repeat_interleave(torch.arange(b), torch.tensor(n_new))  # [T]
        slots = tables[seq_of_tok, pos // block_size] * block_size + pos % block_size
        j = torch.arange(l_max)
        ctx_slots = tables[:, j // block_size] * block_size + j % block_size  # [B, L]
        ctx_t = torch.tensor(ctx)
        ctx_slots = torch.where(j[None, :] < ctx_t[:, None], ctx_slots, 0)
        qi = torch.arange(q_max)
        q_valid = qi[None, :] < torch.tensor(n_new)[:, None]  # [B, Q]
        offsets = torch.tensor([0, *n_new[:-1]]).cumsum(0)
        q_index = torch.where(q_valid, offsets[:, None] + qi[None, :], 0)
        q_pos = torch.tensor(starts)[:, None] + qi[None, :]  # [B, Q]
        mask = (j[None, None, :] <= q_pos[:, :, None]) & (j[None, None, :] < ctx_t[:, None, None])
        # padded query rows attend key 0 only, so softmax stays finite; their outputs are dropped
        mask |= (~q_valid)[:, :, None] & (j == 0)[None, None, :]
        ends = offsets + torch.tensor(n_new) - 1
        sample_rows = ends[torch.tensor(sample, dtype=torch.bool)]
        return AttnMeta(pos, slots, ctx_slots, mask[:, None], q_index, q_valid, sample_rows)


class KVPool:
    """K and V blocks of every attention layer a stage holds."""

    def __init__(self, layers: list[int], num_blocks: int, kv_heads: int, head_dim: int, dtype: torch.dtype,
                 device: torch.device | str = "cpu", block_size: int = BLOCK_SIZE):
        """Args:
            layers: model layer indices whose attention runs on this stage.
            num_blocks: blocks per layer (the lane's block count).
            kv_heads, head_dim: K/V shape per token.
            dtype: KV storage dtype.
        """
        shape = (num_blocks * block_size, kv_heads, head_dim)  # flat slots: block * block_size + offset
        self.k = {l: torch.zeros(shape, dtype=dtype, device=device) for l in layers}
        self.v = {l: torch.zeros(shape, dtype=dtype, device=device) for l in layers}
        self.num_blocks, self.block_size = num_blocks, block_size

    @property
    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for d in (self.k, self.v) for t in d.values())


def paged_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, pool: KVPool, layer: int, meta: AttnMeta,
                    scale: float) -> torch.Tensor:
    """Write the new K/V into the pool, attend each query to its own sequence's context.

    Args:
        q: [T, H, Dh] rotated queries; k, v: [T, KVH, Dh] new keys (rotated) and values.
        layer: model layer index (selects the pool).
        scale: softmax scale (the module's own, usually Dh^-0.5).
    Returns:
        [T, H * Dh] attention output, packed like q.
    """
    kc, vc = pool.k[layer], pool.v[layer]
    kc.index_copy_(0, meta.slots, k.to(kc.dtype))
    vc.index_copy_(0, meta.slots, v.to(vc.dtype))
    keys = kc[meta.ctx_slots].to(q.dtype).transpose(1, 2)  # [B, KVH, L, Dh]
    vals = vc[meta.ctx_slots].to(q.dtype).transpose(1, 2)
    qb = q[meta.q_index].transpose(1, 2)  # [B, H, Q, Dh]
    o = F.scaled_dot_product_attention(qb, keys, vals, attn_mask=meta.mask, scale=scale,
                                       enable_gqa=qb.shape[1] != keys.shape[1])  # [B, H, Q, Dh]
    o = o.transpose(1, 2)[meta.q_valid]  # [T, H, Dh]
    return o.reshape(o.shape[0], -1)
