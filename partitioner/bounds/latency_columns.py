"""Whole-pipeline columns of the latency bound with a floor (latency_bound.tpot_floor_bound), for
s > 1 seats per micro-step.

A pipeline of n stages at s > 1 seats per micro-step runs k ≥ n micro-steps per pass: s = B/k > 1
gives B > k ≥ m = min(n, B), so m = n (simulate.Round.of). Its TPOT ≥ k·a_i ≥ n·a_i for every
stage i, and its tok/s ≤ hi·share / a_i (latency_bound: a_i its stage's mean micro-step, share at
the interval's lo). With a_i ≥ least_g[k_i] (the interval's least micro-step of k_i units of kind
g, any position) and A = max_i least_{g_i}[k_i], one of the interval's least values:
- n·A ≤ TPOT ≤ T, so n ≤ N = ⌊T/A⌋;
- every stage holds k_i ≤ K_g(A), the most units of kind g whose least is ≤ A, so Σ_i K_{g_i}(A) ≥ U;
- tok/s ≤ hi·share / A.
So the pipeline's groups per kind, v, lie in the cone Σ_g v_g (K_g(A) − U/N) ≥ 0 (a "block", one
per interval and A), and its tok/s is at most c·Σ_g v_g K_g(A), c = hi·share / (A·U). A cone of one
inequality in v ≥ 0 is spanned by its extreme rays: one group of a kind with K_g ≥ U/N (tok/s
c·K_g, `Columns.single`), and a pair g, h with K_g < U/N ≤ K_h mixed to meet the row (fraction θ of
a group of g, 1 − θ of h, tok/s c·U/N). Pairs are binned by θ into BINS columns that dominate
their bin (θ's lower edge of g, 1 − its upper edge of h, the bin's most tok/s): each side loses at
most 1/BINS of a group.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["Block", "Columns", "columns"]

BINS = 200


@dataclass(frozen=True, slots=True)
class Block:
    """One seats interval's candidate bottlenecks A (ascending: every finite least value) and the
    most units K[g, j] of kind g whose least micro-step is ≤ A[j]; `rate` = hi · share."""

    rate: float
    a: np.ndarray
    k: np.ndarray

    @staticmethod
    def of(least: list[np.ndarray], rate: float) -> "Block":
        """Args:
        least: per kind, [k] the interval's least micro-step of k units (inf: none fits; [0] unused).
        rate: hi · share of the interval (tok/s per group = rate / a)."""
        ups = []
        for a in least:  # the least from k on: K(A) = max k with least[k] ≤ A, by one search
            ups.append(np.minimum.accumulate(a[1:][::-1])[::-1])
        up = np.array(ups)
        values = np.unique(up[np.isfinite(up)])
        k = np.array([np.searchsorted(m, values, side="right") for m in up], dtype=float).reshape(len(up), -1)
        return Block(rate, values, k)


@dataclass(frozen=True, slots=True)
class Columns:
    """At one T: `single`[g] the most tok/s one group of kind g gives alone (0: none within T);
    `pairs` rows (g, h, groups of g, groups of h, tok/s)."""

    single: np.ndarray
    pairs: np.ndarray


def columns(blocks: list[Block], u: int, t: float) -> Columns:
    """The extreme rays of every block's cone at TPOT ≤ t (module docstring), pairs binned.

    Args:
        blocks: the intervals' blocks (s > 1 only: the argument needs k ≥ n).
        u: the model's units.
        t: seconds, the TPOT every pipeline keeps to.
    """
    g = blocks[0].k.shape[0]
    single = np.zeros(g)
    best = np.zeros(g * g * BINS)
    for b in blocks:
        j = int(np.searchsorted(b.a, t, side="right"))
        if not j:
            continue
        a, k = b.a[:j], np.minimum(b.k[:, :j], u)
        n = np.floor(t / a)
        q = u / n
        d = k - q  # the block's row, per kind
        ok = d >= 0
        if ok.any():
            single = np.maximum(single, np.max(np.where(ok, b.rate * k / (a * u), 0.0), axis=1))
        low, high = ~ok, ok & (d > 0)
        some = np.nonzero(low.any(axis=0) & high.any(axis=0))[0]  # the A with a pair at all
        gi, hi, ji = np.nonzero(low[:, None, some] & high[None, :, some])
        if not len(ji):
            continue
        ji = some[ji]
        dg, dh = -d[gi, ji], d[hi, ji]
        bin_ = np.minimum((dh / (dh + dg) * BINS).astype(int), BINS - 1)
        np.maximum.at(best, (gi * g + hi) * BINS + bin_, b.rate / (a[ji] * n[ji]))
    at = np.nonzero(best)[0]
    gh, bin_ = np.divmod(at, BINS)
    pairs = np.column_stack([gh // g, gh % g, bin_ / BINS, 1 - (bin_ + 1) / BINS, best[at]])
    return Columns(single, pairs)
