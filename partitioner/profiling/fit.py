"""Fitting a profile's curves and overheads from timings (numpy only, no device access).

Efficiency of a timed op = work / (rate · (seconds − dispatch)): its FLOPs over peak FLOP/s,
or its bytes over the memory bandwidth, once the cost of issuing the op is taken out.
Curves are tables on the measured grid, the median of the samples at each point; the
cost model reads them piecewise linear in log space (`curves.py`).
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Sequence

import numpy as np

__all__ = ["efficiency", "table_1d", "table_2d", "eval_1d", "fit_memory", "fit_gather", "fit_line", "fit_overheads", "fit_alpha_beta"]

_MIN_WORK_SHARE = 0.1  # an op timed at no more than its dispatch still did some work: keep ≥ 10% of its time
_ARITHMETIC_BOUND = 1.25  # an op slower than its kind's bytes explain by this factor is bound by something else
_LARGE_OP_BYTES = 1 << 16  # below this, dispatch dominates and says nothing about what bounds an op


def efficiency(work: float, seconds: float, rate: float, dispatch: float = 0.0, cap: float = 64.0) -> float:
    """Achieved share of `rate` for `work` done in `seconds`, less `dispatch` per op.

    Args:
        work: FLOPs or bytes.
        seconds: measured time of one op.
        rate: the nominal rate the share is of (peak FLOP/s or memory bandwidth).
        dispatch: time one op costs doing nothing.
        cap: largest share reported (ops far below dispatch time carry no information).
    """
    busy = max(seconds - dispatch, _MIN_WORK_SHARE * seconds)
    return min(work / (rate * busy), cap)


def _log_bin(x: float, grid: Sequence[float]) -> float:
    return min(grid, key=lambda g: abs(math.log(g) - math.log(x)))


def table_1d(xs: Iterable[float], effs: Iterable[float], grid: Sequence[float] | None = None) -> dict:
    """Median efficiency per point: `{x: [...], eff: [...]}` (a `Curve1D`).

    Args:
        xs: where each sample was taken (> 0).
        effs: its efficiency.
        grid: bins to group samples by (nearest point in log space); each bin's point is
            the geometric mean of its samples' xs, so the curve passes where they were
            taken. Default: one bin per distinct x.
    """
    groups: dict[float, list[tuple[float, float]]] = defaultdict(list)
    pts = sorted(set(grid if grid is not None else xs))
    for x, e in zip(xs, effs):
        groups[_log_bin(x, pts)].append((x, e))
    if not groups:
        raise ValueError("no samples to fit")
    out = sorted((math.exp(float(np.mean([math.log(x) for x, _ in g]))), float(np.median([e for _, e in g]))) for g in groups.values())
    return {"x": [x for x, _ in out], "eff": [e for _, e in out]}


def table_2d(ms: Iterable[float], nks: Iterable[float], effs: Iterable[float]) -> dict:
    """Median efficiency per (m, nk) grid point: `{m, nk, eff[i][j]}` (a `Curve2D`).

    Cells with no sample (shapes skipped as too slow to time) take the nearest measured
    nk in the same row, in log space; rows with none take the nearest measured row.
    """
    groups: dict[tuple[float, float], list[float]] = defaultdict(list)
    for m, nk, e in zip(ms, nks, effs):
        groups[(float(m), float(nk))].append(e)
    if not groups:
        raise ValueError("no samples to fit")
    mgrid = sorted({m for m, _ in groups})
    nkgrid = sorted({nk for _, nk in groups})
    table: list[list[float | None]] = [[float(np.median(groups[(m, nk)])) if (m, nk) in groups else None for nk in nkgrid] for m in mgrid]
    for row in table:
        have = [j for j, v in enumerate(row) if v is not None]
        for j, v in enumerate(row):
            if v is None and have:
                near = min(have, key=lambda h: abs(math.log(nkgrid[h]) - math.log(nkgrid[j])))
                row[j] = row[near]
    full = [i for i, r in enumerate(table) if r and r[0] is not None]
    for i, row in enumerate(table):
        if row[0] is None:
            near = min(full, key=lambda h: abs(math.log(mgrid[h]) - math.log(mgrid[i])))
            table[i] = list(table[near])
    return {"m": mgrid, "nk": nkgrid, "eff": table}


def eval_1d(table: dict, x: float) -> float:
    """A `table_1d` read as the cost model reads it: linear in log x, flat beyond the ends."""
    return float(np.interp(math.log(x), np.log(table["x"]), table["eff"]))


def fit_memory(
    samples: Sequence[dict], bandwidth: float, dispatch: float, grid: Sequence[float], cache_bytes: float
) -> tuple[dict, dict[str, dict], dict[str, dict]]:
    """Memory curves: one per op, one per kind of op, and a default, for ops bound by bytes.

    Every measured op gets a curve of its own samples (its fixed cost and its speed per
    byte). Ops whose instances of 64 KiB up to half the cache take over 1.25× what their
    kind's curve says (silu and exp on a CPU: arithmetic; a transposing copy: strides) are
    left out of the kind and default curves, which price ops that were not measured. Larger
    instances do not decide: there every op slows alike (fresh pages for each new output).

    Args:
        samples: {"op": graph op name, "kind", "bytes", "seconds"} per timed op.
        bandwidth: memory_bandwidth the curves are relative to.
        dispatch: one op's cost doing nothing.
        grid: points of the curves (bytes per op).
        cache_bytes: the last-level cache.

    Returns:
        (default curve, {kind: curve}, {op: curve}).
    """
    if not samples:
        raise ValueError("no samples to fit")

    def curve(ss):
        return table_1d([s["bytes"] for s in ss], [efficiency(s["bytes"], s["seconds"], bandwidth, dispatch) for s in ss], grid)

    def kind_curves(ss):
        return {k: curve([s for s in ss if s["kind"] == k]) for k in dict.fromkeys(s["kind"] for s in ss)}

    first = kind_curves(samples)
    by_op: dict[str, list[dict]] = defaultdict(list)
    for s in samples:
        by_op[s["op"]].append(s)
    slow = set()
    for op, ss in by_op.items():
        mid = [s for s in ss if _LARGE_OP_BYTES <= s["bytes"] <= cache_bytes / 2]
        ratio = [s["seconds"] / (dispatch + s["bytes"] / (bandwidth * eval_1d(first[s["kind"]], s["bytes"]))) for s in mid]
        if ratio and np.median(ratio) > _ARITHMETIC_BOUND:
            slow.add(op)
    typical = [s for s in samples if s["op"] not in slow] or list(samples)
    kinds = {**first, **kind_curves(typical)}
    default = curve(typical)
    ops = {op: curve(ss) for op, ss in by_op.items() if op}
    return default, kinds, ops


def fit_gather(samples: Sequence[dict], bandwidth: float, dispatch: float) -> dict | None:
    """The gather table: efficiency (bytes/s ÷ bandwidth) by rows read and bytes per row.

    Each row of a table far larger than the cache is a random access whose cost depends on
    the row's size; few rows leave the op's own fixed cost, many make an output that needs
    fresh pages each call. At one row size, fewer rows never cost more: each time is held to
    at most the next larger gather's, which removes the slow mode a few-µs gather falls into in
    some rounds (on the 2-core VM 60 rows of 3 KiB took 5.9 µs in one round and 11–13 µs in the
    others) without moving the measured times up.

    Args:
        samples: {"rows", "bytes", "seconds"} per timed gather (bytes read + written).
        bandwidth: memory_bandwidth the table is relative to.
        dispatch: one op's cost doing nothing.

    Returns:
        A `GatherCurve` dict, or None without samples.
    """
    use = sorted(({**s, "row_bytes": s["bytes"] / s["rows"]} for s in samples), key=lambda s: (s["row_bytes"], -s["rows"]))
    if not use:
        return None
    for prev, s in zip(use, use[1:]):  # per row size, from the most rows down
        if s["row_bytes"] == prev["row_bytes"]:
            s["seconds"] = min(s["seconds"], prev["seconds"])
    t = table_2d([s["rows"] for s in use], [s["row_bytes"] for s in use], [efficiency(s["bytes"], s["seconds"], bandwidth, dispatch) for s in use])
    return {"rows": t["m"], "row_bytes": t["nk"], "eff": t["eff"]}


def fit_line(xs: Sequence[float], ys: Sequence[float], *, relative: bool = False) -> tuple[float, float]:
    """Least-squares `y = a + b·x`; (a, b). `relative`: minimise the errors relative to each y
    (points spanning decades, where plain least squares lets the largest decide `a`)."""
    x = np.asarray(xs, dtype=float)
    y = np.asarray(ys, dtype=float)
    if len(x) < 2 or np.ptp(x) == 0:
        return float(np.median(y)), 0.0
    b, a = np.polyfit(x, y, 1, w=1.0 / y if relative else None)
    return float(a), float(b)


def fit_overheads(kernels: Sequence[float], residual_s: Sequence[float]) -> tuple[float, float]:
    """Per-kernel launch overhead and per-step host overhead from whole-step residuals.

    Args:
        kernels: kernels each probe step launches.
        residual_s: its measured time less the modelled work of its ops.

    Returns:
        (launch_overhead, step_overhead), both ≥ 0: the slope and intercept of the line.
    """
    a, b = fit_line(kernels, residual_s)
    if b <= 0:  # no slope in the data: all of it is per step
        return 0.0, max(float(np.median(residual_s)), 0.0)
    if a < 0:  # a line through the origin instead
        k = np.asarray(kernels, dtype=float)
        return float(np.dot(k, residual_s) / np.dot(k, k)), 0.0
    return b, a


def fit_alpha_beta(nbytes: Sequence[float], seconds: Sequence[float]) -> tuple[float, float]:
    """Latency α and bandwidth β of `t = α + bytes/β` (α ≥ 0), fitted on relative errors: sizes
    span decades (1 KiB to 32 MiB), and a plain fit let the largest transfers' noise set α (a
    loaded host's profile measured 0 µs per gloo message, which then cost nothing in `hetc evaluate`)."""
    a, b = fit_line(nbytes, seconds, relative=True)
    if b <= 0:
        raise ValueError("transfer times do not grow with size")
    return max(a, 0.0), 1.0 / b
