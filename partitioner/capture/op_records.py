"""Per-op cost records of a unit: what the per-op cost model needs, identical ops grouped.

A unit keeps, beside its aggregate terms, one `OpRecord` per distinct op shape: its class
(matmul, attention, moe, elementwise, norm, copy, gather, noop), how many identical ops
there are, and per op its FLOP and byte terms, the weights it streams and, for a matmul,
the size N·K of its weight — what sets a GEMM's efficiency together with its rows M.
"""

from __future__ import annotations

from typing import cast

from dataclasses import dataclass

from hetc.partitioner.capture.terms import CONV_OPS, LatentAttention, OpGraph, OpNode, Terms

__all__ = ["OpRecord", "op_kind", "records_for", "aggregate_records", "NORM_OPS", "COPY_OPS"]

# reductions over the hidden dimension (norms, softmax): memory-bound, one pass or two
NORM_OPS = {
    "mean",
    "sum",
    "var",
    "var_mean",
    "layer_norm",
    "native_layer_norm",
    "rms_norm",
    "_fused_rms_norm",
    "softmax",
    "_softmax",
    "log_softmax",
    "group_norm",
    "native_group_norm",
    "batch_norm",
    "amax",
    "amin",
    "max",
    "min",
    "norm",
    "linalg_vector_norm",
    "logsumexp",
    "cumsum",
}
# ops that only move data
COPY_OPS = {
    "cat",
    "clone",
    "contiguous",
    "to",
    "_to_copy",
    "copy_",
    "copy",
    "index_copy",
    "index_copy_",
    "index_put_",
    "index_put",
    "stack",
    "repeat",
    "repeat_interleave",
    "pad",
    "constant_pad_nd",
    "roll",
    "type_as",
    "new_zeros",
    "new_ones",
    "zeros_like",
    "ones_like",
    "empty_like",
    "full_like",
    "fill_",
}
_MATMUL_LIKE = {"matmul", "conv"}
_NAMED = {"elementwise", "norm", "copy", "gather"}  # kinds whose records keep the op name


@dataclass(frozen=True, slots=True)
class OpRecord:
    """`count` identical ops; every term is for one of them.

    Args:
        kind: matmul | conv | attention | moe | elementwise | norm | copy | gather | noop.
        count: identical ops in the unit.
        flops: matmul-class FLOPs (c0 + c1·T + c2·T·L).
        other_flops: one per output element of elementwise and reduction ops.
        act_bytes: activations read and written.
        weight_bytes: parameter bytes streamed each step (all experts' for MoE).
        nk: N·K of the weight (one expert's for MoE); 0 when the op has no weight.
        kv_bytes_per_token: attention: K+V bytes kept per context token, at the export dtype.
        experts, top_k: MoE routing.
        latent: attention: multi-head latent attention's sizes (its kernel forms' FLOPs and bytes).
        op: the op's name for element-wise, norm, copy and gather ops: a profile may have a
            curve for the op itself (silu and exp on a CPU are bound by arithmetic, not bytes).
    """

    kind: str
    count: int
    flops: Terms
    other_flops: Terms
    act_bytes: Terms
    weight_bytes: float = 0.0
    nk: float = 0.0
    kv_bytes_per_token: float = 0.0
    experts: int = 0
    top_k: int = 0
    op: str = ""
    latent: LatentAttention | None = None

    def rows(self, tokens: float) -> float:
        """GEMM rows M for `tokens` new tokens: tokens × rows per token (1 for a linear)."""
        if self.nk <= 0 or self.flops.per_token <= 0:
            return max(tokens, 1.0)
        return max(self.flops.per_token * tokens / (2.0 * self.nk), 1.0)


def op_kind(n: OpNode) -> str:
    """The cost class of a graph node (see OpRecord.kind)."""
    if n.attention:
        return "attention"
    if n.moe and (n.matmul_flops.per_token > 0 or n.matmul_flops.const > 0):
        return "moe"
    if n.op in CONV_OPS:
        return "conv"
    if n.matmul_flops.per_token > 0 or n.matmul_flops.const > 0:
        return "matmul"
    if n.gather:
        return "gather"
    if n.noop:
        return "noop"
    if n.op in NORM_OPS:
        return "norm"
    if n.op in COPY_OPS:
        return "copy"
    return "elementwise"


def records_for(g: OpGraph, idx: list[int]) -> tuple[OpRecord, ...]:
    """The op records of the nodes `idx` of `g` (views and recomputed tensors excluded).

    Each parameter is charged to the first op that reads it (a weight read twice in a
    unit, e.g. tied, streams once); gathers read only their rows, already in their bytes.
    """
    seen: set[str] = set()
    groups: dict[tuple, int] = {}
    for i in idx:
        n = g.nodes[i]
        if n.is_view or g.recomputable[i]:
            continue
        kind = op_kind(n)
        wbytes = 0.0
        for p in n.params:
            if p not in seen:
                seen.add(p)
                if not n.gather:
                    wbytes += g.param_bytes[p]
        nk = n.weight_nk
        if kind in _MATMUL_LIKE and nk <= 0:  # a matmul of two activations: one row per token
            nk = n.matmul_flops.per_token / 2.0
        experts = int(cast(dict, n.moe)["num_experts"]) if kind == "moe" else 0
        top_k = int(cast(dict, n.moe)["top_k"]) if kind == "moe" else 0
        act = Terms() if kind == "noop" else n.act_bytes
        name = n.op if kind in _NAMED else ""
        key = (kind, n.matmul_flops, n.other_flops, act, wbytes, nk, n.kv_bytes_per_token, experts, top_k, name, n.latent)
        groups[key] = groups.get(key, 0) + 1
    return tuple(
        OpRecord(
            kind=k[0],
            count=c,
            flops=k[1],
            other_flops=k[2],
            act_bytes=k[3],
            weight_bytes=k[4],
            nk=k[5],
            kv_bytes_per_token=k[6],
            experts=k[7],
            top_k=k[8],
            op=k[9],
            latent=k[10],
        )
        for k, c in groups.items()
    )


def aggregate_records(
    *, matmul_flops: Terms, other_flops: Terms, act_bytes: Terms, streamed_param_bytes: float, kv_bytes_per_token: float, moe: dict | None
) -> tuple[OpRecord, ...]:
    """Records for a unit built without per-op data: one op per class from its totals.

    The matmul is taken as one GEMM (N·K = its FLOPs per token / 2), the most favourable
    shape; attention keeps the T·L part; MoE experts keep their own weight bytes.
    """
    out = []
    expert_bytes = float(moe.get("expert_bytes", 0.0)) if moe else 0.0
    attn = Terms(0.0, 0.0, matmul_flops.per_token_ctx)
    if attn.per_token_ctx > 0:
        out.append(OpRecord("attention", 1, attn, Terms(), Terms(), kv_bytes_per_token=kv_bytes_per_token))
    dense = Terms(matmul_flops.const, matmul_flops.per_token, 0.0)
    dense_w = max(streamed_param_bytes - expert_bytes, 0.0)
    if moe and expert_bytes > 0:
        # without per-op data the FLOPs cannot be split between router and experts: all go to the experts
        nk = dense.per_token / 2.0 / max(int(moe.get("top_k", 1)), 1)
        out.append(OpRecord("moe", 1, dense, Terms(), Terms(), weight_bytes=expert_bytes, nk=nk, experts=int(moe["num_experts"]), top_k=int(moe["top_k"])))
        dense = Terms()
    if dense.per_token > 0 or dense.const > 0:
        out.append(OpRecord("matmul", 1, dense, Terms(), Terms(), weight_bytes=dense_w, nk=dense.per_token / 2.0))
        dense_w = 0.0
    out.append(OpRecord("elementwise", 1, Terms(), other_flops, act_bytes, weight_bytes=dense_w))
    return tuple(out)
