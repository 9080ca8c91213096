"""Memory a stage needs: weights, paged KV for its sequences, activations."""

from __future__ import annotations

import math
from dataclasses import dataclass

from hetc.experts import ExpertLayout
from hetc.partitioner.capture.units import Unit, held_weights
from hetc.scheduling import KV_BLOCK_TOKENS

__all__ = ["StageMemory", "logits_per_token", "stage_memory", "step_tokens"]


@dataclass(frozen=True, slots=True)
class StageMemory:
    weights: float
    kv: float
    activations: float

    @property
    def total(self) -> float:
        return self.weights + self.kv + self.activations


def logits_per_token(units: list[Unit]) -> float:
    """Bytes per step token of the fp32 logits the stage holding the model's last unit keeps (the
    head's output is captured at 2 bytes an element)."""
    return 4.0 * units[-1].out_bytes_per_token / 2


def step_tokens(prefill_chunk: float, batch: float, tp: int, layout: ExpertLayout) -> float:
    """Most tokens one step of a device runs: a prompt chunk, or a token for each sequence in flight
    (data-parallel layouts: the device's own 1/tp of them)."""
    return max(prefill_chunk, batch / tp if layout.data_parallel else batch)


def stage_memory(
    units: list[Unit],
    *,
    batch: int,
    context: int,
    prefill_chunk: int,
    tp: int = 1,
    logits_bytes_per_token: float = 0.0,
    shared_tokens: int = 0,
    windowed: bool = False,
    layout: ExpertLayout = ExpertLayout.TP,
) -> StageMemory:
    """Bytes one device of a stage holds.

    Args:
        units: the stage's units (tied weights used by two of them counted once).
        batch: sequences in flight on the stage.
        context: tokens each sequence keeps (prompt + output), rounded up to whole KV blocks.
        prefill_chunk: most tokens one step processes (sizes the transient activations).
        tp: tensor-parallel degree (weights and KV split k ways; an MLA latent is kept whole: Unit.kv_ways).
        logits_bytes_per_token: extra per-token output kept by the last stage (fp32 logits).
        shared_tokens: KV tokens held once for all sequences (shared prompt prefixes), in whole blocks.
        windowed: the engine keeps at most a sliding layer's window (Unit.kv_tokens).
        layout: how a group of tp runs MoE layers (hetc/experts.py); data-parallel, each device holds
            all but the routed experts whole, and its own 1/tp of the sequences with their K/V.
    """
    params: dict[str, float] = {}
    for u in units:
        params.update(u.params)
    weights = held_weights(sum(params.values()), sum(u.expert_bytes for u in units), tp, layout)
    blocks = math.ceil(context / KV_BLOCK_TOKENS) * KV_BLOCK_TOKENS
    kv = sum((batch * u.kv_bytes(blocks, windowed) + u.kv_bytes(shared_tokens, windowed)) / u.kv_ways(tp, layout) for u in units)
    act = step_tokens(prefill_chunk, batch, tp, layout) * (max((u.act_bytes.per_token for u in units), default=0.0) + logits_bytes_per_token)
    return StageMemory(weights, kv, act)
