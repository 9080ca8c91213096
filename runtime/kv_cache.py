"""Paged KV on a stage: one pool of blocks per attention layer, and attention over it.

A micro-batch packs the new tokens of all its sequences into one [T, D] tensor (sequence
after sequence). Each sequence brings its own start position and block table, so
sequences of different lengths — a prompt chunk beside single decode tokens — share a step.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch.nn import functional as F

from hetc.scheduling import KV_BLOCK_TOKENS

# MLA: cached latents [..., 1, R] → keys [..., H, Dqk], values [..., H, Dv]
Expand = Callable[[torch.Tensor], tuple[torch.Tensor, torch.Tensor]]

__all__ = ["AttnMeta", "DecodeMeta", "KVPool", "attend", "decode_attention", "gather_decode", "latent_attention", "latent_decode", "paged_attention"]


@dataclass(slots=True)
class AttnMeta:
    """Index tensors of one micro-batch, built once per step and shared by every layer.

    A dense micro-batch (every sequence brings the same number Q of new tokens: a decode step,
    or equal prompt chunks) needs no query gather: its packed rows already are [B, Q] row-major.
    """

    positions: torch.Tensor  # [T] position of each new token in its sequence
    slots: torch.Tensor  # [T] flat KV slot (block * block_size + offset) each new token writes
    blocks: torch.Tensor  # [B * NB] each sequence's first NB context blocks, padded with block 0
    mask: torch.Tensor  # [B, 1, Q, NB * block_size] True where query i of sequence b may attend key j
    q_index: torch.Tensor | None  # [B, Q] packed row of query i of sequence b (0 for padding); None: dense
    q_valid: torch.Tensor | None  # [B, Q] real queries (row-major order = packed order); None: dense
    sample_rows: torch.Tensor | None  # [S] packed rows whose next token is sampled; None: every row

    def to(self, device: torch.device) -> "AttnMeta":
        """The same metadata on `device` (built on the host; a no-op there)."""
        if device.type == "cpu":
            return self

        def move(t: Any) -> Any:
            return None if t is None else t.to(device, non_blocking=True)

        return AttnMeta(*(move(getattr(self, f)) for f in self.__slots__))

    @staticmethod
    def build(
        starts: list[int],
        n_new: list[int],
        block_tables: list[list[int]],
        sample: list[bool],
        block_size: int = KV_BLOCK_TOKENS,
        keep_all: list[bool] | None = None,
    ) -> "AttnMeta":
        """Args:
        starts: per sequence, position of its first new token (= tokens already cached).
        n_new: per sequence, new tokens this step.
        block_tables: per sequence, its KV block ids (covering start + n_new tokens).
        sample: per sequence, whether its last new token's next token is sampled.
        keep_all: per sequence, whether every new token's row goes on past the cut (prompt
            log-probabilities need the logits at each position), not only the sampled one.
        """
        # plain lists, then one tensor per field: an 8-sequence decode step's meta took 0.6 ms as
        # tensor ops per sequence, 0.25 ms so (worker, 1 thread, reference host)
        q_max = max(n_new)
        n_blocks = -(-max(s + n for s, n in zip(starts, n_new)) // block_size)
        pos: list[int] = []
        slots: list[int] = []
        ends: list[int] = []
        for i, (t, s, n, smp) in enumerate(zip(block_tables, starts, n_new, sample)):
            for p in range(s, s + n):
                pos.append(p)
                slots.append(t[p // block_size] * block_size + p % block_size)
            if keep_all is not None and keep_all[i]:
                ends.extend(range(len(pos) - n, len(pos)))
            elif smp:
                ends.append(len(pos) - 1)
        blocks = [b for t in block_tables for b in (list(t[:n_blocks]) + [0] * n_blocks)[:n_blocks]]
        starts_t, n_t = torch.tensor(starts), torch.tensor(n_new)
        j = torch.arange(n_blocks * block_size)
        qi = torch.arange(q_max)
        q_pos = starts_t[:, None] + qi[None, :]  # [B, Q]
        # causal within the sequence, and never past its context (its padding: block 0's slots)
        mask = (j[None, None, :] <= q_pos[:, :, None]) & (j[None, None, :] < (starts_t + n_t)[:, None, None])
        q_index = q_valid = None
        if any(n != q_max for n in n_new):
            q_valid = qi[None, :] < n_t[:, None]  # [B, Q]
            offsets = torch.tensor([0, *n_new[:-1]]).cumsum(0)
            q_index = torch.where(q_valid, offsets[:, None] + qi[None, :], 0)
            # padded query rows attend key 0 only, so softmax stays finite; their outputs are dropped
            mask |= (~q_valid)[:, :, None] & (j == 0)[None, None, :]
        sample_rows = None if len(ends) == len(pos) else torch.tensor(ends, dtype=torch.long)
        return AttnMeta(torch.tensor(pos), torch.tensor(slots), torch.tensor(blocks, dtype=torch.long), mask[:, None], q_index, q_valid, sample_rows)


@dataclass(slots=True)
class DecodeMeta:
    """A decode step's metadata in fixed shapes (one new token per sequence, each sampled), so that a
    captured CUDA graph can replay it: rows past the step's sequences are padding, writing their K/V
    into the lane's padding block 0 and attending it alone (their outputs are dropped)."""

    positions: torch.Tensor  # [B] position of each sequence's new token
    slots: torch.Tensor  # [B] flat KV slot it writes
    block_table: torch.Tensor  # [B, MB] int32 each sequence's blocks, padded with block 0
    context_lens: torch.Tensor  # [B] int32 tokens it attends (its new one included)

    @staticmethod
    def build(starts: list[int], block_tables: list[list[int]], rows: int, width: int, block_size: int = KV_BLOCK_TOKENS) -> "DecodeMeta":
        """Args:
        starts: per sequence, its cached tokens (= its new token's position).
        block_tables: per sequence, its KV blocks (covering the new token).
        rows: the padded batch (≥ len(starts)); width: MB, blocks per row (≥ every table's need).
        """
        # numpy, then one tensor per field: per-row tensor writes took 0.7 ms for 32 rows of 641 blocks
        n = len(starts)
        start = np.asarray(starts, dtype=np.int64)
        table = np.zeros((rows, width), dtype=np.int32)
        for i, t in enumerate(block_tables):
            used = -(-(starts[i] + 1) // block_size)
            table[i, :used] = t[:used]
        last = table[np.arange(n), start // block_size].astype(np.int64)
        positions, slots, lens = (np.zeros(rows, dtype=np.int64) for _ in range(3))
        positions[:n], slots[:n], lens[:n] = start, last * block_size + start % block_size, start + 1
        lens[n:] = 1  # padding rows attend their own (padding-block) slot only
        return DecodeMeta(torch.from_numpy(positions), torch.from_numpy(slots), torch.from_numpy(table), torch.from_numpy(lens.astype(np.int32)))

    def copy_(self, other: "DecodeMeta") -> None:
        """Fill these (static, device) buffers with `other`'s values."""
        for f in self.__slots__:
            getattr(self, f).copy_(getattr(other, f), non_blocking=True)

    def to(self, device: torch.device) -> "DecodeMeta":
        return DecodeMeta(*(getattr(self, f).to(device, non_blocking=True) for f in self.__slots__))


class KVPool:
    """K and V blocks of every attention layer a stage holds.

    Two layouts: flat slots [NB · BS, KVH, D] (slot = block · BS + offset: the eager stage and the
    `gather` form), or blocks [NB, KVH, BS, D] (`paged`: what OpenVINO's paged attention reads).
    """

    def __init__(
        self,
        layers: list[int],
        num_blocks: int,
        kv_heads: int,
        head_dim: int,
        dtype: torch.dtype,
        device: torch.device | str = "cpu",
        block_size: int = KV_BLOCK_TOKENS,
        paged: bool = False,
        values: bool = True,
    ):
        """Args:
        layers: model layer indices whose attention runs on this stage.
        num_blocks: blocks per layer (the lane's block count).
        kv_heads, head_dim: K/V shape per token.
        dtype: KV storage dtype.
        paged: the blocks layout (else flat slots).
        values: a V pool beside K; False: one tensor per token (MLA's latent, kept in `k`).
        """
        if paged:
            shape: tuple[int, ...] = (num_blocks, kv_heads, block_size, head_dim)
        else:
            shape = (num_blocks * block_size, kv_heads, head_dim)
        self.k = {l: torch.zeros(shape, dtype=dtype, device=device) for l in layers}
        self.v = {l: torch.zeros(shape, dtype=dtype, device=device) for l in layers} if values else {}
        self.num_blocks, self.block_size, self.paged = num_blocks, block_size, paged
        self.row_shape, self.dtype = (kv_heads, head_dim), dtype  # one token's K (or V)

    @property
    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for d in (self.k, self.v) for t in d.values())

    def _blocks(self, pool: torch.Tensor) -> torch.Tensor:
        """`pool` as [NB, ...]: one row per block, whichever the layout."""
        return pool if self.paged else pool.view(-1, self.block_size, *pool.shape[1:])

    def copy_blocks(self, pairs: list[tuple[int, int]]) -> None:
        """Copy each (src, dst) block's K and V in every layer (copy-on-write: hetc/kv_blocks.py)."""
        if not pairs:
            return
        src = torch.tensor([s for s, _ in pairs], dtype=torch.long)
        dst = torch.tensor([d for _, d in pairs], dtype=torch.long)
        for pool in (*self.k.values(), *self.v.values()):
            rows = self._blocks(pool)
            rows.index_copy_(0, dst.to(pool.device), rows.index_select(0, src.to(pool.device)))

    def zero_blocks(self, blocks: list[int]) -> None:
        """Zero these blocks' K and V in every layer."""
        ids = torch.tensor(blocks, dtype=torch.long)
        for pool in (*self.k.values(), *self.v.values()):
            self._blocks(pool).index_fill_(0, ids.to(pool.device), 0)

    @property
    def tensors(self) -> int:
        """Tensors cached per token and layer: K and V (2), or MLA's latent (1)."""
        return 2 if self.v else 1

    def _pools(self, layer: int) -> list[torch.Tensor]:
        return [self.k[layer], self.v[layer]] if self.v else [self.k[layer]]

    def read(self, layer: int, slots: torch.Tensor) -> torch.Tensor:
        """[tensors, n, KVH, D]: layer's K and V (or latent) at flat slots (block · BS + offset)."""
        if self.paged:
            b, o = slots // self.block_size, slots % self.block_size
            return torch.stack([p[b, :, o] for p in self._pools(layer)])
        return torch.stack([p[slots] for p in self._pools(layer)])

    def write(self, layer: int, slots: torch.Tensor, kv: torch.Tensor) -> None:
        """Store [tensors, n, KVH, D] at flat slots."""
        for pool, rows in zip(self._pools(layer), kv):
            if self.paged:
                pool[slots // self.block_size, :, slots % self.block_size] = rows
            else:
                pool.index_copy_(0, slots, rows)


def paged_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    pool: KVPool,
    layer: int,
    meta: AttnMeta,
    scale: float,
    window: int | None = None,
    sinks: torch.Tensor | None = None,
) -> torch.Tensor:
    """Write the new K/V into the pool, attend each query to its own sequence's context.

    Args:
        q: [T, H, Dh] rotated queries; k, v: [T, KVH, Dh] new keys (rotated) and values.
        layer: model layer index (selects the pool).
        scale: softmax scale (the module's own, usually Dh^-0.5).
        window: a sliding layer's window (keys of the last `window` positions only); None: full.
        sinks: [H] per-head logits added to the softmax's denominator (gpt-oss); None: none.
    Returns:
        [T, H * Dh] attention output, packed like q.
    """
    kc, vc = _write_new(pool, layer, meta.slots, k, v)
    b, _, q_max, width = meta.mask.shape
    keys, vals = (_gather_blocks(c, meta.blocks, b, pool.block_size) for c in (kc, vc))  # [B, L, KVH, Dh]
    keys, vals = keys.to(q.dtype).transpose(1, 2), vals.to(q.dtype).transpose(1, 2)  # [B, KVH, L, Dh]
    qb = q.view(b, q_max, *q.shape[1:]) if meta.q_index is None else q[meta.q_index]
    qb = qb.transpose(1, 2)  # [B, H, Q, Dh]
    mask = meta.mask
    if window is not None:
        q_pos = meta.positions.view(b, q_max) if meta.q_index is None else meta.positions[meta.q_index]  # [B, Q]
        j = torch.arange(width, device=q.device)
        inside = j[None, None, :] > q_pos[:, :, None] - window  # [B, Q, L]
        if meta.q_valid is not None:  # padding rows keep their key 0
            inside |= ~meta.q_valid[:, :, None]
        mask = mask & inside[:, None]
    o = attend(qb, keys, vals, mask, scale, sinks).transpose(1, 2)  # [B, Q, H, Dh]
    o = o.reshape(-1, *o.shape[2:]) if meta.q_valid is None else o[meta.q_valid]  # [T, H, Dh]
    return o.reshape(o.shape[0], -1)


def decode_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    pool: KVPool,
    layer: int,
    meta: DecodeMeta,
    scale: float,
    window: int | None = None,
    sinks: torch.Tensor | None = None,
) -> torch.Tensor:
    """A decode step's attention: write each sequence's new K/V into the pool, attend its context.

    On CUDA the context is read where it lies, block by block (backends/cuda/paged_decode.py);
    elsewhere, and for a sliding window or sinks (which that kernel lacks), through `gather_decode`.
    Shapes are fixed by the meta (graph-capturable either way).

    Args:
        q: [B, H, Dh] rotated queries; k, v: [B, KVH, Dh] the new keys (rotated) and values.
        window, sinks: as paged_attention's.
    Returns:
        [B, H * Dh].
    """
    kc, vc = _write_new(pool, layer, meta.slots, k, v)
    if window is not None or sinks is not None:
        return gather_decode(q, kc, vc, meta, scale, pool.block_size, window, sinks).flatten(1)
    if q.is_cuda:
        from hetc.backends.cuda.paged_decode import paged_decode

        return paged_decode(q, kc, vc, meta.block_table, meta.context_lens, scale, pool.block_size).flatten(1)
    return gather_decode(q, kc, vc, meta, scale, pool.block_size).flatten(1)


def gather_decode(
    q: torch.Tensor,
    k_pool: torch.Tensor,
    v_pool: torch.Tensor,
    meta: DecodeMeta,
    scale: float,
    block_size: int,
    window: int | None = None,
    sinks: torch.Tensor | None = None,
) -> torch.Tensor:
    """[B, H, Dh]: each query over its row's MB blocks gathered from the pools, masked past its length
    (the reference the CUDA kernel is checked against, and the CPU form); window, sinks: as
    paged_attention's."""
    b, width = meta.block_table.shape
    flat = meta.block_table.flatten().long()
    keys, vals = (_gather_blocks(p, flat, b, block_size).transpose(1, 2) for p in (k_pool, v_pool))  # [B, KVH, L, Dh]
    j = torch.arange(width * block_size, device=q.device)
    mask = j[None, :] < meta.context_lens[:, None]  # [B, L]
    if window is not None:  # the new token sits at context_lens - 1
        mask &= j[None, :] >= meta.context_lens[:, None] - window
    o = attend(q[:, :, None], keys.to(q.dtype), vals.to(q.dtype), mask[:, None, None, :], scale, sinks)  # [B, H, 1, Dh]
    return o[:, :, 0]


def latent_attention(
    q: torch.Tensor,
    latent: torch.Tensor,
    pool: KVPool,
    layer: int,
    meta: AttnMeta,
    scale: float,
    expand: Expand,
) -> torch.Tensor:
    """Multi-head latent attention over the paged pool: write each new token's latent, expand every
    context latent to its keys and values, attend as paged_attention does.

    Args:
        q: [T, H, Dqk] queries (rotary part rotated); latent: [T, 1, R] the new tokens' latents.
        expand: latents [..., 1, R] → keys [..., H, Dqk], values [..., H, Dv] (the layer's kv_b_proj).
    Returns:
        [T, H * Dv].
    """
    pool.k[layer].index_copy_(0, meta.slots, latent.to(pool.dtype))
    b, _, q_max, _ = meta.mask.shape
    keys, vals = expand(_gather_blocks(pool.k[layer], meta.blocks, b, pool.block_size).to(q.dtype))  # [B, L, H, D]
    qb = (q.view(b, q_max, *q.shape[1:]) if meta.q_index is None else q[meta.q_index]).transpose(1, 2)  # [B, H, Q, Dqk]
    o = attend(qb, keys.transpose(1, 2), vals.transpose(1, 2), meta.mask, scale, None).transpose(1, 2)  # [B, Q, H, Dv]
    o = o.reshape(-1, *o.shape[2:]) if meta.q_valid is None else o[meta.q_valid]
    return o.reshape(o.shape[0], -1)


def latent_decode(
    q: torch.Tensor,
    latent: torch.Tensor,
    pool: KVPool,
    layer: int,
    meta: DecodeMeta,
    scale: float,
    absorbed: tuple[torch.Tensor, torch.Tensor],
) -> torch.Tensor:
    """A decode step of multi-head latent attention over the cached latents themselves, the
    up-projections absorbed (DeepSeek-V2 §2.1.2; vLLM's MLA decode): each head's no-rope query goes
    through W_UK into the latent space, scores are over the latents and the shared rotary keys, and
    the heads' mixes of latents go through W_UV. The same products as latent_attention's, without
    up-projecting every cached latent each step.

    Args:
        q: [B, H, nope + rope] queries (rotary part rotated); latent: [B, 1, R + rope] the new tokens'.
        absorbed: W_UK [H, nope, R] and W_UV [H, v, R] (DecoderStage.mla_absorbed).
    Returns:
        [B, H * v].
    """
    pool.k[layer].index_copy_(0, meta.slots, latent.to(pool.dtype))
    w_uk, w_uv = absorbed
    nope, rank = w_uk.shape[1], w_uk.shape[2]
    b, width = meta.block_table.shape
    cached = _gather_blocks(pool.k[layer], meta.block_table.flatten().long(), b, pool.block_size).to(q.dtype).transpose(1, 2)  # [B, 1, L, R + rope]
    query = torch.cat((torch.einsum("bhn,hnr->bhr", q[..., :nope], w_uk), q[..., nope:]), dim=-1)  # [B, H, R + rope]
    j = torch.arange(width * pool.block_size, device=q.device)
    mask = (j[None, :] < meta.context_lens[:, None])[:, None, None, :]
    mixed = attend(query[:, :, None], cached, cached[..., :rank], mask, scale, None)[:, :, 0]  # [B, H, R]
    return torch.einsum("bhr,hvr->bhv", mixed, w_uv).flatten(1)


def attend(q: torch.Tensor, keys: torch.Tensor, vals: torch.Tensor, mask: torch.Tensor, scale: float, sinks: torch.Tensor | None) -> torch.Tensor:
    """Masked softmax attention, [B, H, Q, Dh]: q [B, H, Q, Dh]; keys, vals [B, KVH, L, Dh]; mask
    broadcasting to [B, H, Q, L] (True: attend). With sinks [H], each head's softmax also counts
    exp(sink) in its denominator (a logit that attends no value), as gpt-oss's attention does."""
    gqa = q.shape[1] != keys.shape[1]
    if sinks is None:
        return F.scaled_dot_product_attention(q, keys, vals, attn_mask=mask, scale=scale, enable_gqa=gqa)
    rep = q.shape[1] // keys.shape[1]
    keys, vals = keys.repeat_interleave(rep, dim=1), vals.repeat_interleave(rep, dim=1)
    logits = (q @ keys.transpose(-1, -2) * scale).masked_fill(~mask, float("-inf"))  # [B, H, Q, L]
    sink = sinks.to(logits.dtype)[None, :, None, None].expand(*logits.shape[:-1], 1)
    probs = torch.cat([logits, sink], dim=-1).softmax(dim=-1)[..., :-1]
    return probs.to(vals.dtype) @ vals


def _write_new(pool: KVPool, layer: int, slots: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Store the new tokens' K and V at their flat slots of `layer`'s pools; returns the pools."""
    kc, vc = pool.k[layer], pool.v[layer]
    kc.index_copy_(0, slots, k.to(kc.dtype))
    vc.index_copy_(0, slots, v.to(vc.dtype))
    return kc, vc


def _gather_blocks(pool: torch.Tensor, blocks: torch.Tensor, b: int, block_size: int) -> torch.Tensor:
    """[B, L, KVH, Dh]: each of b sequences' blocks (`blocks`: [B · NB], row-major) from a flat pool.
    Whole blocks (block_size contiguous slots) per sequence: B·NB row copies instead of B·L slot
    lookups (8 sequences, context 80: 110 instead of 165 µs per K or V, caches cold)."""
    rows = pool.view(-1, block_size, *pool.shape[1:]).index_select(0, blocks)
    return rows.view(b, -1, *pool.shape[1:])
