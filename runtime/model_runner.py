"""The runtime's eager stage: a decoder stage (backends/decoder.py: the model's own transformers
modules, one unit walk for every executor) whose attention reads and writes the worker's paged
KV pool in place (kv_cache.py).

A tensor-parallel stage (tp = k) is k StageModels, one per device, each holding 1/k of
the heads (q/k/v rows, o_proj columns), of the MLP (gate/up rows, down columns) and of
the vocabulary (embedding and LM-head rows); an all-reduce follows o_proj, down_proj and
the embedding, an all-gather the head. Norms are small and replicated. An MoE layer's routed
experts are split whole (expert parallelism: E/k each; the router replicated) and its block's
output all-reduced; MLA's latent is cached whole on every rank.
"""

from __future__ import annotations

import copy
import warnings

import torch
import torch.distributed as dist

from hetc.backends.decoder import DecoderStage, check_supported, is_mla, kv_layout
from hetc.errors import BadInput
from hetc.experts import ExpertLayout
from hetc.partitioner.capture.graph import TORCH_DTYPES
from hetc.plan import PlanUnit, UnitKind
from hetc.runtime.kv_cache import AttnMeta, DecodeMeta, KVPool, decode_attention, latent_attention, latent_decode, paged_attention

__all__ = ["TORCH_DTYPES", "StageModel", "check_supported", "check_tp", "kv_layout", "param_count", "shrink_config"]


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
    sizes = {"attention heads": cfg.num_attention_heads, "vocabulary": cfg.vocab_size}
    if not is_mla(cfg):  # MLA's latent is every head's: cached whole on each rank
        sizes["key/value heads"] = kv_layout(cfg)[0]
    if any(u.kind == UnitKind.MLP for u in units):
        sizes["intermediate size"] = cfg.intermediate_size
    if any(u.kind == UnitKind.MOE for u in units):
        sizes["experts"] = num_experts(cfg)
        if getattr(cfg, "n_shared_experts", None):  # DeepSeek's shared experts: one dense MLP, column/row split
            sizes["shared experts' width"] = cfg.moe_intermediate_size * cfg.n_shared_experts
    bad = [f"{k} {v}" for k, v in sizes.items() if v % tp]
    if bad:
        raise BadInput(
            f"{where} is tensor-parallel (tp={tp}) but the model's {', '.join(bad)} do not split {tp} ways.", file=file, field=where, fix="plan with `--tp 1`."
        )


def check_layout(plan, file: str = "plan.json") -> None:
    """Refuse a plan whose tensor-parallel stages run MoE layers in a layout other than the one this
    runtime has (hetc/experts.py `ep`: experts whole, attention tensor-parallel)."""
    ex = plan.experts
    if ex is None or ex.layout == ExpertLayout.EP:
        return
    moe = {u.index for u in plan.units if u.kind == UnitKind.MOE}
    if any(s.tp > 1 and moe & set(range(s.units[0], s.units[1] + 1)) for p in plan.pipelines for s in p.stages):
        raise BadInput(
            f"the plan's tensor-parallel stages run their MoE layers as {ex.layout.value}; hetc serve splits experts whole "
            "over a stage's workers under tensor-parallel attention (ep) only.",
            file=file,
            field="experts.layout",
            fix="re-plan with `--experts ep` (or `--engine hetc`), or serve this plan with the engine it names.",
        )


def num_experts(cfg) -> int:
    """The routed experts of each MoE layer of `cfg`."""
    return next(int(getattr(cfg, k)) for k in ("num_local_experts", "num_experts", "n_routed_experts") if isinstance(getattr(cfg, k, None), int))


def _shard(name: str, t: torch.Tensor, rank: int, k: int) -> torch.Tensor:
    """This tp rank's part of parameter `name`: Megatron-style column/row splits of attention and dense
    MLPs (shared experts included); a routed-experts tensor ([E, ...]) is split by expert: this rank
    holds experts [rank·E/k, (rank+1)·E/k) whole (expert parallelism)."""
    if k == 1:
        return t
    if ".experts." in name:
        n = t.shape[0] // k
        return t[rank * n : (rank + 1) * n]
    rows = (".q_proj.", ".k_proj.", ".v_proj.", ".q_b_proj.", ".kv_b_proj.", ".gate_proj.", ".up_proj.", "embed_tokens.", "lm_head.", "self_attn.sinks")
    cols = (".o_proj.weight", ".down_proj.weight")
    if any(r in name for r in rows):
        n = t.shape[0] // k
        return t[rank * n : (rank + 1) * n]
    if any(name.endswith(c) for c in cols):
        n = t.shape[1] // k
        return t[:, rank * n : (rank + 1) * n].contiguous()
    if name.endswith((".o_proj.bias", ".down_proj.bias")):  # added once, after the all-reduce sums the parts
        return t if rank == 0 else torch.zeros_like(t)
    return t  # norms: replicated


# transformers' fused expert tensors ([E, 2I, D] and [E, D, I]) that checkpoints store per expert
_FUSED_EXPERTS = (".experts.gate_up_proj", ".experts.down_proj")


def _per_expert(weights, name: str, shape: torch.Size, dtype: torch.dtype, rank: int, k: int) -> torch.Tensor:
    """A fused experts tensor of this rank's experts, read from a checkpoint that stores each expert's
    gate/up/down_proj.weight apart (DeepSeek-V3's, Qwen3-MoE's, as transformers saves them)."""
    prefix, _, fused = name.rpartition(".")
    n = shape[0] // k
    parts = ("gate_proj", "up_proj") if fused == "gate_up_proj" else ("down_proj",)
    one = torch.Size([shape[1] // len(parts), shape[2]])
    return torch.stack([torch.cat([weights.get(f"{prefix}.{e}.{p}.weight", one, dtype) for p in parts]) for e in range(rank * n, (rank + 1) * n)])


class StageModel(DecoderStage):
    """The modules of units [first, last] of a decoder LLM, runnable on packed micro-batches: the
    torch-eager RunnableStage (hetc/stage.py)."""

    executor = "torch"

    def __init__(
        self,
        cfg,
        units: list[PlanUnit],
        first: int,
        last: int,
        *,
        dtype: torch.dtype,
        kv_dtype: torch.dtype,
        num_blocks: int,
        weights,
        device: torch.device | str = "cpu",
        tp_rank: int = 0,
        tp_size: int = 1,
        fuse: bool = False,
    ):
        """Args:
        cfg: the transformers config of the model.
        units: the whole unit table (every stage sees the same one).
        first, last: this stage's units, inclusive.
        dtype: compute/weight dtype; kv_dtype: KV storage dtype.
        num_blocks: KV blocks per attention layer (the lane's block manager's count).
        weights: a SafetensorsWeights or RandomWeights (`.get(name, shape, dtype)`).
        tp_rank, tp_size: this device's place in a tensor-parallel stage; set `tp_group`
            (a torch.distributed group) before running when tp_size > 1.
        fuse: q/k/v and gate/up as one GEMM each (DecoderStage.fuse_projections), and the MoE
            experts as one grouped or batched GEMM (static_experts): what GPUs run.
        """
        check_tp(cfg, units[first : last + 1], tp_size, "stage")

        def load(name: str, shape: torch.Size) -> torch.Tensor:
            if name.endswith(_FUSED_EXPERTS) and hasattr(weights, "names") and name not in weights.names():
                return _per_expert(weights, name, shape, dtype, tp_rank, tp_size).to(device)
            return _shard(name, weights.get(name, shape, dtype), tp_rank, tp_size).to(device)

        super().__init__(cfg, units, first, last, dtype=dtype, load=load, variants=True)
        self.tp_rank, self.tp_size, self.tp_group = tp_rank, tp_size, None
        if tp_size > 1:  # each worker holds E/tp experts; _mlp_out's all-reduce combines their outputs
            self.split_experts(tp_rank, tp_size)
        if self.rotary is not None:
            self.rotary.to(device)
        if fuse:
            self.fuse_projections()
            self.static_experts()
        if not self.mla:  # MLA's latent is every head's: each tp rank caches it whole
            self.kv_heads //= tp_size  # this device's share of the heads
        self.vocab_part = cfg.vocab_size // tp_size
        layers = self.attention_layers
        self.kv = KVPool(layers, num_blocks if layers else 0, self.kv_heads, self.head_dim, kv_dtype, device, values=not self.mla)
        self.kv_device = torch.device(device)

    @property
    def param_bytes(self) -> int:
        seen, total = set(), 0
        for p in self.parameters():
            if p.data_ptr() not in seen:
                seen.add(p.data_ptr())
                total += p.numel() * p.element_size()
        return total

    def step_meta(self, starts: list[int], n_new: list[int], block_tables: list[list[int]], sample: list[bool], keep_all: list[bool] | None = None) -> AttnMeta:
        """One micro-batch's attention metadata, on this stage's device (args: AttnMeta.build)."""
        return AttnMeta.build(starts, n_new, block_tables, sample, keep_all=keep_all).to(self.kv_device)

    @torch.inference_mode()
    def forward(self, x: torch.Tensor, meta: AttnMeta | DecodeMeta) -> torch.Tensor:
        """Run the stage's units.

        Args:
            x: token ids [T] on the first stage, else the residual stream [T or S, D].
            meta: the micro-batch's positions, KV slots and masks (AttnMeta), or a decode step's
                static-shaped metadata (DecodeMeta: one token per sequence, every row sampled).
        Returns:
            [T, D] hidden states; [S, D] once the rows were cut to the sampled tokens; [S, V]
            fp32 logits after the head.
        """
        if self.mla:

            def attend_latent(li: int, layer: int, h: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
                q, latent = self.mla_qkv(layer, h, cos, sin)
                scale = self.attention_scale(layer)
                if isinstance(meta, DecodeMeta):
                    o = latent_decode(q, latent, self.kv, layer, meta, scale, self.mla_absorbed(layer))
                else:
                    o = latent_attention(q, latent, self.kv, layer, meta, scale, lambda c: self.mla_expand(layer, c))
                return self._reduce(self.o_proj(layer, o))

            return self.run_units(x, meta.positions, None if isinstance(meta, DecodeMeta) else meta.sample_rows, attend_latent)
        if isinstance(meta, DecodeMeta):

            def attend(li: int, layer: int, h: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
                q, k, v = self.qkv(layer, h, cos, sin)
                o = decode_attention(q, k, v, self.kv, layer, meta, self.attention_scale(layer), self.window(layer), self.sinks(layer))
                return self._reduce(self.o_proj(layer, o))

            return self.run_units(x, meta.positions, None, attend)

        def attend_packed(li: int, layer: int, h: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
            q, k, v = self.qkv(layer, h, cos, sin)
            o = paged_attention(q, k, v, self.kv, layer, meta, self.attention_scale(layer), self.window(layer), self.sinks(layer))
            return self._reduce(self.o_proj(layer, o))

        return self.run_units(x, meta.positions, meta.sample_rows, attend_packed)

    def _reduce(self, t: torch.Tensor) -> torch.Tensor:
        """Sum the tp ranks' partial results (a no-op without tensor parallelism)."""
        if self.tp_size > 1:
            dist.all_reduce(t, group=self.tp_group)
        return t

    def _embed(self, ids: torch.Tensor) -> torch.Tensor:
        emb = self.mods["embed"]
        if self.tp_size == 1:
            return emb(ids)
        local = ids - self.tp_rank * self.vocab_part  # rows of this rank's vocabulary slice
        mine = (local >= 0) & (local < self.vocab_part)
        return self._reduce(emb(local.clamp(0, self.vocab_part - 1)) * mine[:, None])

    def _mlp_out(self, layer: int, h: torch.Tensor) -> torch.Tensor:
        return self._reduce(super()._mlp_out(layer, h))

    def _head(self, x: torch.Tensor) -> torch.Tensor:
        x = super()._head(x)  # [S, V / tp]
        if self.tp_size > 1:
            parts = [torch.empty_like(x) for _ in range(self.tp_size)]
            dist.all_gather(parts, x.contiguous(), group=self.tp_group)
            x = torch.cat(parts, dim=-1)  # [S, V]
        return x
