"""Speculative decoding: the one home for its methods, its limits and the acceptance model.

A round proposes K tokens (a draft model, or n-gram prompt lookup) and the target verifies them in
one step of K+1 positions per sequence. The planner (partitioner/), the simulator (capacity/) and the
server (runtime/) all read the expected yield of a round from here, so a plan, its simulation and a
served run count tokens the same way. An acceptance rate is always an input (given, or read from a
served run's metrics), never fitted silently: a plan records which α it used and where it came from.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from prometheus_client.parser import text_string_to_metric_families

__all__ = [
    "MAX_SPECULATIVE_TOKENS",
    "Acceptance",
    "AcceptanceSource",
    "SpeculationMethod",
    "alpha_from_share",
    "expected_tokens_per_round",
    "expected_tokens_per_step",
    "mean_accepted_share",
    "MeasuredAcceptance",
    "measured_acceptance",
]

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


def expected_tokens_per_step(alpha: float, k: int, proposal_rate: float = 1.0) -> float:
    """Tokens a speculating sequence gains per decode step when a share `proposal_rate` of its steps
    are rounds of K proposals and the rest decode one token: n-gram lookup proposes only where the
    sequence's last n-gram occurred before (a draft model always proposes: rate 1).

    Args:
        alpha: per-token acceptance probability, in [0, 1].
        k: proposals per round, ≥ 0.
        proposal_rate: rounds over decode steps, in (0, 1].
    """
    if not 0.0 < proposal_rate <= 1.0:
        raise ValueError(f"proposal rate must be in (0, 1], got {proposal_rate}")
    return 1.0 + proposal_rate * (expected_tokens_per_round(alpha, k) - 1.0)


@dataclass(frozen=True, slots=True)
class Acceptance:
    """What a plan assumes about its rounds: α, where it came from, and the share of decode steps
    that propose (1 where nothing says otherwise)."""

    alpha: float
    source: AcceptanceSource
    where: str  # the flag or the metrics file
    proposal_rate: float = 1.0


# vLLM's counters (its spec-decode metrics), which hetc's server exports beside its own names
ACCEPTED_TOKENS = "vllm:spec_decode_num_accepted_tokens"
DRAFT_TOKENS = "vllm:spec_decode_num_draft_tokens"
DRAFTS = "vllm:spec_decode_num_drafts"  # rounds: draft tokens / drafts is the K the run served with
# hetc's own: decode steps of sequences that speculate, rounds or not (drafts / steps: the proposal rate)
SPEC_STEPS = "hetc_spec_decode_steps"


def mean_accepted_share(alpha: float, k: int) -> float:
    """Accepted over drafted tokens when each proposal is accepted with probability α: the accepted
    prefix has mean α + α² + … + α^K of K proposals (the round's own token not counted; summed, not
    the closed form, which cancels near α = 1)."""
    return sum(alpha**j for j in range(1, k + 1)) / k


def alpha_from_share(share: float, k: int) -> float:
    """The per-token α whose accepted share of K proposals (`mean_accepted_share`) is `share`: the
    share rises with α, so bisection inverts it (to 1e-12). At K = 1 the two are equal.

    Args:
        share: accepted / drafted tokens, in [0, 1].
        k: proposals per round the run drafted, ≥ 1.
    """
    if not 0.0 <= share <= 1.0:
        raise ValueError(f"accepted share must be in [0, 1], got {share}")
    if k < 1:
        raise ValueError(f"proposals per round must be ≥ 1, got {k}")
    lo, hi = 0.0, 1.0
    while hi - lo > 1e-12:
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if mean_accepted_share(mid, k) < share else (lo, mid)
    return (lo + hi) / 2


@dataclass(frozen=True, slots=True)
class MeasuredAcceptance:
    """A served run's speculation, read from its /metrics (`measured_acceptance`)."""

    alpha: float  # per-token acceptance
    share: float  # accepted over drafted tokens (vLLM's acceptance rate)
    k: int  # proposals per round the run served
    proposal_rate: float  # rounds over speculating decode steps (1.0 where the run does not export its steps)


def measured_acceptance(metrics_text: str, k: int) -> MeasuredAcceptance:
    """α, the accepted share, K served and the proposal rate from a served run's Prometheus /metrics.

    The share is vLLM's accepted over draft tokens; K is draft tokens over drafts where the run
    exports its rounds, else `k`; the proposal rate is drafts over hetc's speculating decode steps
    where the run exports both, else 1. Summed over every label set (all lanes).

    Args:
        metrics_text: the /metrics page as text.
        k: the K to assume where the run does not export its rounds.

    Raises:
        ValueError: a counter is missing, the text is not Prometheus', or no token was drafted.
    """
    totals: dict[str, float] = {}
    names = (ACCEPTED_TOKENS, DRAFT_TOKENS, DRAFTS, SPEC_STEPS)
    for family in text_string_to_metric_families(metrics_text):
        for sample in family.samples:
            name = sample.name.removesuffix("_total")
            if name in names:
                totals[name] = totals.get(name, 0.0) + sample.value
    for need in (ACCEPTED_TOKENS, DRAFT_TOKENS):
        if need not in totals:
            raise ValueError(f"no {need} counter in the metrics")
    drafted, accepted = totals[DRAFT_TOKENS], totals[ACCEPTED_TOKENS]
    if drafted <= 0:
        raise ValueError(f"{DRAFT_TOKENS} is 0: the run drafted nothing")
    drafts, steps = totals.get(DRAFTS, 0.0), totals.get(SPEC_STEPS, 0.0)
    served_k = max(1, round(drafted / drafts) if drafts else k)
    share = min(1.0, accepted / drafted)
    rate = min(1.0, drafts / steps) if drafts and steps else 1.0
    return MeasuredAcceptance(alpha_from_share(share, served_k), share, served_k, rate)
