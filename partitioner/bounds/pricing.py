"""Pricing for column generation (colgen.py): the chain of best reduced cost at one operating point.

For a key (aggregate.Key: a phase, a batch interval, a class of pipeline lengths), a price per
stage kind (its devices' duals, plus its tp-group dual) and the worth of one output tok/s (1
for pipelines, a feed row's dual for pools), a chain's reduced cost is worth·rate/R − Σ prices,
R its bottleneck as refine.py's chain DP counts it (busiest stage at the key's costs, memory at
its first batch, links at their cheapest cut between two types). Device counts are not
counted: the master LP does that.

f(R), the least price of a chain of the class whose bottleneck is at most R, is a dynamic
program over stages and the unit where the chain ends (price_dp.py: where every link is within R,
chains padded with empty stages, one lookup per stage; elsewhere the exact DP over the type of the
last stage too). The rows of the DP are values of R, computed together. Every chain's R is one of
the stage and link times that can occur (`cand`); over an index interval (i, j] of them no chain
does better than worth·rate/cand[i+1] − f(cand[j]), and bisection of the intervals whose estimate
beats a threshold finds the best exactly. An interval is cut halfway in tok/s (worth·rate/R), or
further left where the chains right of the cut could not beat the threshold at f(cand[j]) anyway.
A key remembers across calls the candidates at which no chain exists (whatever the prices) and
where its best chain was last time (evaluated first). Where every link is within R, the DP leaves
out the kinds that another kind dominates at the prices (no dearer, holds every range in memory,
no busier on any unit): half of the 32 kinds on types8-64, and the same least prices.

Before any DP, W = Σ_u min_g price_g·c_g(u) (c_g(u): the unit's busy seconds on kind g, inf
where g can't hold it) bounds every chain: a stage busy at most R is worth at least its price ×
its units' busy / R, so Σ prices ≥ W / R and the reduced cost is at most (worth·rate − W) / R,
at most that over the least bottleneck any chain can have (every unit sits in some stage).

Prefill and decode pools are worth what their KV routes let them feed (colgen's `routes.py`): a
`Worth` caps a pool's tok/s at its route across nodes and values what an in-node route adds at its
own dual, and a pricer may restrict the first or last stage to some types (`restricted`), so that
each pool is priced at the worth of the type its KV leaves (prefill) or enters (decode) by.
"""

from __future__ import annotations

import copy
from typing import Any, NamedTuple

from dataclasses import dataclass

import numpy as np

from hetc.partitioner.bounds.aggregate import Key
from hetc.partitioner.bounds.cell_bound import WORK_PER_SECOND
from hetc.partitioner.bounds.counted_dp import Counts, Group, counted_chain, counted_dp
from hetc.partitioner.bounds.price_dp import free_chain, free_dp, typed_chain, typed_dp
from hetc.partitioner.bounds.refine import Chain
from hetc.partitioner.bounds.stage_costs import SLACK, StageCosts

__all__ = ["KeyPricer", "Priced", "Worth"]

INF = np.inf
# work, in cell_bound.WORK_PER_SECOND's unit (seconds on one core of the reference machine, measured on
# types6-24 and types8-64): so that the pricing budget means the same on any machine
FREE_CELL = 4e-9 * WORK_PER_SECOND  # one free_dp cell (kind × row × unit × stage): ~2.5e8 a second
TYPED_CELL = 7e-9 * WORK_PER_SECOND  # one typed_dp cell (× sparse-table level): ~1.4e8 a second
REACH = 3e-8 * WORK_PER_SECOND  # one u0 entry (kind × row × unit): ~3.2e7 a second
CERTIFICATE = 6e-5 * WORK_PER_SECOND  # one key's certificate at new prices
DOMINATES = 1e-6  # a kind dominates another busy on every unit at most this share less (or exactly as busy)
FIRST = 5  # R values of the first DP round: quantiles of the candidates


class Worth(NamedTuple):
    """What a chain's output tok/s r is worth: per·min(r, across) + (inside_per·(min(r, inside) − start)⁺ − toll)⁺
    (a plain number w is Worth(w): w·r). Nondecreasing in r and at most `most`·r."""

    per: float
    across: float = INF
    inside_per: float = 0.0
    inside: float = INF
    start: float = 0.0
    toll: float = 0.0

    def of(self, r: Any) -> Any:
        """The worth of tok/s r (a number or an array)."""
        extra = np.maximum(0.0, self.inside_per * np.maximum(0.0, np.minimum(r, self.inside) - self.start) - self.toll) if self.inside_per else 0.0
        return self.per * np.minimum(r, self.across) + extra

    @property
    def most(self) -> float:
        """A slope no part of it exceeds: worth·r ≤ most·r."""
        return self.per + self.inside_per


def _worth(worth: "float | Worth") -> Worth:
    return worth if isinstance(worth, Worth) else Worth(float(worth))


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
        self.case: Any = costs.case(key.phase, key.top, key.m, fit=key.batch, floor=True)  # a Case, or None: no kind holds the key
        case = self.case
        U = costs.u
        self.kinds = np.array(
            [] if case is None else [g for g in range(len(costs.kinds)) if np.isfinite(case.P[g, -1]) and (tp_groups or costs.tp[g] == 1)], dtype=np.int64
        )
        if not len(self.kinds):
            self.cand = np.zeros(0)
            return
        assert case is not None
        kk = self.kinds
        holds = case.jfit[kk] > np.arange(U)  # kind g can hold unit u alone
        self.unit = np.where(holds, np.diff(case.P[kk], axis=1), INF)  # [K, U]
        alone = np.where(holds, self.unit + case.over[kk][:, None], INF).min(axis=0)
        self.least = float(alone.max())  # every unit sits in some stage: no chain's bottleneck is below this
        cand: Any = [case.cheapest.ravel()]
        for g in kk:
            ii, jj = costs.ranges(case, int(g))
            cand.append(case.P[g][jj] - case.P[g][ii] + case.over[g])
        cand = np.unique(np.concatenate(cand))
        self.cand = cand[np.isfinite(cand) & (cand >= self.least * (1 - 1e-12))]
        self._flat: np.ndarray | None = None  # _reach_u0's sorted prefix sums, made at its first call
        self._work: float | None = None  # per_device's Σ_u min_g tp_g·c_g(u), made at its first call
        self._stands_in: np.ndarray | None = None  # _undominated's [K, K], made at its first call
        self._weight: tuple = (b"", 0.0)  # (prices, W) of the last call to weight
        self._keep: tuple = (b"", None)  # (prices, undominated kinds) of the last call to _undominated
        self.none, self.hint = -1, -1  # the last candidate known to admit no chain; the best at the last call
        self.type_of = costs.type_of[kk]
        self.T = len(costs.types)
        self.first: np.ndarray | None = None  # [T]: the types the first (last) stage may be of; None: any
        self.last: np.ndarray | None = None
        self.counts: Counts | None = None  # the types whose devices a chain is held to (fitting.py); None: none

    def restricted(self, first: np.ndarray | None, last: np.ndarray | None) -> "KeyPricer":
        """This key's pricer over the chains whose first (last) stage is of a type `first` (`last`) marks
        ([T] bools; None: any), sharing what does not depend on it (candidates, reach). Kinds dominate
        only kinds of their own type there: one of another type may not stand in at the ends."""
        out = copy.copy(self)
        out.first, out.last, out.hint = first, last, -1
        out._stands_in, out._keep = None, (b"", None)
        return out

    def counted(self, types: tuple[int | Group, ...]) -> "KeyPricer":
        """This key's pricer over the chains that take at most the fleet's devices of each of `types`
        (of each group's types together: counted_dp.py), sharing what does not depend on it. A kind
        stands in for another there only where it takes no more devices of a counted type."""
        assert self.first is None and self.last is None, "counts are priced over unrestricted ends"
        out = copy.copy(self)
        out.counts, out.hint = Counts(types, self.costs.devices, self.type_of, self.costs.tp[self.kinds]), -1
        out._stands_in, out._keep = None, (b"", None)
        return out

    def _ends(self, sel: np.ndarray | None = None) -> tuple[np.ndarray | None, np.ndarray | None]:
        """`first`, `last` per kind (of `sel`, indices into self.kinds; default all)."""
        of = self.type_of if sel is None else self.type_of[sel]
        return (None if self.first is None else self.first[of]), (None if self.last is None else self.last[of])

    def weight(self, prices: np.ndarray) -> float:
        """W: no chain's price is below W / R (kept for the last prices: a pass asks several times)."""
        at = prices.tobytes()
        if self._weight[0] != at:
            finite = np.isfinite(self.unit)
            self._weight = (at, float(np.where(finite, prices[self.kinds][:, None] * np.where(finite, self.unit, 0.0), INF).min(axis=0).sum()))
        return self._weight[1]

    def certificate(self, prices: np.ndarray, worth: "float | Worth") -> float:
        """An upper bound on every chain's reduced cost, from W (no DP)."""
        if not len(self.cand):
            return -INF
        W, top = self.weight(prices), _worth(worth).most * self.rate
        return (top - W) / (self.least if top > W else self.cand[-1])

    def per_device(self, prices: np.ndarray, worth: "float | Worth") -> float:
        """An upper bound on every chain's reduced cost per device, from W (no DP), for a key a CPU
        deadline leaves unpriced (colgen.py). A chain of bottleneck R on d devices has reduced cost at
        most (worth·rate − W) / R, and R·d ≥ Σ_u min_g tp_g·c_g(u) (each stage's tp_g devices
        busy ≤ R cover its units) and ≥ the least bottleneck × the class's fewest stages."""
        if not len(self.cand):
            return -INF
        spare = _worth(worth).most * self.rate - self.weight(prices)
        if spare <= 0:
            return 0.0
        return spare * (1 + SLACK) / max(self.busy(), self.least * max(1, self.key.lo))

    def busy(self) -> float:
        """Σ_u min_g tp_g·c_g(u): no chain of the key keeps its devices busy less per round (device-seconds)."""
        if self._work is None:
            tp = self.costs.tp[self.kinds][:, None]
            self._work = float(np.where(np.isfinite(self.unit), tp * self.unit, INF).min(axis=0).sum())
        return self._work

    def price(self, prices: np.ndarray, worth: "float | Worth", beat: float, tol: float) -> Priced:
        """The best reduced cost of the key's chains where it exceeds `beat` (then `found` is
        within `tol` of it, and `upper` too); otherwise an `upper` ≤ beat + tol.

        Args:
            prices: per stage kind (all of costs.kinds).
            worth: the value of one output tok/s of this phase.
        """
        cert = self.certificate(prices, worth)
        if cert <= beat + tol:
            return Priced(cert, -INF, None, 0.0, CERTIFICATE)
        cand, w = self.cand, _worth(worth)
        top = w.most * self.rate
        spare = top - self.weight(prices)  # no chain of bottleneck R does better than spare / R

        def gain(R: Any) -> Any:  # a chain's worth at bottleneck R (nonincreasing in R)
            return w.of(self.rate / R)

        N = len(cand)
        f: dict[int, float] = {}  # the least price of a chain with bottleneck ≤ cand[i], or a lower bound on it
        att: dict[int, float] = {}  # the least price of such a chain the DP found (inf: none)
        work = CERTIFICATE

        def evaluate(idx: list[int]) -> None:
            nonlocal work
            idx = [i for i in dict.fromkeys(idx) if i not in f]
            if idx:  # a chain priced above top / R − beat at bottleneck R pays less than beat
                Rs = cand[idx]
                low, best, dp_work = self._dp(Rs, prices, gain(Rs) - beat if np.isfinite(beat) else np.full(len(idx), INF))
                work += dp_work
                f.update(zip(idx, low))
                att.update(zip(idx, best))
                none = [i for i, x in zip(idx, low) if x == INF]  # no chain at all: whatever the prices
                self.none = max([self.none] + none)

        start = self.none + 1  # candidates up to self.none admit no chain (found by earlier calls)
        if start:
            f[start - 1] = att[start - 1] = INF
        if start < N:
            first = np.linspace(start, N - 1, min(N - start, FIRST)).astype(int).tolist()
            evaluate(sorted(set(first + ([self.hint] if start <= self.hint < N else []))))
        found, at = -INF, -1
        while True:
            pts = sorted(f)
            for i in pts:  # a point: some chain attains it (its bottleneck ≤ cand[i], price att)
                if gain(cand[i]) - att[i] > found:
                    found, at = gain(cand[i]) - att[i], i
            est = [
                (min(gain(cand[a + 1]) - f[b], spare / cand[a + 1 if spare > 0 else b]), a, b) for a, b in zip(pts, pts[1:]) if b > a + 1
            ]  # pts holds N − 1, and 0 or the last without a chain
            live = [(a, b) for e, a, b in est if e > max(found, beat) + tol]
            # a point the DP bounds but attains no chain at (counted rows where links bind) holds up to gain − f
            upper = max([found] + [e for e, _, _ in est] + [gain(cand[i]) - f[i] for i in pts if f[i] < att[i]])
            if not live:
                break
            thr = max(found, beat) + tol
            evaluate([self._split(a, b, top, f[b], thr) for a, b in live])
        if np.isfinite(beat):  # what the DP left out pays at most beat
            upper = max(upper, beat)
        self.hint = at
        if at < 0 or found <= -INF:
            return Priced(min(upper, cert), -INF, None, 0.0, work)
        chain, back = self._backtrack(float(cand[at]), prices, att[at])
        return Priced(min(max(upper, found), cert), found, chain, float(cand[at]), work + back)

    def _split(self, a: int, b: int, top: float, fb: float, thr: float) -> int:
        """Where to evaluate inside the live interval (a, b): halfway in tok/s (top / R), or further left
        where the chains right of it can't beat `thr` even at f[b] (a chain of bottleneck R pays at most
        top / R − f[b], `top` the steepest worth × rate)."""
        cand = self.cand
        x = max(0.5 * (1.0 / cand[a + 1] + 1.0 / cand[b]), (thr + fb) / top if top > 0 else 0.0)
        c = int(np.searchsorted(cand, 1.0 / x, side="right")) - 1
        return min(max(c, a + 1), b - 1)

    def _reach_u0(self, Rs: np.ndarray, sel: np.ndarray | None = None) -> np.ndarray:
        """u0 [K, L, U+1]: the first start from which each kind (of `sel`, indices into self.kinds; default
        all) holds units [start, v) within each R (busy P[v] − P[start] + over ≤ R) and memory (start ≥
        the first whose jfit reaches v); v where none (an empty stage). Every kind's prefix sums are
        searched at once, shifted apart into one sorted array."""
        case, kk = self.case, self.kinds
        assert case is not None
        if self._flat is None:
            P = case.P[kk]
            self._shift = np.r_[0.0, np.cumsum(P[:, -1] + 1.0)[:-1]][:, None, None]
            self._flat = (P + self._shift[:, :, 0]).ravel()
            self._mem = np.array([np.searchsorted(case.jfit[g], np.arange(P.shape[1]), side="left") for g in kk])[:, None, :]
        sel = np.arange(len(kk)) if sel is None else sel
        P = case.P[kk[sel]]
        K, L, U1 = len(sel), len(Rs), P.shape[1]
        q = P[:, None, :] - (Rs * (1 + SLACK))[None, :, None] + case.over[kk[sel]][:, None, None]
        q = np.clip(q, 0.0, P[:, -1:, None] + 0.5) + self._shift[sel]
        u0 = np.searchsorted(self._flat, q.ravel(), side="left").reshape(K, L, U1) - (sel * U1)[:, None, None]
        return np.minimum(np.maximum(u0, self._mem[sel]), np.arange(U1))

    def _undominated(self, pk: np.ndarray) -> np.ndarray:
        """Indices of the kinds no other kind dominates at prices `pk`: one that costs no more, holds every
        range it holds in memory, and is busy less on every unit (by a relative DOMINATES, so that prefix
        sums rounded differently can't reverse it) or exactly as busy. Within any R, a chain's stage of
        a dominated kind can take the other kind instead at no more price: free_dp's least prices are
        the same without them (typed_dp's are not: the other kind may be of another type)."""
        at = pk.tobytes()
        if self._keep[0] == at:  # the last prices' (a key is priced several times a pass)
            return self._keep[1]
        if self._stands_in is None:  # [a, b]: kind a holds every range kind b holds, within any R
            case, kk = self.case, self.kinds
            cost, over, jfit = np.diff(case.P[kk], axis=1), case.over[kk], case.jfit[kk]
            less = ((cost[:, None, :] <= cost[None, :, :] * (1 - DOMINATES)) | (cost[:, None, :] == cost[None, :, :])).all(axis=2)
            self._stands_in = less & (over[:, None] <= over[None, :]) & (jfit[:, None, :] >= jfit[None, :, :]).all(axis=2)
            same = self.type_of[:, None] == self.type_of[None, :]
            if self.first is not None or self.last is not None:  # restricted ends: only a kind of its own type stands in
                self._stands_in &= same
            if self.counts is not None:  # counted: only one that adds no devices of a counted type
                tp = self.costs.tp[kk]
                self._stands_in &= (self.counts.inc == 0)[:, None] | (same & (tp[:, None] <= tp[None, :]))
        idx = np.arange(len(pk))
        dom = self._stands_in & (pk[:, None] <= pk[None, :]) & (idx[:, None] != idx[None, :])
        dom &= ~(dom.T & (idx[None, :] < idx[:, None]))  # two that stand in for each other: the first stays
        self._keep = (at, np.nonzero(~dom.any(axis=0))[0])
        return self._keep[1]

    def _dp(self, Rs: np.ndarray, prices: np.ndarray, cap: np.ndarray) -> tuple[np.ndarray, np.ndarray, float]:
        """At each R: a lower bound on f (the least price of a chain of the key's class with bottleneck
        ≤ R), equal to f where f < the row's `cap`; the least price of a chain the DP found (inf: none);
        and the work (DP cells). Every row takes price_dp.free_dp over the undominated kinds, exact where
        every link is within R; elsewhere it ignores the links (a relaxation: its least price is at most
        f), and only the rows where that stays below their cap take the exact typed_dp (long chains are
        priced out by their stages' balance, not their links: 13 of gen38's 16 CPU s of pricing were
        typed DPs that proved no chain beats the cap). Counted, likewise: free_dp first, counted_dp
        (its work × the count states) only on the rows that free_dp leaves below their cap."""
        key = self.key
        hi = min(key.hi, self.costs.u)
        pk = prices[self.kinds]
        keep = self._undominated(pk)
        link_ok = self.case.cheapest[None, :, :] <= (Rs * (1 + SLACK))[:, None, None]  # [L, T', T]
        free = link_ok.all(axis=(1, 2))
        u0 = self._reach_u0(Rs, keep)
        first, last = self._ends(keep)
        low, found, w = free_dp(u0, pk[keep], key.lo, hi, cap, first=first, last=last)
        if self.counts is not None:  # counted: only rows the uncounted DP leaves below their cap (its least price bounds f there)
            on = np.nonzero(low < cap)[0]
            found = np.full(len(Rs), INF)
            if len(on):
                low[on], found[on], wc = counted_dp(u0[:, on], pk[keep], self.counts.of(keep), key.lo, hi, cap[on])
                w += wc
        best = np.where(free, found, INF)  # a chain that ignores a link out of R is no chain
        work = w * FREE_CELL + REACH * u0.size
        rows = np.nonzero(~free & (low < cap))[0]
        if len(rows):  # counted: links and counts are not priced together, the typed DP's least price bounds f (no chain)
            u0 = self._reach_u0(Rs[rows])
            low[rows], typed, w = typed_dp(u0, pk, self.type_of, self.T, link_ok[rows], key.lo, hi, cap[rows], first=self.first, last=self.last)
            best[rows] = typed if self.counts is None else INF
            work += w * TYPED_CELL + REACH * u0.size
        return low, best, work

    def _backtrack(self, R: float, prices: np.ndarray, f: float) -> tuple[Chain, float]:
        """A chain of the key's class (less its empty stages) with bottleneck ≤ R and price ≤ f."""
        pk, hi = prices[self.kinds], min(self.key.hi, self.costs.u)
        link_ok = self.case.cheapest <= R * (1 + SLACK)
        if link_ok.all():
            keep = self._undominated(pk)
            u0 = self._reach_u0(np.array([R]), keep)
            if self.counts is not None:
                chain, work = counted_chain(u0, pk[keep], self.kinds[keep], self.counts.of(keep), self.key.lo, hi, f)
                return chain, work * FREE_CELL + REACH * u0.size
            first, last = self._ends(keep)
            chain, work = free_chain(u0, pk[keep], self.kinds[keep], self.key.lo, hi, f, first, last)
            return chain, work * FREE_CELL + REACH * u0.size
        u0 = self._reach_u0(np.array([R]))
        chain, work = typed_chain(u0, pk, self.kinds, self.type_of, self.T, link_ok, self.key.lo, hi, f, self.first, self.last)
        return chain, work * TYPED_CELL + REACH * u0.size
