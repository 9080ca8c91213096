"""The frontend's (or a worker host's) worker processes, per pipeline unit and generation.

`spawn` starts this host's workers of a unit for a generation; `join` (node rank 0 only)
waits, without a deadline, while the unit's workers load (loading.py: each alive, none
failed), then forms the frontend's side of the unit's group within the formation timeout and
takes every worker's READY; `stop_unit` ends a unit's processes. The start-up uses the same
calls for every unit at generation 1 that a restart uses for one unit at generation G + 1.
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from hetc.errors import HetcError
from hetc.stage import EXECUTORS
from hetc.runtime.topology import Lane, WorkerSpec, workers

__all__ = ["WorkerPool", "WorkerSetup"]

PROGRESS_S = 30.0  # how often a unit's loading progress is logged


@dataclass(kw_only=True, slots=True)
class WorkerSetup:
    """How this host starts workers."""

    spec: str  # the WorkerConfig JSON every worker reads
    env: dict[str, str]
    local: frozenset[int]  # ranks this host runs
    timeout_s: float  # the transport timeout: every receive, and group formation (with form_timeout_s)
    bind: str | None = None  # the address the frontend's gloo sockets listen on
    form_timeout_s: float | None = None  # joining the group once loaded takes at most max(this, timeout_s); None: groups.FORM_TIMEOUT_S
    command: tuple[str, ...] = field(default_factory=lambda: (sys.executable, "-m", "hetc.runtime.worker"))

    def __post_init__(self) -> None:
        if self.timeout_s <= 0:
            raise ValueError(f"timeout_s must be positive, got {self.timeout_s}")
        if self.form_timeout_s is not None and self.form_timeout_s <= 0:
            raise ValueError(f"form_timeout_s must be positive, got {self.form_timeout_s}")


class WorkerPool:
    """This host's worker processes, by rank; the frontend's group of each unit."""

    def __init__(self, lanes: list[Lane], host_of: dict[str, int], setup: WorkerSetup, log: Callable[[str], None] = lambda _: None):
        """Args:
        lanes: the plan's lanes (topology).
        host_of: plan node → node rank.
        setup: how this host starts workers.
        log: progress lines (a unit's loading, every PROGRESS_S).
        """
        from hetc.runtime.groups import units

        self.lanes, self.host_of, self.setup, self.log = lanes, host_of, setup, log
        self.units = units(lanes)
        self.generation = [0] * len(self.units)
        self.procs: dict[int, subprocess.Popen] = {}
        self.info: dict[int, dict] = {}  # rank → what its READY said (node rank 0)
        self.loading: dict[int, str] = {}  # unit → its loading progress, while `join` waits for it
        self._lock = threading.Lock()
        self._forming: list[threading.Thread] = []  # the frontend's group formations (join)

    def workers_of(self, unit: int) -> list[WorkerSpec]:
        ids = set(self.units[unit])
        return [w for w in workers(self.lanes) if w.stage.lane in ids]

    def spawn(self, unit: int, generation: int) -> None:
        """Start this host's workers of `unit` for `generation`."""
        with self._lock:
            self.generation[unit] = generation
            for w in self.workers_of(unit):
                if w.rank in self.setup.local:
                    self.procs[w.rank] = subprocess.Popen(
                        [*self.setup.command, "--spec", self.setup.spec, "--device", w.device, "--generation", str(generation)], env=self.setup.env
                    )

    def dead(self, unit: int | None = None) -> list[tuple[WorkerSpec, int]]:
        """(worker, exit code) of this host's exited workers (of `unit`, or of every unit)."""
        ws = self.workers_of(unit) if unit is not None else workers(self.lanes)
        with self._lock:
            return [(w, self.procs[w.rank].returncode) for w in ws if w.rank in self.procs and self.procs[w.rank].poll() is not None]

    def join(self, store, unit: int, generation: int, give_up: threading.Event | None = None) -> dict:
        """The frontend joins `unit`'s group of `generation` and takes each worker's READY.
        Returns lane id → transport. Waits as long as the unit's workers are alive and loading;
        raises HetcError at once when one exits or reports a failure while loading, and when the
        group does not form within the formation timeout after all loaded.

        Args:
            store: the job's store (rendezvous.open_store).
            give_up: set to abandon the wait (the server is stopping).
        """
        from hetc.runtime.groups import FORM_TIMEOUT_S, form_group
        from hetc.runtime.loading import LoadWatch
        from hetc.runtime.transport import Kind

        ws = self.workers_of(unit)
        watch = LoadWatch(store, unit, generation, {w.rank: _describe(w) for w in ws}, remote=[w.rank for w in ws if w.rank not in self.setup.local])
        try:
            self._await_loaded(unit, watch, give_up)
        finally:
            self.loading.pop(unit, None)
        out: list = []

        def form() -> None:
            try:
                out.append(form_group(store, self.lanes, unit, generation, 0, self.setup.timeout_s, self.setup.bind))
            except BaseException as e:  # noqa: BLE001 — reported below
                out.append(e)

        t = threading.Thread(target=form, name=f"join-unit{unit}", daemon=True)
        t.start()
        self._forming.append(t)
        deadline = time.monotonic() + max(self.setup.timeout_s, self.setup.form_timeout_s or FORM_TIMEOUT_S) + 5.0
        while t.is_alive():
            t.join(0.2)
            self._check_alive(unit, watch, give_up)
            if time.monotonic() > deadline:
                raise HetcError(f"the workers of pipeline unit {unit} loaded but did not join their group in time.")
        if isinstance(out[0], BaseException):
            raise HetcError(f"forming pipeline unit {unit}'s group failed: {out[0]}")
        tp = out[0]
        for w in ws:
            msg = tp.recv(w.rank)
            if msg.kind is not Kind.READY:
                raise HetcError(f"worker {w.device} sent {msg.kind.name} before READY")
            pb, n_params, blocks, pid, kv_bytes, executor = msg.payload.reshape(-1).tolist()
            s = w.stage
            self.info[w.rank] = {
                "rank": w.rank,
                "device": w.device,
                "stage": f"{s.lane}.{s.index}",
                "tp_rank": w.tp_rank,
                "node_rank": self.host_of[s.node],
                "units": list(s.units),
                "pid": pid,
                "param_bytes": pb,
                "param_tensors": n_params,
                "kv_blocks": blocks,
                "kv_bytes": kv_bytes,
                "generation": generation,
                "executor": EXECUTORS[executor],
            }
        return {lane: tp for lane in self.units[unit]}

    def _await_loaded(self, unit: int, watch, give_up: threading.Event | None) -> None:
        """Until every worker of `unit` loaded (no deadline while they live), logging progress."""
        next_log = time.monotonic() + PROGRESS_S
        while True:
            why = watch.poll()
            if why is not None:
                raise HetcError(f"{why}.")
            if watch.all_loaded():
                watch.form()
                return
            self._check_alive(unit, watch, give_up)
            self.loading[unit] = watch.progress()
            if time.monotonic() >= next_log:
                self.log(self.loading[unit])
                next_log += PROGRESS_S
            time.sleep(0.2)

    def _check_alive(self, unit: int, watch, give_up: threading.Event | None) -> None:
        """Raise when one of this host's workers of `unit` exited (with its reason) or the server stops."""
        for w, code in self.dead(unit):
            why = watch.reason(w.rank)
            raise HetcError(f"{_describe(w)} exited with code {code} while starting" + (f": {why}" if why else "; its message is above."))
        if give_up is not None and give_up.is_set():
            raise HetcError("the server is stopping")

    def forming(self) -> bool:
        """A formation `join` gave up on (a worker died meanwhile) still waits for its members."""
        return any(t.is_alive() for t in self._forming)

    def stop_unit(self, unit: int, grace: float = 2.0) -> None:
        """End this host's workers of `unit` (SIGTERM, then SIGKILL after `grace` seconds)."""
        with self._lock:
            procs = [self.procs[w.rank] for w in self.workers_of(unit) if w.rank in self.procs]
        _stop(procs, grace)

    def terminate(self) -> None:
        with self._lock:
            procs = list(self.procs.values())
        for p in procs:
            if p.poll() is None:
                p.terminate()

    def stop_all(self, grace: float = 5.0) -> None:
        """Wait up to `grace` s for every worker to exit (after SHUTDOWN), then end the rest."""
        with self._lock:
            procs = list(self.procs.values())
        deadline = time.monotonic() + grace
        for p in procs:
            try:
                p.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
        _stop(procs, 2.0)


def _stop(procs: list[subprocess.Popen], grace: float) -> None:
    for p in procs:
        if p.poll() is None:
            p.terminate()
    deadline = time.monotonic() + grace
    for p in procs:
        try:
            p.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def _describe(w: WorkerSpec) -> str:
    return f"the worker for {w.device} (rank {w.rank}, stage {w.stage.lane}.{w.stage.index})"
