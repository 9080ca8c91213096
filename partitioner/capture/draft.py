"""A speculative chain: the draft model's units, then the target's, placed as one chain.

The solver places a drafter as it places any stage: a split that ends a stage after the draft's
last unit puts the drafter on devices of its own; one whose first stage also holds target units
puts it beside the target's first stage, sharing its memory. Its units are marked `Unit.draft`,
so the cost model charges them the drafter's share of each step (simulate.draft_steps: K draft
steps per verify step), and every bound stays additive over units: the drafter's devices count
as devices the plan uses. The cut after the draft's head carries the round's proposals (K token
ids per sequence), not its logits.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from hetc.partitioner.capture.units import Unit

__all__ = ["DRAFT_PREFIX", "TOKEN_ID_BYTES", "draft_chain", "target_part", "vocab_size"]

DRAFT_PREFIX = "draft."  # the draft's parameter names, apart from the target's (tied weights are counted by name)
TOKEN_ID_BYTES = 8  # a proposal on the wire: one int64 token id


def draft_chain(draft: list[Unit], target: list[Unit], k: int) -> list[Unit]:
    """The draft's units (indices 0 … D−1, marked draft) followed by the target's (D … D+N−1).

    Args:
        draft: the draft model's units, as captured.
        target: the target model's units, as captured.
        k: proposals per round: the draft's last cut carries K ids per sequence, spread over the
            K + 1 rows of a verify step (links are costed per row).
    """
    d = len(draft)
    head = [
        replace(
            u,
            params={DRAFT_PREFIX + name: b for name, b in u.params.items()},
            draft=True,
            out_bytes_per_token=TOKEN_ID_BYTES * k / (k + 1) if i == d - 1 else u.out_bytes_per_token,
            out_bytes_const=0.0 if i == d - 1 else u.out_bytes_const,
        )
        for i, u in enumerate(draft)
    ]
    return head + [replace(u, index=d + u.index) for u in target]


def target_part(chain: list[Unit], first: int, last: int) -> tuple[int, int] | None:
    """A stage's units [first, last] of the chain as the target's own indices (None: draft only)."""
    d = sum(1 for u in chain if u.draft)
    if last < d:
        return None
    return max(first, d) - d, last - d


def vocab_size(config: dict[str, Any] | None, units: list[Unit], dtype_bytes: float) -> int:
    """The model's vocabulary: its config's `vocab_size`, else the width of its head's output."""
    if config and isinstance(config.get("vocab_size"), int):
        return int(config["vocab_size"])
    return round(units[-1].out_bytes_per_token / dtype_bytes)
