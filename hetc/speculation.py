"""Speculative decoding: the one home for its methods, its limits and the acceptance model.

A round proposes K tokens (a draft model, or n-gram prompt lookup) and the target verifies them in
one step of K+1 positions per sequence. The planner (partitioner/), the simulator (capacity/) and the
server (runtime/) all read the expected yield of a round from here, so a plan, its simulation and a
served run count tokens the same way. An acceptance rate is always an input (given, or read from a
served run's metrics), never fitted silently: a plan records which α it used and where it came from.
"""

from __future__ import annotations

from enum import StrEnum

__all__ = ["MAX_SPECULATIVE_TOKENS", "AcceptanceSource", "SpeculationMethod", "expected_tokens_per_round"]

MAX_SPECULATIVE_TOKENS = 16  # proposals per round; past this the verify step's K+1 positions cost more than α^K returns


class SpeculationMethod(StrEnum):
    """Where a round's proposals come from."""

    DRAFT = "draft"  # a smaller model with the target's tokenizer, on its own device or beside a target stage
    NGRAM = "ngram"  # prompt lookup: the tokens that followed the sequence's last n-gram earlier in it (no model)


class AcceptanceSource(StrEnum):
    """Where a plan's per-token acceptance rate α came from."""

    GIVEN = "given"  # `--acceptance α` on the command line
    MEASURED = "measured"  # a served run's /metrics (accepted over drafted tokens)


def expected_tokens_per_round(alpha: float, k: int) -> float:
    """Tokens a sequence gains per verify step when each proposal is accepted with probability α.

    Leviathan et al. (2023): the accepted prefix is geometric, and the verify step always adds one
    token of its own (the correction, or the bonus token after K acceptances), so the mean is
    (1 − α^(K+1)) / (1 − α), which is K+1 at α = 1 and 1 at α = 0.

    Args:
        alpha: per-token acceptance probability, in [0, 1].
        k: proposals per round, ≥ 0 (0: no speculation, one token per step).
    """
    if not 0.0 <= alpha <= 1.0:
        raise ValueError(f"acceptance α must be in [0, 1], got {alpha}")
    if k < 0:
        raise ValueError(f"proposals per round must be ≥ 0, got {k}")
    if alpha == 1.0:
        return float(k + 1)
    return (1.0 - alpha ** (k + 1)) / (1.0 - alpha)
