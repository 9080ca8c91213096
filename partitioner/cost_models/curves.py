"""Evaluating a profile's efficiency curves: piecewise linear in log space, flat at the ends.

Efficiency moves with the order of magnitude of a shape (a GEMM of 64 rows vs 128, an op
moving 1 MB vs 4 MB), so tables are read on log axes; outside the measured range the
nearest measured value holds — an extrapolation the data cannot support is not made.
"""

from __future__ import annotations

import math
from bisect import bisect_right
from collections.abc import Sequence

from hetc.cluster import AttentionCurve, Curve1D, Curve2D, GatherCurve
from hetc.efficiency import DecodeAttentionCurve

__all__ = ["LogCurve", "LogTable", "log_weights"]


def log_weights(grid: Sequence[float], v: float) -> tuple[int, int, float]:
    """(i, j, w): `v` lies between grid[i] and grid[j] with weight w on j, in log space.

    Args:
        grid: the logs of ascending grid points.
        v: the value (not its log), > 0.
    """
    lv = math.log(v) if v > 0 else -math.inf
    n = len(grid)
    if n == 1 or lv <= grid[0]:
        return 0, 0, 0.0
    if lv >= grid[-1]:
        return n - 1, n - 1, 0.0
    j = bisect_right(grid, lv)
    i = j - 1
    return i, j, (lv - grid[i]) / (grid[j] - grid[i])


class LogCurve:
    """A `Curve1D` ready to evaluate."""

    __slots__ = ("lx", "eff")

    def __init__(self, c: Curve1D):
        self.lx = [math.log(x) for x in c.x]
        self.eff = list(c.eff)

    def __call__(self, v: float) -> float:
        i, j, w = log_weights(self.lx, v)
        return self.eff[i] + (self.eff[j] - self.eff[i]) * w


class LogTable:
    """A `Curve2D` (rows m, columns nk), `AttentionCurve` (q, ctx), `DecodeAttentionCurve` (seqs, ctx)
    or `GatherCurve` (rows, row_bytes) ready to evaluate: bilinear in the logs of both axes."""

    __slots__ = ("lm", "lnk", "eff")

    def __init__(self, c: Curve2D | AttentionCurve | DecodeAttentionCurve | GatherCurve):
        rows, cols = (
            (c.m, c.nk)
            if isinstance(c, Curve2D)
            else (c.q, c.ctx)
            if isinstance(c, AttentionCurve)
            else (c.seqs, c.ctx)
            if isinstance(c, DecodeAttentionCurve)
            else (c.rows, c.row_bytes)
        )
        self.lm = [math.log(x) for x in rows]
        self.lnk = [math.log(x) for x in cols]
        self.eff = [list(r) for r in c.eff]

    def __call__(self, m: float, nk: float) -> float:
        i0, i1, wi = log_weights(self.lm, m)
        j0, j1, wj = log_weights(self.lnk, nk)
        e = self.eff
        lo = e[i0][j0] + (e[i0][j1] - e[i0][j0]) * wj
        hi = e[i1][j0] + (e[i1][j1] - e[i1][j0]) * wj
        return lo + (hi - lo) * wi
