"""Past the token budget: one lower bound per sequence for every batch whose micro-steps the budget sets.

A pipeline at b sequences in m micro-batches runs k = max(m, ⌈b·rows / budget⌉) micro-steps per pass of
s = b / k seats (simulate.Round.of), and its round is k times a round of one micro-step of s seats
(Round.at): a stage's busy seconds, messages and link tokens per sequence depend on s alone. Within one
prefill-chunk regime (r, batches.Regimes) they do not grow with s (the premise every batch interval of
the bound rests on), and s·rows ≤ budget always. So the least, over the regimes r of s in (0, budget],
of the cost per sequence at the top of the regime bounds a stage's cost per sequence at any batch and
micro-batch count, under that budget, from below.

The first pass of the bound (its keys: aggregate.py, and the cost LP, whole-device MIP and column
generation's pricing over the same keys) prices a kind at this floor (times the batch) wherever the budget,
not the micro-batch count, sets k (b·rows > m·budget): there k and r change with every few sequences (a
decode batch one past k budgets takes another step; the chunks follow s), and batch intervals cut at every
such change were most of the cell bound's keys (DeepSeek-V3 dp-ep over 24 devices: 3,007 of 3,848, each a
cost-model run per kind). Its Regimes does not cut there (batches.py); refinement does, and costs its pieces
exactly (`floor=False`), so the chains it hands the search sit at real batches. Little is lost: a pipeline within the budget reaches the
same seats per micro-step at n·s sequences, so the floor is near what the best batch of a cell costs wherever
its memory holds that many.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from hetc.partitioner.estimate.simulate import Round, Workload, _seat_life
from hetc.scheduling import Phase

__all__ = ["SHORT", "past_budget", "floor_points"]

BISECT = 60  # halvings toward a regime's top (to 2^-60 of the budget)
SHORT = 1 - 1e-9  # per-sequence costs scaled by this: the top of a regime is approached, not reached


def past_budget(wl: Workload, m: int, batch: int, phase: Phase) -> bool:
    """Whether the budget, not the m micro-batches, sets the micro-steps of `batch` sequences (then a round
    at that batch is priced at the floor: module docstring)."""
    return phase != Phase.PREFILL and math.ceil(batch * wl.decode_rows / wl.step_budget) > m


def floor_points(wl: Workload, phase: Phase) -> list[tuple[float, Round]]:
    """(seats s, the round of one micro-step of s seats) at the top of every prefill-chunk regime of s in
    (0, budget / rows] (decode pools: the top alone): the rounds whose cost per sequence, at least, bounds
    every batch past the budget from below."""
    top = wl.step_budget / wl.decode_rows
    seats = [top] if phase == Phase.DECODE else _regime_tops(lambda s: _seat_life(wl, s)[1], top)
    return [(s, Round.at(wl, 1, s, phase)) for s in seats]


def _regime_tops(chunks: Callable[[float], int], top: float) -> list[float]:
    """The largest s (within BISECT halvings) of each value of `chunks` on (0, top], nondecreasing in s."""
    out: list[float] = []
    lo, r = 0.0, -1
    while lo < top:
        first = chunks(min(top, max(lo, top * 1e-9)))
        if chunks(top) == first:
            out.append(top)
            break
        a, b = max(lo, top * 1e-9), top  # chunks(a) == first < chunks(b)
        for _ in range(BISECT):
            mid = (a + b) / 2
            a, b = (mid, b) if chunks(mid) == first else (a, mid)
        out.append(a)
        if first == r:  # no progress (cannot happen for a nondecreasing count): stop rather than loop
            break
        lo, r = b, first
    return out
