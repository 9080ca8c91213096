"""Messages between the frontend and the stage workers, over torch.distributed send/recv.

Every message is two sends on the same (src, dst) pair: a fixed header (int64[8]) and a
body of raw bytes whose sections the header sizes. A step travels
frontend → stage 0 → … → last stage → frontend; each stage fills its own slot of the
timing section, so the frontend learns every stage's compute time from the result.

Header: [kind, step_id, n_meta (int64), n_samp (float64), rows, cols, dtype code, n_times (float64)]
Body:   meta int64[n_meta] | sampling float64[n_samp] | times float64[n_times] | payload dtype[rows, cols]
(8-byte sections first, so every section starts aligned for its dtype)

A receive waits at most the process group's timeout; a peer that died closes its
sockets and the receive fails at once (gloo), so nothing waits forever. While idle the
frontend sends heartbeats through the whole pipeline, well within that timeout.

Messages go through a `Transport`: the frontend's or a worker's view of one pipeline
unit's process group (groups.py), addressed by job-wide ranks. `GlooTransport` is the
torch.distributed one; the engine's tests use an in-process fake.
"""

from __future__ import annotations

import datetime as dt
import enum
import json
import queue
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import torch

__all__ = ["GlooTransport", "Inbox", "Kind", "Message", "Sender", "StepMeta", "Transport", "broadcast"]

HEADER = 8
_DTYPES = [torch.float32, torch.bfloat16, torch.float16, torch.int64, torch.float64]


class Kind(enum.IntEnum):
    STEP = 1  # a micro-batch (frontend → stages)
    RESULT = 2  # sampled token ids (last stage → frontend)
    HEARTBEAT = 3  # keeps idle receivers within their timeout; proves the pipeline is alive
    SHUTDOWN = 4  # drain: each stage forwards it, then exits
    READY = 5  # a worker's report after loading (worker → frontend)
    TRANSFER_OUT = 6  # prefill pool: send a prompt's KV to the decode lane's stages (meta: lane, tokens, blocks)
    TRANSFER_IN = 7  # decode pool: receive it into these blocks (meta: prefill lane, tokens, blocks)
    TOKENS = 8  # last stage → first stage: what a step sampled (meta: seq ids | positions | tokens)
    SCRUB = 9  # zero these KV blocks in every stage (meta: block ids): a sequence's logits were not finite
    COPY = 10  # copy KV blocks in every stage (meta: src, dst pairs) before the step behind it (copy-on-write)


@dataclass(slots=True)
class Message:
    kind: Kind
    step_id: int = 0
    meta: torch.Tensor = field(default_factory=lambda: torch.zeros(0, dtype=torch.long))  # int64
    samp: torch.Tensor = field(default_factory=lambda: torch.zeros(0, dtype=torch.float64))
    payload: torch.Tensor | None = None  # [rows, cols] or [rows]
    times: torch.Tensor = field(default_factory=lambda: torch.zeros(0, dtype=torch.float64))

    def encode(self) -> tuple[torch.Tensor, torch.Tensor]:
        p = self.payload
        if p is None:
            p = torch.zeros(0, 0, dtype=torch.float32)
        p2 = p if p.dim() == 2 else p.reshape(-1, 1)
        header = torch.tensor(
            [int(self.kind), self.step_id, self.meta.numel(), self.samp.numel(), p2.shape[0], p2.shape[1], _DTYPES.index(p2.dtype), self.times.numel()],
            dtype=torch.long,
        )
        parts = [self.meta.contiguous(), self.samp.contiguous(), self.times.contiguous(), p2.contiguous()]
        body = torch.cat([t.reshape(-1).view(torch.uint8) for t in parts])
        return header, body


@dataclass(slots=True)
class StepMeta:
    """What every stage is told about a micro-batch (packed in Message.meta / .samp)."""

    seq_ids: list[int]
    starts: list[int]
    n_new: list[int]
    sample: list[bool]
    block_tables: list[list[int]]
    token_ids: list[int]  # the new tokens, packed (the first stage embeds them); -1: not sampled yet (lookahead)
    sampling: list[tuple[float, float, int, int]]  # per sequence: temperature, top_p, top_k, seed
    # what only some steps need, as JSON (empty: nothing): log-probabilities and the last stage's
    # per-sequence sampling state (runtime/sampling_state.py writes and reads it)
    extras: dict = field(default_factory=dict)

    def encode(self) -> tuple[torch.Tensor, torch.Tensor]:
        b = len(self.starts)
        width = max((len(t) for t in self.block_tables), default=0)
        tables = [t + [0] * (width - len(t)) for t in self.block_tables]
        words = _json_words(self.extras) if self.extras else []
        # the tokens last: the first stage fills in looked-ahead ones in place (meta[-T:])
        flat = [b, width, len(words), *words, *self.seq_ids, *self.starts, *self.n_new, *map(int, self.sample), *sum(tables, []), *self.token_ids]
        samp = [v for s in self.sampling for v in (s[0], s[1], float(s[2]), float(s[3]))]
        return torch.tensor(flat, dtype=torch.long), torch.tensor(samp, dtype=torch.float64)

    @staticmethod
    def decode(meta: torch.Tensor, samp: torch.Tensor) -> "StepMeta":
        v = meta.tolist()
        b, width, n_words = v[0], v[1], v[2]
        extras = _words_json(v[3 : 3 + n_words]) if n_words else {}
        o = 3 + n_words
        seq_ids, starts, n_new = v[o : o + b], v[o + b : o + 2 * b], v[o + 2 * b : o + 3 * b]
        sample = [bool(x) for x in v[o + 3 * b : o + 4 * b]]
        o += 4 * b
        tables = [v[o + i * width : o + (i + 1) * width] for i in range(b)]
        o += b * width
        s = samp.tolist()
        sampling = [(s[4 * i], s[4 * i + 1], int(s[4 * i + 2]), int(s[4 * i + 3])) for i in range(b)]
        return StepMeta(seq_ids, starts, n_new, sample, tables, v[o:], sampling, extras)


def _json_words(obj: dict) -> list[int]:
    """`obj` as JSON in int64 words (zero-padded UTF-8)."""
    raw = json.dumps(obj, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)  # trailing spaces: still the same JSON
    return torch.frombuffer(bytearray(raw), dtype=torch.long).tolist()


def _words_json(words: list[int]) -> dict:
    return json.loads(torch.tensor(words, dtype=torch.long).view(torch.uint8).numpy().tobytes())


def _sizes(header: torch.Tensor) -> tuple[list[int], torch.dtype]:
    _, _, n_meta, n_samp, rows, cols, code, n_times = header.tolist()
    dtype = _DTYPES[code]
    return [n_meta * 8, n_samp * 8, n_times * 8, rows * cols * dtype.itemsize], dtype


def _decode(header: torch.Tensor, body: torch.Tensor) -> Message:
    kind, step, _, _, rows, cols, _, _ = header.tolist()
    sizes, dtype = _sizes(header)
    meta, samp, times, pay = torch.split(body, sizes)
    return Message(Kind(kind), step, meta.view(torch.long), samp.view(torch.float64), pay.view(dtype).view(rows, cols), times.view(torch.float64).clone())


class Transport(Protocol):
    """Messages between the ranks of one process group, addressed by job-wide rank."""

    def send(self, msg: Message, dst: int) -> None:
        """Queue `msg` for `dst`: asynchronous, in order per destination, bounded (back-pressure)."""
        ...

    def flush(self, dst: int) -> None:
        """Wait until everything queued for `dst` has left."""
        ...

    def recv(self, src: int) -> Message:
        """The next message from `src`; raises when the peer is dead or the group's timeout passes."""
        ...

    def close(self) -> None:
        """Drop the group (its peers' receives fail)."""
        ...


class GlooTransport:
    """A `Transport` over a torch.distributed (gloo) process group whose group ranks are
    `ranks` (group rank i is job-wide rank ranks[i]). Also the raw tensor sends the KV moves
    and collectives of a worker need."""

    def __init__(self, pg, ranks: Sequence[int], timeout_s: float | None = None, depth: int = 4):
        """Args:
        pg: a torch.distributed ProcessGroup (gloo) this process belongs to.
        ranks: job-wide rank of each group rank.
        timeout_s: the longest wait of a send or receive (None: the group's own timeout,
            which may be longer: it also bounds the group's formation).
        depth: outstanding sends per destination before `send` waits.
        """
        self.pg, self.ranks = pg, tuple(ranks)
        self.timeout = dt.timedelta(seconds=timeout_s) if timeout_s is not None else None
        self._local = {r: i for i, r in enumerate(self.ranks)}
        self._senders: dict[int, Sender] = {}
        self._lock = threading.Lock()
        self.depth = depth

    def local(self, rank: int) -> int:
        return self._local[rank]

    def isend_tensor(self, t: torch.Tensor, dst: int):
        return self.pg.send([t], self._local[dst], 0)

    def wait(self, work) -> None:
        """Wait for a send or receive, at most the transport's timeout (a timeout closes the pair:
        the group is broken, as when a peer dies)."""
        if self.timeout is None:
            work.wait()
        else:
            work.wait(self.timeout)

    def recv_tensor(self, t: torch.Tensor, src: int) -> None:
        self.wait(self.pg.recv([t], self._local[src], 0))

    def _sender(self, dst: int) -> "Sender":
        with self._lock:
            if dst not in self._senders:
                self._senders[dst] = Sender(self, dst, self.depth)
            return self._senders[dst]

    def send(self, msg: Message, dst: int) -> None:
        self._sender(dst).send(msg)

    def flush(self, dst: int) -> None:
        self._sender(dst).flush()

    def recv(self, src: int) -> Message:
        header = torch.zeros(HEADER, dtype=torch.long)
        self.recv_tensor(header, src)
        body = torch.empty(sum(_sizes(header)[0]), dtype=torch.uint8)
        if body.numel():
            self.recv_tensor(body, src)
        return _decode(header, body)

    def close(self) -> None:
        with self._lock:
            self._senders.clear()
        self.pg = None


def broadcast(msg: Message | None, root: int, group) -> Message:
    """A tensor-parallel group's leader (group rank `root`, passing `msg`) gives every member the
    same message. `group` is the stage's own process group."""
    if msg is not None:
        header, body = msg.encode()
    else:
        header = torch.zeros(HEADER, dtype=torch.long)
    group.broadcast(header, root).wait()
    if msg is None:
        body = torch.empty(sum(_sizes(header)[0]), dtype=torch.uint8)
    if body.numel():
        group.broadcast(body, root).wait()
    return _decode(header, body)


class Sender:
    """Asynchronous sends to one rank, in order; at most `depth` outstanding, so a slow
    receiver holds back the sender (back-pressure) instead of piling up buffers."""

    def __init__(self, transport: GlooTransport, dst: int, depth: int = 4):
        self.tp, self.dst, self.depth = transport, dst, depth
        self._pending: list[tuple[Any, tuple[torch.Tensor, torch.Tensor]]] = []

    def send(self, msg: Message) -> None:
        header, body = msg.encode()
        works = [self.tp.isend_tensor(header, self.dst)]
        if body.numel():
            works.append(self.tp.isend_tensor(body, self.dst))
        self._pending.append((works, (header, body)))  # the buffers must live until sent
        while len(self._pending) > self.depth:
            self._wait_oldest()

    def _wait_oldest(self) -> None:
        works, _ = self._pending.pop(0)
        for w in works:
            self.tp.wait(w)

    def flush(self) -> None:
        while self._pending:
            self._wait_oldest()


class Inbox:
    """Messages from one rank, received by a thread ahead of their use, so a gloo receive's
    rendezvous (a wake-up of the sending process, milliseconds on a busy host) overlaps the
    stage's compute instead of preceding every step. Stops after SHUTDOWN."""

    def __init__(self, transport: Transport, src: int, depth: int = 4):
        self._q: queue.Queue[Message | Exception] = queue.Queue(maxsize=depth)
        self.tp, self.src = transport, src
        threading.Thread(target=self._loop, name=f"inbox-from-{src}", daemon=True).start()

    def _loop(self) -> None:
        try:
            while True:
                msg = self.tp.recv(self.src)
                self._q.put(msg)
                if msg.kind is Kind.SHUTDOWN:
                    return
        except Exception as e:  # a peer died or timed out: the consumer raises it
            self._q.put(e)

    def get(self) -> Message:
        item = self._q.get()
        if isinstance(item, Exception):
            raise item
        return item
