"""Start-up without a fixed deadline (runtime/loading.py, WorkerPool.join): real worker processes
and a real store and gloo group, with loading replaced by a sleep. A worker that loads for longer
than the formation timeout does not fail the start; one that fails or dies while loading is
reported at once with its reason; a worker on another host is alive while its beat moves."""

from __future__ import annotations

import json
import os
import signal
import sys
import textwrap
import threading
import time

import pytest

from hetc.errors import HetcError
from hetc.runtime import workers as workers_mod
from hetc.runtime.loading import Loading, LoadWatch
from hetc.runtime.rendezvous import open_store
from hetc.runtime.topology import Lane, StageSpec
from hetc.runtime.workers import WorkerPool, WorkerSetup

FORM_S = 1.0  # the formation timeout these tests give: loading takes longer


def _lanes() -> list[Lane]:
    """One lane of two 1-device stages: a:0 (rank 1), b:0 (rank 2)."""

    def stage(i: int) -> StageSpec:
        return StageSpec(
            lane=0,
            index=i,
            n_stages=2,
            devices=(f"{'ab'[i]}:0",),
            ranks=(i + 1,),
            prev_rank=i,
            next_rank=(i + 2) % 3,
            backend="cpu",
            profile="p",
            node="ab"[i],
            units=(i, i),
            layers=(i, i),
            kv_budget=1.0,
            weight_bytes=1.0,
            predicted_ms=(1.0, 1.0),
        )

    return [Lane(0, 0, 0, 1, (stage(0), stage(1)))]


# a worker as worker.main runs one, its loading a sleep (or a failure), then READY and SHUTDOWN
WORKER = textwrap.dedent("""
    import argparse, json, os, sys, time
    ap = argparse.ArgumentParser()
    for f in ("--spec", "--device", "--generation"):
        ap.add_argument(f)
    a = ap.parse_args()
    spec = json.load(open(a.spec))
    sys.path[:0] = [spec["path"]]
    from test_runtime_loading import _lanes
    from hetc.runtime.groups import form_group, unit_of_lane
    from hetc.runtime.loading import Loading, wait_to_form
    from hetc.runtime.rendezvous import open_store
    from hetc.runtime.topology import worker_of_device
    lanes, gen = _lanes(), int(a.generation)
    w = worker_of_device(lanes, a.device)
    store = open_store("127.0.0.1", spec["port"], False, 30.0, False)
    unit = unit_of_lane(lanes)[w.stage.lane]
    loading = Loading(store, unit, gen, w.rank)
    todo = spec["devices"][a.device]
    time.sleep(todo["load_s"])
    if todo.get("fail"):
        loading.failed(todo["fail"])
        sys.exit(1)
    loading.loaded()
    wait_to_form(store, unit, gen)
    import torch
    from hetc.runtime.transport import Kind, Message
    tp = form_group(store, lanes, unit, gen, w.rank, 10.0)
    tp.send(Message(Kind.READY, w.rank, payload=torch.tensor([1, 1, 1, os.getpid(), 1, 0])), 0)
    tp.flush(0)
    assert tp.recv(0).kind is Kind.SHUTDOWN
""")


@pytest.fixture
def job(tmp_path):
    """start(devices) → (pool, store): the job's store and a pool whose workers run WORKER."""
    from tests.fixtures.serving import free_port

    port = free_port()
    store = open_store("127.0.0.1", port, True, 30.0, False)
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    pools: list[WorkerPool] = []
    lines: list[str] = []

    def start(devices: dict[str, dict]) -> tuple[WorkerPool, object]:
        spec = tmp_path / "spec.json"
        spec.write_text(json.dumps({"path": os.path.dirname(__file__), "port": port, "devices": devices}))
        setup = WorkerSetup(
            spec=str(spec),
            env={**os.environ, "OMP_NUM_THREADS": "1"},
            local=frozenset({1, 2}),
            timeout_s=FORM_S,
            form_timeout_s=FORM_S,
            command=(sys.executable, str(script)),
        )
        pool = WorkerPool(_lanes(), {"a": 0, "b": 0}, setup, log=lines.append)
        pools.append(pool)
        pool.spawn(0, 1)
        return pool, store

    start.lines = lines  # type: ignore[attr-defined]
    yield start
    for p in pools:
        p.stop_all(grace=0.0)


def test_a_worker_loading_longer_than_the_formation_timeout_does_not_fail_the_start(job, monkeypatch):
    monkeypatch.setattr(workers_mod, "PROGRESS_S", 1.0)
    load_s = FORM_S + 6.0  # past the old fixed deadline (formation timeout + 5 s from the join's start)
    pool, store = job({"a:0": {"load_s": 0.0}, "b:0": {"load_s": load_s}})
    t0 = time.monotonic()
    transports = pool.join(store, 0, 1)
    assert time.monotonic() - t0 > load_s
    assert sorted(pool.info) == [1, 2] and {i["pid"] for i in pool.info.values()} == {p.pid for p in pool.procs.values()}
    assert any("1 of 2 workers loaded" in line and "still loading: the worker for b:0" in line for line in job.lines)
    assert not pool.loading  # the progress is dropped once the unit formed
    tp = transports[0]
    from hetc.runtime.transport import Kind, Message

    for rank in (1, 2):
        tp.send(Message(Kind.SHUTDOWN), rank)
        tp.flush(rank)
    assert [p.wait(30) for p in pool.procs.values()] == [0, 0]


def test_a_worker_that_fails_while_loading_is_reported_at_once_with_its_reason(job):
    pool, store = job({"a:0": {"load_s": 0.0}, "b:0": {"load_s": 0.5, "fail": "OSError: b's weights are gone"}})
    with pytest.raises(HetcError) as e:
        pool.join(store, 0, 1)
    assert "the worker for b:0 (rank 2, stage 0.1)" in str(e.value) and "while starting: OSError: b's weights are gone" in str(e.value)


def test_a_worker_killed_while_loading_is_reported_at_once(job):
    pool, store = job({"a:0": {"load_s": 0.0}, "b:0": {"load_s": 600.0}})
    while not store.check(["load/unit0/gen1/loading/2"]):  # b is loading
        assert pool.procs[2].poll() is None
        time.sleep(0.1)
    out: list = []

    def join() -> None:
        try:
            pool.join(store, 0, 1)
        except HetcError as e:
            out.append((time.monotonic(), str(e)))

    t = threading.Thread(target=join)
    t.start()
    time.sleep(1.0)
    assert not out  # alive and loading: the join waits
    killed = time.monotonic()
    os.kill(pool.procs[2].pid, signal.SIGKILL)
    t.join(30)
    assert out and out[0][0] - killed < 2.0
    assert f"the worker for b:0 (rank 2, stage 0.1) exited with code {-signal.SIGKILL} while starting" in out[0][1]


def test_a_remote_worker_is_alive_while_its_beat_moves(tmp_path):
    from tests.fixtures.serving import free_port

    now = [0.0]
    store = open_store("127.0.0.1", free_port(), True, 10.0, False)
    watch = LoadWatch(store, 0, 1, {1: "the worker for a:0", 2: "the worker for b:0"}, remote=[1, 2], stale_s=10.0, clock=lambda: now[0])
    key = "load/unit0/gen1/loading/"
    for t in range(0, 60, 5):  # a beats for a minute, loading; b never starts
        now[0] = float(t)
        store.add(key + "1", 1)
        why = watch.poll()
        if why is not None:
            break
    assert why == "the worker for b:0 never started loading (no beat for 10 s)" and now[0] == 15.0
    watch = LoadWatch(store, 0, 1, {1: "the worker for a:0"}, remote=[1], stale_s=10.0, clock=lambda: now[0])
    for t in range(60, 120, 5):  # a's beat stops at 70 s
        now[0] = float(t)
        if t <= 70:
            store.add(key + "1", 1)
        if (why := watch.poll()) is not None:
            break
    assert why == "the worker for a:0 stopped reporting while loading (no beat for 10 s)" and now[0] == 85.0
    Loading(store, 0, 1, 1).loaded()
    assert watch.poll() is None and watch.all_loaded()
