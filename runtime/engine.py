"""The frontend's engine: every lane of the plan (lane.py) behind one submit/abort interface.

Every lane is a unit with a process group of its own (groups.py). When a unit fails (a worker
died, a receive timed out), its requests end with an error at once, except a decode pool's:
those go back to a prefill lane, which recomputes them (prompt + tokens so far) and hands them
to a decode lane that serves; the other units keep serving, and `on_unit_failed` (the
launcher's healer) restarts the unit and hands the engine fresh transports (`revive`).
Prefill lanes hand prompts only to decode lanes whose KV link is ready (kvlinks.py); until one
is, the prompt waits with its KV in its prefill lane (`parked`). Sequence status changes only
in the schedulers; the engine routes requests, hand-offs and results between them.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from hetc.runtime.inflight import InFlightTransfer, Transfer
from hetc.runtime.lane import LaneRunner
from hetc.runtime.sampling_state import Logprob
from hetc.batching import MicroBatch, SchedulerConfig, StepOutput, route
from hetc.spec_rounds import fallback
from hetc.kv_blocks import prefix_hashes
from hetc.sequence import SamplingParams, Sequence, SeqStatus
from hetc.runtime.topology import Lane
from hetc.runtime.transport import Transport
from hetc.scheduling import KV_BLOCK_TOKENS, Phase

__all__ = ["Engine", "EngineDead", "Event", "QueueFull", "Request"]


class QueueFull(Exception):
    """The bounded wait queue is full, or the predicted wait too long (HTTP 429 with Retry-After)."""

    def __init__(self, message: str, retry_after: float = 1.0):
        super().__init__(message)
        self.retry_after = retry_after


class EngineDead(Exception):
    """No pipeline can take the request: workers are dead or the server is draining (HTTP 503)."""


@dataclass(frozen=True, slots=True)
class Event:
    token: int | None  # a new token, or None
    finished: bool = False
    reason: str | None = None  # stop | length | abort | error
    error: str | None = None
    status: int = 503  # an error's HTTP status: 503 a worker failed, 500 this request's computation failed
    logprob: Logprob | None = None  # the token's log-probabilities, when the request asked for them


@dataclass(eq=False)
class Request:
    seq: Sequence
    lane: LaneRunner
    sink: Callable[[Event], None]  # called from engine threads; must not block
    arrival: float = field(default_factory=time.monotonic)
    first_token_at: float | None = None
    last_token_at: float | None = None
    delivered: int = 0  # generated tokens sent to the sink (deliver)
    logprobs: dict[int, Logprob] = field(default_factory=dict)  # position → log-probabilities (prompt ones stay; generated ones go with their token)
    lock: threading.Lock = field(default_factory=threading.Lock)  # deliver's, per request


class Engine:
    """All lanes of the plan behind one submit/abort interface."""

    def __init__(
        self,
        lanes: list[Lane],
        blocks: dict[int, int],
        cfg: SchedulerConfig,
        metrics,
        *,
        transports: dict[int, Transport],
        units: list[tuple[int, ...]] | None = None,
        clock: Callable[[], float] = time.monotonic,
        heartbeat_s: float = 1.0,
        links=None,
    ):
        """Args:
        lanes: the plan's lanes (topology).
        blocks: lane id → KV blocks of its block manager.
        cfg: scheduler settings (n_stages is set per lane).
        metrics: a runtime.metrics.Metrics.
        transports: lane id → the transport of its unit's group.
        units: lane ids per unit (groups.units); default: every lane its own unit.
        clock: monotonic seconds (tests pass a fake).
        heartbeat_s: idle interval between heartbeats (well below the transport timeout).
        links: a disaggregated plan's kvlinks.KvLinks (its `on_ready` is set to this engine's).
        """
        self.metrics, self.heartbeat_s, self.cfg, self.clock = metrics, heartbeat_s, cfg, clock
        self.blocks = blocks
        self.units = units or [(l.id,) for l in lanes]
        self.unit_of = {lane: u for u, ids in enumerate(self.units) for lane in ids}
        self._handoffs_pending = 0  # prefilled sequences between their prefill lane and a decode lane's queue
        self.lanes = [self._runner(l, transports[l.id]) for l in lanes]
        self.requests: dict[int, Request] = {}
        self._ids = itertools.count()
        self._lock = threading.Lock()
        self.down: dict[int, str] = {}  # unit → why it is not serving (until revived)
        self.gone: set[int] = set()  # units whose restarts gave up
        self.parked: list[Transfer] = []  # prefilled prompts waiting for a decode lane's ready link
        self.links = links
        if links is not None:
            links.on_ready = self._link_ready
        self.draining = False
        self.on_unit_failed: Callable[[int, str], None] | None = None  # the launcher's healer

    def _runner(self, lane: Lane, transport: Transport) -> LaneRunner:
        cfg = SchedulerConfig(
            self.cfg.max_num_seqs,
            self.cfg.max_batched_tokens,
            self.cfg.max_waiting,
            len(lane.stages),
            handoff=lane.phase == Phase.PREFILL,
            max_queue_wait=self.cfg.max_queue_wait,
            prefix_caching=self.cfg.prefix_caching,
            speculation=self.cfg.speculation,
        )
        return LaneRunner(self, lane, self.blocks[lane.id], cfg, transport)

    @property
    def entry_lanes(self) -> list[LaneRunner]:
        """Lanes that take new requests: up, and prefilling (decode pools get them from prefill pools)
        with a decode lane that serves or will again."""
        return [
            r
            for r in self.lanes
            if r.up and (r.lane.phase == Phase.BOTH or r.lane.phase == Phase.PREFILL and any(self.unit_of[d] not in self.gone for d in r.lane.targets))
        ]

    @property
    def failed(self) -> str | None:
        """Why no request can be served (every unit is down), else None."""
        if self.down and len(self.down) == len(self.units):
            return "; ".join(self.down[u] for u in sorted(self.down))
        return None

    @property
    def max_tokens_per_seq(self) -> int:
        """Most tokens (prompt + output) one sequence can hold: the smallest lane's whole pool."""
        return min(r.sched.blocks.capacity for r in self.lanes) * KV_BLOCK_TOKENS

    def start(self) -> None:
        for r in self.lanes:
            r.start()
        if self.links is not None:
            self.links.open({r.lane.id for r in self.lanes if r.up})

    def num_waiting(self) -> int:
        return sum(r.sched.num_waiting for r in self.lanes)

    def num_running(self) -> int:
        return sum(r.sched.num_running for r in self.lanes)

    def submit(self, prompt_ids: list[int], params: SamplingParams, eos: frozenset[int], sink: Callable[[Event], None]) -> Request:
        """Queue a request on the least loaded working lane. Raises EngineDead (503) or QueueFull (429)."""
        return self.submit_samples(prompt_ids, [(params, sink)], eos)[0]

    def submit_samples(self, prompt_ids: list[int], samples: list[tuple[SamplingParams, Callable[[Event], None]]], eos: frozenset[int]) -> list[Request]:
        """Queue the samples of one prompt (`n`), each with its parameters and sink, on one lane: the
        first is the prompt's sequence, the others fork from it when its prompt is computed but for
        the last token (hetc.batching.Scheduler: they share its KV blocks). More samples than the
        lane runs sequences at once go as sequences of their own (the prefix cache shares their
        prompt's full blocks). Raises EngineDead (503) or QueueFull (429)."""
        if self.draining:
            raise EngineDead("the server is shutting down and takes no new requests")
        keys = prefix_hashes(prompt_ids) if self.cfg.prefix_caching else []  # here, outside every lock
        self._admit(len(prompt_ids), keys)
        with self._lock:
            entry = self.entry_lanes
            if not entry:
                raise EngineDead(self.failed or "every pipeline is restarting")
            if self.num_waiting() >= self.cfg.max_waiting:
                raise QueueFull(f"{self.num_waiting()} requests are waiting (the queue holds {self.cfg.max_waiting})")
            lane, _ = self._pick(entry, keys)
            seqs = [Sequence(next(self._ids), list(prompt_ids), len(prompt_ids), p, eos, block_hashes=list(keys)) for p, _ in samples]
            if self.cfg.speculation is not None:
                for p, _ in samples:
                    why = fallback(p)
                    if why is not None:
                        self.metrics.on_fallback(why)
            reqs = [Request(seq, lane, sink, arrival=self.clock()) for seq, (_, sink) in zip(seqs, samples)]
            for r in reqs:
                self.requests[r.seq.seq_id] = r
        forked = len(seqs) <= lane.sched.cfg.max_num_seqs
        with lane.cond:
            if forked:
                seqs[0].forks = seqs[1:]
            for seq in seqs if not forked else seqs[:1]:
                lane.sched.add(seq)
            lane.poke()
        self.metrics.on_queue(self)
        return reqs

    def handoffs_started(self, n: int) -> None:
        with self._lock:
            self._handoffs_pending += n

    @staticmethod
    def _pick(entry: list[LaneRunner], keys: list[bytes]) -> tuple[LaneRunner, int]:
        """The lane a prompt with these prefix keys goes to (hetc.batching.route: its longest cached
        prefix, unless that lane is much busier) and the prompt tokens its cache holds. The caches are
        read without their lanes' locks (single dict look-ups): a routing hint, not a reservation."""
        cached = [r.sched.blocks.cached_blocks(keys) for r in entry] if keys else [0] * len(entry)
        i = route([r.load() for r in entry], cached)
        return entry[i], cached[i] * KV_BLOCK_TOKENS

    def _admit(self, prompt_tokens: int, keys: list[bytes]) -> None:
        """Refuse a request whose predicted wait for its first token, on the lane that would take
        it, exceeds cfg.max_queue_wait (the prediction: scheduler.Rates, from measured steps, over
        the prompt tokens its prefix cache does not hold)."""
        entry = self.entry_lanes
        if not entry:
            return  # submit says why nothing can take it
        lane, hit = self._pick(entry, keys)
        with lane.cond:  # not under self._lock: the receive loop takes lane.cond, then self._lock
            wait = lane.sched.predicted_wait(max(1, prompt_tokens - hit))
        if wait > self.cfg.max_queue_wait:
            raise QueueFull(
                f"the predicted wait for a first token is {wait:.1f} s, over the server's --max-queue-wait of {self.cfg.max_queue_wait:g} s",
                retry_after=min(wait - self.cfg.max_queue_wait, 60.0) if wait != float("inf") else 60.0,
            )

    def handoff(self, seq: Sequence, src: LaneRunner) -> None:
        """A prefill lane finished `seq`'s prompt: queue its KV for the least loaded decode lane
        whose link is ready, or park it until one is."""
        try:
            with src.cond:
                if seq.status is not SeqStatus.HANDOFF or not src.up:  # aborted or failed meanwhile
                    return
                src_blocks, seq.block_table, seq.num_keyed = seq.block_table, [], 0
                t = Transfer(seq, src, src, seq.num_computed, src_blocks)
            self._route(t)
        finally:
            with self._lock:
                self._handoffs_pending -= 1

    def _route(self, t: Transfer) -> None:
        ready = [(self.lanes[d], e) for d in t.src.lane.targets if self.lanes[d].up and (e := self._epoch(t.src.lane.id, d)) is not None]
        if not ready:
            with self._lock:
                self.parked.append(t)
            return
        dst, t.epoch = min(ready, key=lambda x: LaneRunner.load(x[0]))
        t.dst = dst
        req = self.requests.get(t.seq.seq_id)
        if req is not None:
            req.lane = dst
        with dst.cond:
            dst.incoming.append(t)
            dst.poke()

    def _epoch(self, src: int, dst: int) -> int | None:
        return 0 if self.links is None else self.links.ready((src, dst))

    def _link_ready(self, pair: tuple[int, int]) -> None:
        """A KV link formed: the prompts parked on its prefill lane move on."""
        with self._lock:
            moving = [t for t in self.parked if t.src.lane.id == pair[0]]
            self.parked = [t for t in self.parked if t.src.lane.id != pair[0]]
        for t in moving:
            self._route(t)

    def idle(self) -> bool:
        """Nothing queued, running or moving anywhere (a drained server may stop its workers)."""
        return (
            self._handoffs_pending == 0
            and not self.parked
            and all(
                not r.sched.has_unfinished() and not r.incoming and not any(isinstance(i, InFlightTransfer) for i in r.inflight) for r in self.lanes if r.up
            )
        )

    def requeue(self, seq: Sequence) -> None:
        """A decode lane preempted `seq` (its blocks are free): a prefill lane recomputes it.
        Called with the decode lane's cond held (decode → prefill is the only cross-lane order)."""
        entry = self.entry_lanes
        if not entry:
            return self._end(seq, "error", "no prefill pipeline serves to recompute the sequence (every one is down)")
        lane, _ = self._pick(entry, prefix_hashes(seq.token_ids, parents=seq.block_hashes) if self.cfg.prefix_caching else [])
        req = self.requests.get(seq.seq_id)
        if req is not None:
            req.lane = lane
        with lane.cond:
            lane.sched.add(seq, front=True)
            lane.poke()

    def recompute(self, seqs: list[Sequence]) -> None:
        """Sequences whose KV was lost with a decode lane (or on its way there; their blocks are
        free): a prefill lane recomputes each from its tokens so far; an aborted one ends."""
        for seq in seqs:
            if seq.aborted:
                self._end(seq, "abort")
            else:
                self.requeue(seq)

    def _end(self, seq: Sequence, reason: str, error: str | None = None) -> None:
        seq.status, seq.finish_reason = SeqStatus.FINISHED, reason
        with self._lock:
            req = self.requests.pop(seq.seq_id, None)
        if req is not None:
            if error is None:
                self.metrics.on_finish(req, self.clock())
            req.sink(Event(None, True, reason, error=error))

    def abort(self, req: Request) -> None:
        """Stop a request whose client left or whose stop string matched."""
        with req.lane.cond:
            done = req.lane.sched.abort(req.seq)
            req.lane.poke()
        if done and self.requests.pop(req.seq.seq_id, None) is not None:
            self.metrics.on_finish(req, self.clock())  # in flight: counted when its result comes back

    def record_logprobs(self, batch: MicroBatch, records: list[tuple[int, int, Logprob]]) -> None:
        """A step's log-probabilities (item, position, values), kept on each sequence's request
        until its tokens are delivered (before `deliver` of the same result)."""
        for item, pos, lp in records:
            req = self.requests.get(batch.items[item].seq.seq_id)
            if req is not None:
                req.logprobs[pos] = lp

    def deliver(self, outs: list[StepOutput]) -> None:
        """Stream what `outs` brought: each request gets its sequence's new tokens in order, once.
        Tokens are taken from the sequence (the schedulers append them in order), not from the
        outputs: when a decode lane dies, its last result may still be on its way out of the dead
        lane's thread while a prefill lane has recomputed the sequence and sampled the next token;
        whichever thread gets here first sends both, in order."""
        now = self.clock()
        for o in outs:
            req = self.requests.get(o.seq.seq_id)
            if req is None:
                continue
            with req.lock:
                if o.finished and self.requests.pop(o.seq.seq_id, None) is None:
                    continue  # ended meanwhile (failed, or finished by the other thread)
                seq = o.seq
                new = [] if o.error is not None else seq.token_ids[seq.num_prompt_tokens + req.delivered :]
                req.delivered += len(new)
                for _ in new:
                    self.metrics.on_token(req, now)
                    req.last_token_at = now
                    if req.first_token_at is None:
                        req.first_token_at = now
                if o.finished and o.error is None:  # as in _end: a failed request is not a success of any reason
                    self.metrics.on_finish(req, now)
                if o.error is not None:
                    req.sink(Event(None, True, "error", error=o.error, status=500))
                    continue
                first = seq.num_prompt_tokens + req.delivered - len(new)  # the position of new[0]
                for i, tok in enumerate(new):
                    last = o.finished and i == len(new) - 1
                    req.sink(Event(tok, last, seq.finish_reason if last else None, logprob=req.logprobs.pop(first + i, None)))
                if o.finished and not new:
                    req.sink(Event(None, True, seq.finish_reason))

    # ---- failures and restarts -------------------------------------------------------------
    def lane_failed(self, runner: LaneRunner, reason: str) -> None:
        """`runner`'s transport failed: its whole unit stops, its requests end with an error now
        (a decode lane's go back to prefill instead), the other units keep serving, and the
        healer is asked to restart the unit."""
        unit = self.unit_of[runner.lane.id]
        with self._lock:
            if runner.down is not None or self.lanes[runner.lane.id] is not runner:
                return  # already failed, or an old runner's thread after a restart
            if all(r.stopped.is_set() for r in self.lanes if r.up):
                return  # drained: the workers are stopping
            self.down[unit] = reason
            runners = [self.lanes[i] for i in self.units[unit]]
            for r in runners:
                r.down = reason
            dead = {r.lane.id for r in runners}
            lost = [t for t in self.parked if t.src.lane.id in dead]  # prompts whose KV was in a dead lane
            self.parked = [t for t in self.parked if t.src.lane.id not in dead]
        self.metrics.on_fail()
        if self.links is not None:
            for i in dead:
                self.links.down(i)
        for t in lost:
            t.src.sched.evict(t.seq)  # its KV was in the dead lane's blocks
        back = [t.seq for t in lost]
        for r in runners:
            with r.cond:
                if r.lane.phase == Phase.DECODE:  # its sequences, and the prompts on their way to it
                    back += r.sched.evict_all()
                    landing = [i.transfer.seq for i in r.inflight if isinstance(i, InFlightTransfer)]
                    moving = list(r.incoming)
                    for seq in [*landing, *(t.seq for t in moving)]:
                        r.sched.evict(seq)
                    back += landing
                else:
                    r.sched.fail_all()
                    moving = []
                r.inflight.clear()
                r.incoming.clear()
                r.poke()
            for t in moving:
                t.src.release(t)
                back.append(t.seq)
        for d in self.lanes:  # prompts from a dead prefill lane waiting at a decode lane: their KV is gone
            if d.up and d.lane.phase == Phase.DECODE:
                with d.cond:
                    stale = [t for t in d.incoming if t.src.lane.id in dead]
                    for t in stale:
                        d.incoming.remove(t)
                        d.sched.evict(t.seq)
                back += [t.seq for t in stale]
        keep = {s.seq_id for s in back}
        with self._lock:
            reqs = [q for q in self.requests.values() if q.lane in runners and q.seq.seq_id not in keep]
            for q in reqs:
                self.requests.pop(q.seq.seq_id, None)
        for q in reqs:
            q.sink(Event(None, True, "error", error=reason))
        self.recompute(back)
        if self.on_unit_failed is not None:
            self.on_unit_failed(unit, reason)

    def unit_gave_up(self, unit: int) -> None:
        """`unit` stays down: prompts parked for decode lanes that will never serve end with the reason."""
        self.gone.add(unit)
        with self._lock:
            stuck = [t for t in self.parked if all(self.unit_of[d] in self.gone for d in t.src.lane.targets)]
            self.parked = [t for t in self.parked if t not in stuck]
        for t in stuck:
            t.src.release(t)
            self._end(t.seq, "error", self.down.get(unit, "every decode pipeline is down"))

    def revive(self, unit: int, transports: dict[int, Transport]) -> None:
        """`unit`'s workers were restarted and joined a new group: fresh lanes (empty schedulers
        and KV pools) take requests again.

        Args:
            unit: index into `units`.
            transports: lane id → the new group's transport, for each lane of the unit.
        """
        fresh = [self._runner(self.lanes[i].lane, transports[i]) for i in self.units[unit]]
        with self._lock:
            for r in fresh:
                self.lanes[r.lane.id] = r
            self.down.pop(unit, None)
        for r in fresh:
            r.start()
        if self.links is not None:
            up = {r.lane.id for r in self.lanes if r.up}
            for r in fresh:
                self.links.open(up, r.lane.id)
        if not self.down:
            self.metrics.on_revive()

    # ---- drain -------------------------------------------------------------------------------
    def stop_admitting(self) -> None:
        """Drain's first step: new requests get 503; queued and running ones go on."""
        self.draining = True

    def wait_idle(self, timeout: float) -> bool:
        """Wait until no request is left (True) or `timeout` seconds pass (False)."""
        deadline = self.clock() + timeout
        while self.requests or not self.idle():
            if self.clock() >= deadline:
                return False
            time.sleep(0.05)
        return True

    def cancel_all(self, reason: str) -> None:
        """End every request still open with an error (drain timed out)."""
        for r in self.lanes:
            if r.up:
                with r.cond:
                    for q in list(self.requests.values()):
                        if q.lane is r:
                            r.sched.abort(q.seq)
                    r.poke()
        with self._lock:
            reqs, self.requests = list(self.requests.values()), {}
        for q in reqs:
            q.sink(Event(None, True, "error", error=reason))

    def shutdown(self, timeout: float = 30.0) -> bool:
        """Stop the workers of every working lane (SHUTDOWN through every stage) once idle."""
        self.draining = True
        up = [r for r in self.lanes if r.up]
        for r in up:
            with r.cond:
                r.stopping = True
                r.poke()
        deadline = self.clock() + timeout
        return all(r.stopped.wait(max(0.0, deadline - self.clock())) for r in up)
