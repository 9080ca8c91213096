"""KV links of a disaggregated plan: one gloo group per (prefill lane, decode lane) pair.

Each lane has its own process group (groups.py), so a dead decode pool restarts alone and
its prefill pools keep serving. A prompt's KV moves between a prefill lane's workers and a
decode lane's over their pair's link, a group of both lanes' workers (no frontend). A link
has epochs: the frontend opens epoch E of pair (P, D) by writing `links/P.D` = E to the
job's store when both lanes serve (at start, and after either restarts); each worker of
both lanes watches that key, forms the group `link/P.D/eE/`, and counts itself in
`link/P.D/eE/ready`. The frontend routes prompts over the pair once every member counted
itself. A transfer names its epoch: a worker whose link is of another epoch, or broken (a
member died), answers it as failed instead of waiting — the frontend then recomputes the
sequence on a prefill lane. A worker started after an epoch was opened never joins it: its
lane's revival opens a new one.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from hetc.runtime.topology import Lane
from hetc.runtime.transport import GlooTransport
from hetc.scheduling import Phase

__all__ = ["KvLinks", "LinkTable", "link_pairs", "link_ranks"]

POLL_S = 0.1


def link_pairs(lanes: list[Lane]) -> list[tuple[int, int]]:
    """(prefill lane, decode lane) of every pair that may move KV."""
    return [(l.id, d) for l in lanes if l.phase == Phase.PREFILL for d in l.targets]


def link_ranks(lanes: list[Lane], pair: tuple[int, int]) -> list[int]:
    """Job-wide ranks of the pair's link group, in group-rank order."""
    return sorted(r for l in lanes if l.id in pair for s in l.stages for r in s.ranks)


def _key(pair: tuple[int, int]) -> str:
    return f"links/{pair[0]}.{pair[1]}"


def _prefix(pair: tuple[int, int], epoch: int) -> str:
    return f"link/{pair[0]}.{pair[1]}/e{epoch}/"


class LinkTable:
    """A worker's links to the lanes its KV goes to or comes from, formed in the background."""

    def __init__(self, store, lanes: list[Lane], lane: int, rank: int, timeout_s: float, bind: str | None = None):
        """Args:
        store: the job's store.
        lanes: the plan's lanes (topology).
        lane: this worker's lane id.
        rank: this worker's job-wide rank.
        timeout_s: every send's and receive's limit on a link.
        bind: the address its gloo sockets listen on (None: gloo's default).
        """
        self.store, self.lanes, self.rank, self.timeout_s, self.bind = store, lanes, rank, timeout_s, bind
        self.pairs = [p for p in link_pairs(lanes) if lane in p]
        self._links: dict[int, tuple[int, GlooTransport]] = {}  # other lane → (epoch, link)
        self._dead: list[GlooTransport] = []  # broken links stay referenced: a gloo group's teardown may block
        self._lock = threading.Lock()
        self._lane = lane
        for pair in self.pairs:
            key = _key(pair)
            seen = int(store.get(key)) if store.check([key]) else 0  # epochs opened before this worker: not ours
            threading.Thread(target=self._watch, args=(pair, seen), name=f"link{pair[0]}.{pair[1]}", daemon=True).start()

    def _watch(self, pair: tuple[int, int], seen: int) -> None:
        from hetc.runtime.groups import gloo_group

        store = self.store.clone()
        key = _key(pair)
        while True:
            time.sleep(POLL_S)
            try:
                epoch = int(store.get(key)) if store.check([key]) else 0
            except Exception:  # noqa: BLE001 — the frontend's store is gone: the worker's own loop notices
                return
            if epoch <= seen:
                continue
            seen = epoch
            ranks = link_ranks(self.lanes, pair)
            try:
                link = gloo_group(store, _prefix(pair, epoch), ranks, self.rank, self.timeout_s, self.bind)
            except Exception:  # noqa: BLE001 — a member died while forming: the next epoch replaces it
                continue
            other = pair[1] if pair[0] == self._lane else pair[0]
            with self._lock:
                old = self._links.pop(other, None)
                if old is not None:
                    self._dead.append(old[1])
                self._links[other] = (epoch, link)
            store.add(_prefix(pair, epoch) + "ready", 1)

    def get(self, other: int, epoch: int) -> GlooTransport | None:
        """The link to lane `other` if it is of `epoch` and not broken; else None."""
        with self._lock:
            cur = self._links.get(other)
            return cur[1] if cur is not None and cur[0] == epoch else None

    def broken(self, other: int, epoch: int) -> None:
        """A send or receive on the link failed: it is not used again."""
        with self._lock:
            cur = self._links.get(other)
            if cur is not None and cur[0] == epoch:
                self._dead.append(self._links.pop(other)[1])


class KvLinks:
    """The frontend's view: which pairs' links are ready, and opening new epochs."""

    def __init__(
        self, store, lanes: list[Lane], on_ready: Callable[[tuple[int, int]], None], log: Callable[[str], None] = lambda _: None, form_timeout_s: float = 120.0
    ):
        """Args:
        store: the job's store.
        lanes: the plan's lanes.
        on_ready: called (from a helper thread) when a pair's newest epoch formed.
        log: progress lines.
        form_timeout_s: how long an epoch may take to form before it is left.
        """
        self.store, self.lanes, self.on_ready, self.log = store, lanes, on_ready, log
        self.form_timeout_s = form_timeout_s
        self.pairs = link_pairs(lanes)
        self.epoch = {p: 0 for p in self.pairs}
        self._ready: set[tuple[int, int]] = set()
        self._lock = threading.Lock()

    def ready(self, pair: tuple[int, int]) -> int | None:
        """The pair's epoch if its link is ready for transfers, else None."""
        with self._lock:
            return self.epoch[pair] if pair in self._ready else None

    def down(self, lane: int) -> None:
        """`lane` stopped serving: none of its links carries transfers any more."""
        with self._lock:
            self._ready -= {p for p in self.pairs if lane in p}

    def open(self, lanes_up: set[int], lane: int | None = None) -> None:
        """Open a new epoch for every pair (of `lane`, or all) whose lanes are both in `lanes_up`."""
        for pair in self.pairs:
            if (lane is None or lane in pair) and set(pair) <= lanes_up:
                with self._lock:
                    self._ready.discard(pair)
                    self.epoch[pair] += 1
                    epoch = self.epoch[pair]
                self.store.set(_key(pair), str(epoch))
                threading.Thread(target=self._await, args=(pair, epoch), name=f"await-link{pair}", daemon=True).start()

    def _await(self, pair: tuple[int, int], epoch: int) -> None:
        store = self.store.clone()
        members = len(link_ranks(self.lanes, pair))
        deadline = time.monotonic() + self.form_timeout_s
        while time.monotonic() < deadline:
            with self._lock:
                if self.epoch[pair] != epoch:
                    return  # a newer epoch replaced it
            if store.add(_prefix(pair, epoch) + "ready", 0) >= members:
                with self._lock:
                    if self.epoch[pair] != epoch:
                        return
                    self._ready.add(pair)
                self.on_ready(pair)
                return
            time.sleep(POLL_S)
        self.log(
            f"the KV link of lanes {pair[0]} → {pair[1]} (epoch {epoch}) did not form in "
            f"{self.form_timeout_s:g} s; it waits for the next restart of either lane"
        )
