"""A request's sequence as the scheduler sees it: tokens, KV blocks, progress."""

from __future__ import annotations

import enum
import time
from dataclasses import dataclass, field

__all__ = ["SamplingParams", "Sequence", "SeqStatus"]


@dataclass(frozen=True, slots=True)
class SamplingParams:
    """How the last stage picks the next token. temperature 0 is greedy."""

    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0  # 0: off
    seed: int = 0  # always set: the frontend draws one when the request gives none
    max_tokens: int = 16
    ignore_eos: bool = False
    # the rest: applied by the last stage's per-sequence sampling state (runtime/sampling_state.py)
    presence_penalty: float = 0.0  # OpenAI's: minus this for every token generated so far
    frequency_penalty: float = 0.0  # OpenAI's: minus this times each token's count among those generated
    repetition_penalty: float = 1.0  # vLLM's: logits of prompt or generated tokens divided (> 0) or multiplied (< 0) by it
    logit_bias: tuple[tuple[int, float], ...] = ()  # (token, added to its logit)
    min_tokens: int = 0  # EOS and stop_token_ids are masked until this many tokens were generated
    stop_token_ids: frozenset[int] = frozenset()  # these end the sequence too (also with ignore_eos)
    logprobs: int | None = None  # top log-probabilities returned per generated token (None: none)
    prompt_logprobs: int | None = None  # the same for every prompt token after the first
    grammar: str | None = None  # the output's grammar (runtime/grammar.py: llguidance's text), masking the logits

    @property
    def stateful(self) -> bool:
        """Sampling needs the sequence's own state on the last stage (counts, bias, its length, its grammar)."""
        return bool(
            self.presence_penalty or self.frequency_penalty or self.repetition_penalty != 1.0 or self.logit_bias or self.min_tokens or self.grammar is not None
        )


class SeqStatus(enum.Enum):
    WAITING = "waiting"
    RUNNING = "running"
    HANDOFF = "handoff"  # prefilled by a prefill pool, its KV on the way to a decode pool
    FINISHED = "finished"


@dataclass(eq=False)
class Sequence:
    """One sequence. `token_ids` = prompt + generated; `num_computed` of them have KV in the cache."""

    seq_id: int
    token_ids: list[int]
    num_prompt_tokens: int
    params: SamplingParams
    eos_token_ids: frozenset[int] = frozenset()
    status: SeqStatus = SeqStatus.WAITING
    num_computed: int = 0
    block_table: list[int] = field(default_factory=list)
    in_flight: int = 0  # micro-batches now in the pipeline that hold it (2: one looked ahead)
    samples_in_flight: bool = False  # its latest in-flight item samples the token after the last known one
    last_step: int = -1  # the step id of the latest micro-batch that held it
    aborted: bool = False
    finish_reason: str | None = None  # "stop" | "length" | "abort" | "error"
    arrival: float = field(default_factory=time.monotonic)
    first_scheduled: float | None = None
    preemptions: int = 0
    block_hashes: list[bytes] = field(default_factory=list)  # prefix-cache keys of its full blocks so far (kv_blocks.prefix_hashes)
    num_keyed: int = 0  # blocks of block_table the prefix cache has seen (keyed, or found keyed by another block)
    forks: list[Sequence] = field(default_factory=list)  # its prompt's other samples (n > 1): they fork from it (batching.Scheduler)
    num_draft_computed: int = 0  # of token_ids, those the lane's draft model holds KV for (draft-model speculation)
    spec_drafted: int = 0  # proposals verified for it so far (speculative rounds)
    spec_accepted: int = 0  # of them, accepted

    @property
    def num_tokens(self) -> int:
        return len(self.token_ids)

    @property
    def num_generated(self) -> int:
        return len(self.token_ids) - self.num_prompt_tokens

    @property
    def remaining(self) -> int:
        """Tokens whose KV is still to compute (the whole prompt when waiting, 1 when decoding)."""
        return len(self.token_ids) - self.num_computed

    @property
    def is_finished(self) -> bool:
        return self.status is SeqStatus.FINISHED
