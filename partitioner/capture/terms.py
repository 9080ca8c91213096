"""The torch-free half of the op graph: cost polynomials (Terms), costed nodes and the graph.

Planning from a cached capture needs only these, so they live apart from `graph.py`, which
builds them from an exported program and imports torch.
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["MODEL_DTYPES", "MXFP4_BYTES", "Terms", "LatentAttention", "OpNode", "OpGraph", "DTYPE_BYTES", "VIEW_OPS", "MATMUL_OPS", "ATTENTION_OPS", "CONV_OPS"]

MODEL_DTYPES = ("bf16", "fp16", "fp8", "fp32")  # what --dtype / --kv-dtype accept
DTYPE_BYTES = {"fp32": 4, "tf32": 4, "bf16": 2, "fp16": 2, "fp8": 1, "int8": 1}
# OCP microscaling FP4 (gpt-oss's experts): 4-bit values and one 8-bit scale per block of 32
MXFP4_BYTES = (4 * 32 + 8) / 8 / 32

# Ops that only re-describe memory (no kernel, no traffic).
VIEW_OPS = {
    "view",
    "_unsafe_view",
    "reshape",
    "transpose",
    "permute",
    "expand",
    "unsqueeze",
    "squeeze",
    "slice",
    "select",
    "alias",
    "t",
    "detach",
    "unflatten",
    "flatten",
    "as_strided",
    "split",
    "chunk",
    "unbind",
    "narrow",
    "getitem",
    "split_with_sizes",
    "lift_fresh_copy",
    "_assert_tensor_metadata",
    "sym_size",
    "sym_numel",
    "sym_stride",
    "dropout",
    "view_as",
    "expand_as",
    "contiguous_noop",
}
MATMUL_OPS = {"mm", "addmm", "bmm", "baddbmm", "matmul", "linear", "_scaled_mm", "addbmm", "einsum"}
ATTENTION_OPS = {
    "scaled_dot_product_attention",
    "_scaled_dot_product_flash_attention",
    "_scaled_dot_product_efficient_attention",
    "_scaled_dot_product_cudnn_attention",
    "_flash_attention_forward",
    "_efficient_attention_forward",
    "flex_attention",
}
CONV_OPS = {"convolution", "conv1d", "conv2d", "conv3d", "_convolution", "conv_transpose1d", "conv_transpose2d"}


@dataclass(frozen=True, slots=True)
class Terms:
    """c0 + c1·T + c2·T·L."""

    const: float = 0.0
    per_token: float = 0.0
    per_token_ctx: float = 0.0

    def __add__(self, o: "Terms") -> "Terms":
        return Terms(self.const + o.const, self.per_token + o.per_token, self.per_token_ctx + o.per_token_ctx)

    def scale(self, k: float) -> "Terms":
        return Terms(self.const * k, self.per_token * k, self.per_token_ctx * k)

    def at(self, tokens: float, ctx: float) -> float:
        """Value for `tokens` new tokens of one sequence with context `ctx` (the export's view)."""
        return self.const + self.per_token * tokens + self.per_token_ctx * tokens * ctx

    def as_dict(self) -> dict[str, float]:
        return {"const": self.const, "per_token": self.per_token, "per_token_ctx": self.per_token_ctx}


@dataclass(frozen=True, slots=True)
class LatentAttention:
    """Multi-head latent attention's sizes (DeepSeek-V2 §2.1), for the FLOPs and bytes of its two kernel
    forms (partitioner/cost_models/analytic.py): the export's own is the up-projected heads'.

    Args:
        heads: query heads; rank: kv_lora_rank, the compressed KV a token caches; rope: qk_rope_head_dim,
            the rotary key cached beside it, shared by the heads; nope: qk_nope_head_dim; v: v_head_dim.
        itemsize: bytes per element of up-projected keys and values (the export's dtype).
    """

    heads: int
    rank: int
    rope: int
    nope: int
    v: int
    itemsize: float

    def absorbed_flops(self, tokens: float, ctx: float) -> float:
        """Attention FLOPs of `tokens` queries over `ctx` cached latents with the up-projections absorbed
        into the query and the output: each head's scores over rank + rope, its output over rank. The
        absorption's own GEMMs (query × W_UK, output × W_UV) are the export's kv_b_proj FLOPs again."""
        return 2.0 * self.heads * tokens * ctx * (2 * self.rank + self.rope)

    def expand_flops(self, latents: float) -> float:
        """kv_b_proj over `latents` cached latents: every head's no-rope key and value of each."""
        return 2.0 * latents * self.rank * self.heads * (self.nope + self.v)

    def expanded_bytes(self, latents: float) -> float:
        """The up-projected keys and values of `latents` latents."""
        return latents * self.heads * (self.nope + self.rope + self.v) * self.itemsize


@dataclass(slots=True)
class OpNode:
    name: str
    op: str  # short op name: "linear", "scaled_dot_product_attention", ...
    matmul_flops: Terms = field(default_factory=Terms)
    other_flops: Terms = field(default_factory=Terms)
    act_bytes: Terms = field(default_factory=Terms)  # activations read + written
    params: tuple[str, ...] = ()  # canonical parameter names this node reads
    gather: bool = False  # reads only the rows it returns (embedding): weights not streamed per step
    attention: bool = False
    kv_bytes_per_token: float = 0.0  # K/V bytes this attention node keeps per context token
    latent: LatentAttention | None = None  # an attention node of multi-head latent attention
    moe: dict | None = None  # {num_experts, top_k} for nodes that read stacked expert weights
    is_view: bool = False
    weight_nk: float = 0.0  # matmul with a weight: N·K of one weight matrix (one expert's for MoE)
    noop: bool = False  # a kernel call that moves no data (a cast to its own dtype, contiguous on contiguous)

    @property
    def flops(self) -> Terms:
        return self.matmul_flops + self.other_flops


@dataclass(slots=True)
class OpGraph:
    """The costed nodes in program order, with the data flow needed to cut them."""

    nodes: list[OpNode]
    inputs: list[list[int]]  # per node: indices of producer nodes (activations only)
    out_bytes_per_token: list[Terms]  # per node: its output's size (the tensor crossing a cut after it)
    recomputable: list[bool]  # depends on no parameter (rotary tables, masks, positions)
    uses_param: list[bool]
    graph_outputs: set[int]
    param_bytes: dict[str, float]  # canonical name -> bytes at the weight dtype
    aliases: dict[str, str]  # parameter name -> canonical name (tied weights)
    token_symbol: str | None
    packed: dict[str, float] = field(default_factory=dict)  # canonical name -> bytes per element, where not the weight dtype's
