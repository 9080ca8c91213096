"""A stage as a module of plain tensors (the contract in hetc/stage.py), built from the model's
own transformers modules, for torch.export and the vendor toolchains.

The math is the runtime's (runtime/model_runner.py): Llama-family blocks, rotary on Q and K,
grouped-query attention over the cached past plus the new tokens. Two attention forms:
`FunctionalStage` (gather) gathers the past from read-only block pools through a block table and
returns the new K/V rows, never writing in place; K/V heads are expanded with `repeat_interleave`
(SDPA's `enable_gqa` does not export to ONNX, pytorch#151762) and the attention is written out as
matmul + softmax. `PagedStage` (paged) packs the tokens and leaves attention to one
`hetc::paged_attention` op, which the toolchain maps to its paged-attention kernel.
"""

from __future__ import annotations

import warnings
from typing import Protocol

import torch
from torch import nn

from hetc.backends.paged_attention import paged_attention
from hetc.errors import BadInput
from hetc.scheduling import KV_BLOCK_TOKENS
from hetc.stage import AttentionForm, select_at
from hetc.weights import MetaWeights, WeightSpec

__all__ = ["FunctionalStage", "PagedStage", "UnitLike", "example_inputs", "export_stage", "stage_class", "weight_specs",
           "write_kv"]

_KINDS = ("embed", "attention", "mlp", "norm", "head")


class UnitLike(Protocol):
    index: int
    kind: str
    layer: int


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    a, b = x.chunk(2, dim=-1)
    return torch.cat((-b, a), dim=-1)


class FunctionalStage(nn.Module):
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
        super().__init__()
        from transformers import AutoModelForCausalLM

        mine = units[first: last + 1]
        bad = sorted({u.kind for u in mine} - set(_KINDS))
        if bad:
            raise BadInput(f"units of kind {', '.join(bad)} have no compiled-stage lowering yet.", field="units",
                           fix="compile a Llama-family decoder, or serve with --executor torch.")
        self.kinds = [(u.kind, u.layer) for u in mine]
        self.fused_final_norm = "norm" not in [u.kind for u in units]
        cut = select_at([u.kind for u in units])
        self.selects = first <= cut <= last
        self.select_pos = cut - first  # the unit before which rows are cut to `select`
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
        # this stage's parameter names → the model's (what its safetensors call them)
        self.weight_names: dict[str, str] = {}
        for key, mod in wanted.items():
            for name, p in list(mod.named_parameters()):
                leaf_mod = mod.get_submodule(name.rpartition(".")[0]) if "." in name else mod
                t = weights.get(f"{names[mod]}.{name}", p.shape, dtype)
                setattr(leaf_mod, name.rpartition(".")[2], nn.Parameter(t, requires_grad=False))
                self.weight_names[f"mods.{key}.{name}"] = f"{names[mod]}.{name}"
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
        mask = None

        def attend(li: int, layer: int, h: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
            nonlocal mask
            if mask is None:
                mask = self._mask(positions, past_lens, block_table.shape[1] * KV_BLOCK_TOKENS)
            o, k, v = self._attention(layer, h, cos, sin, mask, block_table, pools[2 * li], pools[2 * li + 1])
            new_kv.extend((k, v))
            return o

        return (self._run(x, positions, select, attend), *new_kv)

    def _run(self, x: torch.Tensor, positions: torch.Tensor, select: torch.Tensor | None, attend) -> torch.Tensor:
        """The stage's units in order; `attend(i, layer, normed x, cos, sin)` is the i-th attention."""
        cos = sin = None
        li = 0
        for i, (kind, layer) in enumerate(self.kinds):
            if select is not None and i == self.select_pos:
                x = self._select(x, select)
            if kind == "embed":
                x = self.mods["embed"](x)
            elif kind == "attention":
                if cos is None:  # here, not before the units: before the embedding x holds ids, not hidden states
                    cos, sin = self._rotary(x, positions)
                x = x + attend(li, layer, self.mods[f"ln{layer}"](x), cos, sin)
                li += 1
            elif kind == "mlp":
                x = x + self.mods[f"mlp{layer}"](self.mods[f"post{layer}"](x))
            elif kind == "norm":
                x = self.mods["norm"](x)
            elif kind == "head":
                if self.fused_final_norm:
                    x = self.mods["norm"](x)
                x = self.mods["head"](x).float()
        return x

    def _rotary(self, x: torch.Tensor, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        cos, sin = self.rotary(x, positions)  # [B, T, D]
        return cos[:, :, None], sin[:, :, None]

    @staticmethod
    def _select(x: torch.Tensor, select: torch.Tensor) -> torch.Tensor:
        """[B, T, H] → [B, H]: the sampled rows only (a gather: IREE rejects two-tensor indexing)."""
        return x.gather(1, select[:, None, None].expand(-1, 1, x.shape[-1])).squeeze(1)

    def _qkv(self, layer: int, h: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor):
        """The layer's rotated queries [..., Hq, D] and keys, and values [..., KVH, D]."""
        attn = self.mods[f"attn{layer}"]
        lead, d = h.shape[:-1], self.head_dim
        q = attn.q_proj(h).view(*lead, -1, d)
        k = attn.k_proj(h).view(*lead, self.kv_heads, d)
        v = attn.v_proj(h).view(*lead, self.kv_heads, d)
        if hasattr(attn, "q_norm"):  # qwen3: per-head RMSNorm before rotary
            q, k = attn.q_norm(q), attn.k_norm(k)
        return q * cos + _rotate_half(q) * sin, k * cos + _rotate_half(k) * sin, v

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
        q, k, v = self._qkv(layer, h, cos, sin)  # [B, T, H, D]
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


class PagedStage(FunctionalStage):
    """The same units with the `paged` signature: packed tokens, attention by `hetc::paged_attention`
    over caches [NB, KVH, BS, D] that it reads and writes in place."""

    form = AttentionForm.PAGED

    def forward(self, x: torch.Tensor, positions: torch.Tensor, past_lens: torch.Tensor,
                subsequence_begins: torch.Tensor, block_indices: torch.Tensor, block_indices_begins: torch.Tensor,
                max_context_len: torch.Tensor, *rest: torch.Tensor) -> torch.Tensor:
        select = rest[0] if self.selects else None
        caches = rest[1:] if self.selects else rest
        meta = (past_lens, subsequence_begins, block_indices, block_indices_begins, max_context_len)

        def attend(li: int, layer: int, h: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
            attn = self.mods[f"attn{layer}"]
            q, k, v = self._qkv(layer, h, cos, sin)  # [T, H, D]
            t = h.shape[0]
            o = paged_attention(q.reshape(t, -1), k.reshape(t, -1), v.reshape(t, -1), caches[2 * li],
                                caches[2 * li + 1], *meta, float(getattr(attn, "scaling", self.head_dim ** -0.5)),
                                self.kv_heads, self.head_dim)
            return attn.o_proj(o)

        return self._run(x, positions, select, attend)

    def _rotary(self, x: torch.Tensor, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        cos, sin = self.rotary(x, positions[None])  # [1, T, D]
        return cos[0, :, None], sin[0, :, None]

    @staticmethod
    def _select(x: torch.Tensor, select: torch.Tensor) -> torch.Tensor:
        return x.index_select(0, select)  # [T, H] → [S, H]

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


def stage_class(form: AttentionForm) -> type[FunctionalStage]:
    """The stage module for an attention form."""
    return PagedStage if form is AttentionForm.PAGED else FunctionalStage


def weight_specs(cfg, units: list[UnitLike], first: int, last: int, dtype: torch.dtype) -> list[WeightSpec]:
    """The model weights stage [first, last] takes (name, shape, dtype), from the stage built on the
    meta device: no weight is read."""
    stage = FunctionalStage(cfg, units, first, last, dtype=dtype, weights=MetaWeights())
    params = dict(stage.named_parameters())
    return [(name, params[fqn].shape, params[fqn].dtype) for fqn, name in stage.weight_names.items()]


def example_inputs(stage: FunctionalStage, *, batch: int, new: int, past: list[int], num_blocks: int,
                   hidden: int, vocab: int, dtype: torch.dtype, kv_dtype: torch.dtype,
                   generator: torch.Generator) -> list[torch.Tensor]:
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
        perm = torch.randperm(num_blocks, generator=g)[:sum(mb)]
        i32 = torch.int32
        args = [x, positions.reshape(-1), past_t.to(i32), (torch.arange(batch + 1) * new).to(i32), perm.to(i32),
                torch.tensor([0, *mb]).cumsum(0).to(i32), torch.tensor(max(past) + new, dtype=i32)]
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


def export_stage(stage: FunctionalStage, *, hidden: int, vocab: int, dtype: torch.dtype,
                 kv_dtype: torch.dtype) -> torch.export.ExportedProgram:
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
        args = example_inputs(stage, batch=2, new=3, past=[3 * KV_BLOCK_TOKENS - 5, 7], num_blocks=7, hidden=hidden,
                              vocab=vocab, dtype=dtype, kv_dtype=kv_dtype, generator=g)
        if stage.selects:
            args[7] = torch.tensor([5, 0, 2, 2, 4])
        b1 = d["B"] + 1
        dims = [{0: d["T"]}, {0: d["T"]}, {0: d["B"]}, {0: b1}, {0: d["NBT"]}, {0: b1}, None]
        rest = ([{0: d["S"]}] if stage.selects else []) + [{0: d["NB"]}] * n_kv
    else:
        args = example_inputs(stage, batch=2, new=3, past=[KV_BLOCK_TOKENS + 8, 7], num_blocks=6, hidden=hidden, vocab=vocab,
                              dtype=dtype, kv_dtype=kv_dtype, generator=g)
        dims = [{0: d["B"], 1: d["T"]}, {0: d["B"], 1: d["T"]}, {0: d["B"]}, {0: d["B"], 1: d["MB"]}]
        rest = ([{0: d["B"]}] if stage.selects else []) + [{0: d["NB"]}] * n_kv
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return export(stage, tuple(args), dynamic_shapes=(*dims, tuple(rest)) if rest else tuple(dims), strict=False)
