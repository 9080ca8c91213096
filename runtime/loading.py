"""Start-up without a fixed deadline: a unit's workers load first, then form its group.

Loading a stage (Python and torch imports, weights, a compiled stage built into the cache)
can take minutes on a busy host, and how long is nobody's to predict. So a unit's group is
formed only once every worker of the unit has loaded: each worker beats
`load/unit<U>/gen<G>/loading/<rank>` in the job's store while it loads, sets `.../loaded/<rank>`
when done (or `.../failed/<rank>` with its reason), then waits for `.../form`. The frontend
(`LoadWatch`) waits as long as every worker is alive — a worker of this host by its process,
one on another host by its beat — and sets `form` once all loaded and it is ready to join
itself (it joins one unit at a time at start-up: a unit that loaded early waits for its turn
without a deadline). A worker that dies or fails while loading is reported at once with its
reason; the fixed formation timeout (groups.FORM_TIMEOUT_S) applies to joining after `form`.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable

__all__ = ["LOAD_STALE_S", "LoadWatch", "Loading", "wait_to_form"]

BEAT_S = 1.0
# a worker on another host whose loading beat has not moved for this long is taken for dead (its
# beat is a thread of its own, so only a stalled or gone process stops it)
LOAD_STALE_S = 120.0
POLL_S = 0.1


def _key(unit: int, generation: int, what: str, rank: int) -> str:
    return f"{_prefix(unit, generation)}{what}/{rank}"


def _prefix(unit: int, generation: int) -> str:
    # apart from the group's own keys (groups.py: unit<U>/gen<G>/)
    return f"load/unit{unit}/gen{generation}/"


class Loading:
    """A worker's side: beat while loading, then say loaded (or failed, and why)."""

    def __init__(self, store, unit: int, generation: int, rank: int):
        """Args:
        store: the job's store (rendezvous.open_store).
        unit: the worker's unit (groups.unit_of_lane).
        generation: its unit's group generation.
        rank: the worker's job-wide rank.
        """
        self.store, self.unit, self.generation, self.rank = store.clone(), unit, generation, rank
        self.done = threading.Event()
        threading.Thread(target=self._beat, name="loading-beat", daemon=True).start()

    def _beat(self) -> None:
        key = _key(self.unit, self.generation, "loading", self.rank)
        while True:
            try:
                self.store.add(key, 1)
            except Exception:  # noqa: BLE001 — the frontend's store is gone: loading fails on its own
                return
            if self.done.wait(BEAT_S):
                return

    def loaded(self) -> None:
        self.done.set()
        self.store.set(_key(self.unit, self.generation, "loaded", self.rank), "1")

    def failed(self, reason: str) -> None:
        """Best effort: the frontend may already be gone."""
        self.done.set()
        try:
            self.store.set(_key(self.unit, self.generation, "failed", self.rank), reason[:1000])
        except Exception:  # noqa: BLE001
            pass


def wait_to_form(store, unit: int, generation: int) -> None:
    """A worker that loaded: wait until the frontend starts forming its unit's group. No
    deadline: the frontend stops the unit's workers when one of them fails."""
    keys = [_prefix(unit, generation) + "form"]
    while not store.check(keys):
        time.sleep(POLL_S)


class LoadWatch:
    """The frontend's side: which of a unit's workers have loaded, and which failed."""

    def __init__(
        self,
        store,
        unit: int,
        generation: int,
        workers: dict[int, str],
        remote: Iterable[int],
        stale_s: float = LOAD_STALE_S,
        clock: Callable[[], float] = time.monotonic,
    ):
        """Args:
        store: the job's store.
        unit: the unit's index (groups.units).
        generation: the generation being started.
        workers: rank → a description of each of the unit's workers (for messages).
        remote: the ranks on other hosts (alive while their beat moves).
        stale_s: how long a remote worker's beat may stand still (or be absent at first).
        clock: monotonic seconds.
        """
        # a connection of its own: other threads (the watchdog, other units' restarts) use the store meanwhile
        self.store, self.unit, self.generation, self.workers = store.clone(), unit, generation, workers
        self.remote, self.stale_s, self.clock = set(remote), stale_s, clock
        self.started = clock()
        self._beats: dict[int, tuple[int, float]] = {}  # rank → (counter, when it last moved)
        self.loaded: set[int] = set()

    def _get(self, what: str, rank: int) -> bytes | None:
        key = _key(self.unit, self.generation, what, rank)
        return self.store.get(key) if self.store.check([key]) else None

    def reason(self, rank: int) -> str | None:
        """Why the worker of `rank` failed, as it reported it (None: it did not say)."""
        got = self._get("failed", rank)
        return got.decode(errors="replace") if got is not None else None

    def poll(self) -> str | None:
        """Look at every worker not loaded yet. Returns why the unit cannot start (a worker failed,
        or a remote one stopped beating), else None; `loaded` holds who is done."""
        now = self.clock()
        for rank, what in self.workers.items():
            if rank in self.loaded:
                continue
            if self._get("loaded", rank) is not None:
                self.loaded.add(rank)
                continue
            why = self.reason(rank)
            if why is not None:
                return f"{what} failed while starting: {why}"
            if rank in self.remote:
                key = _key(self.unit, self.generation, "loading", rank)
                n = int(self.store.add(key, 0))
                last = self._beats.get(rank)
                if last is None or last[0] != n:
                    self._beats[rank] = (n, now)
                elif now - last[1] > self.stale_s:
                    return f"{what} {'never started loading' if n == 0 else 'stopped reporting while loading'} (no beat for {self.stale_s:g} s)"
        return None

    def all_loaded(self) -> bool:
        return len(self.loaded) == len(self.workers)

    def form(self) -> None:
        """Every worker loaded: they may join the group now (the frontend joins it next)."""
        self.store.set(_prefix(self.unit, self.generation) + "form", "1")

    def progress(self) -> str:
        """A line for the log: how many loaded, who is still loading, for how long."""
        left = [what for rank, what in self.workers.items() if rank not in self.loaded]
        return (
            f"pipeline unit {self.unit} (generation {self.generation}): {len(self.loaded)} of {len(self.workers)} "
            f"workers loaded after {self.clock() - self.started:.0f} s; still loading: {', '.join(left)}"
        )
