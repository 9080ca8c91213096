"""Pricing for column generation (colgen.py): the chain of best reduced cost at one operating point, exactly.

For a key (aggregate.Key: a phase, a batch interval, a class of pipeline lengths), a price per
stage kind (its devices' duals, plus its tp-group dual) and the worth of one output tok/s (1
for pipelines, a feed row's dual for pools), a chain's reduced cost is worth·rate/R − Σ prices,
R its bottleneck as refine.py's chain DP counts it (busiest stage at the key's costs, memory at
its first batch, links at their cheapest cut between two types). Device counts are not
counted: the master LP does that.

f(R), the least price of a chain of the class whose bottleneck is at most R, is a dynamic
program over (stages, type of the last stage, the unit where the chain ends exactly): a stage
of kind g ends at v when it starts at some u in [u0(g, v), v), u0 the first start from which g
reaches v within R and memory (a stage reaches at least as far from a later start), so each
step is a range minimum (a sparse table over u). The rows of the DP are values of R, computed
together. Every chain's R is one of the stage and link times that can occur (`cand`); over an
index interval (i, j] of them no chain does better than worth·rate/cand[i+1] − f(cand[j]), and
bisection of the intervals whose estimate beats a threshold finds the best exactly.

Before any DP, W = Σ_u min_g price_g·c_g(u) (c_g(u): the unit's busy seconds on kind g, inf
where g can't hold it) bounds every chain: a stage busy at most R is worth at least its price ×
its units' busy / R, so Σ prices ≥ W / R and the reduced cost is at most (worth·rate − W) / R,
at most that over the least bottleneck any chain can have (every unit sits in some stage).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from hetc.partitioner.aggregate import Key
from hetc.partitioner.refine import Chain
from hetc.partitioner.stage_costs import SLACK, StageCosts

__all__ = ["KeyPricer", "Priced"]

INF = np.inf
FIRST = 5  # R values of the first DP round: quantiles of the candidates


@dataclass(frozen=True, slots=True)
class Priced:
    upper: float  # no chain of the key has a larger reduced cost
    found: float  # the reduced cost of `chain` (−inf: none found)
    chain: Chain | None
    R: float  # its bottleneck
    work: float  # DP cells evaluated


class KeyPricer:
    """What pricing one key needs that does not depend on the prices: its costs, the kinds that
    serve it, the candidate bottlenecks."""

    def __init__(self, costs: StageCosts, key: Key, tp_groups: bool) -> None:
        self.costs, self.key = costs, key
        self.rate = float(key.rate(costs.tables.wl.output_len))
        self.case = costs.case(key.phase, key.top, key.m, fit=key.batch)
        case = self.case
        U = costs.u
        self.kinds = np.array([] if case is None else
                              [g for g in range(len(costs.kinds)) if np.isfinite(case.P[g, -1]) and (tp_groups or costs.tp[g] == 1)],
                              dtype=np.int64)
        if not len(self.kinds):
            self.cand = np.zeros(0)
            return
        assert case is not None
        kk = self.kinds
        holds = case.jfit[kk] > np.arange(U)  # kind g can hold unit u alone
        self.unit = np.where(holds, np.diff(case.P[kk], axis=1), INF)  # [K, U]
        alone = np.where(holds, self.unit + case.over[kk][:, None], INF).min(axis=0)
        self.least = float(alone.max())  # every unit sits in some stage: no chain's bottleneck is below this
        cand = [case.cheapest.ravel()]
        for g in kk:
            ii, jj = costs.ranges(case, int(g))
            cand.append(case.P[g][jj] - case.P[g][ii] + case.over[g])
        cand = np.unique(np.concatenate(cand))
        self.cand = cand[np.isfinite(cand) & (cand >= self.least * (1 - 1e-12))]
        self.type_of = costs.type_of[kk]
        self.T = len(costs.types)
        per = [np.nonzero(self.type_of == t)[0] for t in range(self.T)]
        self.slots = np.full((self.T, max(len(p) for p in per)), -1, dtype=np.int64)
        for t, p in enumerate(per):
            self.slots[t, : len(p)] = p

    def weight(self, prices: np.ndarray) -> float:
        """W: no chain's price is below W / R."""
        finite = np.isfinite(self.unit)
        return float(np.where(finite, prices[self.kinds][:, None] * np.where(finite, self.unit, 0.0), INF).min(axis=0).sum())

    def certificate(self, prices: np.ndarray, worth: float) -> float:
        """An upper bound on every chain's reduced cost, from W (no DP)."""
        if not len(self.cand):
            return -INF
        W = self.weight(prices)
        return (worth * self.rate - W) / (self.least if worth * self.rate > W else self.cand[-1])

    def price(self, prices: np.ndarray, worth: float, beat: float, tol: float) -> Priced:
        """The best reduced cost of the key's chains where it exceeds `beat` (then `found` is
        within `tol` of it, and `upper` too); otherwise an `upper` ≤ beat + tol.

        Args:
            prices: per stage kind (all of costs.kinds).
            worth: the value of one output tok/s of this phase.
        """
        cert = self.certificate(prices, worth)
        if cert <= beat + tol:
            return Priced(cert, -INF, None, 0.0, 0.0)
        cand, top = self.cand, worth * self.rate
        spare = top - self.weight(prices)  # no chain of bottleneck R does better than spare / R
        N = len(cand)
        f: dict[int, float] = {}
        work = 0.0

        def evaluate(idx: list[int]) -> None:
            nonlocal work
            idx = [i for i in dict.fromkeys(idx) if i not in f]
            if idx:  # a chain priced above top / cand[0] − beat pays less than beat at any R
                best, w = self._dp(cand[idx], prices, cap=top / cand[0] - beat if np.isfinite(beat) else INF)
                work += w
                f.update(zip(idx, best))

        evaluate(sorted(set(np.linspace(0, N - 1, min(N, FIRST)).astype(int).tolist())))
        found, at = -INF, -1
        while True:
            pts = sorted(f)
            for i in pts:  # a point: some chain attains it (its bottleneck ≤ cand[i], price f)
                if top / cand[i] - f[i] > found:
                    found, at = top / cand[i] - f[i], i
            est = [(min(top / cand[a + 1] - f[b], spare / cand[a + 1 if spare > 0 else b]), a, b)
                   for a, b in zip(pts, pts[1:]) if b > a + 1]  # pts holds 0 and N − 1
            live = [(a, b) for e, a, b in est if e > max(found, beat) + tol]
            upper = max([found] + [e for e, _, _ in est])
            if not live:
                break
            evaluate([(a + b) // 2 for a, b in live])
        if np.isfinite(beat):  # what the DP left out pays at most beat
            upper = max(upper, beat)
        if at < 0 or found <= -INF:
            return Priced(min(upper, cert), -INF, None, 0.0, work)
        chain, w = self._backtrack(float(cand[at]), prices, f[at])
        return Priced(min(max(upper, found), cert), found, chain, float(cand[at]), work + w)

    def _reach_u0(self, Rs: np.ndarray) -> np.ndarray:
        """u0 [K, L, U+1]: the first start from which each kind reaches each end within each R and
        memory (reach as costs.reach counts it, every kind's prefix sums searched at once)."""
        costs, case, kk = self.costs, self.case, self.kinds
        assert case is not None
        U, L, K = costs.u, len(Rs), len(kk)
        if not hasattr(self, "_flat"):  # every kind's prefix sums, shifted apart into one sorted array
            P = case.P[kk]
            self._shift = np.r_[0.0, np.cumsum(P[:, -1] + 1.0)[:-1]][:, None]
            self._flat = (P + self._shift).ravel()
        P = case.P[kk]
        x = np.clip(P[:, None, :U] + (Rs * (1 + SLACK))[None, :, None] - case.over[kk][:, None, None], 0.0, P[:, -1:, None])
        j = np.searchsorted(self._flat, (x + self._shift[:, :, None]).ravel(), side="right").reshape(K, L, U) - 1
        j -= (np.arange(K) * (U + 1))[:, None, None]
        reach = np.maximum(np.minimum(j, case.jfit[kk][:, None, :]), np.arange(U))
        off = np.arange(K * L)[:, None] * (U + 1)  # rows side by side: one sorted array
        flat = (reach.reshape(K * L, U) + off).ravel()
        q = np.arange(U + 1)[None, :] + off
        u0 = np.searchsorted(flat, q.ravel(), side="left").reshape(K * L, U + 1) - np.arange(K * L)[:, None] * U
        return u0.reshape(K, L, U + 1)

    def _dp(self, Rs: np.ndarray, prices: np.ndarray, keep: bool = False, cap: float = INF):
        """f at each R: the least price of a chain of the key's class with bottleneck ≤ R (inf: none; ≥ cap
        where that is all the caller needs to know), and the work (DP cells); with `keep`, every layer too
        (as [L, T, U+1]) and u0."""
        costs, case, key = self.costs, self.case, self.key
        assert case is not None
        U, L, T = costs.u, len(Rs), self.T
        u0 = self._reach_u0(Rs)
        slot = self.slots  # [T, S]: each type's kinds (positions in self.kinds), −1 where it has fewer
        S = slot.shape[1]
        u0p = np.where(slot[:, :, None, None] >= 0, u0[np.maximum(slot, 0)], U + 1)  # [T, S, L, U+1]
        pk = np.where(slot >= 0, prices[self.kinds][np.maximum(slot, 0)], INF)[:, :, None, None]
        link_ok = case.cheapest[None, :, :] <= (Rs * (1 + SLACK))[:, None, None]  # [L, T', T]
        every_link = bool(link_ok.all())
        v = np.arange(U + 1)
        # a stage of a kind ends at v from a start in [u0, v − 1]: a range minimum, by the sparse table's
        # level lv over [a, a + 2^lv) ∪ [b, b + 2^lv)
        ok = u0p <= v - 1
        length = np.where(ok, v - u0p, 1)
        lv = np.floor(np.log2(length)).astype(np.int64)
        a = np.where(ok, u0p, 0)
        b = np.where(ok, v - (1 << lv), 0)
        levels = int(lv.max()) + 1
        tt, rows = np.arange(T)[:, None, None, None], np.arange(L)[None, None, :, None]
        at_a = (((lv * T + tt) * L + rows) * (U + 1) + a).ravel()  # flat positions in the sparse table [levels, T, L, U+1]
        at_b = (((lv * T + tt) * L + rows) * (U + 1) + b).ravel()
        H = np.where((u0p == 0) & (v >= 1), pk, INF).min(axis=1)  # [T, L, U+1]: one stage from unit 0
        best = H[:, :, U].min(axis=0) if key.lo <= 1 else np.full(L, INF)
        layers = [H.transpose(1, 0, 2)] if keep else None
        St = np.full((levels, T, L, U + 1), INF)
        flat = St.reshape(-1)
        work = 0.0
        for s in range(2, min(key.hi, U) + 1):
            if every_link:  # the cheapest chain so far whose last type may feed each type
                St[0] = H.min(axis=0, keepdims=True)
            else:
                for t in range(T):
                    St[0, t] = np.where(link_ok[:, :, t].T[:, :, None], H, INF).min(axis=0)
            for k in range(1, levels):
                h = 1 << (k - 1)
                np.minimum(St[k - 1, ..., : U + 1 - h], St[k - 1, ..., h:], out=St[k, ..., : U + 1 - h])
            got = np.minimum(flat.take(at_a), flat.take(at_b)).reshape(ok.shape)
            H = np.where(ok, got + pk, INF).min(axis=1)
            work += L * T * S * (U + 1)
            if keep:
                layers.append(H.transpose(1, 0, 2))
            if s >= key.lo:
                best = np.minimum(best, H[:, :, U].min(axis=0))
            if not (H < cap).any():  # prices only grow with more stages: no longer chain costs less than cap
                break
        return (best, work, layers, u0) if keep else (best, work)

    def _backtrack(self, R: float, prices: np.ndarray, f: float) -> tuple[Chain, float]:
        """A chain of the key's class with bottleneck ≤ R and price f."""
        best, work, layers, u0 = self._dp(np.array([R]), prices, keep=True)
        kk, U, pk = self.kinds, self.costs.u, prices[self.kinds]
        link_ok = self.case.cheapest <= R * (1 + SLACK)
        n = next(s for s in range(max(1, self.key.lo), len(layers) + 1) if layers[s - 1][0, :, U].min() <= f * (1 + 1e-12) + 1e-12)
        t = int(np.argmin(layers[n - 1][0, :, U]))
        v, chain, cuts = U, [], [U]
        for s in range(n, 0, -1):
            want = layers[s - 1][0, t, v]
            done = False
            for i in np.nonzero(self.type_of == t)[0]:
                lo = int(u0[i, 0, v])
                if s == 1:
                    if lo == 0 and abs(pk[i] - want) <= 1e-9 * max(1.0, abs(want)):
                        chain.append(int(kk[i]))
                        done = True
                        break
                    continue
                if lo > v - 1:
                    continue
                prev = layers[s - 2][0][:, lo:v]  # [T', starts]
                prev = np.where(link_ok[:, t, None], prev, INF) + pk[i]
                j = np.argwhere(np.abs(prev - want) <= 1e-9 * max(1.0, abs(want)))
                if len(j):
                    t2, u = int(j[0, 0]), lo + int(j[0, 1])
                    chain.append(int(kk[i]))
                    cuts.append(u)
                    t, v, done = t2, u, True
                    break
            if not done:
                raise AssertionError("no predecessor found while backtracking a priced chain")
        cuts.append(0)
        return (tuple(reversed(chain)), tuple(reversed(cuts))), work
