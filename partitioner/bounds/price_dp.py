"""The dynamic programs behind pricing (pricing.py): the least price of a chain of stages whose
bottleneck is at most R, for several R at once, and a chain that attains it.

Both take u0 [K, L, U+1]: for each stage kind k, row (value of R) and unit v, the first start
from which the kind holds units [start, v) within R and memory (a stage holds at least as much
from a later start: shrinking a stage never adds busy time or memory).

`free_dp`, for rows where every link between two types carries its activations within R (almost
all of them: links are rarely the bottleneck): chains may pad with empty stages after the first
(each still paid for). Then G_s[v], the least price of s stages whose last ends exactly at v, is
nondecreasing in v ≥ 1 — a chain that ends at w > v is cut where it crosses v and its later
stages emptied, at the same price — so a stage of kind k ending at v is best started at
max(u0[k, v], 1), where the range minimum of the exact DP becomes one lookup:
G_s[v] = min_k price_k + G_{s−1}[max(u0[k, v], 1)]. Every chain of s stages is a padded one, so
its least price is a lower bound on theirs, and a padded chain less its empty stages is a real
chain of no more stages that costs less: bounds stay valid and what the DP finds is attained.

`typed_dp`, for the other rows: the exact DP over (stages, type of the last stage, the unit where
the chain ends exactly), a link allowed between two types only within R, each step a range
minimum over u in [u0, v) (a sparse table over u).

Both may restrict the first and the last stage to some kinds (`first`, `last`: pools priced per type
of the stage their KV leaves or enters by, colgen.py's KV routes). The last stage is then a real one
(no padding after it), and free_dp's least price over chains ending on a `last` kind stays a lower
bound on the real chains': a real chain's prefix ends at some w ≥ u0, where G is no less.
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["free_dp", "typed_dp", "free_chain", "typed_chain"]

INF = np.inf
SAME = 1e-9  # relative tolerance when backtracking matches a layer's value


def free_dp(
    u0: np.ndarray,
    pk: np.ndarray,
    lo: int,
    hi: int,
    cap: np.ndarray | None = None,
    keep: bool = False,
    first: np.ndarray | None = None,
    last: np.ndarray | None = None,
):
    """Padded chains of lo … hi stages (see the module): per row, (a lower bound on f, equal to f where
    f < cap; the least price found, inf where none; the work in DP cells), and with `keep` the
    layers G_s [s][L, U+1] instead of the first two.

    Args:
        u0: [K, L, U+1] first starts.
        pk: [K] each kind's price.
        cap: per row, the price above which the caller needs no more than that it is above.
        first, last: [K] the kinds the first (last) stage may be of; None: any.
    """
    K, L, U1 = u0.shape
    U = U1 - 1
    p = pk[:, None, None]
    pos = (np.arange(L)[None, :, None] * U1 + np.maximum(u0, 1)).ravel()  # into G [L, U+1]
    opens = (u0 == 0) & (np.arange(U1) >= 1) & (True if first is None else first[:, None, None])
    G = np.where(opens, p, INF).min(axis=0)  # one stage from unit 0, not empty
    best = _ending(G, u0, pk, opens, last, 1) if lo <= 1 else np.full(L, INF)
    layers: Any = [G] if keep else None
    work = 0.0
    for s in range(2, hi + 1):
        ends = _ending(G, u0, pk, opens, last, s) if last is not None and s >= lo else None
        G = (G.ravel().take(pos).reshape(K, L, U1) + p).min(axis=0)
        G[:, 0] = INF  # the first stage holds unit 0
        work += K * L * U1
        if keep:
            layers.append(G)
        if s >= lo:
            np.minimum(best, G[:, U] if ends is None else ends, out=best)
        # G is nondecreasing in v ≥ 1: a row whose G[1] reaches its cap has no longer chain below it
        if cap is not None and s < hi and not (G[:, 1] < cap).any():
            alive = np.isfinite(G[:, 1])
            return np.where(alive, np.minimum(best, cap), best), best, work
    return (layers, work) if keep else (best, best, work)


def _ending(G: np.ndarray, u0: np.ndarray, pk: np.ndarray, opens: np.ndarray, last: np.ndarray | None, s: int) -> np.ndarray:
    """Per row, the least price of s padded stages ending at U whose last is a real stage of a `last`
    kind, from G, the layer of s − 1 stages (s = 1: the stages `opens` allows); G[:, U] where any kind may end."""
    U = G.shape[1] - 1
    if last is None:
        return G[:, U].copy()
    if s == 1:
        return np.where(opens[:, :, U] & last[:, None], pk[:, None], INF).min(axis=0)
    end = u0[:, :, U]  # [K, L]: a real last stage of kind k starts at or after it
    prev = G[np.arange(G.shape[0])[None, :], np.maximum(end, 1)]
    return np.where(last[:, None] & (end < U), prev + pk[:, None], INF).min(axis=0)


def free_chain(
    u0: np.ndarray, pk: np.ndarray, kinds: np.ndarray, lo: int, hi: int, f: float, first: np.ndarray | None = None, last: np.ndarray | None = None
) -> tuple[tuple, float]:
    """A real chain (kinds, cuts) of at most hi stages, price ≤ f, from one row of free_dp (u0 [K, 1, U+1];
    `first`, `last` as there), and the work it took."""
    layers, work = free_dp(u0, pk, lo, hi, keep=True, first=first)
    U = u0.shape[2] - 1
    opens = (u0 == 0) & (np.arange(U + 1) >= 1) & (True if first is None else first[:, None, None])
    within = f * (1 + 1e-12) + 1e-12
    v, chain, cuts = U, [], [U]
    if last is None:
        n = next(s for s in range(max(1, lo), len(layers) + 1) if layers[s - 1][0, U] <= within)
    else:  # the last stage first: a real one of a `last` kind, then the padded chain before it
        n = next(s for s in range(max(1, lo), len(layers) + 1) if _ending(layers[s - 2] if s > 1 else layers[0], u0, pk, opens, last, s)[0] <= within)
        for k in np.nonzero(last)[0].tolist():
            start = int(u0[k, 0, U]) if n == 1 else max(int(u0[k, 0, U]), 1)
            have = (pk[k] if opens[k, 0, U] else INF) if n == 1 else (layers[n - 2][0, start] + pk[k] if start < U else INF)
            if have <= within:
                break
        else:
            raise AssertionError("no last stage found while backtracking a priced chain")
        chain.append(int(kinds[k]))
        cuts.append(start)
        v, n = start, n - 1
    for s in range(n, 0, -1):
        want = layers[s - 1][0, v]
        for k in range(len(pk)):
            start = int(u0[k, 0, v]) if s == 1 else max(int(u0[k, 0, v]), 1)
            have = (pk[k] if opens[k, 0, v] else INF) if s == 1 and start == 0 else layers[s - 2][0, start] + pk[k] if s > 1 else INF
            if abs(have - want) <= SAME * max(1.0, abs(want)):
                break
        else:
            raise AssertionError("no predecessor found while backtracking a priced chain")
        if start < v:  # an empty stage is padding: the real chain skips it
            chain.append(int(kinds[k]))
            cuts.append(start)
        v = start
    return (tuple(reversed(chain)), tuple(reversed(cuts))), work


def typed_dp(
    u0: np.ndarray,
    pk: np.ndarray,
    type_of: np.ndarray,
    T: int,
    link_ok: np.ndarray,
    lo: int,
    hi: int,
    cap: np.ndarray | None = None,
    keep: bool = False,
    first: np.ndarray | None = None,
    last: np.ndarray | None = None,
):
    """The exact DP (see the module) over chains of lo … hi stages: as free_dp, with link_ok [L, T', T]
    saying which type may feed which at each row; with `keep`, (layers [s][L, T, U+1], work). `first`,
    `last`: [T] the types the first (last) stage may be of; None: any."""
    K, L, U1 = u0.shape
    U = U1 - 1
    per = [np.nonzero(type_of == t)[0] for t in range(T)]
    slot = np.full((T, max(len(x) for x in per)), -1, dtype=np.int64)  # [T, S]: each type's kinds, −1 where fewer
    for t, x in enumerate(per):
        slot[t, : len(x)] = x
    S = slot.shape[1]
    u0p = np.where(slot[:, :, None, None] >= 0, u0[np.maximum(slot, 0)], U + 1)  # [T, S, L, U+1]
    p = np.where(slot >= 0, pk[np.maximum(slot, 0)], INF)[:, :, None, None]
    v = np.arange(U1)
    # a stage of a kind ends at v from a start in [u0, v − 1]: a range minimum, by the sparse table's
    # level lv over [a, a + 2^lv) ∪ [b, b + 2^lv)
    ok = u0p <= v - 1
    lv = np.floor(np.log2(np.where(ok, v - u0p, 1))).astype(np.int64)
    a = np.where(ok, u0p, 0)
    b = np.where(ok, v - (1 << lv), 0)
    levels = int(lv.max()) + 1
    tt, rows = np.arange(T)[:, None, None, None], np.arange(L)[None, None, :, None]
    at_a = (((lv * T + tt) * L + rows) * U1 + a).ravel()  # flat positions in the sparse table [levels, T, L, U+1]
    at_b = (((lv * T + tt) * L + rows) * U1 + b).ravel()
    H = np.where((u0p == 0) & (v >= 1), p, INF).min(axis=1)  # [T, L, U+1]: one stage from unit 0
    if first is not None:
        H[~first] = INF
    ends = slice(None) if last is None else np.nonzero(last)[0]
    best = H[ends, :, U].min(axis=0) if lo <= 1 else np.full(L, INF)
    layers: Any = [H.transpose(1, 0, 2)] if keep else None
    St = np.full((levels, T, L, U1), INF)
    flat = St.reshape(-1)
    work = 0.0
    for s in range(2, hi + 1):
        for t in range(T):  # the cheapest chain so far whose last type may feed t
            St[0, t] = np.where(link_ok[:, :, t].T[:, :, None], H, INF).min(axis=0)
        for k in range(1, levels):
            h = 1 << (k - 1)
            np.minimum(St[k - 1, ..., : U1 - h], St[k - 1, ..., h:], out=St[k, ..., : U1 - h])
        got = np.minimum(flat.take(at_a), flat.take(at_b)).reshape(ok.shape)
        H = np.where(ok, got + p, INF).min(axis=1)
        work += L * T * S * U1 * levels
        if keep:
            layers.append(H.transpose(1, 0, 2))
        if s >= lo:
            best = np.minimum(best, H[ends, :, U].min(axis=0))
        if cap is not None and s < hi and not (H < cap[None, :, None]).any():
            # prices only grow with more stages: no longer chain costs less than its row's cap (and
            # none at all extends a row with no chain so far)
            return np.where(np.isfinite(H).any(axis=(0, 2)), np.minimum(best, cap), best), best, work
    return (layers, work) if keep else (best, best, work)


def typed_chain(
    u0: np.ndarray,
    pk: np.ndarray,
    kinds: np.ndarray,
    type_of: np.ndarray,
    T: int,
    link_ok: np.ndarray,
    lo: int,
    hi: int,
    f: float,
    first: np.ndarray | None = None,
    last: np.ndarray | None = None,
) -> tuple[tuple, float]:
    """A chain (kinds, cuts) of lo … hi stages with price f, from one row of typed_dp (u0 [K, 1, U+1],
    link_ok [T', T]; `first`, `last` as there), and the work it took."""
    layers, work = typed_dp(u0, pk, type_of, T, link_ok[None], lo, hi, keep=True, first=first)
    U = u0.shape[2] - 1
    ends = np.where(np.ones(T, dtype=bool) if last is None else last, 0.0, INF)  # a last stage of another type: no chain
    n = next(s for s in range(max(1, lo), len(layers) + 1) if (layers[s - 1][0, :, U] + ends).min() <= f * (1 + 1e-12) + 1e-12)
    t = int(np.argmin(layers[n - 1][0, :, U] + ends))
    v, chain, cuts = U, [], [U]
    for s in range(n, 0, -1):
        want = layers[s - 1][0, t, v]
        done = False
        for i in np.nonzero(type_of == t)[0]:
            start = int(u0[i, 0, v])
            if s == 1:
                if start == 0 and abs(pk[i] - want) <= SAME * max(1.0, abs(want)):
                    chain.append(int(kinds[i]))
                    done = True
                    break
                continue
            if start > v - 1:
                continue
            prev = layers[s - 2][0][:, start:v]  # [T', starts]
            prev = np.where(link_ok[:, t, None], prev, INF) + pk[i]
            j = np.argwhere(np.abs(prev - want) <= SAME * max(1.0, abs(want)))
            if len(j):
                t2, u = int(j[0, 0]), start + int(j[0, 1])
                chain.append(int(kinds[i]))
                cuts.append(u)
                t, v, done = t2, u, True
                break
        if not done:
            raise AssertionError("no predecessor found while backtracking a priced chain")
    cuts.append(0)
    return (tuple(reversed(chain)), tuple(reversed(cuts))), work
