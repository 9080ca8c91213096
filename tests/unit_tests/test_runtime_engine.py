"""The engine on a fake pipeline (no processes): micro-batches complete, a lane's failure fails
only its own sequences (at once) and asks for a restart, a revived lane serves again, and a
SHUTDOWN control record stops the lane's loops."""

from collections import Counter
from collections.abc import Callable
import queue
import threading
import time

import pytest

from hetc.runtime.engine import Engine, EngineDead, Event
from hetc.runtime.metrics import Metrics
from hetc.batching import NOT_FINITE, SAMPLING_FAILURES
from hetc.batching import SchedulerConfig
from hetc.sequence import SamplingParams
from hetc.runtime.topology import Lane, StageSpec
from hetc.runtime.transport import Kind, Message, StepMeta

import torch


def _lane(lane_id: int, first_rank: int, n_stages: int = 2) -> Lane:
    stages = tuple(
        StageSpec(
            lane=lane_id,
            index=i,
            n_stages=n_stages,
            devices=(f"n{lane_id}:{i}",),
            ranks=(first_rank + i,),
            prev_rank=0 if i == 0 else first_rank + i - 1,
            next_rank=0 if i == n_stages - 1 else first_rank + i + 1,
            backend="cpu",
            profile="p",
            node=f"n{lane_id}",
            units=(i, i),
            layers=(i, i),
            kv_budget=1e6,
            weight_bytes=1.0,
            predicted_ms=(1.0, 1.0),
        )
        for i in range(n_stages)
    )
    return Lane(lane_id, lane_id, 0, 4, stages)


def token_at(seq_id: int, pos: int) -> int:
    """What the fake pipeline samples: a function of the sequence and position only."""
    return 100 + 7 * seq_id + pos


class FakePipeline:
    """A lane's stages in-process: STEP → RESULT (token_at per sampled row), control messages
    come back as they went. `hold` keeps results back (work in flight); `kill` is a dead worker:
    the receive fails at once, as gloo's does when a peer's sockets close. `stall_when` (tokens
    received per sequence → bool) sets `hold` after the result that makes it true, and `hold_from`
    (a kind) as such a message is sent, so a test can stop a pipeline at a known point however the
    threads are scheduled."""

    def __init__(self, last_rank: int, stall_when: Callable[[Counter[int]], bool] | None = None, hold_from: Kind | None = None):
        self.last_rank, self.out = last_rank, queue.Queue()
        self.hold = threading.Event()
        self.stall_when, self.received, self.hold_from = stall_when, Counter[int](), hold_from
        self._sampled: dict[int, list[int]] = {}  # step id -> the sequences it samples
        self._held: list[Message] = []  # a result taken just as `hold` was set
        self.sent: list[Kind] = []
        self.unsampleable: set[tuple[int, int]] = set()  # (seq id, position): the sampler fails there
        self._dead = False

    def send(self, msg: Message, dst: int) -> None:
        if self._dead:
            raise RuntimeError("Connection closed by peer")
        self.sent.append(msg.kind)
        if msg.kind is self.hold_from:
            self.hold.set()
        if msg.kind is Kind.STEP:
            meta = StepMeta.decode(msg.meta, msg.samp)
            self._sampled[msg.step_id] = [s for s, smp in zip(meta.seq_ids, meta.sample) if smp]
            toks = [
                (NOT_FINITE if (s, st + n) in self.unsampleable else token_at(s, st + n)) if smp else -1
                for s, st, n, smp in zip(meta.seq_ids, meta.starts, meta.n_new, meta.sample)
            ]
            self.out.put(Message(Kind.RESULT, msg.step_id, payload=torch.tensor(toks, dtype=torch.long), times=msg.times))
        else:
            self.out.put(Message(msg.kind, msg.step_id, times=msg.times))

    def flush(self, dst: int) -> None:
        pass

    def recv(self, src: int) -> Message:
        assert src == self.last_rank
        while True:
            if self._dead:
                raise RuntimeError(f"Connection closed by peer [rank {src}]")
            if self.hold.is_set():
                time.sleep(0.01)
                continue
            try:
                msg = self._held.pop() if self._held else self.out.get(timeout=0.01)
            except queue.Empty:
                continue
            if self.hold.is_set():  # set while this receive waited: the result stays back
                self._held.append(msg)
                continue
            if self.stall_when is not None:
                self.received.update(self._sampled.pop(msg.step_id, []))
                if self.stall_when(self.received):
                    self.hold.set()
            return msg

    def close(self) -> None:
        pass

    def kill(self) -> None:
        self._dead = True


class Sink:
    def __init__(self):
        self.events: list[Event] = []
        self.done = threading.Event()
        self.done_at: float | None = None

    def __call__(self, ev: Event) -> None:
        self.events.append(ev)
        if ev.finished:
            self.done_at = time.monotonic()
            self.done.set()


_ENGINES: list[Engine] = []


@pytest.fixture(autouse=True)
def _stop_engines():
    """Every engine's lanes stop after the test (no threads left running into the next one)."""
    yield
    while _ENGINES:
        eng = _ENGINES.pop()
        for p in eng.lanes:
            p.tp.hold.clear()
        eng.cancel_all("test over")
        eng.shutdown(2.0)
        for r in eng.lanes:
            r.tp.kill()
            for t in r.threads:
                t.join(2.0)


def _engine(n_lanes: int = 2, clock=time.monotonic):
    lanes = [_lane(i, 1 + 2 * i) for i in range(n_lanes)]
    pipes = {l.id: FakePipeline(l.stages[-1].rank) for l in lanes}
    eng = Engine(
        lanes, {l.id: 64 for l in lanes}, SchedulerConfig(max_num_seqs=8, max_batched_tokens=16), Metrics("m"), transports=pipes, clock=clock, heartbeat_s=0.05
    )
    failed: list[tuple[int, str]] = []
    eng.on_unit_failed = lambda unit, why: failed.append((unit, why))
    eng.start()
    _ENGINES.append(eng)
    return eng, pipes, failed


def _submit(eng, prompt, max_tokens):
    sink = Sink()
    req = eng.submit(prompt, SamplingParams(temperature=0.0, max_tokens=max_tokens, ignore_eos=True), frozenset(), sink)
    return req, sink


def test_micro_batches_complete_with_the_pipelines_tokens():
    ticks = []
    eng, _, failed = _engine(1, clock=lambda: ticks.append(1) or time.monotonic())
    req, sink = _submit(eng, [1, 2, 3, 4, 5], max_tokens=4)
    assert sink.done.wait(5)
    # prompt of 5 tokens: the first sampled token is at position 5, then 6, 7, 8
    assert [e.token for e in sink.events if e.token is not None] == [token_at(req.seq.seq_id, p) for p in range(5, 9)]
    assert sink.events[-1].finished and sink.events[-1].reason == "length"
    assert not eng.requests and not failed and ticks  # the engine read the clock it was given
    assert eng.shutdown(2.0)


def test_a_sequence_the_sampler_fails_on_ends_alone_with_the_reason():
    eng, pipes, failed = _engine(1)
    pipes[0].hold.set()
    a, sink_a = _submit(eng, [1, 2, 3], max_tokens=6)
    b, sink_b = _submit(eng, [4, 5, 6], max_tokens=6)
    pipes[0].unsampleable.add((a.seq.seq_id, 4))  # a's second token
    pipes[0].hold.clear()
    assert sink_a.done.wait(5) and sink_b.done.wait(5)
    assert [e.token for e in sink_a.events if e.token is not None] == [token_at(a.seq.seq_id, 3)]
    end = sink_a.events[-1]
    assert end.reason == "error" and end.error == SAMPLING_FAILURES[NOT_FINITE] and end.status == 500
    assert sink_b.events[-1].reason == "length" and len([e for e in sink_b.events if e.token is not None]) == 6
    assert not failed and not eng.down and eng.lanes[0].up  # the lane serves on
    assert Kind.SCRUB in pipes[0].sent  # a's blocks were zeroed in every stage, then freed
    assert eng.lanes[0].sched.blocks.num_used == 0 and not eng.requests
    c, sink_c = _submit(eng, [1, 2, 3], max_tokens=2)
    assert sink_c.done.wait(5) and sink_c.events[-1].reason == "length"


def test_tokens_reach_the_client_in_order_whichever_lane_delivers_first():
    """A dead decode lane's last result, delivered after the prefill lane that recomputed the
    sequence delivered the next token, neither reorders nor repeats the stream."""
    from hetc.batching import StepOutput

    eng, pipes, _ = _engine(1)
    pipes[0].hold.set()  # nothing comes back from the pipeline itself
    req, sink = _submit(eng, [1, 2, 3], max_tokens=4)
    seq = req.seq
    seq.token_ids += [50, 51]  # t_k sampled by the dead lane, then t_k+1 by the recomputing one
    eng.deliver([StepOutput(seq, 51, False)])  # the recomputing lane's thread is first
    eng.deliver([StepOutput(seq, 50, False)])  # the dead lane's thread, late
    seq.token_ids.append(52)
    eng.deliver([StepOutput(seq, 52, False)])
    assert [e.token for e in sink.events] == [50, 51, 52] and not any(e.finished for e in sink.events)
    assert req.delivered == 3


def test_a_lane_failure_fails_only_its_sequences_at_once():
    eng, pipes, failed = _engine(2)
    pipes[0].hold.set()
    pipes[1].hold.set()  # both requests in flight
    a, sink_a = _submit(eng, [1, 2, 3], max_tokens=3)
    b, sink_b = _submit(eng, [4, 5, 6], max_tokens=3)
    assert {a.lane.lane.id, b.lane.lane.id} == {0, 1}  # least loaded: one on each lane
    dead, alive = (sink_a, sink_b) if a.lane.lane.id == 0 else (sink_b, sink_a)
    time.sleep(0.1)
    t0 = time.monotonic()
    pipes[0].kill()
    assert dead.done.wait(2.0) and dead.done_at - t0 < 2.0
    assert dead.events[-1].reason == "error" and "lane 0" in dead.events[-1].error
    assert not alive.done.is_set()
    pipes[1].hold.clear()
    assert alive.done.wait(5) and alive.events[-1].reason == "length"
    assert [u for u, _ in failed] == [0] and set(eng.down) == {0}
    assert eng.failed is None  # one unit still serves
    c, sink_c = _submit(eng, [7], max_tokens=2)  # new requests go to the working lane
    assert c.lane.lane.id == 1 and sink_c.done.wait(5)
    # the unit comes back with a fresh transport: requests may use lane 0 again
    eng.revive(0, {0: FakePipeline(pipes[0].last_rank)})
    assert not eng.down and eng.lanes[0].up and eng.lanes[0].sched.blocks.num_used == 0
    pipes[1].hold.set()
    d, sink_d = _submit(eng, [8, 9], max_tokens=2)
    _, sink_e = _submit(eng, [8, 9], max_tokens=2)
    assert sink_d.done.wait(5) or sink_e.done.wait(5)
    pipes[1].hold.clear()
    assert sink_d.done.wait(5) and sink_e.done.wait(5)


def test_every_unit_down_refuses_requests():
    eng, pipes, failed = _engine(1)
    pipes[0].kill()
    deadline = time.monotonic() + 2
    while not eng.failed:
        assert time.monotonic() < deadline
        time.sleep(0.01)
    with pytest.raises(EngineDead, match="lane 0"):
        _submit(eng, [1], max_tokens=1)


def test_a_shutdown_control_record_stops_the_loops():
    eng, pipes, _ = _engine(2)
    _, sink = _submit(eng, [1, 2], max_tokens=2)
    assert sink.done.wait(5)
    assert eng.shutdown(2.0)
    assert all(r.stopped.is_set() for r in eng.lanes)
    assert all(p.sent[-1] is Kind.SHUTDOWN for p in pipes.values())
    for r in eng.lanes:  # both loops of every lane end
        for t in r.threads:
            t.join(2.0)
            assert not t.is_alive(), t.name


def test_drain_refuses_new_requests_and_cancels_what_outlives_the_timeout():
    eng, pipes, _ = _engine(1)
    pipes[0].hold.set()
    _, sink = _submit(eng, [1, 2], max_tokens=50)
    eng.stop_admitting()
    with pytest.raises(EngineDead, match="shutting down"):
        _submit(eng, [1], max_tokens=1)
    assert not eng.wait_idle(0.2)
    eng.cancel_all("drain timeout")
    assert sink.done.is_set() and sink.events[-1].error == "drain timeout"


class FakeLinks:
    """KvLinks without a store: an opened pair is ready at once (its `on_ready` is called)."""

    def __init__(self):
        self.on_ready, self.epoch, self.ready_pairs, self.opened = None, {}, set(), []

    def ready(self, pair):
        return self.epoch[pair] if pair in self.ready_pairs else None

    def down(self, lane):
        self.ready_pairs -= {p for p in self.ready_pairs if lane in p}

    def open(self, lanes_up, lane=None):
        for pair in [(0, 1)]:
            if (lane is None or lane in pair) and set(pair) <= lanes_up:
                self.epoch[pair] = self.epoch.get(pair, 0) + 1
                self.opened.append(pair)
                self.ready_pairs.add(pair)
                self.on_ready(pair)


def test_a_dead_decode_pool_sends_its_sequences_back_to_prefill_and_they_complete():
    import dataclasses

    pre = dataclasses.replace(_lane(0, 1), phase="prefill", targets=(1,))
    dec = dataclasses.replace(_lane(1, 3), phase="decode")
    # the decode lane stops once each of the three sequences has 3 decode tokens, whatever the load
    pipes = {0: FakePipeline(2), 1: FakePipeline(4, stall_when=lambda n: len(n) == 3 and min(n.values()) >= 3)}
    links = FakeLinks()
    eng = Engine(
        [pre, dec], {0: 64, 1: 64}, SchedulerConfig(max_num_seqs=8, max_batched_tokens=16), Metrics("m"), transports=pipes, heartbeat_s=0.05, links=links
    )
    failed: list[int] = []
    eng.on_unit_failed = lambda unit, why: failed.append(unit)
    eng.start()
    _ENGINES.append(eng)
    assert links.opened == [(0, 1)]
    prompts = [[1, 2, 3], [4, 5, 6, 7, 8], list(range(20, 40))]
    reqs = [_submit(eng, p, max_tokens=40) for p in prompts]
    deadline = time.monotonic() + 5
    while not all(len(s.events) >= 4 for _, s in reqs):  # every sequence decoding on the decode lane
        assert time.monotonic() < deadline
        time.sleep(0.005)
    assert pipes[1].hold.is_set()
    pipes[1].kill()  # a decode worker dies
    deadline = time.monotonic() + 2
    while not failed:
        assert time.monotonic() < deadline
        time.sleep(0.005)
    assert failed == [1] and eng.lanes[0].up  # the prefill lane keeps serving
    time.sleep(0.2)
    assert not any(s.done.is_set() for _, s in reqs)  # nothing failed: recomputed, parked for a decode lane
    assert eng.parked or any(r.sched.has_unfinished() for r in eng.lanes if r.up)
    eng.revive(1, {1: FakePipeline(4)})  # the decode pool is back: its link opens, the prompts move on
    for (req, sink), prompt in zip(reqs, prompts):
        assert sink.done.wait(5) and sink.events[-1].reason == "length", sink.events[-1]
        got = [e.token for e in sink.events if e.token is not None]
        # every token once, in order: the recomputed sequences go on from where their stream was
        assert got == [token_at(req.seq.seq_id, p) for p in range(len(prompt), len(prompt) + 40)]
    assert links.opened == [(0, 1), (0, 1)] and not eng.parked


def test_a_kv_transfer_in_flight_does_not_hold_back_the_next_prompt():
    """A one-stage prefill pool keeps one micro-batch in flight; a prompt's KV leaving it is a message
    through the stage but not a micro-batch, so the next prompt's step goes out while it is on its way
    (when it took the seat, a 5-stage pool ran 40% busy: BENCHMARKS.md, capacity planning)."""
    import dataclasses

    pre = dataclasses.replace(_lane(0, 1, n_stages=1), phase="prefill", targets=(1,))
    dec = dataclasses.replace(_lane(1, 2), phase="decode")
    pipes = {0: FakePipeline(1, hold_from=Kind.TRANSFER_OUT), 1: FakePipeline(3)}
    eng = Engine(
        [pre, dec], {0: 64, 1: 64}, SchedulerConfig(max_num_seqs=8, max_batched_tokens=16), Metrics("m"), transports=pipes, heartbeat_s=0.05, links=FakeLinks()
    )
    eng.on_unit_failed = lambda unit, why: None
    eng.start()
    _ENGINES.append(eng)
    _submit(eng, [1, 2, 3], max_tokens=4)
    assert pipes[0].hold.wait(5)  # its KV is leaving the prefill stage, and stays in flight
    _submit(eng, [4, 5, 6], max_tokens=4)
    deadline = time.monotonic() + 5
    while pipes[0].sent.count(Kind.STEP) < 2:
        assert time.monotonic() < deadline, pipes[0].sent
        time.sleep(0.005)
    # heartbeats (every 50 ms) fall between them as the host's load has it: the order of the work is the point
    assert [k for k in pipes[0].sent if k is not Kind.HEARTBEAT] == [Kind.STEP, Kind.TRANSFER_OUT, Kind.STEP]


def test_a_dead_prefill_pool_fails_its_own_sequences_and_the_decode_pool_serves_on():
    import dataclasses

    pre = [dataclasses.replace(_lane(i, 1 + 2 * i), phase="prefill", targets=(2,)) for i in (0, 1)]
    dec = dataclasses.replace(_lane(2, 5), phase="decode")
    pipes = {0: FakePipeline(2), 1: FakePipeline(4), 2: FakePipeline(6)}
    eng = Engine([*pre, dec], {0: 64, 1: 64, 2: 64}, SchedulerConfig(max_num_seqs=8, max_batched_tokens=16), Metrics("m"), transports=pipes, heartbeat_s=0.05)
    eng.on_unit_failed = lambda unit, why: None
    eng.start()
    _ENGINES.append(eng)
    pipes[0].hold.set()
    time.sleep(0.05)  # a receive already waiting has returned
    a, sink_a = _submit(eng, [1, 2, 3], max_tokens=10)  # held on prefill lane 0
    b, sink_b = _submit(eng, [4, 5, 6], max_tokens=30)  # prefill lane 1, then decoding
    assert a.lane.lane.id == 0 and b.lane.lane.id == 1
    deadline = time.monotonic() + 5
    while len(sink_b.events) < 3:
        assert time.monotonic() < deadline
        time.sleep(0.005)
    pipes[0].kill()
    assert sink_a.done.wait(2) and sink_a.events[-1].reason == "error"
    assert sink_b.done.wait(5) and sink_b.events[-1].reason == "length"
    _, sink_c = _submit(eng, [7, 8], max_tokens=4)  # prefill lane 1 and the decode lane serve on
    assert sink_c.done.wait(5) and sink_c.events[-1].reason == "length"


@pytest.mark.parametrize("caching", [True, False])
def test_requests_go_to_the_lane_caching_their_prefix_until_it_is_twice_as_busy(caching):
    """SGLang's cache-aware routing: after a prompt ran on lane 0, prompts sharing its first two
    blocks go there while its queue is at most twice the other's (an idle lane counting as 1); with
    --no-prefix-caching, to the least loaded lane."""
    lanes = [_lane(i, 1 + 2 * i) for i in range(2)]
    pipes = {l.id: FakePipeline(l.stages[-1].rank) for l in lanes}
    cfg = SchedulerConfig(max_num_seqs=8, max_batched_tokens=256, prefix_caching=caching)
    eng = Engine(lanes, {l.id: 64 for l in lanes}, cfg, Metrics("m"), transports=pipes, heartbeat_s=0.05)
    eng.start()
    _ENGINES.append(eng)
    shared = list(range(1, 65))  # two blocks of 32
    first, sink = _submit(eng, [*shared, 900], max_tokens=2)
    assert sink.done.wait(5) and first.lane is eng.lanes[0]
    for p in pipes.values():
        p.hold.set()  # nothing finishes from here: the queues only grow
    got = [_submit(eng, [*shared, 1000 + i], max_tokens=4)[0] for i in range(4)]
    lanes_of = [eng.lanes.index(r.lane) for r in got]
    assert lanes_of == ([0, 0, 0, 1] if caching else [0, 1, 0, 1])
    deadline = time.monotonic() + 5
    while any(r.seq.first_scheduled is None for r in got) and time.monotonic() < deadline:  # the senders admit them
        time.sleep(0.01)
    assert eng.metrics.prefix_hits.labels("m")._value.get() == (3 * 64 if caching else 0)
    assert eng.metrics.vllm_prefix_hits.labels("m")._value.get() == eng.metrics.prefix_hits.labels("m")._value.get()
