"""Pricing that respects how many devices of each type exist.

The stage-price DP in colgen.py does not count devices, so its best pipeline may take,
say, 15 of 4 A100s. This DP does: its state is (type of the last stage, devices of each
type used so far), and its value the furthest unit prefix such a chain covers (covering
more is never worse: a stage reaches at least as far from a later start). With prices per
device, a pipeline's price is a function of its counts alone, so the cheapest full cover
at a bottleneck level R is the cheapest count vector whose prefix reaches the last unit.

Relaxations (every real pipeline is still covered): tp-group prices are dropped (they are
≥ 0), and a link between two types is allowed when its cheapest cut position is.
"""

from __future__ import annotations

import numpy as np

__all__ = ["covers", "cheapest", "backtrack"]


def covers(reach: np.ndarray, allowed: np.ndarray, type_of: np.ndarray, tp: np.ndarray,
           devices: np.ndarray) -> np.ndarray:
    """E[r, t, *c]: the furthest prefix covered by a chain whose last stage has type t and
    which uses c_k devices of each type k (−1 where none).

    Every stage adds devices, so count vectors are settled in order of their total: one
    sweep, each vector extended once.

    Args:
        reach: [nR, G, U] furthest end of a stage of kind g starting at unit i.
        allowed: [nR, T', T] whether some link from type T' into type T fits within R.
        type_of, tp: per kind.
        devices: per type, how many exist.
    """
    nR, G, U = reach.shape
    T = len(devices)
    dims = tuple(int(n) + 1 for n in devices)
    cells = np.indices(dims).reshape(T, -1)  # [T, cells]: the count vector of each cell
    stride = np.array([int(np.prod(dims[k + 1:])) for k in range(T)])
    total = cells.sum(axis=0)
    E = np.full((nR, T, cells.shape[1]), -1, dtype=np.int64)
    for g in range(G):  # first stages: from unit 0
        t, k = int(type_of[g]), int(tp[g])
        if k < dims[t]:
            E[:, t, k * stride[t]] = np.maximum(E[:, t, k * stride[t]], reach[:, g, 0])
    for d in range(1, int(total.max()) + 1):
        here = np.nonzero(total == d)[0]
        for t2 in range(T):
            src = E[:, t2, here]  # [nR, cells of this total]
            live = (src > 0) & (src < U)
            if not live.any():
                continue
            got = np.take_along_axis(reach, np.clip(src, 0, U - 1)[:, None, :].repeat(G, axis=1), axis=2)
            for g in range(G):
                t, k = int(type_of[g]), int(tp[g])
                fits = cells[t, here] + k < dims[t]
                if not fits.any():
                    continue
                dst = here[fits] + k * stride[t]
                val = got[:, g, fits]
                val = np.where(live[:, fits] & allowed[:, t2, t, None] & (val > src[:, fits]), val, -1)
                E[:, t, dst] = np.maximum(E[:, t, dst], val)
    return E.reshape(nR, T, *dims)


def cheapest(E: np.ndarray, U: int, price: np.ndarray) -> tuple[np.ndarray, list]:
    """Per R: the least price of a full cover (inf if none) and its (t, counts)."""
    nR, T = E.shape[:2]
    dims = E.shape[2:]
    grid = sum(np.arange(d).reshape([-1 if a == k else 1 for a in range(T)]) * price[k]
               for k, d in enumerate(dims))
    cost = np.where(E >= U, grid[None, None], np.inf).reshape(nR, -1)
    best = cost.argmin(axis=1)
    where = [(int(b // np.prod(dims)), np.unravel_index(int(b % np.prod(dims)), dims)) for b in best]
    return cost.min(axis=1), where


def backtrack(E: np.ndarray, reach: np.ndarray, allowed: np.ndarray, type_of: np.ndarray, tp: np.ndarray,
              t: int, counts: tuple, U: int) -> tuple[tuple[int, ...], tuple[int, ...]] | None:
    """Kinds and cuts of a chain reaching unit U that ends in type t with `counts` (one R: E is [T, *c])."""
    kinds, cuts, target, c = [], [U], U, list(counts)
    while True:
        first = next((g for g in range(len(type_of)) if type_of[g] == t and tp[g] == sum(c) and c[t] == tp[g]
                      and reach[g, 0] >= target), None)
        if first is not None:
            kinds.append(first)
            cuts.append(0)
            break
        step = None
        for g in (g for g in range(len(type_of)) if type_of[g] == t and tp[g] <= c[t]):
            prev = list(c)
            prev[t] -= int(tp[g])
            for t2 in range(len(allowed)):
                i = int(E[(t2, *prev)])
                if 0 < i < target and allowed[t2, t] and reach[g, i] >= target:
                    step = (g, i, t2, prev)
                    break
            if step:
                break
        if step is None:
            return None
        g, i, t, c = step
        kinds.append(g)
        cuts.append(i)
        target = i
    return tuple(reversed(kinds)), tuple(reversed(cuts))
