"""A stage as a functional module of plain tensors (the contract in hetc/stage.py), built from
the model's own transformers modules, for torch.export and the vendor toolchains.

The math is the runtime's (runtime/model_runner.py): Llama-family blocks, rotary on Q and K,
grouped-query attention over the cached past plus the new tokens. Here the past is gathered
from read-only block pools through a block table and the new K/V rows are returned, never
written in place; K/V heads are expanded with `repeat_interleave` (SDPA's `enable_gqa` does
not export to ONNX, pytorch#151762) and the attention is written out as matmul + softmax.
"""

from __future__ import annotations

import warnings
from typing import Protocol

import torch
from torch import nn

from hetc.errors import BadInput
from hetc.scheduling import KV_BLOCK_TOKENS

__all__ = ["FunctionalStage", "UnitLike", "write_kv"]

_KINDS = ("embed", "attention", "mlp", "norm", "head")


class UnitLike(Protocol):
    index: int
    kind: str
    layer: int


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    a, b = x.chunk(2, dim=-1)
    return torch.cat((-b, a), dim=-1)


class FunctionalStage(nn.Module):
    """Units [first, last] of a decoder LLM with the compiled-stage signature."""

    def __init__(self, cfg, units: list[UnitLike], first: int, last: int, *, dtype: torch.dtype, weights):
        """Args:
            cfg: the transformers config of the model.
            units: the whole unit table (embed, attention/mlp per layer, norm, head).
            first, last: this stage's units, inclusive.
            dtype: compute and weight dtype.
            weights: `.get(name, shape, dtype)` (hetc.weights: safetensors or random).
        """
        super().__init__()
        from transformers import AutoModelForCausalLM

        mine = units[first: last + 1]
        bad = sorted({u.kind for u in mine} - set(_KINDS))
        if bad:
            raise BadInput(f"units of kind {', '.join(bad)} have no compiled-stage lowering yet.", field="units",
                           fix="compile a Llama-family decoder, or serve with --executor torch.")
        self.kinds = [(u.kind, u.layer) for u in mine]
        self.fused_final_norm = "norm" not in [u.kind for u in units]
        select_at = next(u.index for u in units if u.kind in ("norm", "head"))
        self.selects = first <= select_at <= last
        self.select_pos = select_at - first  # the unit before which rows are cut to `select`
        self.first_stage = mine[0].kind == "embed"
        self.head = mine[-1].kind == "head"
        self.attention_layers = [u.layer for u in mine if u.kind == "attention"]
        with torch.device("meta"), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            full = AutoModelForCausalLM.from_config(cfg, dtype=dtype, attn_implementation="eager")
        backbone = full.get_decoder() if hasattr(full, "get_decoder") else full.model
        names = {m: n for n, m in full.named_modules()}
        wanted: dict[str, nn.Module] = {}
        for kind, layer in self.kinds:
            if kind == "embed":
                wanted["embed"] = full.get_input_embeddings()
            elif kind == "attention":
                blk = backbone.layers[layer]
                wanted[f"ln{layer}"], wanted[f"attn{layer}"] = blk.input_layernorm, blk.self_attn
            elif kind == "mlp":
                blk = backbone.layers[layer]
                wanted[f"post{layer}"], wanted[f"mlp{layer}"] = blk.post_attention_layernorm, blk.mlp
            if kind == "norm" or (kind == "head" and self.fused_final_norm):
                wanted["norm"] = backbone.norm
            if kind == "head":
                wanted["head"] = full.get_output_embeddings()
        for mod in wanted.values():
            for name, p in list(mod.named_parameters()):
                leaf_mod = mod.get_submodule(name.rpartition(".")[0]) if "." in name else mod
                t = weights.get(f"{names[mod]}.{name}", p.shape, dtype)
                setattr(leaf_mod, name.rpartition(".")[2], nn.Parameter(t, requires_grad=False))
        self.mods = nn.ModuleDict(wanted)
        self.rotary = type(backbone.rotary_emb)(config=cfg) if self.attention_layers else None
        if self.rotary is not None:  # persistent: torch-mlir's importer finds buffers in the state dict only
            for name, buf in list(self.rotary.named_buffers(recurse=False)):
                self.rotary.register_buffer(name, buf, persistent=True)
        heads = cfg.num_attention_heads
        self.head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // heads
        self.kv_heads = getattr(cfg, "num_key_value_heads", None) or heads
        self.groups = heads // self.kv_heads
        del full

    def forward(self, x: torch.Tensor, positions: torch.Tensor, past_lens: torch.Tensor, block_table: torch.Tensor,
                *rest: torch.Tensor) -> tuple[torch.Tensor, ...]:
        select = rest[0] if self.selects else None
        pools = rest[1:] if self.selects else rest
        new_kv: list[torch.Tensor] = []
        cos = sin = None
        mask = None
        li = 0
        for i, (kind, layer) in enumerate(self.kinds):
            if select is not None and i == self.select_pos:
                # [B, T, H] → [B, H]: the sampled rows only (a gather: IREE rejects two-tensor indexing)
                x = x.gather(1, select[:, None, None].expand(-1, 1, x.shape[-1])).squeeze(1)
            if kind == "embed":
                x = self.mods["embed"](x)  # [B, T] → [B, T, H]
            elif kind == "attention":
                if cos is None:
                    cos, sin = self.rotary(x, positions)  # [B, T, D]
                    cos, sin = cos[:, :, None], sin[:, :, None]
                    mask = self._mask(positions, past_lens, block_table.shape[1] * KV_BLOCK_TOKENS)
                o, k, v = self._attention(layer, self.mods[f"ln{layer}"](x), cos, sin, mask, block_table,
                                          pools[2 * li], pools[2 * li + 1])
                x = x + o
                new_kv += [k, v]
                li += 1
            elif kind == "mlp":
                x = x + self.mods[f"mlp{layer}"](self.mods[f"post{layer}"](x))
            elif kind == "norm":
                x = self.mods["norm"](x)
            elif kind == "head":
                if self.fused_final_norm:
                    x = self.mods["norm"](x)
                x = self.mods["head"](x).float()  # [B, V]
        return (x, *new_kv)

    @staticmethod
    def _mask(positions: torch.Tensor, past_lens: torch.Tensor, past_slots: int) -> torch.Tensor:
        """[B, 1, T, P + T] True where a query may attend: cached keys below its sequence's past
        length, new keys at or before its own position (padding repeats a real position)."""
        past = torch.arange(past_slots, device=positions.device)[None, :] < past_lens[:, None]  # [B, P]
        past = past[:, None, :].expand(-1, positions.shape[1], -1)  # [B, T, P]
        new = positions[:, None, :] <= positions[:, :, None]  # [B, T(query), T(key)]
        return torch.cat((past, new), dim=-1)[:, None]

    def _attention(self, layer: int, h: torch.Tensor, cos, sin, mask, block_table, k_pool, v_pool):
        attn = self.mods[f"attn{layer}"]
        b, t, _ = h.shape
        d = self.head_dim
        q = attn.q_proj(h).view(b, t, -1, d)  # [B, T, Hq, D]
        k = attn.k_proj(h).view(b, t, self.kv_heads, d)  # [B, T, KVH, D]
        v = attn.v_proj(h).view(b, t, self.kv_heads, d)
        if hasattr(attn, "q_norm"):  # qwen3: per-head RMSNorm before rotary
            q, k = attn.q_norm(q), attn.k_norm(k)
        q = q * cos + _rotate_half(q) * sin
        k = k * cos + _rotate_half(k) * sin
        nb = block_table.shape[1] * KV_BLOCK_TOKENS
        flat = block_table.reshape(-1)
        past_k = k_pool.index_select(0, flat).reshape(b, nb, self.kv_heads, d).to(q.dtype)  # [B, P, KVH, D]
        past_v = v_pool.index_select(0, flat).reshape(b, nb, self.kv_heads, d).to(q.dtype)
        keys = torch.cat((past_k, k), dim=1).repeat_interleave(self.groups, dim=2).transpose(1, 2)  # [B, Hq, S, D]
        vals = torch.cat((past_v, v), dim=1).repeat_interleave(self.groups, dim=2).transpose(1, 2)
        scores = q.transpose(1, 2) @ keys.transpose(-1, -2) * getattr(attn, "scaling", d ** -0.5)  # [B, Hq, T, S]
        scores = scores.float().masked_fill(~mask, float("-inf"))
        o = (scores.softmax(-1).to(vals.dtype) @ vals).transpose(1, 2).reshape(b, t, -1)  # [B, T, Hq·D]
        return attn.o_proj(o), k.to(k_pool.dtype), v.to(v_pool.dtype)


def write_kv(pool: torch.Tensor, block_table: torch.Tensor, positions: torch.Tensor, rows: torch.Tensor,
             valid: torch.Tensor | None = None) -> None:
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


def example_inputs(stage: FunctionalStage, *, batch: int, new: int, past: list[int], num_blocks: int,
                   hidden: int, vocab: int, dtype: torch.dtype, kv_dtype: torch.dtype,
                   generator: torch.Generator) -> list[torch.Tensor]:
    """Inputs in the signature's order: random tokens/hidden states and KV pools, `new` tokens per
    sequence after `past[b]` cached ones, block tables drawn at random (non-contiguous)."""
    g = generator
    mb = max(1, -(-(max(past) + new) // KV_BLOCK_TOKENS))
    if stage.first_stage:
        x = torch.randint(0, vocab, (batch, new), generator=g)
    else:
        x = torch.randn(batch, new, hidden, generator=g).to(dtype)
    past_t = torch.tensor(past)
    positions = past_t[:, None] + torch.arange(new)[None, :]
    table = torch.stack([torch.randperm(num_blocks, generator=g)[:mb] for _ in range(batch)])
    args = [x, positions, past_t, table]
    if stage.selects:
        args.append(torch.full((batch,), new - 1))
    for _ in stage.attention_layers:
        for _ in range(2):
            args.append((torch.randn(num_blocks, KV_BLOCK_TOKENS, stage.kv_heads, stage.head_dim, generator=g)
                         * 0.5).to(kv_dtype))
    return args


def export_stage(stage: FunctionalStage, *, hidden: int, vocab: int, dtype: torch.dtype,
                 kv_dtype: torch.dtype) -> torch.export.ExportedProgram:
    """torch.export the stage with the signature's dims dynamic (B, T, MB, NB): one program for all.

    The example inputs have every dynamic dim ≥ 2 (export specializes sizes 0 and 1).
    """
    from torch.export import Dim, export

    args = example_inputs(stage, batch=2, new=3, past=[20, 7], num_blocks=6, hidden=hidden, vocab=vocab,
                          dtype=dtype, kv_dtype=kv_dtype, generator=torch.Generator().manual_seed(0))

    b, t, mb, nb = (Dim(n, min=1, max=m) for n, m in (("B", 4096), ("T", 1 << 17), ("MB", 1 << 16), ("NB", 1 << 24)))
    dims = [{0: b, 1: t}, {0: b, 1: t}, {0: b}, {0: b, 1: mb}]
    n_pools = 2 * len(stage.attention_layers)
    rest = ([{0: b}] if stage.selects else []) + [{0: nb}] * n_pools
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return export(stage, tuple(args), dynamic_shapes=(*dims, tuple(rest)), strict=False)
