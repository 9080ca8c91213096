"""Self-healing: the watchdog that notices dead workers, and the restarts of a failed unit.

A unit fails when one of its workers exits (seen here by polling the processes) or its
transport fails (seen by the lane's threads: a peer on another host died or timed out).
The engine then fails the unit's requests at once and calls `unit_failed`; a restart thread
stops the unit's surviving workers, starts fresh ones (weights reloaded, KV empty) for the
next generation of the unit's group, and hands the engine the new transports. After
`max_restarts` failed attempts in a row the unit stays down and /health says which stage
failed and why. Other hosts restart their workers of the unit when the store's
`restart/unit<U>` key names a newer generation; a host that stops beating its
`alive/<node rank>` counter is reported by name.
"""

from __future__ import annotations

import enum
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from hetc.errors import HetcError
from hetc.runtime.worker import EXIT_PEER_LOST

__all__ = ["Healer", "UnitState", "beat", "follow_restarts", "run_worker_host"]

HOST_STALE_S = 3.0  # a host whose counter has not moved for this long is gone
BEAT_S = 0.5


class UnitState(enum.StrEnum):
    SERVING = "serving"
    RESTARTING = "restarting"
    FAILED = "failed"  # restarts used up (or impossible): stays down


@dataclass(slots=True)
class UnitHealth:
    state: UnitState = UnitState.SERVING
    generation: int = 1
    restarts: int = 0  # successful restarts so far
    reason: str | None = None  # the last failure
    since: float = 0.0


class Healer:
    """Watches node rank 0's workers and restarts failed units."""

    def __init__(self, pool, store, engine, *, max_restarts: int, log: Callable[[str], None], other_hosts: tuple[int, ...] = ()):
        """Args:
        pool: the WorkerPool (workers.py).
        store: the job's store.
        engine: the Engine; its `on_unit_failed` is set to this healer.
        max_restarts: attempts per failure before a unit stays down (0: never restart).
        log: progress lines.
        other_hosts: the node ranks of the other hosts (multi-host jobs).
        """
        self.pool, self.store, self.engine, self.log = pool, store, engine, log
        self.max_restarts = max_restarts
        self.hosts = other_hosts
        self.units = [UnitHealth() for _ in pool.units]
        self.stopping = threading.Event()
        self._beats: dict[int, tuple[int, float]] = {}  # node rank → (counter, when it last moved)
        engine.on_unit_failed = self.unit_failed

    def start(self) -> None:
        threading.Thread(target=self._watch, name="watchdog", daemon=True).start()

    def stop(self) -> None:
        self.stopping.set()

    # ---- noticing --------------------------------------------------------------------------
    def _watch(self) -> None:
        while not self.stopping.wait(0.2):
            if self.engine.draining:
                continue  # drained workers exit on their own
            for u, h in enumerate(self.units):
                if h.state is not UnitState.SERVING:
                    continue
                gone = self.pool.dead(u)
                if gone:
                    w, code = min(gone, key=lambda d: d[1] == EXIT_PEER_LOST)  # the one that died first
                    runner = self.engine.lanes[w.stage.lane]
                    what = f"the worker for device {w.device} (rank {w.rank}, stage {w.stage.lane}.{w.stage.index}) exited with code {code}"
                    if code == EXIT_PEER_LOST:  # not the cause: _restart looks for it
                        what = f"pipeline lane {w.stage.lane} lost a stage worker ({what}: it lost a peer)"
                    self.engine.lane_failed(runner, what)
            self._read_beats()

    def _read_beats(self) -> None:
        now = time.monotonic()
        for r in self.hosts:
            key = f"alive/{r}"
            if not self.store.check([key]):
                continue
            n = int(self.store.get(key))
            old = self._beats.get(r)
            if old is None or old[0] != n:
                self._beats[r] = (n, now)

    def gone_hosts(self, unit: int) -> list[str]:
        """Hosts of `unit`'s workers whose beat stopped (waits up to HOST_STALE_S to be sure)."""
        ranks = {self.pool.host_of[w.stage.node] for w in self.pool.workers_of(unit)} & set(self.hosts)
        if not ranks:
            return []
        deadline = time.monotonic() + HOST_STALE_S + BEAT_S
        while time.monotonic() < deadline and not self.stopping.is_set():
            self._read_beats()
            now = time.monotonic()
            stale = [r for r in ranks if now - self._beats.get(r, (0, now))[1] > HOST_STALE_S]
            if stale:
                return [f"host {self._name(r)} (node rank {r})" for r in sorted(stale)]
            time.sleep(BEAT_S)
        return []

    def _name(self, node_rank: int) -> str:
        key = f"host/{node_rank}"
        return self.store.get(key).decode() if self.store.check([key]) else "?"

    # ---- restarting ------------------------------------------------------------------------
    def unit_failed(self, unit: int, reason: str) -> None:
        """The engine failed `unit` (its requests have their errors): restart it in the background."""
        h = self.units[unit]
        h.state, h.reason, h.since = UnitState.RESTARTING, reason, time.monotonic()
        self.log(f"pipeline unit {unit} failed: {reason}")
        threading.Thread(target=self._restart, args=(unit,), name=f"restart-unit{unit}", daemon=True).start()

    def _culprit(self, unit: int) -> str | None:
        """Which of this host's workers of `unit` died, when a transport error reported the failure
        first (the others exit with EXIT_PEER_LOST on their receive errors)."""
        deadline = time.monotonic() + 1.0
        while True:
            dead = self.pool.dead(unit)
            if dead or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        dead = [(w, code) for w, code in dead if code not in (0, EXIT_PEER_LOST)]
        if not dead:
            return None  # only workers that lost a peer: the dead one is on another host
        w, code = min(dead, key=lambda d: d[1] >= 0)  # killed by a signal first
        return f"the worker for device {w.device} (rank {w.rank}, stage {w.stage.lane}.{w.stage.index}) exited with code {code}"

    def _restart(self, unit: int) -> None:
        h = self.units[unit]
        if not h.reason.startswith("the worker for device"):  # type: ignore[union-attr]  # a transport error: name the dead worker if local
            culprit = self._culprit(unit)
            if culprit is not None:
                h.reason = f"{culprit} ({h.reason})"
                self.engine.down[unit] = h.reason
                self.log(f"pipeline unit {unit}: {culprit}")
        self.pool.stop_unit(unit)
        gone = self.gone_hosts(unit)
        if gone:
            return self._give_up(unit, f"{', '.join(gone)} went away (no beat for {HOST_STALE_S:g} s); its workers cannot be restarted from here")
        last = h.reason
        for attempt in range(1, self.max_restarts + 1):
            if self.stopping.is_set() or self.engine.draining:
                return self._give_up(unit, f"{h.reason}; not restarted: the server is shutting down")
            gen = self.pool.generation[unit] + 1
            self.log(f"restarting pipeline unit {unit} (attempt {attempt} of {self.max_restarts}, generation {gen})")
            self.store.set(f"restart/unit{unit}", str(gen))  # other hosts start theirs (follow_restarts)
            self.pool.spawn(unit, gen)
            try:
                transports = self.pool.join(self.store, unit, gen, give_up=self.stopping)
            except HetcError as e:
                last = str(e)
                self.log(f"restart of pipeline unit {unit} failed: {last}")
                self.pool.stop_unit(unit)
                continue
            h.state, h.generation, h.restarts = UnitState.SERVING, gen, h.restarts + 1
            self.engine.revive(unit, transports)
            self.log(f"pipeline unit {unit} serves again (generation {gen}, {time.monotonic() - h.since:.1f} s after the failure)")
            return
        self._give_up(unit, f"{h.reason}; gave up after {self.max_restarts} restart attempt(s)" + (f", the last: {last}" if self.max_restarts else ""))

    def _give_up(self, unit: int, why: str) -> None:
        h = self.units[unit]
        h.state, h.reason = UnitState.FAILED, why
        self.engine.down[unit] = why
        self.engine.unit_gave_up(unit)
        self.log(f"pipeline unit {unit} stays down: {why}")

    def health(self) -> list[dict]:
        """Per unit: its lanes, state, generation, restarts, the last failure and, while a restart
        waits for its workers to load, how far they are."""
        return [
            {
                "unit": u,
                "lanes": list(self.pool.units[u]),
                "state": str(h.state),
                "generation": h.generation,
                "restarts": h.restarts,
                **({"reason": h.reason} if h.reason else {}),
                **({"loading": self.pool.loading[u]} if u in self.pool.loading else {}),
            }
            for u, h in enumerate(self.units)
        ]


def beat(store, node_rank: int, stop: threading.Event) -> None:
    """A worker host's name and liveness counter in the store (the frontend reads them:
    Healer.gone_hosts)."""
    import socket

    store.set(f"host/{node_rank}", socket.gethostname())
    while not stop.wait(BEAT_S):
        try:
            store.add(f"alive/{node_rank}", 1)
        except Exception:  # noqa: BLE001 — the frontend's store is gone: the host's loop notices
            return


def follow_restarts(store, pool, stop: threading.Event) -> None:
    """A worker host: start this host's workers of a unit again when the frontend restarts it."""
    mine = [u for u in range(len(pool.units)) if any(w.rank in pool.setup.local for w in pool.workers_of(u))]
    while not stop.wait(BEAT_S):
        for u in mine:
            key = f"restart/unit{u}"
            try:
                gen = int(store.get(key)) if store.check([key]) else 0
            except Exception:  # noqa: BLE001 — the store went away with the frontend
                return
            if gen > pool.generation[u]:
                pool.stop_unit(u)
                pool.spawn(u, gen)


def run_worker_host(pool, store, node_rank: int, stop: threading.Event, log: Callable[[str], None]) -> int:
    """A worker host (node rank > 0): beat, start this host's workers again when the frontend
    restarts their unit, until they exit after a drain (0), the frontend's store goes away (1),
    or `stop` is set (SIGTERM/SIGINT: 0). Its workers are stopped on the way out."""
    threading.Thread(target=beat, args=(store, node_rank, stop), daemon=True).start()
    follower = threading.Thread(target=follow_restarts, args=(store, pool, stop), daemon=True)
    follower.start()
    try:
        while not stop.wait(0.2):
            codes = [p.poll() for p in pool.procs.values()]
            if codes and all(code == 0 for code in codes):
                log("workers finished")
                return 0
            if not follower.is_alive():
                log("the frontend's store is gone; stopping this node's workers")
                return 1
        return 0
    finally:
        stop.set()
        pool.terminate()
        pool.stop_all(grace=0.0)
