"""What a lane has in its pipeline, in send order: one typed record per message sent.

The receiver takes the oldest record for each message that comes back from the last stage
(stages keep the order), so the record says what the message answers: a micro-batch's
result, a KV transfer that left or landed, a scrub or copy of KV blocks, or a control message
(heartbeat, shutdown).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import TYPE_CHECKING

from hetc.batching import MicroBatch
from hetc.sequence import Sequence

if TYPE_CHECKING:
    from hetc.runtime.lane import LaneRunner

__all__ = ["Control", "ControlKind", "InFlight", "InFlightBatch", "InFlightCopy", "InFlightScrub", "InFlightTransfer", "Transfer", "TransferLeg"]


@dataclass(eq=False, slots=True)
class Transfer:
    """One prompt's KV moving from a prefill lane to a decode lane (disaggregated plans)."""

    seq: Sequence
    src: "LaneRunner"
    dst: "LaneRunner"
    tokens: int  # KV positions sent: everything computed before the first sampled token
    src_blocks: list[int]
    epoch: int = 0  # the pair's link epoch it travels on (kvlinks.py); -1: its prefill lane was down
    sent_bytes: float = 0.0


@dataclass(eq=False, slots=True)
class InFlightBatch:
    batch: MicroBatch
    sent_at: float  # perf_counter() when sent (the round trip's start)


class TransferLeg(enum.Enum):
    OUT = "out"  # leaving the prefill lane's stages
    IN = "in"  # landing in the decode lane's stages


@dataclass(eq=False, slots=True)
class InFlightTransfer:
    transfer: Transfer
    leg: TransferLeg


@dataclass(eq=False, slots=True)
class InFlightScrub:
    """Blocks every stage zeroes before they are free again (a sequence whose logits were not
    finite may have left NaN in them; the next owner's masked attention would spread it)."""

    blocks: list[int]


@dataclass(eq=False, slots=True)
class InFlightCopy:
    """Blocks every stage copies (src, dst) before the micro-batch sent right behind (copy-on-write
    of blocks sequences shared: hetc/kv_blocks.py)."""

    pairs: list[tuple[int, int]]


class ControlKind(enum.Enum):
    HEARTBEAT = "heartbeat"
    SHUTDOWN = "shutdown"


@dataclass(frozen=True, slots=True)
class Control:
    kind: ControlKind


InFlight = InFlightBatch | InFlightTransfer | InFlightScrub | InFlightCopy | Control
