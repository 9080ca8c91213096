"""The serving policy: iteration-level continuous batching over a paged KV cache, one
scheduler per pipeline lane. Pure (no torch, no threads, no wall clock of its own): the
runtime's lanes (runtime/lane.py) and the capacity simulator (capacity/simulator.py) drive
the same `Scheduler`, so what the simulator predicts is what the server does.

Each call to `schedule()` forms one micro-batch from sequences not already in the
pipeline: running sequences first (one decode token each, or the next chunk of a prompt
being prefilled), then waiting sequences admitted first-come-first-served while KV blocks
and the token budget last. Long prompts are prefilled in chunks of at most
`max_batched_tokens`. When a running sequence needs a block and none is free, the most
recently admitted sequence not in flight is preempted: its blocks are freed and it goes
back to the front of the queue, to be recomputed (prompt + what it generated so far); a step
that preempts admits no one, so the sequence just preempted does not take its blocks straight back.
With prefix caching (hetc/kv_blocks.py) a sequence admitted takes the cached blocks of its
longest known prefix and is prefilled from their end on; a preempted one usually finds its
own blocks still cached. Blocks shared with other sequences stay theirs when one is freed.
Micro-batches are kept small enough that `n_stages` of them can be in flight at once,
so no stage idles while others work.

Lookahead: a decoding sequence whose micro-batch is still in the pipeline may be scheduled
again before its result is back; its input token is then the one that micro-batch samples,
which the first stage gets from the last stage directly (feedback.py). The frontend's round
trip (result → scheduler → next step) overlaps the pipeline's work instead of idling it. A
sequence that ends with the in-flight token (EOS) wasted that one row; one that ends by
length, or would need a preemption to grow, is not looked ahead.

Speculation (`SchedulerConfig.speculation`, hetc/spec_rounds.py): a decoding sequence that can
speculate is scheduled for its last token and K proposals, one chunk of K+1 positions with blocks
reserved for all of them; its result carries the accepted proposals and the target's next token,
the sequence keeps those and its KV is rolled back past them (`BlockManager.trim`). Such a
sequence is not looked ahead: its next input token is not known until the verify result says how
many proposals were kept, so its steps alternate with the frontend. A round never preempts
another sequence: when its K+1 positions do not fit, it decodes one token instead.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from hetc.kv_blocks import BlockManager
from hetc.sequence import Sequence, SeqStatus
from hetc.spec_rounds import UNDRAFTED, SpecConfig, fallback, ngram_propose
from hetc.speculation import SpeculationMethod
from hetc.scheduling import KV_BLOCK_TOKENS, MAX_WAITING, PREFILL_CHUNK, Phase

# What the last stage sends in place of a token it could not sample (runtime/sampler.py)
NOT_FINITE = -2  # the row's logits hold a NaN, or their maximum is infinite
SAMPLER_ERROR = -3  # the draw raised (the worker's log says why)
GRAMMAR_ERROR = -4  # the sequence's grammar (response_format, tools) cannot go on (the worker's log says why)
SAMPLING_FAILURES = {
    NOT_FINITE: "the model's logits for this sequence are not finite (NaN or infinity): no token can be chosen",
    SAMPLER_ERROR: "sampling this sequence's next token failed (the last stage's log says why)",
    GRAMMAR_ERROR: "the output grammar of this sequence (response_format or tools) cannot go on (the last stage's log says why)",
}

__all__ = [
    "BatchItem",
    "MicroBatch",
    "Rates",
    "Refusal",
    "Scheduler",
    "SchedulerConfig",
    "StepOutput",
    "inflight_depth",
    "lane_config",
    "lane_max_seqs",
    "longest_request",
    "looks_ahead",
    "refusal",
    "route",
]


@dataclass(frozen=True, slots=True)
class SchedulerConfig:
    max_num_seqs: int = 64  # sequences running at once (holding KV)
    max_batched_tokens: int = PREFILL_CHUNK  # tokens in one micro-batch: the prefill chunk
    max_chunk_tokens: int = 0  # one sequence's tokens in a micro-batch at most (a data-parallel rank's budget; 0: the micro-batch's)
    max_waiting: int = MAX_WAITING  # the bounded wait queue; submit beyond it is refused (HTTP 429)
    n_stages: int = 1  # micro-batches that may be in flight at once
    handoff: bool = False  # a prefill pool: a sequence leaves after its first sampled token
    max_queue_wait: float = 30.0  # seconds: a request predicted to wait longer is refused (HTTP 429)
    prefix_caching: bool = True  # reuse the KV of full blocks earlier prompts computed (kv_blocks.py)
    speculation: SpecConfig | None = None  # speculative rounds for the sequences that can (None: one token per step)


@dataclass(slots=True)
class BatchItem:
    seq: Sequence
    start: int  # position of the first new token
    n_new: int  # tokens processed this step
    sample: bool  # this chunk ends at the last known token: the last stage samples the next one
    ahead: bool = False  # its one token is the one the sequence's in-flight micro-batch samples
    draft: list[int] = field(default_factory=list)  # proposals after its known token (UNDRAFTED: the first stage drafts them)
    draft_from: int = 0  # a draft-model lane: the first position its drafter computes (it catches up from there to `start`)
    asked: bool = False  # a speculating sequence's decode step that asked for proposals (`draft` may be []: none found)

    @property
    def tokens(self) -> list[int]:
        """The ids the first stage embeds: its known tokens, then the proposals (-1 for a token not
        known yet: looked ahead, or drafted on the first stage)."""
        if self.ahead:
            return [-1]
        return self.seq.token_ids[self.start : self.start + self.n_new - len(self.draft)] + self.draft


@dataclass(slots=True)
class MicroBatch:
    step_id: int
    items: list[BatchItem] = field(default_factory=list)
    sent_at: float = 0.0
    copies: list[tuple[int, int]] = field(default_factory=list)  # (src, dst) KV blocks every stage copies first (copy-on-write)
    prefix_queried: int = 0  # tokens of the sequences admitted by this batch looked up in the prefix cache
    prefix_hits: int = 0  # of them, found (their prefill skipped)

    @property
    def num_tokens(self) -> int:
        return sum(i.n_new for i in self.items)

    @property
    def has_prefill(self) -> bool:
        return any(i.n_new - len(i.draft) > 1 or not i.sample for i in self.items)  # a round's proposals are decode work


@dataclass(frozen=True, slots=True)
class StepOutput:
    seq: Sequence
    token: int | None  # the last token sampled for seq this step (None: a prefill chunk that samples nothing)
    finished: bool
    error: str | None = None  # the last stage could not sample it (finished with reason "error")
    drafted: int = 0  # a speculative round: proposals verified
    accepted: int = 0  # of them, accepted (the step gained accepted + 1 tokens, fewer if it stopped among them)
    asked: bool = False  # the step asked for proposals (BatchItem.asked): drafted / asked steps is the proposal rate


FINISH_WINDOW = 64  # finishes the seat-wait estimate spans: several bursts of a closed loop's clients


@dataclass(slots=True)
class Rates:
    """The lane's measured service rates, for admission by predicted queue wait.

    Tokens per result and seconds per result are exponential moving averages over results. A
    result's interval is the time since the previous result, but at most the time since its own
    micro-batch was sent, so an idle pipeline does not read as a slow one. Finishes are rare events
    that come in bursts (a closed loop's clients, equal lengths), so their rate is not an average
    per result (its reciprocal, the wait for a seat, ran to hours between bursts and refused
    requests with 429 at 43% load): it is the last FINISH_WINDOW finishes over the pipeline work
    since the first of them. Until something was measured, nothing is predicted (cold start admits).
    """

    alpha: float = 0.2
    tokens: float = 0.0  # EMA of tokens per result
    interval: float = 0.0  # EMA of seconds per result
    busy: float = 0.0  # seconds of pipeline work so far (the intervals summed)
    finishes: deque[float] = field(default_factory=lambda: deque(maxlen=FINISH_WINDOW))  # `busy` at each finish
    last: float | None = None

    def observe(self, tokens: int, finished: int, sent_at: float, now: float) -> None:
        if self.last is None and sent_at <= 0:  # no send time (a scheduler driven without an engine)
            self.last = now
            return
        dt = max(now - sent_at if self.last is None else min(now - self.last, now - sent_at if sent_at > 0 else now), 1e-6)
        self.last = now
        self.busy += dt
        self.finishes.extend([self.busy] * finished)
        if self.interval == 0.0:
            self.tokens, self.interval = float(tokens), dt
            return
        a = self.alpha
        self.tokens += a * (tokens - self.tokens)
        self.interval += a * (dt - self.interval)

    def finish_rate(self) -> float:
        """Sequences finished per second of pipeline work (0: fewer than two finishes seen)."""
        if len(self.finishes) < 2:
            return 0.0
        return (len(self.finishes) - 1) / max(self.busy - self.finishes[0], self.interval)

    def predict_wait(self, queued_tokens: int, seats_short: int, step_tokens: int | None = None) -> float:
        """Seconds until a new request's first token: its queue's prompt tokens at the measured
        token rate, or, when every seat is taken, the time for `seats_short` sequences to finish.

        Args:
            step_tokens: most tokens one step carries (the prefill chunk). Prompt tokens go at least
                that many (or all of them, if fewer) per measured step: a lane whose recent steps
                were decode rows only (one token each) still prefills a long prompt in one step.
        """
        if self.interval == 0.0:
            return 0.0
        per_step = max(self.tokens, min(queued_tokens, step_tokens)) if step_tokens else self.tokens
        wait = queued_tokens * self.interval / max(per_step, 1e-9)
        rate = self.finish_rate()
        if seats_short > 0 and rate > 0:  # too few finishes seen: a seat's wait is unknown, not infinite
            wait = max(wait, seats_short / rate)
        return wait


class Scheduler:
    """Owns the lane's sequences and block manager. Not thread-safe: the runtime's lane holds a lock."""

    def __init__(
        self,
        blocks: BlockManager,
        config: SchedulerConfig,
        on_preempt: Callable[[Sequence], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
        propose: Callable[[Sequence, int], list[int]] | None = None,
    ):
        """Args:
        blocks: the lane's KV blocks.
        config: limits; `handoff` for a prefill pool.
        on_preempt: where a preempted sequence goes instead of this lane's queue (a decode
            pool runs no prefill: its preempted sequences are recomputed by a prefill pool).
        clock: seconds, the same clock that stamps `MicroBatch.sent_at` (the simulator's is virtual).
        propose: (sequence, at most k) → its proposals for a speculative round; default: n-gram
            lookup over its tokens, or UNDRAFTED × k for a draft model (drafted on the first stage).
        """
        self.blocks, self.cfg, self.on_preempt, self.clock = blocks, config, on_preempt, clock
        self.propose = propose or self._propose
        self.waiting: deque[Sequence] = deque()
        self.running: list[Sequence] = []
        self.handoffs: list[Sequence] = []  # prefilled sequences for a decode pool (prefill pools)
        self.scrub: list[int] = []  # blocks to zero in every stage before they are free again (the lane sends them)
        self._step = 0
        self.num_preemptions = 0
        self.rates = Rates()

    # ---- queue -------------------------------------------------------------------------
    @property
    def num_waiting(self) -> int:
        return len(self.waiting)

    @property
    def num_running(self) -> int:
        return len(self.running)

    def has_unfinished(self) -> bool:
        return bool(self.waiting or self.running)

    def predicted_wait(self, prompt_tokens: int) -> float:
        """Seconds a new request of `prompt_tokens` would wait for its first token (measured rates)."""
        queued = prompt_tokens + sum(s.remaining for s in self.waiting)
        short = len(self.waiting) + 1 - (self.cfg.max_num_seqs - len(self.running))
        return self.rates.predict_wait(queued, short, self.cfg.max_batched_tokens)

    def add(self, seq: Sequence, front: bool = False) -> None:
        seq.status = SeqStatus.WAITING
        if front:
            self.waiting.appendleft(seq)
        else:
            self.waiting.append(seq)

    def admit_running(self, seq: Sequence) -> None:
        """A sequence whose KV arrived from a prefill pool (its blocks are already its own)."""
        seq.status = SeqStatus.RUNNING
        self.running.append(seq)

    def fork(self, parent: Sequence, child: Sequence) -> None:
        """`child` (a copy of `parent`'s tokens so far, its own sampling parameters) runs beside
        `parent` on this lane, sharing its blocks and computed KV until either writes a shared block
        (copy-on-write: `BlockManager.fork`): the samples of one prompt (`n` > 1). Call it when
        `parent` has no step in flight, e.g. with its prompt computed but for the last token, so
        that each sample computes that token and samples its first token itself."""
        self.blocks.fork(parent, child)
        child.first_scheduled = parent.first_scheduled
        self.admit_running(child)

    def reserve_incoming(self, seq: Sequence) -> bool:
        """A decode pool: give a prefilled sequence blocks for the KV already computed (a
        prefill pool sends it); False when they do not fit yet. It is in flight until `land`."""
        if not self.blocks.can_grow(seq, 0):
            return False
        self.blocks.grow(seq, 0)
        seq.num_draft_computed = 0  # a drafter's KV does not move between pools: it catches up on its first round
        seq.in_flight = 1  # an abort waits for the KV to land
        return True

    def land(self, seq: Sequence) -> StepOutput | None:
        """A decode pool: `seq`'s KV arrived; it runs from here, or finishes if it was aborted
        meanwhile (returned)."""
        seq.in_flight = 0
        if seq.aborted:
            self.drop(seq, "abort")
            return StepOutput(seq, None, True)
        self.admit_running(seq)
        return None

    def drop(self, seq: Sequence, reason: str) -> None:
        """Finish a sequence this scheduler holds no queue entry for (a transfer on its way)."""
        self.blocks.free(seq)
        seq.status, seq.finish_reason = SeqStatus.FINISHED, reason

    def abort(self, seq: Sequence) -> bool:
        """Stop `seq`. Returns True when it is finished now; False when it is in flight and
        will be finished (and its blocks freed) when its micro-batch comes back."""
        seq.aborted = True
        if seq.in_flight:
            return False
        self._finish(seq, "abort")
        return True

    def _finish(self, seq: Sequence, reason: str) -> None:
        for child in seq.forks:  # its samples not forked yet go on as sequences of their own
            if child.status is SeqStatus.WAITING:
                self.add(child, front=True)
        seq.forks = []
        if seq.status is SeqStatus.RUNNING:
            self.running.remove(seq)
        elif seq.status is SeqStatus.WAITING and seq in self.waiting:
            self.waiting.remove(seq)
        self.blocks.free(seq)
        seq.status, seq.finish_reason = SeqStatus.FINISHED, reason

    def _preempt(self, seq: Sequence) -> None:
        """Free `seq`'s KV; it is recomputed from its tokens when admitted again."""
        self.running.remove(seq)
        self.blocks.free(seq)
        seq.status = SeqStatus.WAITING
        seq.preemptions += 1
        self.num_preemptions += 1
        if self.on_preempt is not None:
            self.on_preempt(seq)
        else:
            self.waiting.appendleft(seq)

    # ---- one micro-batch -----------------------------------------------------------------
    def schedule(self, lookahead: bool = False) -> MicroBatch | None:
        """The next micro-batch from sequences not in flight (with `lookahead`, also decoding
        sequences in flight once); None when there is nothing to run."""
        active = len(self.running) + len(self.waiting)
        # split the active sequences over n_stages micro-batches so the pipeline stays full
        seq_cap = max(1, math.ceil(active / self.cfg.n_stages))
        budget = self.cfg.max_batched_tokens
        batch = MicroBatch(self._step)
        step, n_stages = self._step, self.cfg.n_stages
        preempted = False
        for seq in list(self.running):
            if budget == 0 or len(batch.items) >= seq_cap:
                break
            if seq.status is not SeqStatus.RUNNING:
                continue
            if seq.in_flight:
                # the cheapest of _can_look_ahead's conditions first: most sequences in flight fail them
                if lookahead and seq.in_flight == 1 and step - seq.last_step >= n_stages and self._can_look_ahead(seq):
                    self.blocks.grow(seq, seq.num_tokens + 1 - seq.num_computed, start=seq.num_tokens)
                    self.blocks.key_full(seq, seq.num_tokens)
                    seq.in_flight += 1
                    seq.last_step = batch.step_id
                    batch.items.append(BatchItem(seq, seq.num_tokens, 1, sample=True, ahead=True, draft_from=min(seq.num_draft_computed, seq.num_tokens)))
                    seq.num_draft_computed = seq.num_tokens + 1
                    budget -= 1
                continue
            n = self._chunk(seq, min(seq.remaining, budget, self.cfg.max_chunk_tokens or budget))
            draft = self._round(seq, budget - n) if n == seq.remaining == 1 else None
            if draft and not self.blocks.can_grow(seq, 1 + len(draft)):
                draft = []  # a round never preempts: one token instead
            while not self.blocks.can_grow(seq, n):
                victim = next((s for s in reversed(self.running) if not s.in_flight and s is not seq), None)
                self._preempt(victim or seq)
                preempted = True
                if victim is None:
                    break
            if seq.status is not SeqStatus.RUNNING:
                continue
            self._add(batch, seq, n, draft)
            budget -= n + len(draft or [])
        # no admission in a step that preempted (vLLM's rule): the preempted sequence would come straight
        # back, take the blocks just freed, and be preempted again next step — recomputing its prompt each time
        while not preempted and self.waiting and budget > 0 and len(batch.items) < seq_cap and len(self.running) < self.cfg.max_num_seqs:
            seq = self.waiting[0]
            hit = self.blocks.cached_prefix(seq)  # its KV there is computed: prefill starts after it
            n = min(seq.num_tokens - len(hit) * self.blocks.block_size, budget, self.cfg.max_chunk_tokens or budget)
            n = n - 1 if seq.forks and n == seq.num_tokens - len(hit) * self.blocks.block_size else n
            if not self.blocks.can_admit(seq, hit, max(n, 1)) or seq.forks and self.running and len(self.running) + 1 + len(seq.forks) > self.cfg.max_num_seqs:
                break  # first come first served: later arrivals do not overtake it
            self.waiting.popleft()
            if self.blocks.caching:
                batch.prefix_queried += seq.num_tokens
            batch.prefix_hits += self.blocks.admit(seq, hit)
            seq.status = SeqStatus.RUNNING
            self.running.append(seq)
            if seq.first_scheduled is None:
                seq.first_scheduled = self.clock()
            if n == 0:  # its prompt is cached but for the last token: its samples fork now
                n = self._chunk(seq, 1)
            self._add(batch, seq, n)
            budget -= n
        if not batch.items:
            return None
        batch.copies = self.blocks.take_copies()
        self._step += 1
        return batch

    def _chunk(self, seq: Sequence, n: int) -> int:
        """Tokens of `seq`'s next chunk (n asked for): a sequence with samples to fork stops one short
        of its prompt's end; once there (and not in flight), they fork, and each computes the last
        prompt token and samples its first token itself (`fork`)."""
        if not seq.forks or n < seq.remaining:
            return n
        if seq.remaining > 1:
            return n - 1
        for child in seq.forks:
            if child.status is SeqStatus.WAITING:  # not aborted meanwhile
                self.fork(seq, child)
        seq.forks = []
        return n

    def _can_look_ahead(self, seq: Sequence) -> bool:
        """`seq`'s next step may go before its in-flight one comes back: n_stages micro-batches
        after it, so the first stage runs the others meanwhile instead of waiting for its token."""
        return (
            seq.in_flight == 1
            and seq.samples_in_flight
            and not seq.aborted
            and not self.cfg.handoff
            and self._step - seq.last_step >= self.cfg.n_stages
            and seq.num_generated + 2 <= seq.params.max_tokens  # the in-flight token does not end it by length
            and not self.speculates(seq)  # its next input is known only when its round's result is
            and self.blocks.can_grow(seq, seq.num_tokens + 1 - seq.num_computed, start=seq.num_tokens)
        )

    def speculates(self, seq: Sequence) -> bool:
        """`seq` decodes in speculative rounds on this lane (a prefill pool's leave after one token)."""
        return self.cfg.speculation is not None and not self.cfg.handoff and fallback(seq.params) is None

    def _round(self, seq: Sequence, budget: int) -> list[int] | None:
        """Proposals for a decoding `seq`'s next step: at most K, within `budget` tokens and short
        of its last allowed token (the verify step adds one of its own); [] where the proposer has
        none (n-gram lookup without a match); None where no round could be asked for."""
        spec = self.cfg.speculation
        if spec is None or not self.speculates(seq):
            return None
        k = min(spec.k, budget, seq.params.max_tokens - seq.num_generated - 1)
        return self.propose(seq, k) if k > 0 else None

    def _propose(self, seq: Sequence, k: int) -> list[int]:
        spec = self.cfg.speculation
        assert spec is not None
        if spec.method is SpeculationMethod.DRAFT:
            return [UNDRAFTED] * k
        return ngram_propose(seq.token_ids, k, spec.ngram_max, spec.ngram_min)

    def _add(self, batch: MicroBatch, seq: Sequence, n: int, draft: list[int] | None = None) -> None:
        """`seq`'s next `n` tokens into `batch`, with a round's proposals (`draft`: [] where one was asked
        for and none came; None where none was asked for)."""
        asked, draft = draft is not None, draft or []
        self.blocks.grow(seq, n + len(draft))
        self.blocks.key_full(seq, seq.num_computed + n)  # known tokens only: never a proposal
        seq.in_flight += 1
        seq.last_step = batch.step_id
        start = seq.num_computed
        sample = start + n == seq.num_tokens
        seq.samples_in_flight = sample
        batch.items.append(BatchItem(seq, start, n + len(draft), sample=sample, draft=draft, draft_from=min(seq.num_draft_computed, start), asked=asked))
        if not draft:  # a drafter computes every token its target does; a round's own are counted on its result
            seq.num_draft_computed = max(seq.num_draft_computed, start + n)

    # ---- results -------------------------------------------------------------------------
    def on_result(self, batch: MicroBatch, tokens: list[int], accepted: list[list[int]] | None = None) -> list[StepOutput]:
        """Apply the tokens the last stage sampled (one per item; -1 where it sampled none; a
        `SAMPLING_FAILURES` code where it could not sample: that sequence ends with an error).

        Args:
            batch: the micro-batch the result is of.
            tokens: per item, its sampled token (after a speculative round: the target's token
                after the accepted proposals).
            accepted: per item, the proposals the verify step accepted, in order ([] for an item
                without proposals); None: no item had any.
        Returns what each sequence got; finished ones have released their blocks.
        """
        out = []
        for idx, (item, tok) in enumerate(zip(batch.items, tokens, strict=True)):
            seq = item.seq
            seq.in_flight -= 1
            seq.samples_in_flight = seq.samples_in_flight and seq.in_flight > 0
            if seq.status is not SeqStatus.RUNNING:  # finished while a looked-ahead step was in flight
                continue
            if seq.aborted:
                self._finish(seq, "abort")
                out.append(StepOutput(seq, None, True))
                continue
            kept = accepted[idx] if accepted is not None and item.draft else []
            seq.num_computed = item.start + item.n_new - len(item.draft) + len(kept)  # its KV past them is rolled back below
            if item.draft:
                # the drafter wrote its own inputs (the known token, then all proposals but the last)
                seq.num_draft_computed = min(item.start + len(item.draft), seq.num_computed)
                seq.spec_drafted += len(item.draft)
                seq.spec_accepted += len(kept)
            if not item.sample:
                out.append(StepOutput(seq, None, False))
                continue
            if tok < 0:  # its KV may hold NaN: its blocks are scrubbed before anyone gets them again
                self.scrub += self.blocks.unkey(seq)
                self._finish(seq, "error")
                out.append(StepOutput(seq, None, True, error=SAMPLING_FAILURES.get(tok, f"the last stage sent token {tok}")))
                continue
            reason = None
            for t in [*kept, tok]:  # a stop among the accepted tokens ends the sequence there
                seq.token_ids.append(t)
                if not seq.params.ignore_eos and t in seq.eos_token_ids or t in seq.params.stop_token_ids:
                    reason = "stop"
                elif seq.num_generated >= seq.params.max_tokens:
                    reason = "length"
                if reason:
                    break
            if item.draft and not reason:
                self.blocks.trim(seq)
                self.blocks.key_full(seq, seq.num_computed)  # blocks the accepted proposals filled: their KV is back
            if reason:
                self._finish(seq, reason)
            elif self.cfg.handoff:  # KV goes to a decode pool; the blocks stay until it is sent
                self.running.remove(seq)
                seq.status = SeqStatus.HANDOFF
                self.handoffs.append(seq)
            out.append(StepOutput(seq, seq.token_ids[-1], reason is not None, drafted=len(item.draft), accepted=len(kept), asked=item.asked))
        self.rates.observe(batch.num_tokens, sum(o.finished for o in out), batch.sent_at, self.clock())
        return out

    def evict(self, seq: Sequence) -> None:
        """Take `seq` out with its KV freed, to be recomputed by another lane (a decode pool died, or
        the prompt's KV did not arrive)."""
        if seq in self.running:
            self.running.remove(seq)
        elif seq in self.waiting:
            self.waiting.remove(seq)
        self.blocks.free(seq)
        seq.status, seq.in_flight, seq.samples_in_flight = SeqStatus.WAITING, 0, False

    def evict_all(self) -> list[Sequence]:
        """`evict` every sequence this scheduler holds; returns them."""
        seqs = [*self.running, *self.waiting]
        for s in seqs:
            self.evict(s)
        return seqs

    def fail_all(self) -> list[Sequence]:
        """Finish every sequence with an error (a dead stage); returns them."""
        seqs = [*self.running, *self.waiting, *self.handoffs]
        seqs += [c for s in seqs for c in s.forks]
        self.handoffs.clear()
        for s in seqs:
            s.forks = []
            self.blocks.free(s)
            s.status, s.finish_reason, s.in_flight = SeqStatus.FINISHED, "error", 0
        self.running.clear()
        self.waiting.clear()
        return seqs


# ---- the rules around a lane's scheduler (the runtime's engine and lanes, and the simulator) --------
def looks_ahead(phase: Phase) -> bool:
    """A lane sends decode steps before their input token is back, except a prefill pool (its
    sequences leave after their first token: nothing to look ahead for)."""
    return phase != Phase.PREFILL


def inflight_depth(n_stages: int, phase: Phase, speculation: SpecConfig | None = None) -> int:
    """Micro-batches a lane keeps in its pipeline: one per stage, and one more queued behind each
    when it looks ahead — not when it speculates: a round's next input is known only when its
    result is back, so the extra micro-batch could only take the sequences not in flight, and a
    lane's sequences would split into alternating half-batches for good (at batch 2 on one stage,
    1.4× the steps; benchmarks/speculation.py)."""
    return n_stages * (2 if looks_ahead(phase) and speculation is None else 1)


def lane_config(base: SchedulerConfig, n_stages: int, phase: Phase, max_num_seqs: int | None = None, ranks: int = 1) -> SchedulerConfig:
    """`base` for one lane: micro-batches split over its stages, prefill pools hand sequences off,
    its own `max_num_seqs` when given (`lane_max_seqs`), and a micro-batch's token budget over `ranks`
    data-parallel ranks that each schedule their own (`max_batched_tokens` is a rank's)."""
    return dataclasses.replace(
        base,
        n_stages=n_stages,
        handoff=phase == Phase.PREFILL,
        max_num_seqs=max_num_seqs or base.max_num_seqs,
        max_batched_tokens=base.max_batched_tokens * ranks,
        max_chunk_tokens=base.max_batched_tokens if ranks > 1 else base.max_chunk_tokens,  # a prompt's chunk: on one rank
    )


def lane_max_seqs(batch: int, n_stages: int, override: int | None = None) -> int:
    """Sequences a lane runs at once: `--max-num-seqs` when given, else its own pipeline's planned
    batch (the plan sized its KV for that many), at least 2 per stage so its micro-batches stay full."""
    return override or max(batch, 2 * n_stages)


def longest_request(lanes: list[tuple[Phase, int]], block_tokens: int = KV_BLOCK_TOKENS) -> tuple[int, int]:
    """(the longest prompt, the longest prompt + output) a server of these lanes — (phase, KV blocks)
    each — takes: requests go to the least loaded lane, not the one they fit, so a prompt must fit
    every lane that prefills and a whole sequence every lane that decodes. A prefill pool's KV holds
    prompts only (the plan sizes it so), and does not limit the output."""
    prefill = [n for ph, n in lanes if ph != Phase.DECODE]
    decode = [n for ph, n in lanes if ph != Phase.PREFILL]
    return min(prefill) * block_tokens, min(decode) * block_tokens


def route(loads: list[int], cached: list[int]) -> int:
    """The lane a new request goes to (SGLang's cache-aware routing): the one holding the longest
    cached prefix of its prompt, unless its queue is more than twice the shortest (then, as with
    no hit anywhere, the least loaded). The shortest counts as at least 1, so an idle lane beside
    a lane with one request does not break the affinity of a light load.

    Args:
        loads: per lane, sequences queued, running and arriving (`LaneRunner.load`).
        cached: per lane, blocks of the prompt's prefix its cache holds.
    """
    least = min(range(len(loads)), key=loads.__getitem__)
    best = max(range(len(loads)), key=lambda i: (cached[i], -loads[i]))
    if cached[best] == 0 or loads[best] > 2 * max(loads[least], 1):
        return least
    return best


@dataclass(frozen=True, slots=True)
class Refusal:
    """Why a request is refused on arrival (HTTP 429) and when to try again."""

    reason: str
    retry_after: float


def refusal(predicted_wait: float, num_waiting: int, cfg: SchedulerConfig) -> Refusal | None:
    """The server's admission: a request is refused when the lane that would take it predicts a
    longer wait for its first token than `max_queue_wait` (`Scheduler.predicted_wait`), or when
    the bounded queue is full; None admits it.

    Args:
        predicted_wait: seconds, on the least loaded entry lane.
        num_waiting: requests waiting on every lane.
        cfg: the server's limits.
    """
    if predicted_wait > cfg.max_queue_wait:
        return Refusal(
            f"the predicted wait for a first token is {predicted_wait:.1f} s, over the server's --max-queue-wait of {cfg.max_queue_wait:g} s",
            min(predicted_wait - cfg.max_queue_wait, 60.0),
        )
    if num_waiting >= cfg.max_waiting:
        return Refusal(f"{num_waiting} requests are waiting (the queue holds {cfg.max_waiting})", 1.0)
    return None
