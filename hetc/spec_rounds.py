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

__all__ = ["NGRAM_MAX", "NGRAM_MIN", "UNDRAFTED", "Fallback", "SpecConfig", "fallback", "ngram_propose", "serve_speculation"]

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
    GRAMMAR = "grammar"  # response_format / tools: the matcher advances one sampled token at a time
    PENALTIES = "penalties"  # presence/frequency/repetition penalties, logit_bias, min_tokens: per-position state on the last stage
    ALL = (LOGPROBS, GRAMMAR, PENALTIES)


def fallback(params: SamplingParams) -> str | None:
    """The `Fallback` reason `params` cannot speculate in this version; None: it can.

    Args:
        params: the request's sampling parameters.
    """
    if params.logprobs is not None:
        return Fallback.LOGPROBS
    if params.grammar is not None:
        return Fallback.GRAMMAR
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


def serve_speculation(plan_spec, enabled: bool, method: str | None, k: int | None, file: str = "plan.json") -> SpecConfig | None:
    """The speculation `hetc serve` runs: the plan's `speculation` section, or `--speculate ngram`
    for a plan without one; `--num-speculative-tokens` sets K of either; `--no-speculation` none.

    Args:
        plan_spec: the plan's `speculation` (hetc.plan.Speculation) or None.
        enabled: False with --no-speculation.
        method: --speculate (only "ngram": a draft model needs the planner's placement).
        k: --num-speculative-tokens, or None.
        file: the plan's path, for errors.
    Raises:
        BadInput: flags that contradict each other or the plan.
    """
    from hetc.errors import BadInput

    if not enabled:
        if method is not None or k is not None:
            flag = "--speculate" if method is not None else "--num-speculative-tokens"
            raise BadInput(f"{flag} was given with --no-speculation.", field=flag, fix="drop one of them.")
        return None
    if method is not None and plan_spec is not None:
        raise BadInput(
            f"the plan speculates already ({plan_spec.method.value}, K={plan_spec.num_speculative_tokens}); "
            "--speculate is for plans without a speculation section.",
            file=file,
            field="speculation",
            fix="drop --speculate (--num-speculative-tokens sets K), or pass --no-speculation to serve without it.",
        )
    if method is not None:
        if method != SpeculationMethod.NGRAM:
            raise BadInput(
                f"--speculate {method}: only ngram can be turned on at serve time.",
                field="--speculate",
                fix="plan a draft model with `hetc plan --draft MODEL` (it places the drafter), or use --speculate ngram.",
            )
        return SpecConfig(SpeculationMethod.NGRAM, k or 3)
    if plan_spec is None:
        if k is not None:
            raise BadInput("--num-speculative-tokens was given but the plan does not speculate.", file=file, field="speculation", fix="add --speculate ngram.")
        return None
    k = k or plan_spec.num_speculative_tokens
    if not 1 <= k <= MAX_SPECULATIVE_TOKENS:
        raise BadInput(f"--num-speculative-tokens is {k}.", field="--num-speculative-tokens", fix=f"pass 1 to {MAX_SPECULATIVE_TOKENS}.")
    return SpecConfig(plan_spec.method, k)
