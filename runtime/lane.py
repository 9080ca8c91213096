"""One pipeline replica ("lane") on the frontend: its scheduler, its record of what is in
flight, and the two threads that talk to its stages through the lane's transport.

Threads share the scheduler under the lane's condition variable; gloo sends and receives
release the GIL, so the HTTP server keeps serving while they wait. A transport error ends
both threads and reports the lane as failed to the engine, which fails its requests and
asks for a restart; a restarted lane is a new LaneRunner.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING

import torch

from hetc.kv_blocks import PADDING_BLOCKS, BlockManager
from hetc.runtime.inflight import Control, ControlKind, InFlight, InFlightBatch, InFlightCopy, InFlightScrub, InFlightTransfer, Transfer, TransferLeg
from hetc.batching import MicroBatch, Scheduler, SchedulerConfig, inflight_depth
from hetc.runtime.sampling_state import LaneSampling, decode_logprobs
from hetc.runtime.speculate import result_tokens, spec_extras
from hetc.speculation import SpeculationMethod
from hetc.runtime.topology import Lane
from hetc.runtime.transport import Kind, Message, StepMeta, Transport
from hetc.scheduling import Phase

if TYPE_CHECKING:
    from hetc.runtime.engine import Engine

__all__ = ["LaneRunner"]


class LaneRunner:
    """One pipeline replica: its scheduler and the two threads that talk to its stages."""

    def __init__(self, engine: "Engine", lane: Lane, num_blocks: int, cfg: SchedulerConfig, transport: Transport):
        self.engine, self.lane, self.tp = engine, lane, transport
        # a decode pool runs no prefill: its preempted sequences are recomputed by a prefill pool
        # a decode pool caches nothing: its prompts arrive computed (the prefill pool caches them)
        blocks = BlockManager(num_blocks, reserved=PADDING_BLOCKS, caching=cfg.prefix_caching and lane.phase != Phase.DECODE)
        self.sched = Scheduler(blocks, cfg, on_preempt=engine.requeue if lane.phase == Phase.DECODE else None)
        self.incoming: deque[Transfer] = deque()  # decode lanes: prefilled sequences waiting for blocks
        self.cond = threading.Condition()
        self.inflight: deque[InFlight] = deque()
        self.first_rank, self.last_rank = lane.stages[0].rank, lane.stages[-1].rank
        self.down: str | None = None  # why the lane stopped working (set by the engine)
        self.stopping = False  # SHUTDOWN requested
        self.stopped = threading.Event()
        self._last_send = engine.clock()
        self._send_lock = threading.Lock()
        self._dirty = True
        self._then: Message | None = None  # a step to send right behind the message _next_message returned
        self.threads: list[threading.Thread] = []
        self.depth = inflight_depth(len(lane.stages), lane.phase, cfg.speculation)
        self.sampling = LaneSampling()  # which sequences have sampling state on the last stage
        # a draft model runs in the lane's first stage worker (runtime/drafter.py): told what to catch up on each step
        # (a prefill pool's sequences leave after their first token: it has no drafter)
        self.drafting = cfg.speculation is not None and cfg.speculation.method is SpeculationMethod.DRAFT and lane.phase != Phase.PREFILL

    @property
    def up(self) -> bool:
        return self.down is None

    def start(self) -> None:
        self.threads = [
            threading.Thread(target=self._guard, args=(fn,), name=f"lane{self.lane.id}-{name}", daemon=True)
            for name, fn in (("send", self._send_loop), ("recv", self._recv_loop))
        ]
        for t in self.threads:
            t.start()

    def _guard(self, fn: Callable[[], None]) -> None:
        try:
            fn()
        except Exception as e:  # a transport error: a peer died or timed out
            devices = ", ".join(s.device for s in self.lane.stages)
            text = str(e).splitlines()[0] if str(e) else type(e).__name__
            self.engine.lane_failed(self, f"pipeline lane {self.lane.id} ({devices}) lost a stage worker: {text[:240]}")

    def _live(self) -> bool:
        return self.down is None and not self.engine.failed

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
        """With `cond` held: the next message to send, already recorded in `inflight`; None: nothing now."""
        if self.sched.scrub:  # before any step: those blocks are not free until it comes back
            blocks, self.sched.scrub = self.sched.scrub, []
            self.inflight.append(InFlightScrub(blocks))
            return Message(Kind.SCRUB, meta=torch.tensor(blocks, dtype=torch.long))
        if self.incoming:
            msg = self._next_transfer()
            if msg is not None:
                return msg
        now = self.engine.clock()
        # only micro-batches count against the depth: a KV transfer leg or a scrub taking a step's
        # seat left a prefill pool's stages idle while its prompts' KV queued out (BENCHMARKS.md)
        if sum(isinstance(r, InFlightBatch) for r in self.inflight) < self.depth:
            batch = self.sched.schedule(self.lane.lookahead)
            if batch is not None:
                msg = self._step_message(batch)
                batch.sent_at = now  # the scheduler's measured rates time each round trip from here
                self.engine.metrics.on_schedule(self, batch)
                self._last_send = now
                if batch.copies:  # copy-on-write: every stage copies the blocks before the step writes them
                    self.inflight.append(InFlightCopy(batch.copies))
                    self.inflight.append(InFlightBatch(batch, now))
                    self._then = msg
                    return Message(Kind.COPY, meta=torch.tensor([b for pair in batch.copies for b in pair], dtype=torch.long))
                self.inflight.append(InFlightBatch(batch, now))
                return msg
        if not heartbeat_ok or self.inflight:
            return None
        if self.stopping and self.engine.idle():
            self.inflight.append(Control(ControlKind.SHUTDOWN))
            return Message(Kind.SHUTDOWN)
        if now - self._last_send >= self.engine.heartbeat_s:
            self.inflight.append(Control(ControlKind.HEARTBEAT))
            self._last_send = now
            return Message(Kind.HEARTBEAT)
        return None

    def _next_transfer(self) -> Message | None:
        """A decode lane (cond held): take the first incoming prompt whose blocks fit; the matching
        TRANSFER_OUT goes to its prefill lane just before this TRANSFER_IN (see _send_next)."""
        t = self.incoming[0]
        if t.seq.aborted:  # the client left while it waited: its prefill blocks go back
            self.incoming.popleft()
            self.sched.drop(t.seq, "abort")
            t.src.release(t)
            return None
        if not self.sched.reserve_incoming(t.seq):
            return None
        self.incoming.popleft()
        self.inflight.append(InFlightTransfer(t, TransferLeg.IN))
        return self._transfer_message(Kind.TRANSFER_IN, t, t.src.lane.id, t.seq.block_table)

    def _transfer_message(self, kind: Kind, t: Transfer, other: int, blocks: list[int]) -> Message:
        meta = torch.tensor([other, t.epoch, t.tokens, *blocks], dtype=torch.long)
        return Message(kind, t.seq.seq_id, meta=meta, times=torch.zeros(len(self.lane.stages), dtype=torch.float64))

    def send_transfer_out(self, t: Transfer) -> bool:
        """A prefill lane: send a prompt's KV to `t.dst` (called by the decode lane's sender).
        False when this lane is down (its KV is gone)."""
        with self._send_lock:
            with self.cond:
                if not self._live():
                    return False
                self.inflight.append(InFlightTransfer(t, TransferLeg.OUT))
            self.tp.send(self._transfer_message(Kind.TRANSFER_OUT, t, t.dst.lane.id, t.src_blocks), self.first_rank)
            return True

    def release(self, t: Transfer) -> None:
        """A prefill lane: the prompt's blocks are free again (its KV was sent, or is not needed)."""
        with self.cond:
            self.sched.blocks.free_blocks(t.src_blocks[::-1])
            t.src_blocks = []
            self.poke()

    def _send_next(self, heartbeat_ok: bool) -> Message | None:
        with self._send_lock:
            with self.cond:
                if not self._live():
                    return None
                msg = self._next_message(heartbeat_ok)
                then, self._then = self._then, None
                if msg is None and heartbeat_ok:
                    self._dirty = False  # nothing to do until the next poke (or the heartbeat is due)
                rec = self.inflight[-1] if msg is not None and msg.kind is Kind.TRANSFER_IN else None
            if msg is not None and isinstance(rec, InFlightTransfer) and not rec.transfer.src.send_transfer_out(rec.transfer):
                # every transfer to this lane is issued here, OUT then IN, so each pair of workers
                # sees its transfers in the same order on both sides; with no OUT, the workers
                # answer the IN as failed (an epoch no link has) without waiting on the link
                msg.meta[1] = -1
            if msg is not None:
                self.tp.send(msg, self.first_rank)
                if then is not None:
                    self.tp.send(then, self.first_rank)
                if msg.kind is Kind.SHUTDOWN:
                    self.tp.flush(self.first_rank)
            return msg

    def _send_loop(self) -> None:
        while self._live():
            msg = self._send_next(heartbeat_ok=True)
            if msg is not None:
                if msg.kind is Kind.SHUTDOWN:
                    return
                continue
            with self.cond:
                if not self._dirty and self._live():
                    due = self.engine.heartbeat_s - (self.engine.clock() - self._last_send)
                    self.cond.wait(timeout=max(0.01, due) if not self.inflight else self.engine.heartbeat_s)

    def _step_message(self, batch: MicroBatch) -> Message:
        items = batch.items
        meta = StepMeta(
            seq_ids=[i.seq.seq_id for i in items],
            starts=[i.start for i in items],
            n_new=[i.n_new for i in items],
            sample=[i.sample for i in items],
            block_tables=[list(i.seq.block_table) for i in items],
            # a looked-ahead token is not sampled yet: the first stage fills it in (feedback.py), as a drafter its proposals
            token_ids=[t for i in items for t in i.tokens],
            sampling=[(i.seq.params.temperature, i.seq.params.top_p, i.seq.params.top_k, i.seq.params.seed) for i in items],
            extras=self.sampling.extras(items, self.sched.running) | spec_extras(items, self.drafting),
        )
        m, s = meta.encode()
        # per stage its compute seconds, then per stage 1.0 where the step replayed a CUDA graph
        return Message(Kind.STEP, batch.step_id, meta=m, samp=s, times=torch.zeros(2 * len(self.lane.stages), dtype=torch.float64))

    # ---- receiving -------------------------------------------------------------------------
    def _recv_loop(self) -> None:
        while True:
            msg = self.tp.recv(self.last_rank)
            now = self.engine.clock()
            handoffs, done_out, outs, lost = [], None, [], None
            with self.cond:
                if not self._live():
                    return
                rec = self.inflight.popleft()
                if isinstance(rec, InFlightBatch):
                    _expect(msg, Kind.RESULT, rec)
                    assert msg.payload is not None  # _expect checked the kind: a RESULT carries the sampled ids
                    outs = self.sched.on_result(rec.batch, *result_tokens(msg.payload, len(rec.batch.items)))
                    self.engine.metrics.on_rounds(outs)
                    if msg.meta.numel():
                        self.engine.record_logprobs(rec.batch, decode_logprobs(msg.meta, msg.samp))
                    self.engine.metrics.on_step(self, rec.batch, msg.times.tolist(), now - rec.sent_at)
                    handoffs, self.sched.handoffs = self.sched.handoffs, []
                    self.engine.handoffs_started(len(handoffs))
                elif isinstance(rec, InFlightTransfer) and rec.leg is TransferLeg.OUT:  # its KV left every stage
                    _expect(msg, Kind.TRANSFER_OUT, rec)
                    t = done_out = rec.transfer
                    t.sent_bytes = float(msg.times.sum()) if bool((msg.times >= 0).all()) else 0.0
                    self.sched.blocks.free_blocks(t.src_blocks[::-1])
                    t.src_blocks = []
                elif isinstance(rec, InFlightTransfer) and bool((msg.times < 0).any()):  # a stage did not get its KV
                    _expect(msg, Kind.TRANSFER_IN, rec)
                    self.sched.evict(rec.transfer.seq)
                    lost = rec.transfer.seq
                elif isinstance(rec, InFlightTransfer):  # its KV is in every decode stage: decode from here
                    _expect(msg, Kind.TRANSFER_IN, rec)
                    out = self.sched.land(rec.transfer.seq)
                    outs = [out] if out is not None else []
                elif isinstance(rec, InFlightScrub):  # zero in every stage: free again
                    _expect(msg, Kind.SCRUB, rec)
                    self.sched.blocks.reclaim(rec.blocks)
                elif isinstance(rec, InFlightCopy):  # copied in every stage (the step behind it is recorded next)
                    _expect(msg, Kind.COPY, rec)
                else:
                    _expect(msg, Kind.SHUTDOWN if rec.kind is ControlKind.SHUTDOWN else Kind.HEARTBEAT, rec)
                self.poke()
            if isinstance(rec, Control) and rec.kind is ControlKind.SHUTDOWN:
                self.stopped.set()
                return
            try:
                if isinstance(rec, InFlightBatch):
                    self._send_next(heartbeat_ok=False)  # keep the first stage busy before the HTTP work below
            finally:  # even when that send fails: the tokens sampled are the sequences' own (they may go on elsewhere)
                if done_out is not None and done_out.sent_bytes:
                    self.engine.metrics.on_transfer(done_out.tokens, done_out.sent_bytes)
                if lost is not None:
                    self.engine.recompute([lost])
                for seq in handoffs:
                    self.engine.handoff(seq, self)
                self.engine.deliver(outs)

    # ---- requests --------------------------------------------------------------------------
    def load(self) -> int:
        return self.sched.num_running + self.sched.num_waiting + len(self.incoming)


def _expect(msg: Message, kind: Kind, rec: InFlight) -> None:
    if msg.kind is not kind:
        raise RuntimeError(f"the last stage sent {msg.kind.name} where {kind.name} was due ({type(rec).__name__})")
