"""A decoder LLM's stage: the one module for its math, whatever executes it.

Belongs here: which of the model's own transformers modules each unit kind runs, the walk over a
stage's units (embedding, attention and MLP halves with their residuals, the rows cut to the
sampled tokens before the final norm or head), rotary, the q/k/v projections (fused or not; MLA's
latent and its expansion), each layer's sliding window and attention sinks, the split of an MoE
layer's experts, and what an architecture must have for a stage to run it exactly (`check_supported`).

Not here: where KV lives and how attention reads it. Each executor brings its own `attend`:
the runtime's eager stage (runtime/model_runner.py) attends over its paged pool in place, the
compiled stages (backends/stage.py) in the `gather` or `paged` form of hetc/stage.py. Process
groups, scheduling and sampling are the runtime's.

Units map to modules by kind (plan.json's unit table):
  embed          model.embed_tokens
  attention L    model.layers[L].input_layernorm, .self_attn (+ residual)
  mlp / moe L    model.layers[L].post_attention_layernorm, .mlp (+ residual); an MoE block's
                 experts may be a part of the layer's (split_experts: expert parallelism)
  norm           model.norm
  head           lm_head (with model.norm when the model has no separate norm unit)
so a stage may start at the MLP half of a layer. The model is built on the meta device and only
the stage's modules get parameters.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from typing import Any, Protocol

import torch
from torch import nn

from hetc.backends.experts import ExpertsKernel, LocalExperts, experts_kernel, set_experts_kernel
from hetc.errors import BadInput
from hetc.plan import UnitKind
from hetc.stage import select_at

__all__ = [
    "DECODER_KINDS",
    "DecoderStage",
    "UnitLike",
    "apply_rotary",
    "apply_rotary_interleaved",
    "check_supported",
    "eager_only",
    "is_mla",
    "kv_layout",
    "kv_tensors",
    "rotate_half",
]

# the unit kinds a decoder stage runs (a compiled stage: the same without MoE)
DECODER_KINDS = (UnitKind.EMBED, UnitKind.ATTENTION, UnitKind.MLP, UnitKind.MOE, UnitKind.NORM, UnitKind.HEAD)
_EXTRA_NORMS = ("pre_feedforward_layernorm", "post_feedforward_layernorm", "post_self_attn_layernorm")

# attend(i, layer, normed hidden, cos, sin) → the attention's output (after o_proj): the i-th attention of the stage
Attend = Callable[[int, int, torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]


class UnitLike(Protocol):
    @property
    def index(self) -> int: ...

    @property
    def kind(self) -> str: ...

    @property
    def layer(self) -> int: ...


def is_mla(cfg: Any) -> bool:
    """Whether the model's attention is multi-head latent attention (DeepSeek-V2/V3): its cache holds
    one latent per token and layer, not each head's K and V."""
    return getattr(cfg, "kv_lora_rank", None) is not None


def kv_layout(cfg: Any) -> tuple[int, int]:
    """(kv_heads, head_dim) of one cached tensor per token and layer: the attention's K (and V), or
    MLA's (1, kv_lora_rank + qk_rope_head_dim) latent (`kv_tensors`: 1)."""
    if is_mla(cfg):
        return 1, cfg.kv_lora_rank + cfg.qk_rope_head_dim
    heads = cfg.num_attention_heads
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // heads
    return getattr(cfg, "num_key_value_heads", None) or heads, head_dim


def kv_tensors(cfg: Any) -> int:
    """Tensors of `kv_layout`'s shape cached per token and layer: K and V, or MLA's latent alone."""
    return 1 if is_mla(cfg) else 2


def _windowed(cfg: Any) -> bool:
    window = getattr(cfg, "sliding_window", None)
    return bool(window and getattr(cfg, "use_sliding_window", True) and window < getattr(cfg, "max_position_embeddings", 0))


def layer_window(cfg: Any, layer: int) -> int | None:
    """A layer's sliding window from its config alone (as transformers' attention modules read it):
    per layer where the config lists `layer_types` (gpt-oss, qwen2), else the config's window for
    every layer (mistral); None: full causal attention."""
    types = getattr(cfg, "layer_types", None)
    if isinstance(types, list) and layer < len(types):
        return int(cfg.sliding_window) if types[layer] == "sliding_attention" and cfg.sliding_window else None
    return int(cfg.sliding_window) if _windowed(cfg) else None


def eager_only(cfg: Any, units: Sequence[UnitLike]) -> bool:
    """Whether a stage of `units` needs the runtime's eager stage: MoE units (data-dependent routing),
    or attention with sliding windows or MLA (no compiled lowering of those yet)."""
    kinds = {str(u.kind) for u in units}
    return UnitKind.MOE in kinds or (UnitKind.ATTENTION in kinds and (is_mla(cfg) or _windowed(cfg)))


def check_supported(cfg: Any, units: Sequence[UnitLike], file: str = "plan.json", kinds: Sequence[UnitKind] = DECODER_KINDS, variants: bool = False) -> None:
    """Refuse (BadInput) a model a decoder stage cannot run exactly, with the reason.

    Args:
        cfg: the transformers config; units: the model's whole unit table.
        kinds: the unit kinds the executor runs.
        variants: the executor's attention implements per-layer sliding windows, attention sinks
            and multi-head latent attention (the runtime's eager stage does; compiled stages do not).
    """
    names = [str(u.kind) for u in units]
    bad = sorted(set(names) - set(kinds))
    if bad:
        raise BadInput(
            f"the model has units of kind {', '.join(bad)}; this executor runs decoder LLMs (units {', '.join(kinds)}).",
            file=file,
            field="units",
            fix="serve a Llama-family decoder (llama, mistral, qwen2, qwen3, mixtral), or a compiled stage without MoE layers with --executor torch.",
        )
    if not names or names[0] != UnitKind.EMBED or names[-1] != UnitKind.HEAD:
        raise BadInput(
            "the unit table does not start with the embedding and end with the LM head.",
            file=file,
            field="units",
            fix="regenerate the plan with `hetc plan` for a decoder LLM.",
        )
    if not variants and _windowed(cfg):
        raise BadInput(
            f"the model uses sliding-window attention (window {cfg.sliding_window}), which this executor does not implement.",
            file=file,
            field="model",
            fix="serve it with the runtime's eager stages (--executor torch), or a model with full attention.",
        )
    if not variants and is_mla(cfg):
        raise BadInput(
            "the model uses multi-head latent attention (DeepSeek's MLA), which this executor does not implement.",
            file=file,
            field="model",
            fix="serve it with the runtime's eager stages (--executor torch).",
        )
    for key in ("final_logit_softcapping", "attn_logit_softcapping"):
        if getattr(cfg, key, None):
            raise BadInput(f"the model uses {key}, which this runtime does not implement yet.", file=file, field="model", fix="serve a Llama-family decoder.")


def apply_rotary_interleaved(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """DeepSeek's rotary on pairs (x0, x1), (x2, x3), ... (config `rope_interleave`), the result's
    halves de-interleaved (as transformers' DeepseekV3 lays them out); cos, sin: llama's (halves repeated)."""
    half = cos.shape[-1] // 2
    c, s = cos[..., :half], sin[..., :half]
    a, b = x[..., 0::2], x[..., 1::2]
    return torch.cat((a * c - b * s, b * c + a * s), dim=-1)


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    a, b = x.chunk(2, dim=-1)
    return torch.cat((-b, a), dim=-1)


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Llama's rotary embedding (halves rotated); cos, sin broadcast over the heads."""
    return x * cos + rotate_half(x) * sin


def _check_layer(layer: nn.Module, i: int) -> None:
    attn = getattr(layer, "self_attn", None)
    projections = ("kv_a_proj_with_mqa", "kv_b_proj", "o_proj") if hasattr(attn, "kv_b_proj") else ("q_proj", "k_proj", "v_proj", "o_proj")
    if attn is None or not all(hasattr(attn, p) for p in projections) or not hasattr(layer, "input_layernorm") or any(hasattr(layer, n) for n in _EXTRA_NORMS):
        raise BadInput(
            f"layer {i} is not a Llama-style block (input_layernorm, self_attn with q/k/v/o_proj or MLA's, post_attention_layernorm, mlp).",
            field="model",
            fix="serve a Llama-family decoder.",
        )


class DecoderStage(nn.Module):
    """Units [first, last] of a decoder LLM as the model's own modules, keyed `embed`, `ln{L}`,
    `attn{L}`, `post{L}`, `mlp{L}`, `norm`, `head`; `run_units` walks them with the executor's
    attention. Subclasses override the hooks where their executor differs (`_rotary`, `_select`,
    `_embed`, `_mlp_out`, `_head`)."""

    def __init__(
        self,
        cfg: Any,
        units: Sequence[UnitLike],
        first: int,
        last: int,
        *,
        dtype: torch.dtype,
        load: Callable[[str, torch.Size], torch.Tensor],
        kinds: Sequence[UnitKind] = DECODER_KINDS,
        variants: bool = False,
    ):
        """Args:
        cfg: the transformers config of the model.
        units: the whole unit table (every stage sees the same one).
        first, last: this stage's units, inclusive.
        dtype: the compute and weight dtype.
        load: (the model's parameter name, its full shape) → this stage's tensor (a tp rank's
            shard, on its device).
        kinds: the unit kinds this executor runs.
        variants: the executor's attention implements sliding windows, attention sinks (`window`,
            `sinks`) and MLA (`mla_qkv`, `mla_expand`, `mla_absorbed`); else a model with any of them is refused.
        """
        super().__init__()
        from transformers import AutoModelForCausalLM

        mine = units[first : last + 1]
        check_supported(cfg, units, kinds=kinds, variants=variants)
        self.cfg, self.dtype = cfg, dtype
        self.kinds = [(UnitKind(u.kind), u.layer) for u in mine]
        self.fused_final_norm = UnitKind.NORM not in [u.kind for u in units]  # the head unit then includes the norm
        cut = select_at([str(u.kind) for u in units])
        self.selects = first <= cut <= last
        self.select_pos = cut - first  # rows are cut to the sampled tokens before this unit (norm, head: per token)
        self.first_stage = self.kinds[0][0] is UnitKind.EMBED
        self.head = self.kinds[-1][0] is UnitKind.HEAD
        self.attention_layers = [layer for kind, layer in self.kinds if kind is UnitKind.ATTENTION]
        self.moe_layers = {layer for kind, layer in self.kinds if kind is UnitKind.MOE}
        self.experts_kernel = ExpertsKernel.LOOP  # transformers' default: a GEMM pair per expert hit
        with torch.device("meta"), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            full = AutoModelForCausalLM.from_config(cfg, dtype=dtype, attn_implementation="eager")
        backbone = full.get_decoder() if hasattr(full, "get_decoder") else full.model
        wanted: dict[str, nn.Module] = {}
        for kind, layer in self.kinds:
            if kind is UnitKind.EMBED:
                wanted["embed"] = full.get_input_embeddings()
            elif kind is UnitKind.ATTENTION:
                blk = backbone.layers[layer]
                _check_layer(blk, layer)
                wanted[f"ln{layer}"], wanted[f"attn{layer}"] = blk.input_layernorm, blk.self_attn
                if not variants and hasattr(blk.self_attn, "sinks"):
                    raise BadInput(
                        f"layer {layer}'s attention has sinks (a learned logit per head in the softmax), which this executor does not implement.",
                        field="model",
                        fix="serve the model with the runtime's eager stages (--executor torch).",
                    )
            elif kind in (UnitKind.MLP, UnitKind.MOE):
                blk = backbone.layers[layer]
                wanted[f"post{layer}"] = blk.post_attention_layernorm
                wanted[f"mlp{layer}"] = blk.mlp if hasattr(blk, "mlp") else blk.block_sparse_moe
            if kind is UnitKind.NORM or (kind is UnitKind.HEAD and self.fused_final_norm):
                wanted["norm"] = backbone.norm
            if kind is UnitKind.HEAD:
                wanted["head"] = full.get_output_embeddings()
        names = {m: n for n, m in full.named_modules()}
        # this stage's parameter names → the model's (what its safetensors call them)
        self.weight_names: dict[str, str] = {}
        for key, mod in wanted.items():
            for name, p in list(mod.named_parameters()):
                owner, _, leaf = name.rpartition(".")
                model_name = f"{names[mod]}.{name}"
                t = load(model_name, p.shape)
                setattr(mod.get_submodule(owner) if owner else mod, leaf, nn.Parameter(t, requires_grad=False))
                self.weight_names[f"mods.{key}.{name}"] = model_name
            for name, b in list(mod.named_buffers()):
                owner, _, leaf = name.rpartition(".")
                holder = mod.get_submodule(owner) if owner else mod
                if b.is_meta and leaf not in holder._non_persistent_buffers_set:  # a checkpoint tensor (DeepSeek's e_score_correction_bias)
                    model_name = f"{names[mod]}.{name}"
                    holder.register_buffer(leaf, load(model_name, b.shape))
                    self.weight_names[f"mods.{key}.{name}"] = model_name
                elif b.is_meta:
                    raise BadInput(
                        f"module {names[mod]} has a buffer {name} this runtime cannot initialize.", field="model", fix="serve a Llama-family decoder."
                    )
        self.mods = nn.ModuleDict(wanted)
        self.rotary: Any = type(backbone.rotary_emb)(config=cfg) if self.attention_layers else None
        self.kv_heads, self.head_dim = kv_layout(cfg)
        self.mla = is_mla(cfg)
        del full

    @property
    def param_names(self) -> list[str]:
        """The model's names of this stage's parameter tensors."""
        return list(self.weight_names.values())

    def run_units(self, x: torch.Tensor, positions: torch.Tensor, select: torch.Tensor | None, attend: Attend) -> torch.Tensor:
        """The stage's units in order.

        Args:
            x: token ids on the first stage, else the residual stream.
            positions: each token's position (for rotary).
            select: the rows whose next token is sampled (cut before the first norm/head); None: all.
            attend: the executor's attention (see `Attend`).
        """
        rot: tuple[torch.Tensor, torch.Tensor] | None = None  # cos, sin
        li = 0
        for i, (kind, layer) in enumerate(self.kinds):
            if select is not None and i == self.select_pos:
                x = self._select(x, select)
            if kind is UnitKind.EMBED:
                x = self._embed(x)
            elif kind is UnitKind.ATTENTION:
                if rot is None:  # here, not before the units: before the embedding x holds ids, not hidden states
                    rot = self._rotary(x, positions)
                x = x + attend(li, layer, self.mods[f"ln{layer}"](x), *rot)
                li += 1
            elif kind in (UnitKind.MLP, UnitKind.MOE):
                x = x + self._mlp_out(layer, self.mods[f"post{layer}"](x))
            elif kind is UnitKind.NORM:
                x = self.mods["norm"](x)
            elif kind is UnitKind.HEAD:
                if self.fused_final_norm:
                    x = self.mods["norm"](x)
                x = self._head(x)
        return x

    def qkv(self, layer: int, h: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The layer's rotated queries [..., Hq, D], rotated keys and values [..., KVH, D] (KVH: the
        heads this module holds, a tp rank's share).

        Args:
            h: the normed hidden states [..., H].
        """
        attn: Any = self.mods[f"attn{layer}"]
        lead, d, kvh = h.shape[:-1], self.head_dim, self.kv_heads
        fused = getattr(attn, "qkv_proj", None)
        if fused is not None:  # one GEMM (fuse_projections)
            q, k, v = fused(h).split([fused.out_features - 2 * kvh * d, kvh * d, kvh * d], dim=-1)
        else:
            q, k, v = attn.q_proj(h), attn.k_proj(h), attn.v_proj(h)
        q, k, v = q.view(*lead, -1, d), k.view(*lead, kvh, d), v.view(*lead, kvh, d)
        if hasattr(attn, "q_norm"):  # qwen3: per-head RMSNorm before rotary
            q, k = attn.q_norm(q), attn.k_norm(k)
        return apply_rotary(q, cos, sin), apply_rotary(k, cos, sin), v

    def mla_qkv(self, layer: int, h: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """MLA's queries [..., Hq, nope + rope] (rotary part rotated) and the latent a token caches
        [..., 1, kv_lora_rank + rope]: the normed compressed KV, then the rotated shared rotary key.

        Args:
            h: the normed hidden states [..., H]; cos, sin: [..., 1, rope].
        """
        attn: Any = self.mods[f"attn{layer}"]
        lead, nope, rope = h.shape[:-1], attn.qk_nope_head_dim, attn.qk_rope_head_dim
        q = attn.q_proj(h) if attn.q_lora_rank is None else attn.q_b_proj(attn.q_a_layernorm(attn.q_a_proj(h)))
        q_pass, q_rot = q.view(*lead, -1, nope + rope).split([nope, rope], dim=-1)
        kv, k_rot = attn.kv_a_proj_with_mqa(h).split([attn.kv_lora_rank, rope], dim=-1)
        rotate = apply_rotary_interleaved if getattr(self.cfg, "rope_interleave", False) else apply_rotary
        q_rot, k_rot = rotate(q_rot, cos, sin), rotate(k_rot[..., None, :], cos, sin)
        return torch.cat((q_pass, q_rot), dim=-1), torch.cat((attn.kv_a_layernorm(kv)[..., None, :], k_rot), dim=-1)

    def mla_expand(self, layer: int, latent: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Keys [..., Hq, nope + rope] and values [..., Hq, v] of cached latents [..., 1, kv_lora_rank + rope]
        (kv_b_proj of the compressed part; the rotary key shared by the heads)."""
        attn: Any = self.mods[f"attn{layer}"]
        kv, k_rot = latent[..., 0, :].split([attn.kv_lora_rank, attn.qk_rope_head_dim], dim=-1)
        k_nope, v = attn.kv_b_proj(kv).view(*kv.shape[:-1], -1, attn.qk_nope_head_dim + attn.v_head_dim).split([attn.qk_nope_head_dim, attn.v_head_dim], dim=-1)
        return torch.cat((k_nope, k_rot[..., None, :].expand(*k_nope.shape[:-1], -1)), dim=-1), v

    def mla_absorbed(self, layer: int) -> tuple[torch.Tensor, torch.Tensor]:
        """kv_b_proj split per head into W_UK [Hq, nope, kv_lora_rank] and W_UV [Hq, v, kv_lora_rank],
        which a decode step folds into the query and the output (runtime/kv_cache.py latent_decode)."""
        attn: Any = self.mods[f"attn{layer}"]
        nope, v = attn.qk_nope_head_dim, attn.v_head_dim
        w = attn.kv_b_proj.weight
        uk, uv = w.view(-1, nope + v, w.shape[-1]).split([nope, v], dim=1)
        return uk, uv

    def fuse_projections(self) -> None:
        """Concatenate each layer's q/k/v and (dense MLPs') gate/up weights into one GEMM each: two
        launches instead of five per layer. For devices where launches cost (cuda, rocm); the sums
        are the same products, in one matrix."""
        mod: Any
        for key, mod in self.mods.items():
            if key.startswith("attn") and not self.mla:
                mod.qkv_proj = _concat_linear([mod.q_proj, mod.k_proj, mod.v_proj])
                del mod.q_proj, mod.k_proj, mod.v_proj
            elif key.startswith("mlp") and int(key[3:]) not in self.moe_layers and hasattr(mod, "gate_proj"):
                mod.gate_up_proj = _concat_linear([mod.gate_proj, mod.up_proj])
                del mod.gate_proj, mod.up_proj

    def static_experts(self, kernel: ExpertsKernel | None = None) -> None:
        """Run the MoE layers' experts with shapes the routing does not change (no host sync), so a
        CUDA graph can hold the step: `kernel`, by default the one `experts_kernel` picks for the
        stage's expert weights. The sums are the loop's products, added in another order."""
        for layer in self.moe_layers:
            experts: Any = self.mods[f"mlp{layer}"].experts
            self.experts_kernel = kernel or experts_kernel(next(experts.parameters()))
            set_experts_kernel(experts, self.experts_kernel)

    @property
    def capturable(self) -> bool:
        """Whether a CUDA graph can hold this stage's step: no MoE layer, or experts of static shapes
        held whole (a LocalExperts part picks its tokens on the host)."""
        split = any(isinstance(self.mods[f"mlp{layer}"].experts, LocalExperts) for layer in self.moe_layers)
        return not self.moe_layers or (self.experts_kernel is not ExpertsKernel.LOOP and not split)

    def split_experts(self, rank: int, parts: int) -> None:
        """Expert parallelism: this stage holds experts [rank·E/parts, (rank+1)·E/parts) of each MoE
        layer (loaded so: each `experts` tensor's first E/parts rows), and its MoE blocks return their
        share of the output — the tokens routed to its experts, weighted — for the executor to sum
        over the parts. The router runs whole on every part (it is small, and replicated)."""
        for layer in self.moe_layers:
            mlp: Any = self.mods[f"mlp{layer}"]
            inner = mlp.experts
            per = inner.num_experts // parts
            inner.num_experts = per  # the local experts' count, as the module's own loop reads it
            mlp.experts = LocalExperts(inner, rank * per, per)

    def o_proj(self, layer: int, o: torch.Tensor) -> torch.Tensor:
        """The layer's attention output projection of `o` [..., Hq·D]."""
        attn: Any = self.mods[f"attn{layer}"]
        return attn.o_proj(o)

    def attention_scale(self, layer: int) -> float:
        return float(getattr(self.mods[f"attn{layer}"], "scaling", self.head_dim**-0.5))

    def window(self, layer: int) -> int | None:
        """The layer's sliding window (a query sees the keys of the last `window` positions, its own
        included), or None: full causal attention. The module's own where it keeps one per layer
        (gpt-oss, qwen2: their sliding layers), else the config's for every layer (mistral, mixtral)."""
        attn: Any = self.mods[f"attn{layer}"]
        w = attn.sliding_window if hasattr(attn, "sliding_window") else self.cfg.sliding_window if _windowed(self.cfg) else None
        return int(w) if w else None

    def sinks(self, layer: int) -> torch.Tensor | None:
        """The layer's attention sinks [Hq] (a learned logit per head in the softmax's denominator,
        attending no value: gpt-oss), or None."""
        return getattr(self.mods[f"attn{layer}"], "sinks", None)

    # ---- hooks: what an executor may run differently

    def _rotary(self, x: torch.Tensor, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """cos, sin for packed tokens: positions [T] → [T, 1, D] each."""
        cos, sin = self.rotary(x, positions[None])
        if cos.shape[-1] * 2 == self.head_dim:  # gpt-oss's rotary gives one half; the halves share it
            cos, sin = cos.repeat(1, 1, 2), sin.repeat(1, 1, 2)
        return cos[0, :, None], sin[0, :, None]

    def _select(self, x: torch.Tensor, select: torch.Tensor) -> torch.Tensor:
        return x.index_select(0, select)  # [T, H] → [S, H]

    def _embed(self, ids: torch.Tensor) -> torch.Tensor:
        return self.mods["embed"](ids)

    def _mlp_out(self, layer: int, h: torch.Tensor) -> torch.Tensor:
        mlp: Any = self.mods[f"mlp{layer}"]
        if layer in self.moe_layers:  # MoE blocks take [B, S, D] and may return (out, router logits)
            out = mlp(h[None])
            return (out[0] if isinstance(out, tuple) else out)[0]
        fused = getattr(mlp, "gate_up_proj", None)
        if fused is not None:
            gate, up = fused(h).chunk(2, dim=-1)
            return mlp.down_proj(mlp.act_fn(gate) * up)
        return mlp(h)

    def _head(self, x: torch.Tensor) -> torch.Tensor:
        return self.mods["head"](x).float()


def _concat_linear(parts: list[nn.Linear]) -> nn.Linear:
    w = parts[0].weight
    fused = nn.Linear(w.shape[1], sum(p.out_features for p in parts), bias=parts[0].bias is not None, device="meta", dtype=w.dtype)
    fused.weight = nn.Parameter(torch.cat([p.weight for p in parts]), requires_grad=False)
    if parts[0].bias is not None:
        fused.bias = nn.Parameter(torch.cat([p.bias for p in parts]), requires_grad=False)
    return fused
