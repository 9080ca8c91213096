"""Past the first chunk regime: one lower bound per sequence for every batch where the steps are full.

A pipeline at b sequences in m micro-batches runs k = max(m, ⌈b·rows / budget⌉) micro-steps per pass of
s = b / k seats (simulate.Round.of), and its round is k times a round of one micro-step of s seats
(Round.at): a stage's busy seconds, messages and link tokens per sequence depend on s alone. Within one
prefill-chunk regime (r, batches.Regimes) they do not grow with s (the premise every batch interval of
the bound rests on), and s·rows ≤ budget always. So the least, over the regimes r of s in (0, budget],
of the cost per sequence at the top of the regime bounds a stage's cost per sequence at any batch and
micro-batch count, under that budget, from below.

The first pass of the bound (its keys: aggregate.py, and the cost LP, whole-device MIP and column
generation's pricing over the same keys) prices a kind at this floor (times the batch) wherever a pipeline's
micro-steps hold more seats than the first regime's top s₁ (b > m·s₁): past the budget (b·rows > m·budget,
s₁ ≤ budget / rows) k and r change with every few sequences (a decode batch one past k budgets takes another
step; the chunks follow s), and between m·s₁ and the budget r does (a prompt in ever more chunks as the decode
seats fill the step); batch intervals cut at every such change were most of the bound's keys (DeepSeek-V3
dp-ep over 24 devices: 3,007 of 3,848; qwen2.5-7b over 52 devices of 6 types: 12 of the 28 intervals of
one-stage pipelines lay between s₁ = 1,028 and the budget of 2,048, 6 past it), each a cost-model run per
kind. Its Regimes does not cut there and its keys run on to the ceiling in one (batches.py, aggregate.keys);
refinement does, and costs its pieces exactly (`floor=False`), so the chains it hands the search sit at real
batches. Little is lost: the cost per sequence is flat once the steps are full (the cost at s₁ is the floor
itself on every catalog profile for qwen2.5-7b and llama-3.1-70b at 1,024 / 256 and 8,192 / 512 tokens; the
tests' 96-token prompts in 64-token chunks put it 12–16% above), and a pipeline reaches the same seats per
micro-step at m·s sequences, so the floor is near what the best batch of a cell costs wherever its memory
holds that many.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

from hetc.partitioner.estimate.simulate import Round, Workload, _seat_life
from hetc.scheduling import Phase

__all__ = ["SHORT", "floored", "floor_points", "floor_seats"]

BISECT = 60  # halvings toward a regime's top (to 2^-60 of the budget)
SHORT = 1 - 1e-9  # per-sequence costs scaled by this: the top of a regime is approached, not reached


def floored(wl: Workload, m: int, batch: int, phase: Phase) -> bool:
    """Whether a round of `batch` sequences in m micro-batches is priced at the floor (module docstring): its
    micro-steps hold more than the first chunk regime's top (past the budget, always)."""
    return phase != Phase.PREFILL and batch > m * floor_seats(wl, phase)


def floor_seats(wl: Workload, phase: Phase) -> float:
    """s₁: the top of the first chunk regime (decode pools: the budget's seats), past which a micro-step is priced at the floor."""
    return floor_points(wl, phase)[0][0]


@functools.cache
def floor_points(wl: Workload, phase: Phase) -> list[tuple[float, Round]]:
    """(seats s, the round of one micro-step of s seats) at the top of every prefill-chunk regime of s in
    (0, budget / rows] (decode pools: the top alone): the rounds whose cost per sequence, at least, bounds
    every batch from below (kept: the same few per workload)."""
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
