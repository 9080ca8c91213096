"""Batches as engines run them: any number of sequences in flight per pipeline, up to a cap.

The cap is the engine's `max_num_seqs` when given, else what memory admits: no pipeline can
hold more sequences than the KV of the whole cluster's free memory (after one copy of the
weights) has room for.

The bound covers every integer batch with intervals [batch, top]: a pipeline running b
sequences, batch ≤ b ≤ top, is bounded by `top` sequences' tokens over its round time at
`top` sequences, with its memory at `batch`. Why that is valid:
- memory grows with the batch (KV per sequence, activations per step token), so a pipeline
  that holds b sequences holds `batch`;
- a fixed pipeline's throughput T(b) = b / round(b) does not fall as b grows. With n stages
  it keeps m = min(n, b) micro-batches of s = b/m sequences; a stage's busy time per round is
  m·d(s) + (b/output_len)·p + overhead·(m + prompts), d a decode step, p a prompt's prefill,
  and its links carry m·(α + s·β) + prompts·(…). Per sequence (divided by b): for b ≥ n,
  d(s)/s + p/output_len + overhead·(1/s + …)/n…, each nonincreasing in s wherever d(s)/s is; for
  b < n (s = 1) constant; the loop term Σ (d(s) + link(s)) likewise. So round(b)/b is
  nonincreasing, T(b) ≤ T(top), wherever a decode step's time per sequence d(s)/s is
  nonincreasing in s. The analytic model gives that when every efficiency read at a
  batch-dependent size is nondecreasing in it: an op's time is max(c, m) + (1 − o)·min(c, m)
  (homogeneous of degree 1, nondecreasing in both), compute c = FLOPs/(peak·e) with FLOPs
  affine in s, nonnegative intercept, and e nondecreasing in rows; bytes m affine likewise
  over a constant bandwidth; launches constant per step; an MoE's touched-expert share
  concave in the tokens. The same shows busy(b, m) nondecreasing in m at fixed b, which lets
  a class of pipelines of lengths ≥ lo be costed at m = min(lo, top). Profiles whose fitted
  curves fall somewhere are costed by the bound with their envelope (envelope.py).
  tests/unit_tests/test_batches.py checks the per-sequence property through
  `unit_round_costs` on every catalog profile and on a fitted, non-monotone one.
So the only cells a key inflates are those whose pipelines hold fewer than `top` sequences
(by at most top/b*, b* the most they hold). The cell bound starts from octaves
[2^i, 2^(i+1) − 1]; refinement evaluates a cell's best chain at the most sequences it holds
and splits the interval there (cell_bound.py).
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


def octaves(ceiling: int, per_octave: int = 1) -> list[tuple[int, int]]:
    """Intervals [lo, hi] of batches 1 … ceiling, each batch in exactly one: octaves
    [2^i, 2^(i+1) − 1] split into `per_octave` parts of equal ratio (rounded; no part empty)."""
    out, b = [], 1
    while b <= ceiling:
        for j in range(per_octave):
            top = min(ceiling, 2 * b - 1, max(b, round(b * 2 ** ((j + 1) / per_octave)) - 1))
            start = out[-1][1] + 1 if out else 1
            if start <= top:
                out.append((start, top))
        b *= 2
    return out


def search(evaluate: Callable[[int], T | None], score: Callable[[T], float], ceiling: int,
           hints: tuple[int, ...] = ()) -> list[tuple[int, T]]:
    """Batches worth running on one chain, with what `evaluate` gives for each (None: it does
    not fit). Every batch when the chain holds at most ALL_BATCHES; otherwise the powers of two,
    the largest batch that fits (memory only shrinks with the batch, so bisection finds it),
    the `hints`, and a bisection for the best batch between the best one's neighbours.

    Args:
        evaluate: the option at a batch, or None where it does not fit.
        score: larger is better.
        ceiling: the most sequences allowed.
        hints: batches to try as well (where the bound found this chain's best: the best split
            at the largest batch that fits can be worse than at a smaller one).
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
        for h in hints:
            if 1 <= h <= min(lo, ceiling):
                at(h)
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
