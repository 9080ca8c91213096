"""One stage of a decoder LLM: the model's own transformers modules for the stage's
units, with hetc's paged-KV attention.

Units map to modules by kind (from plan.json's unit table):
  embed          model.embed_tokens
  attention L    model.layers[L].input_layernorm, .self_attn (+ residual)
  mlp / moe L    model.layers[L].post_attention_layernorm, .mlp (+ residual)
  norm           model.norm
  head           lm_head (with model.norm when the model has no separate norm unit)
so a stage may start at the MLP half of a layer. The model is built on the meta device
and only the stage's modules get real parameters.

A tensor-parallel stage (tp = k) is k StageModels, one per device, each holding 1/k of
the heads (q/k/v rows, o_proj columns), of the MLP (gate/up rows, down columns) and of
the vocabulary (embedding and LM-head rows); an all-reduce follows o_proj, down_proj and
the embedding, an all-gather the head. Norms are small and replicated.
"""

from __future__ import annotations

import copy
import warnings

import torch
import torch.distributed as dist
from torch import nn

from hetc.errors import BadInput
from hetc.partitioner.capture.graph import TORCH_DTYPES
from hetc.plan import PlanUnit
from hetc.runtime.kv_cache import AttnMeta, KVPool, paged_attention
from hetc.stage import select_at

__all__ = ["TORCH_DTYPES", "StageModel", "check_supported", "check_tp", "kv_layout", "param_count",
           "shrink_config"]

# plan dtype → what the stage computes in (fp8 weights are computed in bf16 here)
_KINDS = ("embed", "attention", "mlp", "moe", "norm", "head")
_EXTRA_NORMS = ("pre_feedforward_layernorm", "post_feedforward_layernorm", "post_self_attn_layernorm")


def kv_layout(cfg) -> tuple[int, int]:
    """(kv_heads, head_dim) of the model's attention."""
    heads = cfg.num_attention_heads
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // heads
    return getattr(cfg, "num_key_value_heads", None) or heads, head_dim


def check_supported(cfg, units: list[PlanUnit], file: str = "plan.json") -> None:
    """Refuse (BadInput) a model this runtime cannot run exactly, with the reason."""
    kinds = [u.kind for u in units]
    bad = sorted(set(kinds) - set(_KINDS))
    if bad:
        raise BadInput(f"the model has units of kind {', '.join(bad)}; `hetc serve` runs decoder LLMs "
                       f"(units {', '.join(_KINDS)}).", file=file, field="units",
                       fix="serve a Llama-family decoder (llama, mistral, qwen2, qwen3, mixtral).")
    if not kinds or kinds[0] != "embed" or kinds[-1] != "head":
        raise BadInput("the unit table does not start with the embedding and end with the LM head.", file=file,
                       field="units", fix="regenerate the plan with `hetc plan` for a decoder LLM.")
    window = getattr(cfg, "sliding_window", None)
    use_window = getattr(cfg, "use_sliding_window", window is not None)
    if window and use_window and window < getattr(cfg, "max_position_embeddings", 0):
        raise BadInput(f"the model uses sliding-window attention (window {window}), which this runtime does not "
                       "implement yet.", file=file, field="model", fix="serve a model with full attention.")
    for key in ("final_logit_softcapping", "attn_logit_softcapping"):
        if getattr(cfg, key, None):
            raise BadInput(f"the model uses {key}, which this runtime does not implement yet.", file=file,
                           field="model", fix="serve a Llama-family decoder.")


def shrink_config(cfg, f: int):
    """A width-shrunk copy of a decoder config for emulating a model too big for the host:
    the same layers (so the same units and cuts), 1/f of the heads, hidden and MLP width,
    the same head size and vocabulary."""
    if f == 1:
        return cfg
    c = copy.deepcopy(cfg)
    kvh, hd = kv_layout(cfg)
    kv2 = max(1, kvh // f)
    c.num_key_value_heads = kv2
    c.num_attention_heads = max(kv2, (cfg.num_attention_heads // f) // kv2 * kv2)
    c.head_dim = hd
    c.hidden_size = max(64, cfg.hidden_size // f)
    for key in ("intermediate_size", "moe_intermediate_size", "shared_expert_intermediate_size"):
        if isinstance(getattr(c, key, None), int):
            setattr(c, key, max(64, getattr(c, key) // f))
    return c


def param_count(cfg) -> int:
    """Parameters of the causal LM `cfg` describes (built on the meta device)."""
    from transformers import AutoModelForCausalLM

    with torch.device("meta"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        m = AutoModelForCausalLM.from_config(cfg)
    return sum(p.numel() for p in m.parameters())


def check_tp(cfg, units: list[PlanUnit], tp: int, where: str, file: str = "plan.json") -> None:
    """Refuse a tp degree this model cannot be split by evenly."""
    if tp == 1:
        return
    kvh, _ = kv_layout(cfg)
    sizes = {"attention heads": cfg.num_attention_heads, "key/value heads": kvh,
             "intermediate size": cfg.intermediate_size, "vocabulary": cfg.vocab_size}
    bad = [f"{k} {v}" for k, v in sizes.items() if v % tp]
    if any(u.kind == "moe" for u in units):
        bad.append("MoE experts (not split by this runtime yet)")
    if bad:
        raise BadInput(f"{where} is tensor-parallel (tp={tp}) but the model's {', '.join(bad)} do not split {tp} "
                       "ways.", file=file, field=where, fix="plan with `--tp 1`.")


def _shard(name: str, t: torch.Tensor, rank: int, k: int) -> torch.Tensor:
    """This tp rank's part of parameter `name` (Megatron-style column/row split)."""
    if k == 1:
        return t
    rows = (".q_proj.", ".k_proj.", ".v_proj.", ".gate_proj.", ".up_proj.", "embed_tokens.", "lm_head.")
    cols = (".o_proj.weight", ".down_proj.weight")
    if any(r in name for r in rows):
        n = t.shape[0] // k
        return t[rank * n:(rank + 1) * n]
    if any(name.endswith(c) for c in cols):
        n = t.shape[1] // k
        return t[:, rank * n:(rank + 1) * n].contiguous()
    if name.endswith((".o_proj.bias", ".down_proj.bias")):  # added once, after the all-reduce sums the parts
        return t if rank == 0 else torch.zeros_like(t)
    return t  # norms: replicated


def _set_param(root: nn.Module, name: str, t: torch.Tensor) -> None:
    mod_name, _, leaf = name.rpartition(".")
    mod = root.get_submodule(mod_name) if mod_name else root
    setattr(mod, leaf, nn.Parameter(t, requires_grad=False))


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    a, b = x.chunk(2, dim=-1)
    return torch.cat((-b, a), dim=-1)


class StageModel(nn.Module):
    """The modules of units [first, last] of a decoder LLM, runnable on packed micro-batches: the
    torch-eager RunnableStage (hetc/stage.py)."""

    executor = "torch"

    def __init__(self, cfg, units: list[PlanUnit], first: int, last: int, *, dtype: torch.dtype,
                 kv_dtype: torch.dtype, num_blocks: int, weights, device: torch.device | str = "cpu",
                 tp_rank: int = 0, tp_size: int = 1):
        """Args:
            cfg: the transformers config of the model.
            units: the whole unit table (every stage sees the same one).
            first, last: this stage's units, inclusive.
            dtype: compute/weight dtype; kv_dtype: KV storage dtype.
            num_blocks: KV blocks per attention layer (the lane's block manager's count).
            weights: a SafetensorsWeights or RandomWeights (`.get(name, shape, dtype)`).
            tp_rank, tp_size: this device's place in a tensor-parallel stage; set `tp_group`
                (a torch.distributed group) before running when tp_size > 1.
        """
        super().__init__()
        from transformers import AutoModelForCausalLM

        check_supported(cfg, units)
        check_tp(cfg, units[first: last + 1], tp_size, "stage")
        self.cfg, self.dtype = cfg, dtype
        self.tp_rank, self.tp_size, self.tp_group = tp_rank, tp_size, None
        self.units = units[first: last + 1]
        self.first, self.last = first, last
        kinds = [u.kind for u in units]
        self.fused_final_norm = "norm" not in kinds  # the head unit then includes the final norm
        # rows are cut to the sampled tokens before the first of norm/head: both are per-token
        self.select_at = select_at([u.kind for u in units])
        with torch.device("meta"), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            full = AutoModelForCausalLM.from_config(cfg, dtype=dtype, attn_implementation="eager")
        backbone = full.get_decoder() if hasattr(full, "get_decoder") else full.model
        embed_name = next(n for n, m in full.named_modules() if m is full.get_input_embeddings())
        self.mods = nn.ModuleDict()
        wanted: dict[str, nn.Module] = {}  # full module path → module
        for u in self.units:
            if u.kind == "embed":
                wanted[embed_name] = full.get_input_embeddings()
            elif u.kind == "attention":
                layer = backbone.layers[u.layer]
                self._check_layer(layer, u.layer)
                wanted[f"{self._lp(full, backbone)}.{u.layer}.input_layernorm"] = layer.input_layernorm
                wanted[f"{self._lp(full, backbone)}.{u.layer}.self_attn"] = layer.self_attn
            elif u.kind in ("mlp", "moe"):
                layer = backbone.layers[u.layer]
                mlp_name = "mlp" if hasattr(layer, "mlp") else "block_sparse_moe"
                wanted[f"{self._lp(full, backbone)}.{u.layer}.post_attention_layernorm"] = layer.post_attention_layernorm
                wanted[f"{self._lp(full, backbone)}.{u.layer}.{mlp_name}"] = getattr(layer, mlp_name)
            elif u.kind == "norm" or (u.kind == "head" and self.fused_final_norm):
                wanted[next(n for n, m in full.named_modules() if m is backbone.norm)] = backbone.norm
            if u.kind == "head":
                wanted["lm_head"] = full.get_output_embeddings()
        self.param_names: list[str] = []
        for path, mod in wanted.items():
            for name, p in list(mod.named_parameters()):
                full_name = f"{path}.{name}"
                t = _shard(full_name, weights.get(full_name, p.shape, dtype), tp_rank, tp_size)
                _set_param(mod, name, t.to(device))
                self.param_names.append(full_name)
            for name, b in mod.named_buffers():
                if b.is_meta:
                    raise BadInput(f"module {path} has a buffer {name} this runtime cannot initialize.",
                                   field="model", fix="serve a Llama-family decoder.")
            self.mods[path.replace(".", "__")] = mod
        self._paths = {path: path.replace(".", "__") for path in wanted}
        self._embed_key, self._lp_key = embed_name, self._lp(full, backbone)
        self._norm_key = next((n for n, m in full.named_modules() if m is backbone.norm), "")
        attn_layers = [u.layer for u in self.units if u.kind == "attention"]
        self.rotary = None
        if attn_layers:
            self.rotary = type(backbone.rotary_emb)(config=cfg).to(device)
        kvh, hd = kv_layout(cfg)
        self.kv_heads, self.head_dim = kvh // tp_size, hd  # this device's share of the heads
        self.vocab_part = cfg.vocab_size // tp_size
        self.kv = KVPool(attn_layers, num_blocks if attn_layers else 0, self.kv_heads, hd, kv_dtype, device)
        self.kv_device = torch.device(device)
        del full

    @staticmethod
    def _lp(full: nn.Module, backbone: nn.Module) -> str:
        """Module path of the layer list, e.g. model.layers."""
        return next(n for n, m in full.named_modules() if m is backbone.layers)

    @staticmethod
    def _check_layer(layer: nn.Module, i: int) -> None:
        attn = getattr(layer, "self_attn", None)
        if attn is None or not all(hasattr(attn, p) for p in ("q_proj", "k_proj", "v_proj", "o_proj")) \
                or not hasattr(layer, "input_layernorm") or any(hasattr(layer, n) for n in _EXTRA_NORMS):
            raise BadInput(f"layer {i} is not a Llama-style block (input_layernorm, self_attn with q/k/v/o_proj, "
                           "post_attention_layernorm, mlp).", field="model", fix="serve a Llama-family decoder.")

    def _m(self, path: str) -> nn.Module:
        return self.mods[self._paths[path]]

    @property
    def param_bytes(self) -> int:
        seen, total = set(), 0
        for p in self.parameters():
            if p.data_ptr() not in seen:
                seen.add(p.data_ptr())
                total += p.numel() * p.element_size()
        return total

    def step_meta(self, starts: list[int], n_new: list[int], block_tables: list[list[int]],
                  sample: list[bool]) -> AttnMeta:
        """One micro-batch's attention metadata, on this stage's device (args: AttnMeta.build)."""
        return AttnMeta.build(starts, n_new, block_tables, sample).to(self.kv_device)

    @torch.inference_mode()
    def forward(self, x: torch.Tensor, meta: AttnMeta) -> torch.Tensor:
        """Run the stage's units.

        Args:
            x: token ids [T] on the first stage, else the residual stream [T or S, D].
            meta: the micro-batch's positions, KV slots and masks.
        Returns:
            [T, D] hidden states; [S, D] once the rows were cut to the sampled tokens; [S, V]
            fp32 logits after the head.
        """
        cos = sin = None
        for u in self.units:
            if u.index == self.select_at and meta.sample_rows is not None:
                x = x[meta.sample_rows]  # only the tokens whose successor is sampled go on
            if u.kind == "embed":
                x = self._embed(x)  # [T] → [T, D]
            elif u.kind == "attention":
                if cos is None:
                    cos, sin = self.rotary(x, meta.positions[None])  # [1, T, Dh]
                    cos, sin = cos[0, :, None], sin[0, :, None]  # [T, 1, Dh]
                x = x + self._attention(u.layer, self._m(f"{self._lp_key}.{u.layer}.input_layernorm")(x),
                                        cos, sin, meta)
            elif u.kind in ("mlp", "moe"):
                base = f"{self._lp_key}.{u.layer}"
                h = self._m(f"{base}.post_attention_layernorm")(x)
                mlp = self._m(f"{base}.mlp") if f"{base}.mlp" in self._paths else self._m(f"{base}.block_sparse_moe")
                out = mlp(h[None])  # MoE blocks expect [B, S, D]
                out = out[0] if isinstance(out, tuple) else out
                x = x + self._reduce(out[0])
            elif u.kind == "norm":
                x = self._m(self._norm_key)(x)
            elif u.kind == "head":
                if self.fused_final_norm:
                    x = self._m(self._norm_key)(x)
                x = self._m("lm_head")(x).float()  # [S, V / tp]
                if self.tp_size > 1:
                    parts = [torch.empty_like(x) for _ in range(self.tp_size)]
                    dist.all_gather(parts, x.contiguous(), group=self.tp_group)
                    x = torch.cat(parts, dim=-1)  # [S, V]
        return x

    def _reduce(self, t: torch.Tensor) -> torch.Tensor:
        """Sum the tp ranks' partial results (a no-op without tensor parallelism)."""
        if self.tp_size > 1:
            dist.all_reduce(t, group=self.tp_group)
        return t

    def _embed(self, ids: torch.Tensor) -> torch.Tensor:
        emb = self._m(self._embed_key)
        if self.tp_size == 1:
            return emb(ids)
        local = ids - self.tp_rank * self.vocab_part  # rows of this rank's vocabulary slice
        mine = (local >= 0) & (local < self.vocab_part)
        return self._reduce(emb(local.clamp(0, self.vocab_part - 1)) * mine[:, None])

    def _attention(self, layer: int, h: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                   meta: AttnMeta) -> torch.Tensor:
        attn = self._m(f"{self._lp_key}.{layer}.self_attn")
        t = h.shape[0]
        kvh, hd = self.kv_heads, self.head_dim
        q = attn.q_proj(h).view(t, -1, hd)  # [T, H / tp, Dh]
        k = attn.k_proj(h).view(t, kvh, hd)  # [T, KVH, Dh]
        v = attn.v_proj(h).view(t, kvh, hd)
        if hasattr(attn, "q_norm"):  # qwen3: per-head RMSNorm before rotary
            q, k = attn.q_norm(q), attn.k_norm(k)
        q = q * cos + _rotate_half(q) * sin
        k = k * cos + _rotate_half(k) * sin
        o = paged_attention(q, k, v, self.kv, layer, meta, getattr(attn, "scaling", hd ** -0.5))
        return self._reduce(attn.o_proj(o))
