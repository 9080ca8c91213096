"""A discrete-event simulation of `hetc serve` running a plan under a load.

What the server does, event by event, on a virtual clock:
- each lane (pipeline replica) has the runtime's own `Scheduler` (hetc/batching.py): FCFS
  admission under its KV blocks and the token budget, chunked prefill, micro-batches split over
  its stages, preemption by recompute, lookahead; the lane keeps `inflight_depth` micro-batches in
  its pipeline (KV transfer legs ride beside them) and schedules the next one whenever a result
  frees a seat, as runtime/lane.py does;
- a micro-batch crosses the frontend's message to the first stage, every stage (a FIFO server
  busy for its step time), every link between stages (FIFO, busy for the activations), and the
  result's message back; a looked-ahead item waits at the first stage for the token its
  sequence's previous micro-batch samples, sent over the link from the last stage;
- a request goes to the entry lane the engine routes it to (`hetc.batching.route`: the longest
  cached prefix, unless that lane is much busier), whose prefix cache is the runtime's own
  (hetc/kv_blocks.py: requests carry token ids that share exactly what the load says they share);
- a request arriving is refused (HTTP 429) as the engine refuses it: predicted wait on its
  lane over `max_queue_wait`, or the bounded queue full (`hetc.batching.refusal`);
  one longer than the lanes' KV pools hold is rejected (400, `hetc.batching.longest_request`);
- each lane runs at most its own pipeline's batch of sequences (`lane_max_seqs`) unless the
  server's `max_num_seqs` says otherwise;
- in a disaggregated plan a prefill lane hands each prompt (after its first token) to the least
  loaded decode lane it feeds; the decode lane takes it when its blocks fit, and the prompt's KV
  crosses both pipelines (each prefill stage busy reading its layers' rows out, each decode stage
  receiving them over the links between them: capacity/lanes.py `kv_legs`);
  a decode lane's preempted sequence goes back to the least loaded entry lane.
Step times come from the cost model and the profile's measured serving host work (capacity/lanes.py),
so the same seed gives the same result.
"""

from __future__ import annotations

import heapq
from typing import cast
import itertools
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from hetc.batching import MicroBatch, Scheduler, SchedulerConfig, inflight_depth, lane_config, lane_max_seqs, longest_request, looks_ahead, refusal, route
from hetc.cluster import Cluster
from hetc.kv_blocks import PADDING_BLOCKS, BlockManager, prefix_hashes
from hetc.requests import ServeLimits
from hetc.scheduling import KV_BLOCK_TOKENS, Phase
from hetc.sequence import SamplingParams, Sequence, SeqStatus
from hetc.capacity.lanes import SimLane, kv_legs, link_time, step_of
from hetc.capacity.load import Arrivals, Load, Request
from hetc.capacity.speculation import SimSpeculation

__all__ = ["Outcome", "RequestRecord", "simulate", "simulate_until"]


@dataclass(slots=True)
class RequestRecord:
    arrival: float
    input_len: int
    output_len: int
    status: int = 200  # the server's answer: 200, 429 (refused on arrival), 400 (too long for the KV pools),
    # 503 (a decode pool preempted it and no prefill pool's KV holds it to recompute)
    token_times: list[float] = field(default_factory=list)  # when the frontend delivered each token
    preemptions: int = 0
    prefix_len: int = 0  # its prompt's first tokens shared with the other requests of its prefix group
    prefix_group: int = 0

    def token_ids(self, uid: int) -> list[int]:
        return Request(self.arrival, self.input_len, self.output_len, self.prefix_len, self.prefix_group).token_ids(uid)

    @property
    def done(self) -> bool:
        return len(self.token_times) >= self.output_len

    @property
    def served(self) -> bool:
        return self.status == 200


@dataclass(slots=True)
class Outcome:
    """What a simulation saw: every request, and every stage's busy seconds and peak KV."""

    requests: list[RequestRecord]
    start: float
    end: float
    busy: dict[tuple[int, int], float]  # (lane, stage) -> seconds busy
    stepped: dict[tuple[int, int], tuple[float, int]]  # (lane, stage) -> its micro-batches' seconds and count
    kv_peak: dict[int, float]  # lane -> most of its KV blocks in use at once (fraction)
    preemptions: int
    steps: int
    prefix_queried: int = 0  # prompt tokens the lanes' prefix caches were asked for, and found
    prefix_hits: int = 0
    spec_rounds: int = 0  # speculative rounds verified, their proposals, and of them the accepted
    spec_drafted: int = 0
    spec_accepted: int = 0
    spec_rejected: int = 0  # rounds that ended with a rejected proposal
    spec_steps: int = 0  # decode steps that asked for proposals (rounds over these: the proposal rate)


@dataclass(eq=False, slots=True)
class _Msg:
    """A message through a lane's pipeline: a micro-batch, or one leg of a KV transfer."""

    lane: int
    batch: MicroBatch | None = None
    service: list[float] = field(default_factory=list)  # per stage
    link: list[float] = field(default_factory=list)  # per link after a stage
    deps: list[_Msg] = field(default_factory=list)  # micro-batches that sample a looked-ahead token
    sampled_at: float | None = None  # when its last stage finished
    transfer: _Transfer | None = None
    leg_out: bool = False


@dataclass(eq=False, slots=True)
class _Transfer:
    seq: Sequence
    src: int  # prefill lane
    dst: int  # decode lane
    tokens: int
    src_blocks: list[int]


class _Server:
    """A FIFO resource: a stage or a link."""

    __slots__ = ("queue", "busy_until", "busy_s", "step_s", "steps", "waiting")

    def __init__(self) -> None:
        self.queue: deque[_Msg] = deque()
        self.busy_until = 0.0
        self.busy_s = 0.0  # micro-batches and KV transfer legs
        self.step_s = 0.0  # micro-batches only, as the runtime's hetc_stage_step_seconds counts them
        self.steps = 0
        self.waiting = False  # a start is scheduled (the first stage waiting for a looked-ahead token)


class _Sim:
    def __init__(self, lanes: list[SimLane], cluster: Cluster, cfg: ServeLimits, spec: SimSpeculation | None = None):
        self.now = 0.0
        self.events: list = []
        self._seq = itertools.count()
        self.lanes, self.cluster, self.spec = lanes, cluster, spec
        self.cfg = SchedulerConfig(
            max_batched_tokens=cfg.max_batched_tokens,
            max_waiting=cfg.max_waiting,
            max_queue_wait=cfg.max_queue_wait,
            prefix_caching=cfg.prefix_caching,
            speculation=spec.config if spec is not None else None,
        )
        clock = lambda: self.now  # noqa: E731
        self.sched = [
            Scheduler(
                BlockManager(l.num_blocks, reserved=PADDING_BLOCKS, caching=cfg.prefix_caching and l.phase != Phase.DECODE),
                lane_config(self.cfg, len(l.stages), l.phase, lane_max_seqs(l.batch, len(l.stages), cfg.max_num_seqs), l.budget_ranks),
                on_preempt=self._requeue if l.phase == Phase.DECODE else None,
                clock=clock,
                propose=(lambda seq, k: spec.propose(k)) if spec is not None else None,
            )
            for l in lanes
        ]
        self.depth = [inflight_depth(len(l.stages), l.phase, self.cfg.speculation) for l in lanes]
        self.inflight = [0] * len(lanes)  # micro-batches in flight per lane (not transfer legs)
        self.incoming: list[deque[_Transfer]] = [deque() for _ in lanes]
        # per lane: stage servers, then link servers between them
        self.stages = [[_Server() for _ in l.stages] for l in lanes]
        self.links = [[_Server() for _ in l.links] for l in lanes]
        self.last_msg: dict[int, _Msg] = {}  # seq id -> the latest micro-batch holding it
        self.records: dict[int, RequestRecord] = {}
        self.on_done: dict[int, Callable[[RequestRecord], None]] = {}
        self.kv_peak = [0.0] * len(lanes)
        self.dirty: set[int] = set()
        self.steps = 0
        self.spec_rounds = self.spec_drafted = self.spec_accepted = self.spec_rejected = self.spec_steps = 0
        self.entry = [l.id for l in lanes if l.phase in (Phase.BOTH, Phase.PREFILL)]
        self.max_prompt, self.max_len = longest_request([(l.phase, s.blocks.capacity) for l, s in zip(lanes, self.sched, strict=True)])

    # ---- events -----------------------------------------------------------------------------
    def at(self, t: float, fn, *args) -> None:
        heapq.heappush(self.events, (t, next(self._seq), fn, args))

    def run(self, stop: Callable[[float], bool] | None = None) -> bool:
        """Process events until none is left (True), or until `stop(now)` says so (False; asked
        every 512 events)."""
        n = 0
        while self.events:
            t, _, fn, args = heapq.heappop(self.events)
            self.now = t
            fn(*args)
            while self.dirty:
                self._pump(self.dirty.pop())
            n += 1
            if stop is not None and n % 512 == 0 and stop(t):
                return False
        return True

    # ---- the engine: admission, routing, hand-offs ------------------------------------------
    def load(self, i: int) -> int:
        s = self.sched[i]
        return s.num_running + s.num_waiting + len(self.incoming[i])

    def submit(self, rec: RequestRecord, on_done: Callable[[RequestRecord], None]) -> float | None:
        """Queue a request on the least loaded entry lane, or refuse it: returns Retry-After (s) then."""
        if rec.input_len > self.max_prompt or rec.input_len + rec.output_len > self.max_len:
            rec.status = 400
            return 0.0
        uid = len(self.records)
        tokens = rec.token_ids(uid)
        keys = prefix_hashes(tokens) if self.cfg.prefix_caching and rec.prefix_len else []
        cached = [self.sched[i].blocks.cached_blocks(keys) for i in self.entry]
        pick = route([self.load(i) for i in self.entry], cached)
        lane = self.entry[pick]
        waiting = sum(s.num_waiting for s in self.sched)
        hit = min(cached[pick], (rec.input_len - 1) // KV_BLOCK_TOKENS) * KV_BLOCK_TOKENS
        no = refusal(self.sched[lane].predicted_wait(rec.input_len - hit), waiting, self.cfg)
        if no is not None:
            rec.status = 429
            return no.retry_after
        seq = Sequence(uid, tokens, rec.input_len, SamplingParams(max_tokens=rec.output_len, ignore_eos=True), arrival=self.now, block_hashes=keys)
        self.records[seq.seq_id] = rec
        self.on_done[seq.seq_id] = on_done
        self.sched[lane].add(seq)
        self.dirty.add(lane)
        return None

    def _requeue(self, seq: Sequence) -> None:
        """A decode lane preempted `seq`: the least loaded entry lane that can hold its tokens recomputes
        it (engine.requeue); when none can (a prefill pool's KV holds prompts), it fails (503)."""
        fits = [i for i in self.entry if self.sched[i].blocks.capacity * KV_BLOCK_TOKENS > seq.num_tokens]
        if not fits:
            seq.status = SeqStatus.FINISHED
            rec = self.records[seq.seq_id]
            rec.status = 503
            self.on_done.pop(seq.seq_id)(rec)
            return
        lane = min(fits, key=self.load)
        self.sched[lane].add(seq, front=True)
        self.dirty.add(lane)

    def _handoff(self, seq: Sequence, src: int) -> None:
        dst = min(self.lanes[src].targets, key=self.load)
        blocks, seq.block_table, seq.num_keyed = seq.block_table, [], 0
        self.incoming[dst].append(_Transfer(seq, src, dst, seq.num_computed, blocks))
        self.dirty.add(dst)

    # ---- a lane's sender (runtime/lane.py _next_message) ----------------------------------------
    def _pump(self, i: int) -> None:
        lane, sched = self.lanes[i], self.sched[i]
        while True:
            if self.incoming[i]:
                t = self.incoming[i][0]
                if sched.reserve_incoming(t.seq):
                    self.incoming[i].popleft()
                    out, into = kv_legs(self.lanes[t.src], lane, self.cluster, t.tokens)
                    self._send(_Msg(t.src, service=out, link=[0.0] * len(self.lanes[t.src].links), transfer=t, leg_out=True))
                    self._send(_Msg(i, service=into, link=[0.0] * len(lane.links), transfer=t))
                    continue
            if self.inflight[i] >= self.depth[i]:
                return
            batch = sched.schedule(looks_ahead(lane.phase))
            if batch is None:
                return
            batch.sent_at = self.now
            self.steps += 1
            self.kv_peak[i] = max(self.kv_peak[i], sched.blocks.num_used / sched.blocks.capacity)
            shape = step_of(batch)
            n = len(lane.stages)
            msg = _Msg(i, batch, [lane.step_time(k, shape) for k in range(n)], [link_time(lane, k, shape) for k in range(n - 1)])
            if self.spec is not None and self.spec.draft_s and any(it.draft for it in batch.items):
                msg.service[0] += self.spec.draft_s  # the drafter runs in the first stage's worker
            for it in batch.items:
                if it.ahead:
                    msg.deps.append(self.last_msg[it.seq.seq_id])
                self.last_msg[it.seq.seq_id] = msg
            self._send(msg)

    def _send(self, msg: _Msg) -> None:
        if msg.batch is not None:
            self.inflight[msg.lane] += 1
        self.at(self.now + self.lanes[msg.lane].overheads.message_in, self._arrive, msg, 0)

    # ---- the pipeline ------------------------------------------------------------------------
    def _arrive(self, msg: _Msg, k: int) -> None:
        srv = self.stages[msg.lane][k]
        srv.queue.append(msg)
        self._start(msg.lane, k)

    def _start(self, lane: int, k: int) -> None:
        srv = self.stages[lane][k]
        if not srv.queue or srv.busy_until > self.now or srv.waiting:
            return
        msg = srv.queue[0]
        if k == 0 and msg.deps:  # looked-ahead tokens come from the last stage (or its own samples)
            if any(d.sampled_at is None for d in msg.deps):
                return  # _finish of the dependency starts it
            fb = self.lanes[lane].feedback
            ready = max(cast(float, d.sampled_at) for d in msg.deps) + sum(link.latency for link in fb)  # none is None (above)
            if ready > self.now:
                srv.waiting = True
                self.at(ready, self._retry, lane, k)
                return
        srv.queue.popleft()
        dt = msg.service[k]
        srv.busy_until = self.now + dt
        srv.busy_s += dt
        if msg.batch is not None:
            srv.step_s += dt
            srv.steps += 1
        self.at(self.now + dt, self._stage_done, msg, k)

    def _retry(self, lane: int, k: int) -> None:
        self.stages[lane][k].waiting = False
        self._start(lane, k)

    def _stage_done(self, msg: _Msg, k: int) -> None:
        lane = self.lanes[msg.lane]
        self._start(msg.lane, k)
        if k == len(lane.stages) - 1:
            msg.sampled_at = self.now
            if msg.batch is not None and self.stages[msg.lane][0].queue:
                self._start(msg.lane, 0)
            self.at(self.now + lane.overheads.message_out, self._result, msg)
            return
        link = self.links[msg.lane][k]
        start = max(self.now, link.busy_until)
        link.busy_until = start + msg.link[k]
        link.busy_s += msg.link[k]
        self.at(link.busy_until, self._arrive, msg, k + 1)

    # ---- results at the frontend (runtime/lane.py _recv_loop, engine.deliver) -------------------
    def _result(self, msg: _Msg) -> None:
        i = msg.lane
        if msg.batch is not None:
            self.inflight[i] -= 1
        self.dirty.add(i)
        sched = self.sched[i]
        if msg.transfer is not None:
            t = msg.transfer
            if msg.leg_out:  # the prompt's KV left every prefill stage: its blocks are free
                sched.blocks.free_blocks(t.src_blocks[::-1])
                t.src_blocks = []
            else:
                sched.land(t.seq)
            return
        batch = msg.batch
        assert batch is not None
        accepted = None
        if self.spec is not None and any(it.draft for it in batch.items):
            accepted = [[0] * self.spec.accepted(len(it.draft)) if it.draft else [] for it in batch.items]
        outs = sched.on_result(batch, [0 if it.sample else -1 for it in batch.items], accepted)
        # the lane sends its next micro-batch before the tokens reach the clients (lane._recv_loop), so
        # a closed-loop client's next request cannot join the step its last token freed a place in
        self._pump(i)
        done: list[tuple[Callable[[RequestRecord], None], RequestRecord]] = []
        for o in outs:
            rec = self.records[o.seq.seq_id]
            while len(rec.token_times) < o.seq.num_generated:  # a round delivers its tokens at once
                rec.token_times.append(self.now)
            self.spec_steps += o.asked
            if o.drafted:
                self.spec_rounds += 1
                self.spec_drafted += o.drafted
                self.spec_accepted += o.accepted
                self.spec_rejected += o.accepted < o.drafted
            if o.finished:
                rec.preemptions = o.seq.preemptions
                done.append((self.on_done.pop(o.seq.seq_id), rec))
        for seq in sched.handoffs:
            self._handoff(seq, i)
        sched.handoffs = []
        for on_done, rec in done:
            on_done(rec)


def _ignore(_: RequestRecord) -> None:
    pass


def simulate(lanes: list[SimLane], cluster: Cluster, load: Load, limits: ServeLimits | None = None, spec: SimSpeculation | None = None) -> Outcome:
    """Serve `load` on `lanes` and return what every request saw.

    Args:
        lanes: the plan's lanes (capacity/lanes.py `lanes_of`).
        cluster: the plan's cluster (links between pools).
        load: the requests and how they arrive.
        limits: the server's settings (default: `hetc serve`'s; `num_kv_blocks` is the lanes' own).
        spec: speculative rounds and their acceptance (capacity/speculation.py); None: none.
    """
    o = simulate_until(lanes, cluster, load, limits, None, spec)
    assert o is not None  # nothing asked it to stop
    return o


def simulate_until(
    lanes: list[SimLane],
    cluster: Cluster,
    load: Load,
    limits: ServeLimits | None,
    stop: Callable[[list[RequestRecord], float], bool] | None,
    spec: SimSpeculation | None = None,
) -> Outcome | None:
    """`simulate`, asking `stop(requests so far, now)` every 512 events; None when it said to stop
    (a search that has seen enough)."""
    sim = _Sim(lanes, cluster, limits or ServeLimits(), spec)
    records: list[RequestRecord] = []
    if load.arrivals is Arrivals.CLOSED:
        todo = iter(load.requests)

        def next_request(_: RequestRecord | None = None) -> None:
            r = next(todo, None)
            if r is not None:
                rec = RequestRecord(sim.now, r.input_len, r.output_len, prefix_len=r.prefix_len, prefix_group=r.prefix_group)
                records.append(rec)
                retry = sim.submit(rec, next_request)
                if retry is not None:  # refused: this client tries its next request after Retry-After
                    sim.at(sim.now + retry, next_request)

        for _ in range(min(load.concurrency, len(load.requests))):
            sim.at(0.0, next_request)
    else:
        for r in load.requests:
            rec = RequestRecord(r.arrival, r.input_len, r.output_len, prefix_len=r.prefix_len, prefix_group=r.prefix_group)
            records.append(rec)
            sim.at(r.arrival, sim.submit, rec, _ignore)
    if not sim.run(None if stop is None else lambda now: stop(records, now)):
        return None
    busy = {(l.id, k): s.busy_s for l in lanes for k, s in enumerate(sim.stages[l.id])}
    stepped = {(l.id, k): (s.step_s, s.steps) for l in lanes for k, s in enumerate(sim.stages[l.id])}
    served = [r for r in records if r.served]
    end = max((r.token_times[-1] for r in served if r.token_times), default=0.0)
    stuck = [r for r in served if not r.done]
    if stuck:
        raise RuntimeError(f"{len(stuck)} admitted requests never finished (a request longer than a lane's KV pool?)")
    return Outcome(
        records,
        min((r.arrival for r in records), default=0.0),
        end,
        busy,
        stepped,
        dict(enumerate(sim.kv_peak)),
        sum(s.num_preemptions for s in sim.sched),
        sim.steps,
        sum(s.blocks.queried_tokens for s in sim.sched),
        sum(s.blocks.hit_tokens for s in sim.sched),
        sim.spec_rounds,
        sim.spec_drafted,
        sim.spec_accepted,
        sim.spec_rejected,
        sim.spec_steps,
    )
