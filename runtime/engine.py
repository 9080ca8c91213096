"""The frontend's engine: per lane (pipeline replica) a scheduler, a sender thread that
feeds micro-batches to the first stage and a receiver thread that takes sampled tokens
from the last stage; a watchdog that fails everything in flight when a worker dies.

Threads share the scheduler under the lane's condition variable; gloo sends and receives
release the GIL, so the HTTP server keeps serving while they wait.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from hetc.runtime.block_manager import BlockManager
from hetc.scheduling import KV_BLOCK_TOKENS
from hetc.runtime.scheduler import MicroBatch, Scheduler, SchedulerConfig, StepOutput
from hetc.runtime.sequence import SamplingParams, Sequence, SeqStatus
from hetc.runtime.topology import Lane
from hetc.runtime.transport import Kind, Message, Sender, StepMeta, recv

__all__ = ["Engine", "EngineDead", "Event", "QueueFull", "Request"]


class QueueFull(Exception):
    """The bounded wait queue is full, or the predicted wait too long (HTTP 429 with Retry-After)."""

    def __init__(self, message: str, retry_after: float = 1.0):
        super().__init__(message)
        self.retry_after = retry_after


class EngineDead(Exception):
    """A worker died or the server is draining (HTTP 503)."""


@dataclass(frozen=True, slots=True)
class Event:
    token: int | None  # a new token, or None
    finished: bool = False
    reason: str | None = None  # stop | length | abort | error
    error: str | None = None


@dataclass(eq=False)
class Request:
    seq: Sequence
    lane: "LaneRunner"
    sink: Callable[[Event], None]  # called from engine threads; must not block
    arrival: float = field(default_factory=time.monotonic)
    first_token_at: float | None = None
    last_token_at: float | None = None


_HEARTBEAT = object()  # marks a heartbeat in the in-flight queue


@dataclass(eq=False)
class Transfer:
    """One prompt's KV moving from a prefill lane to a decode lane (disaggregated plans)."""

    seq: Sequence
    src: "LaneRunner"
    dst: "LaneRunner"
    tokens: int  # KV positions sent: everything computed before the first sampled token
    src_blocks: list[int]
    sent_bytes: float = 0.0


class LaneRunner:
    """One pipeline replica: its scheduler and the two threads that talk to its stages."""

    def __init__(self, engine: "Engine", lane: Lane, num_blocks: int, cfg: SchedulerConfig):
        self.engine, self.lane = engine, lane
        # a decode pool runs no prefill: its preempted sequences are recomputed by a prefill pool
        self.sched = Scheduler(BlockManager(num_blocks), cfg,
                               on_preempt=engine.requeue if lane.phase == "decode" else None)
        self.incoming: deque[Transfer] = deque()  # decode lanes: prefilled sequences waiting for blocks
        self.cond = threading.Condition()
        self.inflight: deque = deque()
        self.first_rank, self.last_rank = lane.stages[0].rank, lane.stages[-1].rank
        self.stopping = False  # SHUTDOWN requested
        self.stopped = threading.Event()
        self._last_send = time.monotonic()
        self._send_lock = threading.Lock()
        self._dirty = True
        self._out = Sender(self.first_rank)
        # looking ahead, each stage has a micro-batch queued behind the one it runs
        self.depth = len(lane.stages) * (2 if lane.lookahead else 1)

    def start(self) -> None:
        threading.Thread(target=self._guard, args=(self._send_loop,), name=f"lane{self.lane.id}-send", daemon=True).start()
        threading.Thread(target=self._guard, args=(self._recv_loop,), name=f"lane{self.lane.id}-recv", daemon=True).start()

    def _guard(self, fn: Callable[[], None]) -> None:
        try:
            fn()
        except Exception as e:  # a transport error: a peer died or timed out
            devices = ", ".join(s.device for s in self.lane.stages)
            text = str(e).splitlines()[0] if str(e) else type(e).__name__
            self.engine.fail(f"pipeline lane {self.lane.id} ({devices}) lost a stage worker: {text[:240]}")

    # ---- sending ---------------------------------------------------------------------------
    # Both threads send: the receiver sends the next micro-batch as soon as a result frees its
    # sequences (no thread hand-off between a result and the next step), the sender thread
    # sends what new requests make possible, heartbeats while idle, and SHUTDOWN. `_send_lock`
    # keeps "append to inflight" and "send" in one order; it is taken before `cond`.
    def poke(self) -> None:
        """The scheduler's state changed (call with `cond` held): the sender looks again."""
        self._dirty = True
        self.cond.notify_all()

    def _next_message(self, heartbeat_ok: bool) -> Message | None:
        """With `cond` held: the next message to send, already queued in `inflight`; None: nothing now."""
        if self.incoming:
            msg = self._next_transfer()
            if msg is not None:
                return msg
        if len(self.inflight) < self.depth:
            batch = self.sched.schedule(self.lane.lookahead)
            if batch is not None:
                msg = self._step_message(batch)
                self.inflight.append(batch)
                self.engine.metrics.on_schedule(self)
                batch.sent_at = time.perf_counter()
                self._last_send = time.monotonic()
                return msg
        if not heartbeat_ok or self.inflight:
            return None
        if self.stopping and self.engine.idle():
            self.inflight.append(_HEARTBEAT)
            return Message(Kind.SHUTDOWN)
        if time.monotonic() - self._last_send >= self.engine.heartbeat_s:
            self.inflight.append(_HEARTBEAT)
            self._last_send = time.monotonic()
            return Message(Kind.HEARTBEAT)
        return None

    def _next_transfer(self) -> Message | None:
        """A decode lane (cond held): take the first incoming prompt whose blocks fit; the matching
        TRANSFER_OUT goes to its prefill lane just before this TRANSFER_IN (see _send_next)."""
        t = self.incoming[0]
        if t.seq.aborted:  # the client left while it waited: its prefill blocks go back
            self.incoming.popleft()
            t.seq.status = SeqStatus.FINISHED
            t.seq.finish_reason = "abort"
            t.src.release(t)
            return None
        if not self.sched.blocks.can_grow(t.seq, 0):
            return None
        self.incoming.popleft()
        self.sched.blocks.grow(t.seq, 0)  # blocks for the t.tokens positions already computed
        t.seq.in_flight = 1  # an abort waits for the KV to land
        self.inflight.append(t)
        meta = torch.tensor([t.src.lane.id, t.tokens, *t.seq.block_table], dtype=torch.long)
        return Message(Kind.TRANSFER_IN, t.seq.seq_id, meta=meta,
                       times=torch.zeros(len(self.lane.stages), dtype=torch.float64))

    def send_transfer_out(self, t: Transfer) -> None:
        """A prefill lane: send a prompt's KV to `t.dst` (called by the decode lane's sender)."""
        with self._send_lock:
            with self.cond:
                if self.engine.failed:
                    return
                self.inflight.append(t)
            meta = torch.tensor([t.dst.lane.id, t.tokens, *t.src_blocks], dtype=torch.long)
            self._out.send(Message(Kind.TRANSFER_OUT, t.seq.seq_id, meta=meta,
                                   times=torch.zeros(len(self.lane.stages), dtype=torch.float64)))

    def release(self, t: Transfer) -> None:
        """A prefill lane: the prompt's blocks are free again (its KV was sent, or is not needed)."""
        with self.cond:
            self.sched.blocks.free_blocks(t.src_blocks)
            t.src_blocks = []
            self.poke()

    def _send_next(self, heartbeat_ok: bool) -> Message | None:
        with self._send_lock:
            with self.cond:
                if self.engine.failed:
                    return None
                msg = self._next_message(heartbeat_ok)
                if msg is None and heartbeat_ok:
                    self._dirty = False  # nothing to do until the next poke (or the heartbeat is due)
                t = self.inflight[-1] if msg is not None and msg.kind is Kind.TRANSFER_IN else None
            if t is not None:
                # every transfer to this lane is issued here, OUT then IN, so each pair of workers
                # sees its transfers in the same order on both sides
                t.src.send_transfer_out(t)
            if msg is not None:
                self._out.send(msg)
                if msg.kind is Kind.SHUTDOWN:
                    self._out.flush()
            return msg

    def _send_loop(self) -> None:
        while not self.engine.failed:
            msg = self._send_next(heartbeat_ok=True)
            if msg is not None:
                if msg.kind is Kind.SHUTDOWN:
                    return
                continue
            with self.cond:
                if not self._dirty and not self.engine.failed:
                    due = self.engine.heartbeat_s - (time.monotonic() - self._last_send)
                    self.cond.wait(timeout=max(0.01, due) if not self.inflight else self.engine.heartbeat_s)

    def _step_message(self, batch: MicroBatch) -> Message:
        items = batch.items
        meta = StepMeta(seq_ids=[i.seq.seq_id for i in items], starts=[i.start for i in items],
                        n_new=[i.n_new for i in items], sample=[i.sample for i in items],
                        block_tables=[list(i.seq.block_table) for i in items],
                        # a looked-ahead token is not sampled yet: the first stage fills it in (feedback.py)
                        token_ids=[t for i in items for t in ([-1] if i.ahead else
                                                              i.seq.token_ids[i.start:i.start + i.n_new])],
                        sampling=[(i.seq.params.temperature, i.seq.params.top_p, i.seq.params.top_k,
                                   i.seq.params.seed) for i in items])
        m, s = meta.encode()
        return Message(Kind.STEP, batch.step_id, meta=m, samp=s,
                       times=torch.zeros(len(self.lane.stages), dtype=torch.float64))

    # ---- receiving -------------------------------------------------------------------------
    def _recv_loop(self) -> None:
        while True:
            msg = recv(self.last_rank)
            now = time.perf_counter()
            handoffs, done_out = [], None
            with self.cond:
                if self.engine.failed:
                    return
                item = self.inflight.popleft()
                outs = []
                if msg.kind is Kind.RESULT:
                    outs = self.sched.on_result(item, msg.payload.reshape(-1).tolist())
                    self.engine.metrics.on_step(self, item, msg.times.tolist(), now - item.sent_at)
                    handoffs, self.sched.handoffs = self.sched.handoffs, []
                    with self.engine._lock:
                        self.engine.handoffs_pending += len(handoffs)
                elif msg.kind is Kind.TRANSFER_OUT:  # its KV left every prefill stage
                    item.sent_bytes = float(msg.times.sum())
                    self.sched.blocks.free_blocks(item.src_blocks)
                    item.src_blocks = []
                    done_out = item
                elif msg.kind is Kind.TRANSFER_IN:  # its KV is in every decode stage: decode from here
                    seq = item.seq
                    seq.in_flight = 0
                    if seq.aborted:
                        self.sched.blocks.free(seq)
                        seq.status, seq.finish_reason = SeqStatus.FINISHED, "abort"
                        outs = [StepOutput(seq, None, True)]
                    else:
                        self.sched.admit_running(seq)
                self.poke()
            if msg.kind is Kind.SHUTDOWN:
                self.stopped.set()
                return
            if msg.kind is Kind.RESULT:
                self._send_next(heartbeat_ok=False)  # keep the first stage busy before the HTTP work below
            if done_out is not None:
                self.engine.metrics.on_transfer(done_out.tokens, done_out.sent_bytes)
            for seq in handoffs:
                self.engine.handoff(seq, self)
            self.engine.deliver(outs)

    # ---- requests --------------------------------------------------------------------------
    def load(self) -> int:
        return self.sched.num_running + self.sched.num_waiting + len(self.incoming)


class Engine:
    """All lanes of the plan behind one submit/abort interface."""

    def __init__(self, lanes: list[Lane], blocks: dict[int, int], cfg: SchedulerConfig, metrics, *,
                 heartbeat_s: float = 1.0):
        """Args:
            lanes: the plan's lanes (topology).
            blocks: lane id → KV blocks of its block manager.
            cfg: scheduler settings (n_stages is set per lane).
            metrics: a runtime.metrics.Metrics.
            heartbeat_s: idle interval between heartbeats (well below the transport timeout).
        """
        self.metrics, self.heartbeat_s, self.cfg = metrics, heartbeat_s, cfg
        self.handoffs_pending = 0  # prefilled sequences between their prefill lane and a decode lane's queue
        self.lanes = [LaneRunner(self, l, blocks[l.id], SchedulerConfig(
            cfg.max_num_seqs, cfg.max_batched_tokens, cfg.max_waiting, len(l.stages), handoff=l.phase == "prefill",
            max_queue_wait=cfg.max_queue_wait))
            for l in lanes]
        # requests enter where prompts are prefilled; decode pools get them from prefill pools
        self.entry_lanes = [r for r in self.lanes if r.lane.phase in ("both", "prefill")]
        self.requests: dict[int, Request] = {}
        self._ids = itertools.count()
        self._lock = threading.Lock()
        self.failed: str | None = None
        self.draining = False
        self.on_fail: Callable[[str], None] | None = None  # the launcher stops the surviving workers

    @property
    def max_tokens_per_seq(self) -> int:
        """Most tokens (prompt + output) one sequence can hold: the smallest lane's whole pool."""
        return min(r.sched.blocks.num_blocks for r in self.lanes) * KV_BLOCK_TOKENS

    def start(self) -> None:
        for r in self.lanes:
            r.start()

    def num_waiting(self) -> int:
        return sum(r.sched.num_waiting for r in self.lanes)

    def num_running(self) -> int:
        return sum(r.sched.num_running for r in self.lanes)

    def submit(self, prompt_ids: list[int], params: SamplingParams, eos: frozenset[int],
               sink: Callable[[Event], None]) -> Request:
        """Queue a request. Raises EngineDead (503) or QueueFull (429)."""
        if self.failed:
            raise EngineDead(self.failed)
        if self.draining:
            raise EngineDead("the server is shutting down")
        self._admit(len(prompt_ids))
        with self._lock:
            if self.num_waiting() >= self.cfg.max_waiting:
                raise QueueFull(f"{self.num_waiting()} requests are waiting (the queue holds {self.cfg.max_waiting})")
            lane = min(self.entry_lanes, key=LaneRunner.load)
            seq = Sequence(next(self._ids), list(prompt_ids), len(prompt_ids), params, eos)
            req = Request(seq, lane, sink)
            self.requests[seq.seq_id] = req
        with lane.cond:
            lane.sched.add(seq)
            lane.poke()
        self.metrics.on_queue(self)
        return req

    def _admit(self, prompt_tokens: int) -> None:
        """Refuse a request whose predicted wait for its first token, on the lane that would take
        it, exceeds cfg.max_queue_wait (the prediction: scheduler.Rates, from measured steps)."""
        lane = min(self.entry_lanes, key=LaneRunner.load)
        with lane.cond:  # not under self._lock: the receive loop takes lane.cond, then self._lock
            wait = lane.sched.predicted_wait(prompt_tokens)
        if wait > self.cfg.max_queue_wait:
            raise QueueFull(f"the predicted wait for a first token is {wait:.1f} s, over the server's "
                            f"--max-queue-wait of {self.cfg.max_queue_wait:g} s",
                            retry_after=min(wait - self.cfg.max_queue_wait, 60.0) if wait != float("inf") else 60.0)

    def handoff(self, seq: Sequence, src: LaneRunner) -> None:
        """A prefill lane finished `seq`'s prompt: queue its KV for the least loaded decode lane."""
        try:
            dst = min((self.lanes[i] for i in src.lane.targets), key=LaneRunner.load)
            with src.cond:
                if seq.status is not SeqStatus.HANDOFF:  # aborted meanwhile: its blocks are free
                    return
                src_blocks, seq.block_table = seq.block_table, []
                t = Transfer(seq, src, dst, seq.num_computed, src_blocks)
                req = self.requests.get(seq.seq_id)
                if req is not None:
                    req.lane = dst
            with dst.cond:
                dst.incoming.append(t)
                dst.poke()
        finally:
            with self._lock:
                self.handoffs_pending -= 1

    def idle(self) -> bool:
        """Nothing queued, running or moving anywhere (a drained server may stop its workers)."""
        return self.handoffs_pending == 0 and all(
            not r.sched.has_unfinished() and not r.incoming and not any(isinstance(i, Transfer) for i in r.inflight)
            for r in self.lanes)

    def requeue(self, seq: Sequence) -> None:
        """A decode lane preempted `seq` (its blocks are free): a prefill lane recomputes it.
        Called with the decode lane's cond held (decode → prefill is the only cross-lane order)."""
        lane = min(self.entry_lanes, key=LaneRunner.load)
        req = self.requests.get(seq.seq_id)
        if req is not None:
            req.lane = lane
        with lane.cond:
            lane.sched.add(seq, front=True)
            lane.poke()

    def abort(self, req: Request) -> None:
        """Stop a request whose client left or whose stop string matched."""
        with req.lane.cond:
            done = req.lane.sched.abort(req.seq)
            req.lane.poke()
        if done:
            self.requests.pop(req.seq.seq_id, None)

    def deliver(self, outs) -> None:
        now = time.monotonic()
        for o in outs:
            req = self.requests.get(o.seq.seq_id)
            if req is None:
                continue
            if o.token is not None:
                self.metrics.on_token(req, now)
                req.last_token_at = now
                if req.first_token_at is None:
                    req.first_token_at = now
            if o.finished:
                self.requests.pop(o.seq.seq_id, None)
                self.metrics.on_finish(req, now)
            if o.token is not None or o.finished:
                req.sink(Event(o.token, o.finished, o.seq.finish_reason if o.finished else None))

    def fail(self, reason: str) -> None:
        """A worker is dead: fail every request, refuse new ones (health turns 503)."""
        with self._lock:
            if self.failed or all(r.stopped.is_set() for r in self.lanes):
                return
            self.failed = reason
        self.metrics.on_fail()
        for r in self.lanes:
            with r.cond:
                r.sched.fail_all()
                r.inflight.clear()
                r.incoming.clear()
                r.poke()
        reqs, self.requests = list(self.requests.values()), {}
        for req in reqs:
            req.sink(Event(None, True, "error", error=reason))
        if self.on_fail:
            self.on_fail(reason)

    def shutdown(self, timeout: float = 30.0) -> bool:
        """Drain: finish what is queued, then stop the workers (SHUTDOWN through every stage)."""
        self.draining = True
        for r in self.lanes:
            with r.cond:
                r.stopping = True
                r.poke()
        deadline = time.monotonic() + timeout
        return all(r.stopped.wait(max(0.0, deadline - time.monotonic())) for r in self.lanes) and not self.failed
