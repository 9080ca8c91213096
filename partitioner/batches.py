"""Batches as engines run them: any number of sequences in flight per pipeline, up to a cap.

The cap is the engine's `max_num_seqs` when given, else what memory admits: no pipeline can
hold more sequences than the KV of the whole cluster's free memory (after one copy of the
weights) has room for.

The bound covers every integer batch with intervals [batch, top]: a pipeline running b
sequences, batch ≤ b ≤ top, is bounded by `top` sequences' tokens over its round time at
`batch` sequences, with its memory at `batch`. Two properties of the saturation model make
this valid (tests/unit_tests/test_batches.py checks them on every catalog profile):
- memory grows with the batch (KV per sequence, activations per step token);
- a stage's busy time per round, m micro-steps of b/m sequences plus b/output_len prompts,
  does not shrink when b or m grows: every op costs (1 − o)(a + c) + o·max(a, c) plus
  launches, with a (compute) and c (bytes) affine in the step's tokens with non-negative
  intercepts, so its time is non-decreasing in the tokens and its time per token is
  non-increasing; m·t(b/m) is then non-decreasing in m, and each term in b. (Fitted
  efficiency curves, as `hetc profile` writes for a CPU, are outside this argument.)
The cell bound starts from octaves [2^i, 2^(i+1) − 1] and halves the intervals its optimum's
cells use, for every cell, down to single batches (cell_bound.py).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TypeVar

from hetc.cluster import Cluster
from hetc.partitioner.simulate import Workload
from hetc.partitioner.units import Unit
from hetc.scheduling import KV_BLOCK_TOKENS

__all__ = ["ALL_BATCHES", "batch_ceiling", "octaves", "search"]

MAX_BATCH = 1 << 16  # a model with no KV has no memory cap: sequences in flight considered at most
ALL_BATCHES = 64  # a chain that holds at most this many sequences has every batch evaluated

T = TypeVar("T")


def batch_ceiling(units: list[Unit], cluster: Cluster, wl: Workload, max_num_seqs: int | None = None) -> int:
    """The most sequences one pipeline may run: `max_num_seqs`, or what the KV of every
    device's free memory, less one copy of the weights, holds (at least 1)."""
    params: dict[str, float] = {}
    for u in units:
        params.update(u.params)
    free = sum(n.profile.usable_memory * n.count for n in cluster.nodes) - sum(params.values())
    per_seq = math.ceil(wl.context / KV_BLOCK_TOKENS) * KV_BLOCK_TOKENS * sum(u.kv_bytes_per_token for u in units)
    admits = MAX_BATCH if per_seq <= 0 else int(min(MAX_BATCH, max(1.0, free / per_seq)))
    return max(1, min(admits, max_num_seqs or admits))


def octaves(ceiling: int) -> list[tuple[int, int]]:
    """[2^i, 2^(i+1) − 1] up to the ceiling: every batch 1 … ceiling in exactly one interval."""
    out, b = [], 1
    while b <= ceiling:
        out.append((b, min(2 * b - 1, ceiling)))
        b *= 2
    return out


def search(evaluate: Callable[[int], T | None], score: Callable[[T], float], ceiling: int) -> list[tuple[int, T]]:
    """Batches worth running on one chain, with what `evaluate` gives for each (None: it does
    not fit). Every batch when the chain holds at most ALL_BATCHES; otherwise the powers of two,
    the largest batch that fits (memory only shrinks with the batch, so bisection finds it),
    and a bisection for the best batch between the best one's neighbours.

    Args:
        evaluate: the option at a batch, or None where it does not fit.
        score: larger is better.
        ceiling: the most sequences allowed.
    """
    seen: dict[int, T] = {}
    failed: set[int] = set()

    def at(b: int) -> T | None:
        if b not in seen and b not in failed:
            got = evaluate(b)
            if got is None:
                failed.add(b)
            else:
                seen[b] = got
        return seen.get(b)

    b, last = 1, 0
    while b <= ceiling and at(b) is not None:
        last, b = b, 2 * b
    if not last:
        return []
    lo, hi = last, min(2 * last - 1, ceiling)  # the largest that fits lies in [last, hi]
    if hi <= ALL_BATCHES:
        for k in range(1, hi + 1):
            at(k)
    else:
        while lo < hi:
            mid = (lo + hi + 1) // 2
            lo, hi = (mid, hi) if at(mid) is not None else (lo, mid - 1)
        _climb(at, score, seen)
    return sorted(seen.items())


def _climb(at: Callable[[int], T | None], score: Callable[[T], float], seen: dict[int, T]) -> None:
    """Bisect toward the best batch between the best one's evaluated neighbours (a handful of
    evaluations; the bound says how far the plan may still be from the best)."""
    for _ in range(12):
        keys = sorted(seen)
        i = max(range(len(keys)), key=lambda j: score(seen[keys[j]]))
        left = keys[i - 1] if i else keys[i]
        right = keys[i + 1] if i + 1 < len(keys) else keys[i]
        gaps = [(keys[i] - left, (left + keys[i]) // 2), (right - keys[i], (keys[i] + right + 1) // 2)]
        width, probe = max(gaps)
        if width <= 1 or at(probe) is None:
            return
