"""Analytic cost model: roofline with the profile's achievable efficiencies.

Time of a run of units on a device for one engine step:
    compute = matmul FLOPs / (peak[dtype] · efficiency.matmul)
    memory  = (weights streamed + activations + KV read) / (bandwidth · efficiency.memory)
    time    = max(compute, memory) + kernels · launch_overhead
Every efficiency and overhead comes from the profile (with its source), none from code.
"""

from __future__ import annotations

from dataclasses import dataclass

from hetc.cluster import Profile
from hetc.partitioner.graph import DTYPE_BYTES
from hetc.partitioner.units import Unit

__all__ = ["Step", "compute_dtype", "units_time"]

# What runs where the device has no native unit for the dtype: fp8 weights are dequantized
# to 16-bit (weight-only, as vLLM does on Ampere); bf16 and fp16 substitute for each other.
_SUBSTITUTES = {"fp8": ("fp8", "bf16", "fp16"), "bf16": ("bf16", "fp16"), "fp16": ("fp16", "bf16"),
                "fp32": ("fp32",)}


@dataclass(frozen=True, slots=True)
class Step:
    """One engine step of a stage.

    Args:
        tokens: new tokens processed (prefill chunk length × sequences, or decode batch).
        seqs: sequences in the step.
        ctx: mean context length each new token attends to (for prefill of a fresh prompt
            of T tokens with causal attention this is ≈ T/2).
    """

    tokens: float
    seqs: float
    ctx: float


def compute_dtype(profile: Profile, dtype: str) -> str:
    for d in _SUBSTITUTES[dtype]:
        if d in profile.peak_flops:
            return d
    raise KeyError(f"{profile.name} has no peak_flops for {dtype} or a substitute")


def _expert_fraction(moe: dict, tokens: float) -> float:
    """Expected share of experts a step touches: 1 − (1 − k/E)^tokens."""
    e, k = moe["num_experts"], moe["top_k"]
    return 1.0 - (1.0 - k / e) ** max(tokens, 1.0)


def units_time(units: list[Unit], profile: Profile, step: Step, *, dtype: str, kv_dtype: str, tp: int = 1) -> float:
    """Seconds for `units` on one device of `profile` (or a tp group, without its all-reduce)."""
    peak = profile.peak_flops[compute_dtype(profile, dtype)] * profile.efficiency.matmul
    bw = profile.memory_bandwidth * profile.efficiency.memory
    t, ctx_tokens = step.tokens, step.seqs * step.ctx
    total = 0.0
    for u in units:
        flops = u.matmul_flops.const + u.matmul_flops.per_token * t + u.attention_flops_per_ctx * t * step.ctx
        weights = u.streamed_param_bytes
        if u.moe:
            expert = u.moe["expert_bytes"]
            weights += expert * (_expert_fraction(u.moe, t) - 1.0)
        act = u.act_bytes.const + u.act_bytes.per_token * t + u.act_bytes.per_token_ctx * t * step.ctx
        kv_read = u.kv_bytes_per_token * ctx_tokens  # already at the KV dtype
        compute = flops / peak / tp
        memory = (weights / tp + act / tp + kv_read / tp) / bw
        total += max(compute, memory) + u.kernels * profile.launch_overhead
    return total
