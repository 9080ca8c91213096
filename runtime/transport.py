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
"""

from __future__ import annotations

import enum
import queue
import threading
from dataclasses import dataclass, field

import torch
import torch.distributed as dist

__all__ = ["Inbox", "Kind", "Message", "Sender", "StepMeta", "broadcast", "recv"]

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
        header = torch.tensor([int(self.kind), self.step_id, self.meta.numel(), self.samp.numel(), p2.shape[0],
                               p2.shape[1], _DTYPES.index(p2.dtype), self.times.numel()], dtype=torch.long)
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

    def encode(self) -> tuple[torch.Tensor, torch.Tensor]:
        b = len(self.starts)
        width = max((len(t) for t in self.block_tables), default=0)
        tables = [t + [0] * (width - len(t)) for t in self.block_tables]
        # the tokens last: the first stage fills in looked-ahead ones in place (meta[-T:])
        flat = [b, width, *self.seq_ids, *self.starts, *self.n_new, *map(int, self.sample), *sum(tables, []),
                *self.token_ids]
        samp = [v for s in self.sampling for v in (s[0], s[1], float(s[2]), float(s[3]))]
        return torch.tensor(flat, dtype=torch.long), torch.tensor(samp, dtype=torch.float64)

    @staticmethod
    def decode(meta: torch.Tensor, samp: torch.Tensor) -> "StepMeta":
        v = meta.tolist()
        b, width = v[0], v[1]
        o = 2
        seq_ids, starts, n_new = v[o:o + b], v[o + b:o + 2 * b], v[o + 2 * b:o + 3 * b]
        sample = [bool(x) for x in v[o + 3 * b:o + 4 * b]]
        o += 4 * b
        tables = [v[o + i * width:o + (i + 1) * width] for i in range(b)]
        o += b * width
        s = samp.tolist()
        sampling = [(s[4 * i], s[4 * i + 1], int(s[4 * i + 2]), int(s[4 * i + 3])) for i in range(b)]
        return StepMeta(seq_ids, starts, n_new, sample, tables, v[o:], sampling)


def _sizes(header: torch.Tensor) -> tuple[list[int], torch.dtype]:
    _, _, n_meta, n_samp, rows, cols, code, n_times = header.tolist()
    dtype = _DTYPES[code]
    return [n_meta * 8, n_samp * 8, n_times * 8, rows * cols * dtype.itemsize], dtype


def _decode(header: torch.Tensor, body: torch.Tensor) -> Message:
    kind, step, _, _, rows, cols, _, _ = header.tolist()
    sizes, dtype = _sizes(header)
    meta, samp, times, pay = torch.split(body, sizes)
    return Message(Kind(kind), step, meta.view(torch.long), samp.view(torch.float64), pay.view(dtype).view(rows, cols),
                   times.view(torch.float64).clone())


def recv(src: int) -> Message:
    """Receive one message from rank `src` (blocks up to the process group's timeout)."""
    header = torch.zeros(HEADER, dtype=torch.long)
    dist.recv(header, src=src)
    body = torch.empty(sum(_sizes(header)[0]), dtype=torch.uint8)
    if body.numel():
        dist.recv(body, src=src)
    return _decode(header, body)


def broadcast(msg: Message | None, src: int, group) -> Message:
    """A tensor-parallel group's leader (`src`, passing `msg`) gives every member the same message."""
    if msg is not None:
        header, body = msg.encode()
    else:
        header = torch.zeros(HEADER, dtype=torch.long)
    dist.broadcast(header, src=src, group=group)
    if msg is None:
        body = torch.empty(sum(_sizes(header)[0]), dtype=torch.uint8)
    if body.numel():
        dist.broadcast(body, src=src, group=group)
    return _decode(header, body)


class Sender:
    """Asynchronous sends to one rank, in order; at most `depth` outstanding, so a slow
    receiver holds back the sender (back-pressure) instead of piling up buffers."""

    def __init__(self, dst: int, depth: int = 4):
        self.dst, self.depth = dst, depth
        self._pending: list[tuple[object, tuple[torch.Tensor, torch.Tensor]]] = []

    def send(self, msg: Message) -> None:
        header, body = msg.encode()
        works = [dist.isend(header, dst=self.dst)]
        if body.numel():
            works.append(dist.isend(body, dst=self.dst))
        self._pending.append((works, (header, body)))  # the buffers must live until sent
        while len(self._pending) > self.depth:
            self._wait_oldest()

    def _wait_oldest(self) -> None:
        works, _ = self._pending.pop(0)
        for w in works:
            w.wait()

    def flush(self) -> None:
        while self._pending:
            self._wait_oldest()


class Inbox:
    """Messages from one rank, received by a thread ahead of their use, so a gloo receive's
    rendezvous (a wake-up of the sending process, milliseconds on a busy host) overlaps the
    stage's compute instead of preceding every step. Stops after SHUTDOWN."""

    def __init__(self, src: int, depth: int = 4):
        self._q: queue.Queue[Message | Exception] = queue.Queue(maxsize=depth)
        self.src = src
        threading.Thread(target=self._loop, name=f"inbox-from-{src}", daemon=True).start()

    def _loop(self) -> None:
        try:
            while True:
                msg = recv(self.src)
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
