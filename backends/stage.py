"""A stage as a module of plain tensors (the contract in hetc/stage.py), for torch.export and the
vendor toolchains.

The math is the decoder stage's (backends/decoder.py), the eager runtime's too; what is this
module's own is the attention over the cached past plus the new tokens. Two attention forms:
`FunctionalStage` (gather) gathers the past from read-only block pools through a block table and
returns the new K/V rows, never writing in place; K/V heads are expanded with `repeat_interleave`
(SDPA's `enable_gqa` does not export to ONNX, pytorch#151762) and the attention is written out as
matmul + softmax. `PagedStage` (paged) packs the tokens and leaves attention to one
`hetc::paged_attention` op, which the toolchain maps to its paged-attention kernel.
"""

from __future__ import annotations

import warnings

import torch

from hetc.backends.decoder import DecoderStage, UnitLike
from hetc.backends.paged_attention import paged_attention
from hetc.errors import BadInput
from hetc.plan import UnitKind
from hetc.scheduling import KV_BLOCK_TOKENS
from hetc.stage import AttentionForm
from hetc.weights import MetaWeights, WeightSpec

__all__ = ["FunctionalStage", "PagedStage", "UnitLike", "example_inputs", "export_stage", "stage_class", "weight_specs", "write_kv"]

# what a compiled stage lowers: a decoder's units without MoE
COMPILED_KINDS = (UnitKind.EMBED, UnitKind.ATTENTION, UnitKind.MLP, UnitKind.NORM, UnitKind.HEAD)


class FunctionalStage(DecoderStage):
    """Units [first, last] of a decoder LLM with the compiled-stage signature's `gather` form."""

    form = AttentionForm.GATHER

    def __init__(self, cfg, units: list[UnitLike], first: int, last: int, *, dtype: torch.dtype, weights):
        """Args:
        cfg: the transformers config of the model.
        units: the whole unit table (embed, attention/mlp per layer, norm, head).
        first, last: this stage's units, inclusive.
        dtype: compute and weight dtype.
        weights: `.get(name, shape, dtype)` (hetc.weights: safetensors or random).
        """
        bad = sorted({str(u.kind) for u in units[first : last + 1]} - set(COMPILED_KINDS))
        if bad:
            raise BadInput(
                f"units of kind {', '.join(bad)} have no compiled-stage lowering yet.",
                field="units",
                fix="compile a Llama-family decoder, or serve with --executor torch.",
            )
        super().__init__(cfg, units, first, last, dtype=dtype, load=lambda name, shape: weights.get(name, shape, dtype))
        if self.rotary is not None:  # persistent: torch-mlir's importer finds buffers in the state dict only
            for name, buf in list(self.rotary.named_buffers(recurse=False)):
                self.rotary.register_buffer(name, buf, persistent=True)
        self.groups = cfg.num_attention_heads // self.kv_heads

    def forward(  # type: ignore[override]
        self, x: torch.Tensor, positions: torch.Tensor, past_lens: torch.Tensor, block_table: torch.Tensor, *rest: torch.Tensor
    ) -> tuple[torch.Tensor, ...]:
        select = rest[0] if self.selects else None
        pools = rest[1:] if self.selects else rest
        new_kv: list[torch.Tensor] = []
        mask = None

        def attend(li: int, layer: int, h: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
            nonlocal mask
            if mask is None:
                mask = self._mask(positions, past_lens, block_table.shape[1] * KV_BLOCK_TOKENS)
            o, k, v = self._attention(layer, h, cos, sin, mask, block_table, pools[2 * li], pools[2 * li + 1])
            new_kv.extend((k, v))
            return o

        return (self.run_units(x, positions, select, attend), *new_kv)

    def _rotary(self, x: torch.Tensor, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        cos, sin = self.rotary(x, positions)  # [B, T, D]
        return cos[:, :, None], sin[:, :, None]

    def _select(self, x: torch.Tensor, select: torch.Tensor) -> torch.Tensor:
        """[B, T, H] → [B, H]: the sampled rows only (a gather: IREE rejects two-tensor indexing)."""
        return x.gather(1, select[:, None, None].expand(-1, 1, x.shape[-1])).squeeze(1)

    @staticmethod
    def _mask(positions: torch.Tensor, past_lens: torch.Tensor, past_slots: int) -> torch.Tensor:
        """[B, 1, T, P + T] True where a query may attend: cached keys below its sequence's past
        length, new keys at or before its own position (padding repeats a real position)."""
        past = torch.arange(past_slots, device=positions.device)[None, :] < past_lens[:, None]  # [B, P]
        past = past[:, None, :].expand(-1, positions.shape[1], -1)  # [B, T, P]
        new = positions[:, None, :] <= positions[:, :, None]  # [B, T(query), T(key)]
        return torch.cat((past, new), dim=-1)[:, None]

    def _attention(self, layer: int, h: torch.Tensor, cos, sin, mask, block_table, k_pool, v_pool):
        b, t, _ = h.shape
        d = self.head_dim
        q, k, v = self.qkv(layer, h, cos, sin)  # [B, T, H, D]
        nb = block_table.shape[1] * KV_BLOCK_TOKENS
        flat = block_table.reshape(-1)
        past_k = k_pool.index_select(0, flat).reshape(b, nb, self.kv_heads, d).to(q.dtype)  # [B, P, KVH, D]
        past_v = v_pool.index_select(0, flat).reshape(b, nb, self.kv_heads, d).to(q.dtype)
        keys = torch.cat((past_k, k), dim=1).repeat_interleave(self.groups, dim=2).transpose(1, 2)  # [B, Hq, S, D]
        vals = torch.cat((past_v, v), dim=1).repeat_interleave(self.groups, dim=2).transpose(1, 2)
        scores = q.transpose(1, 2) @ keys.transpose(-1, -2) * self.attention_scale(layer)  # [B, Hq, T, S]
        scores = scores.float().masked_fill(~mask, float("-inf"))
        o = (scores.softmax(-1).to(vals.dtype) @ vals).transpose(1, 2).reshape(b, t, -1)  # [B, T, Hq·D]
        return self.o_proj(layer, o), k.to(k_pool.dtype), v.to(v_pool.dtype)


class PagedStage(FunctionalStage):
    """The same units with the `paged` signature: packed tokens, attention by `hetc::paged_attention`
    over caches [NB, KVH, BS, D] that it reads and writes in place."""

    form = AttentionForm.PAGED

    def forward(  # type: ignore[override]
        self,
        x: torch.Tensor,
        positions: torch.Tensor,
        past_lens: torch.Tensor,
        subsequence_begins: torch.Tensor,
        block_indices: torch.Tensor,
        block_indices_begins: torch.Tensor,
        max_context_len: torch.Tensor,
        *rest: torch.Tensor,
    ) -> torch.Tensor:  # the other form's signature
        select = rest[0] if self.selects else None
        caches = rest[1:] if self.selects else rest
        meta = (past_lens, subsequence_begins, block_indices, block_indices_begins, max_context_len)

        def attend(li: int, layer: int, h: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
            q, k, v = self.qkv(layer, h, cos, sin)  # [T, H, D]
            t = h.shape[0]
            o = paged_attention(
                q.reshape(t, -1),
                k.reshape(t, -1),
                v.reshape(t, -1),
                caches[2 * li],
                caches[2 * li + 1],
                *meta,
                self.attention_scale(layer),
                self.kv_heads,
                self.head_dim,
            )
            return self.o_proj(layer, o)

        return self.run_units(x, positions, select, attend)

    # packed rows, as the eager stage's: the decoder stage's own hooks, not FunctionalStage's padded ones
    _rotary = DecoderStage._rotary
    _select = DecoderStage._select


def write_kv(pool: torch.Tensor, block_table: torch.Tensor, positions: torch.Tensor, rows: torch.Tensor, valid: torch.Tensor | None = None) -> None:
    """Write new K or V rows into a block pool (what the runtime does with a stage's outputs).

    Args:
        pool: [NB, BS, KVH, D]; block_table: [B, MB] covering the new positions too.
        positions: [B, T]; rows: [B, T, KVH, D]; valid: [B, T] rows to write (default all).
    """
    keep = valid if valid is not None else torch.ones_like(positions, dtype=torch.bool)
    seq, _ = keep.nonzero(as_tuple=True)
    pos = positions[keep]  # padding rows may point past the table: only real rows are looked up
    slots = block_table[seq, pos // KV_BLOCK_TOKENS] * KV_BLOCK_TOKENS + pos % KV_BLOCK_TOKENS
    pool.view(-1, *pool.shape[2:])[slots] = rows[keep].to(pool.dtype)


def stage_class(form: AttentionForm) -> type[FunctionalStage]:
    """The stage module for an attention form."""
    return PagedStage if form is AttentionForm.PAGED else FunctionalStage


def weight_specs(cfg, units: list[UnitLike], first: int, last: int, dtype: torch.dtype) -> list[WeightSpec]:
    """The model weights stage [first, last] takes (name, shape, dtype), from the stage built on the
    meta device: no weight is read."""
    stage = FunctionalStage(cfg, units, first, last, dtype=dtype, weights=MetaWeights())
    params = dict(stage.named_parameters())
    return [(name, params[fqn].shape, params[fqn].dtype) for fqn, name in stage.weight_names.items()]


def example_inputs(
    stage: FunctionalStage,
    *,
    batch: int,
    new: int,
    past: list[int],
    num_blocks: int,
    hidden: int,
    vocab: int,
    dtype: torch.dtype,
    kv_dtype: torch.dtype,
    generator: torch.Generator,
) -> list[torch.Tensor]:
    """Inputs in the signature's order (of the stage's form): random tokens/hidden states and KV
    blocks, `new` tokens per sequence after `past[b]` cached ones, each sequence's blocks drawn at
    random (non-contiguous)."""
    g = generator
    mb = [max(1, -(-(p + new) // KV_BLOCK_TOKENS)) for p in past]
    lead = (batch, new) if stage.form is AttentionForm.GATHER else (batch * new,)
    if stage.first_stage:
        x = torch.randint(0, vocab, lead, generator=g)
    else:
        x = torch.randn(*lead, hidden, generator=g).to(dtype)
    past_t = torch.tensor(past)
    positions = past_t[:, None] + torch.arange(new)[None, :]
    kv_shape = (num_blocks, KV_BLOCK_TOKENS, stage.kv_heads, stage.head_dim)
    if stage.form is AttentionForm.PAGED:  # distinct blocks: the op writes the new rows into them
        kv_shape = (num_blocks, stage.kv_heads, KV_BLOCK_TOKENS, stage.head_dim)
        perm = torch.randperm(num_blocks, generator=g)[: sum(mb)]
        i32 = torch.int32
        args = [
            x,
            positions.reshape(-1),
            past_t.to(i32),
            (torch.arange(batch + 1) * new).to(i32),
            perm.to(i32),
            torch.tensor([0, *mb]).cumsum(0).to(i32),
            torch.tensor(max(past) + new, dtype=i32),
        ]
        if stage.selects:
            args.append(torch.arange(1, batch + 1) * new - 1)
    else:
        width = max(mb)
        table = torch.stack([torch.randperm(num_blocks, generator=g)[:width] for _ in range(batch)])
        args = [x, positions, past_t, table]
        if stage.selects:
            args.append(torch.full((batch,), new - 1))
    for _ in stage.attention_layers:
        for _ in range(2):
            args.append((torch.randn(*kv_shape, generator=g) * 0.5).to(kv_dtype))
    return args


def export_stage(stage: FunctionalStage, *, hidden: int, vocab: int, dtype: torch.dtype, kv_dtype: torch.dtype) -> torch.export.ExportedProgram:
    """torch.export the stage with the signature's dims dynamic: one program for every shape.

    The example inputs give every dynamic dim a size ≥ 2 (export specializes sizes 0 and 1) and
    unrelated dims different sizes (export would take equal sizes for one symbol).
    """
    from torch.export import Dim, export

    lim = {"B": 4096, "T": 1 << 17, "MB": 1 << 16, "NB": 1 << 24, "NBT": 1 << 24, "S": 1 << 17}
    d = {n: Dim(n, min=1 if n != "NB" else 2, max=m) for n, m in lim.items()}
    n_kv = 2 * len(stage.attention_layers)
    g = torch.Generator().manual_seed(0)
    if stage.form is AttentionForm.PAGED:  # T 6, B 2 (+1: 3), NBT 4, S 5, NB 7
        args = example_inputs(
            stage, batch=2, new=3, past=[3 * KV_BLOCK_TOKENS - 5, 7], num_blocks=7, hidden=hidden, vocab=vocab, dtype=dtype, kv_dtype=kv_dtype, generator=g
        )
        if stage.selects:
            args[7] = torch.tensor([5, 0, 2, 2, 4])
        b1 = d["B"] + 1
        dims = [{0: d["T"]}, {0: d["T"]}, {0: d["B"]}, {0: b1}, {0: d["NBT"]}, {0: b1}, None]
        rest = ([{0: d["S"]}] if stage.selects else []) + [{0: d["NB"]}] * n_kv
    else:
        args = example_inputs(
            stage, batch=2, new=3, past=[KV_BLOCK_TOKENS + 8, 7], num_blocks=6, hidden=hidden, vocab=vocab, dtype=dtype, kv_dtype=kv_dtype, generator=g
        )
        dims = [{0: d["B"], 1: d["T"]}, {0: d["B"], 1: d["T"]}, {0: d["B"]}, {0: d["B"], 1: d["MB"]}]
        rest = ([{0: d["B"]}] if stage.selects else []) + [{0: d["NB"]}] * n_kv
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return export(stage, tuple(args), dynamic_shapes=(*dims, tuple(rest)) if rest else tuple(dims), strict=False)
