"""Batches as engines run them: any number of sequences in flight per pipeline, up to a cap.

The cap is the engine's `max_num_seqs` when given, else what memory admits: no pipeline can
hold more sequences than the KV of the whole cluster's free memory (after one copy of the
weights) has room for.

The bound covers every integer batch with intervals [batch, top]: a pipeline running b
sequences, batch ≤ b ≤ top, is bounded by `top` sequences' tokens over its round time at
`top` sequences, with its memory at `batch`. Why that is valid:
- memory grows with the batch (KV per sequence, activations per step token), so a pipeline
  that holds b sequences holds `batch`;
- within a step regime (Regimes: the micro-steps per pass k and the chunks r a prompt is
  prefilled in stay put), a fixed pipeline's throughput T(b) = b / round(b) does not fall as b
  grows. A stage's busy time per round is k·passes steps of s = b/k seats, passes = life /
  output_len; with k and r fixed, a decode-only round is k·d(s) and per sequence d(s)/s, which
  does not grow where a step's time per row does not: in the analytic model an op's time is
  max(c, m) + (1 − o)·min(c, m) (homogeneous of degree 1, nondecreasing in both), compute c =
  FLOPs/(peak·e) with FLOPs affine in s, nonnegative intercept, e nondecreasing in rows; bytes
  affine likewise over a constant bandwidth; launches constant per step; an MoE's touched-expert
  share concave in the tokens. Links likewise (messages per step, bytes per token); for
  b ≤ n (s = 1) the round is b equal steps. Mixed steps (chunked prefill beside decode tokens)
  add the seat-life terms of simulate.Round.of, continuous in s while r is fixed; there the
  property is measured, not proved (test_batches.py: every catalog profile, several workloads,
  every batch of a regime), and it fails across regimes — a decode batch one past the token
  budget takes two steps and streams the weights twice — so no interval straddles one, except
  where the steps are full (b > n·s₁, s₁ the first chunk regime's top; past the budget, always):
  there the bound prices a stage at one floor per sequence that holds at every batch
  (budget_floor.py), and Regimes keeps one run from there up (`floor_from`). The
  same holds for busy(b, m) nondecreasing in m at fixed b where the lengths prefill in the
  same chunks, which lets a class of pipelines of lengths ≥ lo be costed at m = min(lo, top)
  (classes that do not are split into single lengths). Profiles whose fitted curves fall
  somewhere are costed by the bound with their envelope (envelope.py).
So the only cells a key inflates are those whose pipelines hold fewer than `top` sequences
(by at most top/b*, b* the most they hold). The cell bound starts from octaves
[2^i, 2^(i+1) − 1]; refinement evaluates a cell's best chain at the most sequences it holds
and splits the interval there (cell_bound.py).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import numpy as np

from hetc.cluster import TP_SIZES, Cluster
from hetc.partitioner.estimate.budget_floor import floor_seats
from hetc.partitioner.estimate.simulate import Workload
from hetc.partitioner.capture.units import Unit
from hetc.scheduling import Phase

__all__ = ["ALL_BATCHES", "batch_ceiling", "octaves", "Regimes", "search"]

MAX_BATCH = 1 << 16  # a model with no KV has no memory cap: sequences in flight considered at most
ALL_BATCHES = 64  # a chain that holds at most this many sequences has every batch evaluated
PAST = -1  # Regimes' chunks where a round is priced at the floor (no k or r matters there: budget_floor.py)

T = TypeVar("T")


def batch_ceiling(units: list[Unit], cluster: Cluster, wl: Workload, max_num_seqs: int | None = None) -> int:
    """The most sequences one pipeline may run: `max_num_seqs`, or what the KV of every
    device's free memory, less one copy of the weights, holds (at least 1)."""
    params: dict[str, float] = {}
    for u in units:
        params.update(u.params)
    free = sum(n.profile.usable_memory * n.count for n in cluster.nodes) - sum(params.values()) - wl.kv_bytes(units, wl.shared_kv)
    per_seq = wl.kv_bytes(units, wl.kv_tokens())
    admits = MAX_BATCH if per_seq <= 0 else int(min(MAX_BATCH, max(1.0, free / per_seq)))
    return max(1, min(admits, max_num_seqs or admits))


def octaves(ceiling: int, per_octave: int = 1) -> list[tuple[int, int]]:
    """Intervals [lo, hi] of batches 1 … ceiling, each batch in exactly one: octaves
    [2^i, 2^(i+1) − 1] split into `per_octave` parts of equal ratio (rounded; no part empty)."""
    out: list[tuple[int, int]] = []
    b = 1
    while b <= ceiling:
        for j in range(per_octave):
            top = min(ceiling, 2 * b - 1, max(b, round(b * 2 ** ((j + 1) / per_octave)) - 1))
            start = out[-1][1] + 1 if out else 1
            if start <= top:
                out.append((start, top))
        b *= 2
    return out


class Regimes:
    """Where a pipeline's step regime changes with its batch (simulate.Round.of), the breaks the
    bound's batch intervals must not straddle: a pipeline of n stages at b sequences runs
    k = max(min(n, b), ⌈b · decode_rows / budget⌉) micro-steps per pass of s = b / k seats each, and
    (prefill and decode together) prefills a prompt in r(s) chunks, the fewest that fit the
    budget the decode tokens leave (`prefill_chunk` × the data-parallel ranks of the pipeline's
    narrowest stage, Workload.ranked: the breaks are those of every budget a pipeline may run at).
    While k (or s = 1, b ≤ n) and r stay put, a round's busy seconds per sequence never grow with b; where
    the steps are full (b > n·s₁) one run, priced at a floor that holds for every k and r (budget_floor.py);
    where r differs between two lengths at one batch, the longer one's round need not cost more
    (test_batches.py measures both on every profile)."""

    def __init__(self, wl: Workload, phase: Phase, ceiling: int, floor: bool = True) -> None:
        """`floor`: one run where the steps are full, for costs priced at the floor there (False: every change, for exact costs)."""
        self.wl, self.phase, self.ceiling, self.floor = wl, phase, ceiling, floor
        # every budget a pipeline may run at (its narrowest stage's data-parallel ranks: Workload.ranked)
        self.budgets = list({w.dp_ranks: w for w in (wl.ranked(tp) for tp in TP_SIZES)}.values())
        self._codes: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        self._floor_from: dict[int, int] = {}  # floor_from per n: column generation asks for it at every key it prices

    def _of(self, n: int) -> tuple[np.ndarray, np.ndarray]:
        """(regime code, r per budget) per batch 0 … ceiling for pipelines of n stages: the code changes
        where k or r changes under any budget."""
        if n not in self._codes:
            b = np.arange(self.ceiling + 1)
            codes, chunks = [], []
            for wl in self.budgets:
                k = np.maximum(np.minimum(n, b), np.ceil(b * wl.decode_rows / wl.step_budget)).astype(np.int64)
                r = self._chunks(wl, b / np.maximum(k, 1)) if self.phase == Phase.BOTH else np.zeros(len(b), dtype=np.int64)
                k[b <= n] = 0  # one seat per micro-step: the same steps, b of them
                # the steps full (budget_floor.floored at m = n): priced at the floor per sequence, whatever k and r
                past = b > n * floor_seats(wl, self.phase) if self.floor and self.phase != Phase.PREFILL else np.zeros(len(b), dtype=bool)
                k[past], r[past] = -1, PAST
                codes.append(k * (1 << 24) + r)
                chunks.append(r)
            code = np.unique(np.stack(codes, axis=1), axis=0, return_inverse=True)[1].ravel() if len(codes) > 1 else codes[0]
            self._codes[n] = (code, np.stack(chunks))
        return self._codes[n]

    @staticmethod
    def _chunks(wl: Workload, s: np.ndarray) -> np.ndarray:
        """simulate._seat_life's r at s seats per micro-step, for an array of s."""
        inp, dec, rows, budget = wl.prefill_len, wl.decode_steps, wl.decode_rows, wl.step_budget
        r, todo, t = np.zeros(len(s), dtype=np.int64), np.ones(len(s), dtype=bool), 1
        while todo.any():
            spare = budget - s * rows * dec / (t + dec)
            ok = todo & (spare > 0) & (np.ceil(inp * wl.dp_ranks / np.where(spare > 0, spare, 1.0)) <= t)
            r[ok], todo, t = t, todo & ~ok, t + 1
        return r

    def floor_from(self, n: int) -> int:
        """The least batch from which n-stage pipelines are priced at the floor under every budget, up to
        the ceiling (ceiling + 1 where none): one interval covers them all, its costs per sequence the
        same at every batch (budget_floor.py)."""
        if n not in self._floor_from:
            floor = (self._of(n)[1] == PAST).all(axis=0)
            self._floor_from[n] = int(len(floor) - np.argmin(floor[::-1])) if not floor.all() else 0
        return self._floor_from[n]

    def runs(self, n: int, b: int, top: int) -> list[tuple[int, int]]:
        """[b, top] cut where the regime of n-stage pipelines changes (none if top < b)."""
        if top < b:
            return []
        code = self._of(n)[0][b : top + 1]
        cuts = np.nonzero(code[1:] != code[:-1])[0] + 1
        edges = [0, *cuts.tolist(), len(code)]
        return [(b + x, b + y - 1) for x, y in zip(edges, edges[1:])]

    def shared(self, lo: int, hi: int, b: int, top: int) -> bool:
        """Whether pipelines of lo … hi stages prefill in the same chunks at every batch of [b, top]
        (then a longer one's round costs at least a shorter one's), under every budget that does not set
        the micro-steps of lo stages there (one that does prices the class at its floor: budget_floor.py)."""
        short, long = self._of(lo)[1][:, b : top + 1], self._of(hi)[1][:, b : top + 1]
        return bool(((short == long) | (short == PAST)).all())


def search(evaluate: Callable[[int], T | None], score: Callable[[T], float], ceiling: int, hints: tuple[int, ...] = ()) -> list[tuple[int, T]]:
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
