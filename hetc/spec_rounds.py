"""Speculative rounds as the scheduler runs them: who speculates, and what n-gram lookup proposes.

Pure (no torch): the runtime's lanes and the capacity simulator drive the same `Scheduler`
(batching.py), which asks here for a decoding sequence's proposals each round. A round schedules
the sequence's last token and its K proposals as one chunk of K+1 positions (the mixed-step path:
no attention form of its own), the last stage verifies them (runtime/speculate.py), and the
scheduler keeps the accepted prefix and the target's own next token and rolls the rest of the KV
back (kv_blocks.BlockManager.trim). The acceptance model and the method names live in
hetc/speculation.py.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from hetc.sequence import SamplingParams
from hetc.speculation import MAX_SPECULATIVE_TOKENS, SpeculationMethod

__all__ = ["NGRAM_MAX", "NGRAM_MIN", "UNDRAFTED", "Fallback", "SpecConfig", "fallback", "ngram_propose"]

NGRAM_MAX = 4  # the longest suffix prompt lookup matches (vLLM's prompt_lookup_max default)
NGRAM_MIN = 1  # the shortest it falls back to
UNDRAFTED = -1  # a proposal the lane's first stage drafts (a draft model's): the frontend sends this in its place


@dataclass(frozen=True, slots=True)
class SpecConfig:
    """A lane's speculation: `k` proposals per round from `method`."""

    method: SpeculationMethod
    k: int
    ngram_max: int = NGRAM_MAX
    ngram_min: int = NGRAM_MIN

    def __post_init__(self) -> None:
        if not 1 <= self.k <= MAX_SPECULATIVE_TOKENS:
            raise ValueError(f"num_speculative_tokens must be in [1, {MAX_SPECULATIVE_TOKENS}], got {self.k}")
        if not 1 <= self.ngram_min <= self.ngram_max:
            raise ValueError(f"n-gram lengths must satisfy 1 ≤ min ≤ max, got [{self.ngram_min}, {self.ngram_max}]")


class Fallback:
    """Why a request decodes one token per step although the server speculates (the /metrics label)."""

    LOGPROBS = "logprobs"  # per-token log-probabilities are returned for sampled tokens only
    PENALTIES = "penalties"  # presence/frequency/repetition penalties, logit_bias, min_tokens: per-position state on the last stage
    ALL = (LOGPROBS, PENALTIES)


def fallback(params: SamplingParams) -> str | None:
    """The `Fallback` reason `params` cannot speculate in this version; None: it can.

    Args:
        params: the request's sampling parameters.
    """
    if params.logprobs is not None:
        return Fallback.LOGPROBS
    if params.stateful:
        return Fallback.PENALTIES
    return None


def ngram_propose(tokens: list[int], k: int, n_max: int = NGRAM_MAX, n_min: int = NGRAM_MIN) -> list[int]:
    """Prompt lookup (Saxena 2023, vLLM's `ngram`): the up to `k` tokens that followed the latest
    earlier occurrence of the sequence's last n tokens, for the longest n in [n_min, n_max] that
    occurs; [] when none does.

    Args:
        tokens: the sequence so far (prompt + generated).
        k: proposals wanted.
        n_max, n_min: the suffix lengths tried, longest first.
    """
    size = len(tokens)
    if k <= 0 or size < n_min + 1:
        return []
    arr = np.asarray(tokens, dtype=np.int64)
    for n in range(min(n_max, size - 1), n_min - 1, -1):
        # windows starting at 0 .. size − n − 1: every occurrence of the suffix but the suffix itself
        windows = np.lib.stride_tricks.sliding_window_view(arr[:-1], n)
        hits = np.flatnonzero((windows == arr[size - n :]).all(axis=1))
        if hits.size:
            start = int(hits[-1]) + n
            return arr[start : start + k].tolist()
    return []
