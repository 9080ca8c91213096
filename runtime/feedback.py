"""Sampled tokens going from the last stage straight to the first (lookahead steps).

The frontend may send a sequence's next decode step before the step that samples its input
token has come back (scheduler.py, lookahead); that step carries -1 for the token. The first
stage fills it in with what the last stage sampled for that sequence at that position: its
own samples in a 1-stage lane; else TOKENS messages the last stage sends it after every
step, taken by a thread so the last stage never waits on the first. One hop, where the
result's way through the frontend is two plus the scheduler. The last stage also passes on
heartbeats (every message but a step's) and SHUTDOWN, so this channel is never silent for
longer than the pipeline itself.
"""

from __future__ import annotations

import threading
import time
from collections import deque

import torch

from hetc.runtime.transport import Kind, Message, StepMeta, Transport

__all__ = ["SampledTokens", "receive_tokens", "tokens_message"]


class SampledTokens:
    """(seq id, position) → token sampled there, put by the last stage, taken by the first.

    Samples nobody takes (the sequence was not looked ahead) are dropped `keep` puts later;
    a looked-ahead step always takes a sample from one of the lane's last few steps.
    """

    def __init__(self, keep: int = 256):
        self._tok: dict[tuple[int, int], int] = {}
        self._puts: deque[list[tuple[int, int]]] = deque()
        self._cond = threading.Condition()
        self._keep = keep
        self.error: str | None = None  # the receiving thread's failure

    def put(self, seq_ids: list[int], positions: list[int], tokens: list[int]) -> None:
        keys = list(zip(seq_ids, positions))
        with self._cond:
            self._tok.update(zip(keys, tokens))
            self._puts.append(keys)
            if len(self._puts) > self._keep:
                for k in self._puts.popleft():
                    self._tok.pop(k, None)
            self._cond.notify_all()

    def fail(self, reason: str) -> None:
        with self._cond:
            self.error = reason
            self._cond.notify_all()

    def fill(self, meta: StepMeta, packed: torch.Tensor, timeout: float) -> float:
        """Replace the -1 tokens of `meta` (and the same tail of `packed`, its encoded form)
        with the sampled ones, waiting up to `timeout` s for each. Returns the seconds it took
        (the stage was idle meanwhile)."""
        ids = meta.token_ids
        if -1 not in ids:
            return 0.0
        t0 = time.perf_counter()
        off = 0
        rounds = set(meta.extras.get("spec", ()))  # a round's -1s are its proposals, for the lane's drafter (drafter.py)
        for i, (sid, start, n) in enumerate(zip(meta.seq_ids, meta.starts, meta.n_new)):
            for j in range(n if i not in rounds else 0):
                if ids[off + j] == -1:
                    # a sample that failed (batching.SAMPLING_FAILURES) ended its request at the frontend: any
                    # valid id keeps this row's embedding in range, and its result is dropped
                    ids[off + j] = max(0, self._take((sid, start + j), timeout))
            off += n
        packed[packed.numel() - len(ids) :] = torch.tensor(ids, dtype=torch.long)
        return time.perf_counter() - t0

    def _take(self, key: tuple[int, int], timeout: float) -> int:
        with self._cond:
            if not self._cond.wait_for(lambda: key in self._tok or self.error, timeout):
                raise RuntimeError(f"no token was sampled for sequence {key[0]} at position {key[1]} within {timeout:g} s")
            if self.error:
                raise RuntimeError(f"the last stage's tokens stopped coming: {self.error}")
            return self._tok.pop(key)


def tokens_message(step_id: int, seq_ids: list[int], positions: list[int], tokens: list[int]) -> Message:
    """A TOKENS message (what one step sampled; nothing for a prefill chunk)."""
    return Message(Kind.TOKENS, step_id, meta=torch.tensor([*seq_ids, *positions, *tokens], dtype=torch.long))


def receive_tokens(transport: Transport, src: int, store: SampledTokens) -> threading.Thread:
    """Start the first stage's thread that puts every TOKENS message from rank `src` into
    `store`, until SHUTDOWN."""

    def loop() -> None:
        try:
            while True:
                msg = transport.recv(src)
                if msg.kind is Kind.SHUTDOWN:
                    return
                if msg.kind is Kind.HEARTBEAT:
                    continue
                if msg.kind is not Kind.TOKENS:
                    raise RuntimeError(f"unexpected message {msg.kind.name} from the last stage (rank {src})")
                v = msg.meta.tolist()
                n = len(v) // 3
                store.put(v[:n], v[n : 2 * n], v[2 * n :])
        except Exception as e:  # the last stage died or timed out: fail the step waiting for it
            store.fail(str(e).splitlines()[0] if str(e) else type(e).__name__)

    t = threading.Thread(target=loop, name="tokens-from-last-stage", daemon=True)
    t.start()
    return t
