"""The serving policy's shared numbers and names: one home for what the planner's
saturation model, the capacity simulator and the runtime's scheduler must agree on.

`Phase(StrEnum)` and friends compare equal to their strings, so plan.json keeps its
text values and older call sites keep working while new code uses the enums.
"""

from __future__ import annotations

from enum import StrEnum

__all__ = ["KV_BLOCK_TOKENS", "MAX_WAITING", "PREFILL_CHUNK", "Disaggregate", "Objective", "Phase"]

KV_BLOCK_TOKENS = 32  # tokens per paged-KV block: the block OpenVINO's CPU paged-attention kernel reads
PREFILL_CHUNK = 2048  # most tokens one engine step processes: a long prompt is prefilled in chunks of it
MAX_WAITING = 256  # the bounded wait queue; a request beyond it gets 429


class Phase(StrEnum):
    """What a pipeline runs: both phases, or one side of a disaggregated plan."""

    BOTH = "both"
    PREFILL = "prefill"
    DECODE = "decode"


class Objective(StrEnum):
    THROUGHPUT = "throughput"  # output tok/s at saturation (max)
    LATENCY = "latency"  # ms per request (min)
    COST = "cost"  # USD per million output tokens (min)
    ENERGY = "energy"  # output tokens per joule (max)


class Disaggregate(StrEnum):
    AUTO = "auto"  # pools where they predict more output tok/s
    ON = "on"  # pools only
    OFF = "off"  # every pipeline prefills and decodes
