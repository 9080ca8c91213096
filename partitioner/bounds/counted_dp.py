"""price_dp.free_dp with devices counted per type: the least price of a padded chain whose bottleneck
is at most R and which takes at most N_t devices of each counted type t (fitting.py).

A state is (stages, unit where the chain ends, devices taken of each counted type): the counts are
one mixed-radix index c = Σ_t c_t · stride_t over the counted types (digit c_t ≤ N_t), and a stage of
kind k adds tp_k devices to its type's digit (none where the type is not counted). G_s[c][v], the least
price of s padded stages ending exactly at v with counts c, is nondecreasing in v ≥ 1 for each c as in
free_dp (cutting a chain at v and emptying its later stages keeps its kinds, so its counts), so one
lookup per stage and kind stays exact: G_s[c][v] = min_k price_k + G_{s−1}[c − inc_k][max(u0[k, v], 1)].
Every real chain within the counts is a padded one with its own counts, so the least price over all c
is a lower bound on theirs; a padded chain less its empty stages takes no more devices of any type.
A digit may count a group of types together (`Counts`): the same DP over Σ_t∈g d_t ≤ Σ_t∈g N_t.
"""

from __future__ import annotations

import copy
from typing import Any

import numpy as np

__all__ = ["Counts", "Group", "counted_dp", "counted_chain", "groups_of"]

INF = np.inf
SAME = 1e-9  # relative tolerance when backtracking matches a layer's value


Group = tuple[int, ...]  # types counted together: their devices summed within the sum of their counts


def groups_of(counted: tuple[int | Group, ...]) -> tuple[Group, ...]:
    """Counted types as groups (a lone type: its own group)."""
    return tuple(g if isinstance(g, tuple) else (g,) for g in counted)


class Counts:
    """The count index of a set of counted types: each kind's step in it, and where it has no room. A digit
    counts one group of types: Σ_t∈g d_t ≤ Σ_t∈g N_t, which every chain within each N_t keeps (a relaxation
    of counting them apart, with Σ N_t + 1 states in place of Π (N_t + 1))."""

    def __init__(self, counted: tuple[int | Group, ...], limit: np.ndarray, type_of: np.ndarray, tp: np.ndarray) -> None:
        """Args:
        counted: the types counted (indices into the fleet's types), or groups of types counted together.
        limit: [T] each type's devices.
        type_of, tp: [K] each kind's type and devices.
        """
        groups = groups_of(counted)
        radix = [int(sum(int(limit[t]) for t in g)) + 1 for g in groups]
        self.size = int(np.prod(radix)) if radix else 1
        stride = np.cumprod([1] + radix[:-1]) if radix else np.zeros(0, dtype=np.int64)
        digits = [(np.arange(self.size) // s) % r for s, r in zip(stride, radix)]  # [groups][C]
        where = {t: i for i, g in enumerate(groups) for t in g}
        K = len(type_of)
        self.inc = np.zeros(K, dtype=np.int64)  # each kind's step in the index
        self.src = np.tile(np.arange(self.size), (K, 1))  # [K, C]: the index before a stage of kind k, −1: no room
        for k in range(K):
            i = where.get(int(type_of[k]))
            if i is None:
                continue
            self.inc[k] = int(tp[k]) * int(stride[i])
            self.src[k] = np.where(digits[i] >= tp[k], np.arange(self.size) - self.inc[k], -1)

    def of(self, sel: np.ndarray) -> "Counts":
        """The same index over the kinds `sel` (indices into this one's kinds)."""
        out = copy.copy(self)
        out.inc, out.src = self.inc[sel], self.src[sel]
        return out


def counted_dp(u0: np.ndarray, pk: np.ndarray, counts: Counts, lo: int, hi: int, cap: np.ndarray | None = None, keep: bool = False):
    """free_dp's padded chains of lo … hi stages within the counts: per row, (a lower bound on f, equal to
    f where f < cap; the least price found, inf where none; the work in DP cells), and with `keep` the
    layers G_s [s][C, L, U+1] instead of the first two.

    Args:
        u0: [K, L, U+1] first starts (price_dp's module).
        pk: [K] each kind's price.
        counts: the counted types' index (`Counts` over the same K kinds).
        cap: per row, the price above which the caller needs no more than that it is above.
    """
    K, L, U1 = u0.shape
    U, C = U1 - 1, counts.size
    p = pk[:, None, None, None]
    pos = (np.arange(L)[:, None] * U1 + np.maximum(u0, 1)).reshape(K, 1, L * U1)  # into G [C + 1, L·(U+1)]
    src = np.where(counts.src < 0, C, counts.src)[:, :, None]  # row C of the padded G: no chain
    opens = (u0 == 0) & (np.arange(U1) >= 1)
    G = np.full((C, L, U1), INF)
    for k in range(K):  # one stage from unit 0, not empty, at its own count
        np.minimum(G[counts.inc[k]], np.where(opens[k], pk[k], INF), out=G[counts.inc[k]])
    best = G[:, :, U].min(axis=0) if lo <= 1 else np.full(L, INF)
    layers: Any = [G] if keep else None
    work = 0.0
    for s in range(2, hi + 1):
        flat = np.vstack([G.reshape(C, L * U1), np.full((1, L * U1), INF)])
        G = (flat[src, pos].reshape(K, C, L, U1) + p).min(axis=0)
        G[:, :, 0] = INF  # the first stage holds unit 0
        work += K * C * L * U1
        if keep:
            layers.append(G)
        if s >= lo:
            np.minimum(best, G[:, :, U].min(axis=0), out=best)
        low1 = G[:, :, 1].min(axis=0)  # nondecreasing in v ≥ 1 for each count: no longer chain below the cap
        if cap is not None and s < hi and not (low1 < cap).any():
            return np.where(np.isfinite(low1), np.minimum(best, cap), best), best, work
    return (layers, work) if keep else (best, best, work)


def counted_chain(u0: np.ndarray, pk: np.ndarray, kinds: np.ndarray, counts: Counts, lo: int, hi: int, f: float) -> tuple[tuple, float]:
    """A real chain (kinds, cuts) of at most hi stages within the counts, price ≤ f, from one row of
    counted_dp (u0 [K, 1, U+1]), and the work it took."""
    layers, work = counted_dp(u0, pk, counts, lo, hi, keep=True)
    U = u0.shape[2] - 1
    within = f * (1 + 1e-12) + 1e-12
    n = next(s for s in range(max(1, lo), len(layers) + 1) if layers[s - 1][:, 0, U].min() <= within)
    c, v = int(np.argmin(layers[n - 1][:, 0, U])), U
    chain, cuts = [], [U]
    for s in range(n, 0, -1):
        want = layers[s - 1][c, 0, v]
        for k in range(len(pk)):
            start = int(u0[k, 0, v]) if s == 1 else max(int(u0[k, 0, v]), 1)
            before = int(counts.src[k, c])
            if s == 1:
                have = pk[k] if start == 0 and v >= 1 and counts.inc[k] == c else INF
            else:
                have = layers[s - 2][before, 0, start] + pk[k] if before >= 0 else INF
            if abs(have - want) <= SAME * max(1.0, abs(want)):
                break
        else:
            raise AssertionError("no predecessor found while backtracking a counted chain")
        if start < v:  # an empty stage is padding: the real chain skips it
            chain.append(int(kinds[k]))
            cuts.append(start)
        v, c = start, before
    return (tuple(reversed(chain)), tuple(reversed(cuts))), work
