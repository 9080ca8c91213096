"""Pricing for column generation (colgen.py): the pipeline of best reduced cost.

For prices w per stage kind, pricing looks for the pipeline of largest reduced cost
τ − Σ w over its stages by dynamic programming over unit prefixes, for every (phase,
batch, class of pipeline lengths) and a ladder of bottleneck levels R: a pipeline whose
busiest stage and link take at most R per round gives τ ≤ batch / R, and C(R), the least
stage price of a pipeline with that bottleneck, falls as R grows, so over R_i ≤ R ≤ R_i+1
the reduced cost is at most batch / R_i − C(R_i+1) (and τ / price at most their ratio).

Pricing relaxes the saturation model (simulate.py) so that its τ bounds every real
pipeline's: the loop term (one micro-batch passing all stages) is dropped; a pipeline of
n stages is costed with the micro-batches of the shortest length in its class (fewer
micro-steps, less busy); a link between two stages of one type is the type's intra-node
fabric, between two types their fastest node pair. The stage DP counts no devices; where
its best pipeline takes more than exist, count_pricing.py's DP, which does, takes over.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from hetc.cluster import Cluster
from hetc.partitioner.cost_models.links import hops
from hetc.partitioner.count_pricing import backtrack, cheapest, covers
from hetc.partitioner.simulate import Round
from hetc.partitioner.tables import BATCH_GRID, Kind, Tables

__all__ = ["Column", "Pricer", "SEARCH", "CERTIFY"]

INF = np.inf
QUARTERS = np.array([0.25, 0.5, 0.75])
SEARCH, CERTIFY = 2, 20  # rounds of ladder refinement (each quarters an interval) while searching and for the bound


@dataclass(frozen=True, slots=True)
class Column:
    kinds: tuple[int, ...]  # kind index per stage, in order
    cuts: tuple[int, ...]  # unit boundaries: stage s holds units [cuts[s], cuts[s+1])
    batch: int  # prefill pools: prompts in flight
    tok_s: float  # relaxed throughput (pricing model); prefill pools: output tok/s they can feed
    phase: str = "both"


def _classes(max_stages: int) -> list[tuple[int, int]]:
    """Pipeline-length classes: exact up to 8 stages, then ranges growing by half."""
    out, n = [], 1
    while n <= max_stages:
        hi = n if n <= 8 else min(max_stages, n + max(1, n // 2) - 1)
        out.append((n, min(hi, max_stages)))
        n = hi + 1
    return out


class Pricer:
    """Everything pricing needs that does not depend on the duals, per (phase, batch, class)."""

    def __init__(self, tables: Tables, kinds: list[Kind], cluster: Cluster, max_stages: int,
                 phases: tuple[str, ...] = ("both",)) -> None:
        self.phases = phases
        self.tables, self.kinds, self.u = tables, kinds, len(tables.units)
        types = list(dict.fromkeys(k.type_key for k in kinds))
        self.types = types
        self.devices = np.array([sum(nd.count for nd in next(k for k in kinds if k.type_key == t).nodes)
                                 for t in types], dtype=float)
        self.type_of = np.array([types.index(k.type_key) for k in kinds])
        self.tp = np.array([k.tp for k in kinds], dtype=float)
        self.of_type = [np.nonzero(self.type_of == t)[0] for t in range(len(types))]  # kinds of each type
        self.classes = _classes(max_stages)
        self.paths = {}  # (t', t) -> candidate hop lists (the fastest is taken per size)
        for a, ta in enumerate(types):
            na = next(k for k in kinds if k.type_key == ta).nodes
            for b, tb in enumerate(types):
                nb = next(k for k in kinds if k.type_key == tb).nodes
                self.paths[a, b] = [hops(cluster, na[0], na[0])] if a == b else [hops(cluster, x, y) for x in na for y in nb]
        self.out_bytes = np.array([0.0] + [u.out_bytes_per_token for u in tables.units])  # out of unit i-1 at cut i
        self._cases: dict = {}
        self._cover_cache: dict = {}
        self.work = 0.0  # DP cells evaluated so far

    def case(self, key: tuple):
        """(prefix costs P[g, i], overheads[g], last fitting end jfit[g, i], link busy[t', t, i]) or None."""
        if key not in self._cases:
            self._cases[key] = self._build(*key)
        return self._cases[key]

    def _build(self, phase: str, batch: int, cls: tuple[int, int]):
        t, wl, u = self.tables, self.tables.wl, self.u
        m = max(1, min(cls[0], batch))
        P = np.zeros((len(self.kinds), u + 1))
        over = np.zeros(len(self.kinds))
        jfit = np.zeros((len(self.kinds), u), dtype=np.int64)
        for g, kind in enumerate(self.kinds):
            fits = t.fits(kind, batch, phase)  # [i, k]
            ks = np.where(fits[:u], np.arange(u + 1)[None, :], 0).max(axis=1)
            jfit[g] = np.arange(u) + ks
            if not ks.any() or (phase != "both" and kind.tp > 1):  # the runtime's pools are tp 1
                P[g] = INF
                continue
            cost, over[g] = t.unit_costs(kind, m, batch, phase)
            P[g, 1:] = np.cumsum(cost)
        if np.isinf(P).all():
            return None
        r = Round.of(wl, batch, m, phase)
        T = len(self.types)
        link = np.zeros((T, T, u + 1))
        ob = self.out_bytes[None, 1:u]
        for (a, c), paths in self.paths.items():
            best = np.full((1, u - 1), INF)
            for p in paths:  # α–β per hop: latency + bytes / bandwidth
                lat, inv = sum(h.latency for h in p), sum(1 / h.bandwidth for h in p)
                busy = (r.micro * (lat + r.seqs * ob * inv) + r.prompts * r.chunks * (lat + r.chunk * ob * inv)
                        if p else 0 * ob)  # Round.link_time, vectorized over the cut positions
                best = np.minimum(best, busy)
            link[a, c, 1:u] = best[0]
        return P, over, jfit, link

    def reach(self, key: tuple, R: np.ndarray) -> np.ndarray:
        """reach[r, g, i]: the furthest end of a stage of kind g starting at unit i, within R[r] and memory."""
        P, over, jfit, _ = self.case(key)
        G, U, nR = len(self.kinds), self.u, len(R)
        limit = P[None, :, :U] + (R[:, None, None] - over[None, :, None])  # [nR, G, U]
        reach = np.empty((nR, G, U), dtype=np.int64)
        for g in range(G):
            if np.isinf(P[g, 0]):
                reach[:, g] = np.arange(U)[None, :]
                continue
            reach[:, g] = np.searchsorted(P[g], limit[:, g], side="right") - 1
        return np.maximum(np.minimum(reach, jfit[None]), np.arange(U)[None, None, :])

    def costs(self, w: np.ndarray, key: tuple, R: np.ndarray, keep: bool = False):
        """C[r, s] = least stage price of an s-stage pipeline (s in the class) with bottleneck ≤ R[r].

        With `keep`, also the per-layer tables for reconstructing (one R only)."""
        link = self.case(key)[3]
        G, U, nR, T = len(self.kinds), self.u, len(R), len(self.types)
        self.work += nR * key[2][1] * G * (U + 1)
        reach = self.reach(key, R)
        # lo[r, g, j] = first start i whose stage can reach j  (reach is nondecreasing in i)
        flat = (np.arange(nR * G).reshape(nR, G, 1) * (U + 2) + reach).ravel()
        cnt = np.bincount(flat, minlength=nR * G * (U + 2)).reshape(nR, G, U + 2).cumsum(axis=2)
        lo = np.concatenate([np.full((nR, G, 1), U + 1), cnt[:, :, :U]], axis=2)  # j = 0 … U
        j = np.arange(U + 1)
        length = j[None, None, :] - lo  # window [lo, j-1] has `length` starts
        ok = length >= 1
        lvl = np.where(ok, np.floor(np.log2(np.maximum(length, 1))).astype(np.int64), 0)
        a_idx = np.where(ok, lo, 0)
        b_idx = np.where(ok, j[None, None, :] - (1 << lvl), 0)
        allowed = link[None] <= R[:, None, None, None]  # [nR, T', T, U+1]
        K = int(lvl.max()) + 1  # sparse-table levels the longest window needs
        base = (np.arange(nR)[:, None, None] * T + self.type_of[None, :, None]) * (U + 1)
        flat_a = (lvl * nR * T * (U + 1) + base + a_idx).ravel()  # sparse-table cells of each window's two halves
        flat_b = (lvl * nR * T * (U + 1) + base + b_idx).ravel()
        ST = np.empty((K, nR, T, U + 1))
        F = np.where((j[None, None, :] >= 1) & (j[None, None, :] <= reach[:, :, :1]), w[None, :, None], INF)
        lo_n, hi_n = key[2]
        out = np.full((nR, hi_n - lo_n + 1), INF)
        layers = [F] if keep else None
        if lo_n == 1:
            out[:, 0] = F[:, :, U].min(axis=1)
        for s in range(2, hi_n + 1):
            M = np.stack([F[:, g].min(axis=1) for g in self.of_type], axis=1)  # [nR, T, U+1]
            H = ST[0]
            for tj in range(T):  # cheapest previous stage whose link into type tj fits
                H[:, tj] = np.where(allowed[:, :, tj], M, INF).min(axis=1)
            H[:, :, 0] = INF  # a later stage never starts at unit 0
            for k in range(1, K):
                half = 1 << (k - 1)
                np.minimum(ST[k - 1, :, :, :-half], ST[k - 1, :, :, half:], out=ST[k, :, :, :-half])
                ST[k, :, :, -half:] = ST[k - 1, :, :, -half:]
            flat = ST.ravel()
            best = np.minimum(flat[flat_a], flat[flat_b]).reshape(nR, G, U + 1)
            F = np.where(ok, best + w[None, :, None], INF)
            if keep:
                layers.append(F)
            if s >= lo_n:
                out[:, s - lo_n] = F[:, :, U].min(axis=1)
            if np.isinf(F).all():
                break
        return (out, layers, reach, allowed) if keep else out

    def reconstruct(self, w: np.ndarray, key: tuple, R: float, s: int) -> Column | None:
        """The s-stage pipeline of least price with bottleneck ≤ R, and its relaxed throughput."""
        _, layers, reach, allowed = self.costs(w, key, np.array([R]), keep=True)
        U = self.u
        F = [f[0] for f in layers]
        reach, allowed = reach[0], allowed[0]
        g = int(np.argmin(F[s - 1][:, U]))
        if not np.isfinite(F[s - 1][g, U]):
            return None
        kinds, cuts, j = [g], [U], U
        for layer in range(s - 1, 0, -1):
            target = F[layer][g, j] - w[g]
            found = None
            for i in range(j - 1, 0, -1):
                if reach[g, i] < j:
                    break
                for g2 in range(len(self.kinds)):
                    if allowed[self.type_of[g2], self.type_of[g], i] and abs(F[layer - 1][g2, i] - target) <= 1e-9 * max(1.0, abs(target)):
                        found = (i, g2)
                        break
                if found:
                    break
            if found is None:
                return None
            j, g = found
            kinds.append(g)
            cuts.append(j)
        cuts.append(0)
        kinds, cuts = tuple(reversed(kinds)), tuple(reversed(cuts))
        return Column(kinds, cuts, key[1], self.relaxed_tok_s(kinds, cuts, key[0], key[1]), key[0])

    def relaxed_tok_s(self, kinds: tuple[int, ...], cuts: tuple[int, ...], phase: str, batch: int) -> float:
        """The pricing model's throughput of a pipeline (its length's class sets the micro-batches)."""
        cls = next(c for c in self.classes if c[0] <= len(kinds) <= c[1])
        P, over, _, link = self.case((phase, batch, cls))
        busy = max(P[g, b] - P[g, a] + over[g] for g, a, b in zip(kinds, cuts, cuts[1:]))
        busy = max([busy] + [link[self.type_of[g1], self.type_of[g2], c]
                             for g1, g2, c in zip(kinds, kinds[1:], cuts[1:-1])])
        return (self.tables.wl.output_len if phase == "prefill" else batch) / busy

    def keys(self) -> list[tuple]:
        """(phase, batch, class) triples that have pipelines; prefill pools keep one prompt per stage."""
        out = []
        for phase in self.phases:
            for c in self.classes:
                out += [(phase, b, c) for b in ([c[0]] if phase == "prefill" else BATCH_GRID)
                        if self.case((phase, b, c)) is not None]
        return out

    def price(self, w: np.ndarray, pdev: np.ndarray, mu: float, keys: list, *, rounds: int, counted: bool,
              stop: float = INF) -> tuple[list[Column], dict]:
        """Per (phase, batch, class) in `keys`: the best column the cluster can hold if its reduced
        cost is positive, and upper estimates (reduced cost, τ / price) over the columns it can hold.

        Args:
            w: price of a stage of each kind; pdev: price of a device of each type (w without
                the tp-group part), used when the best column takes more devices than exist.
            mu: price of one output tok/s of decode pools in prefill capacity (the master's
                row tying decode pools to the prefill pools that feed them).
            rounds: ladder refinements per pair; none once the work done passes `stop` (the
                estimates stay valid, only looser).
        """
        cols, est = [], {}
        for key in keys:
            rounds = rounds if self.work < stop else 0
            worth = {"both": 1.0, "decode": 1.0 - mu, "prefill": mu}[key[0]]  # reduced cost per tok/s
            scale = worth * (self.tables.wl.output_len if key[0] == "prefill" else key[1])
            col, up, ratio = self._price_key(w, key, scale, rounds)
            if counted and key[0] == "both" and up > 0 and (rounds >= CERTIFY or col is not None and not self.holds(col)):
                col, up2, ratio2 = self._price_counts(pdev, key, rounds)
                up, ratio = min(up, up2), min(ratio, ratio2)
            est[key] = (up, ratio)
            if (col is not None and (self.holds(col) or not counted)
                    and worth * col.tok_s - float(w[list(col.kinds)].sum()) > 1e-9):
                cols.append(col)
        return cols, est

    def holds(self, col: Column) -> bool:
        """Whether the cluster has the devices and tp groups the pipeline takes."""
        g = list(col.kinds)
        use = np.bincount(self.type_of[g], weights=self.tp[g], minlength=len(self.types))
        return bool((use <= self.devices).all()) and all(col.kinds.count(k) <= self.kinds[k].groups for k in set(g))

    def _ladder(self, key: tuple, scale: float, floor: float, cost: Callable[[np.ndarray], np.ndarray],
                rounds: int, steps: int = 24):
        """Bottleneck levels R and least prices C[r, s] at each; refined (`rounds` times) where an interval's upper
        estimate scale / R_i − C(R_i+1) is positive and C changes inside it.

        Returns (R, C, upper, ratio): `upper` bounds the reduced cost τ − price and `ratio`
        τ / price (Farley) of every pipeline here; R and C are None when nothing in this
        class can pay its least price `floor`."""
        P, over, _, link = self.case(key)
        usable = np.isfinite(P[:, -1])
        # the bottleneck can't be below every device's best time for the costliest unit
        per_unit = (np.diff(P[usable], axis=1) + over[usable, None]).min(axis=0) if usable.any() else np.full(self.u, INF)
        r_lo = float(per_unit.max())
        r_sat = float(max(np.max(np.where(usable, P[:, -1] + over, 0.0)), link.max()))
        r_hi = min(r_sat, scale / floor) if floor > 0 else r_sat
        if not np.isfinite(r_lo):
            return None, None, -INF, 0.0
        if r_lo >= r_hi:  # every pipeline here is slower than its cheapest price
            return None, None, scale / r_lo - floor, 1.0
        # a fixed ladder from r_lo to r_sat, cut just above r_hi: the same levels every call
        ladder = np.geomspace(r_lo, r_sat, steps) if r_sat > r_lo else np.array([r_lo])
        R = ladder[: int(np.searchsorted(ladder, r_hi)) + 1]
        C = cost(R)
        for _ in range(rounds):
            est = scale / R[:-1, None] - C[1:]
            split = (est > 0) & (C[:-1] != C[1:]) & (R[1:, None] / R[:-1, None] > 1 + 1e-4)
            need = np.nonzero(split.any(axis=1))[0]
            if not len(need):
                break
            # three geometric points per interval: one DP call refines as far as two halvings
            mid = (R[need, None] ** (1 - QUARTERS) * R[need + 1, None] ** QUARTERS).ravel()
            R = np.concatenate([R, mid])
            C = np.concatenate([C, cost(mid)])
            order = np.argsort(R)
            R, C = R[order], C[order]
        tau = scale / R[:, None]  # over [R_i, R_i+1]: τ ≤ scale / R_i, price ≥ C(R_i+1); beyond the top, C stays
        den = np.concatenate([C[1:], C[-1:]])
        upper = float((tau - den).max())
        with np.errstate(divide="ignore", invalid="ignore"):
            ratio = float(np.where(np.isinf(den), 0.0, tau / den).max())
        return R, C, upper, ratio

    def _price_key(self, w: np.ndarray, key: tuple, scale: float, rounds: int):
        """The best column for stage prices `w`, counting no devices (its reduced cost may be ≤ 0),
        and the ladder's two estimates (reduced cost, ratio)."""
        if self.case(key) is None or scale <= 0:
            return None, -INF, 0.0
        R, C, upper, ratio = self._ladder(key, scale, key[2][0] * float(w.min()), lambda R: self.costs(w, key, R), rounds)
        if R is None or upper <= 0:  # no pipeline here pays its price
            return None, upper, ratio
        val = scale / R[:, None] - C
        r, s = np.unravel_index(np.argmax(val), val.shape)
        if not np.isfinite(val[r, s]):
            return None, upper, ratio
        return self.reconstruct(w, key, float(R[r]), key[2][0] + int(s)), upper, ratio

    def _covers(self, key: tuple, R: np.ndarray) -> list[np.ndarray]:
        """count_pricing.covers per level R (they don't depend on prices: cached across iterations)."""
        todo = np.array([r for r in R if (key, float(r)) not in self._cover_cache])
        if len(todo):
            self.work += len(todo) * len(self.kinds) * len(self.types) * float(np.prod(self.devices + 1))
            E = covers(self.reach(key, todo), self._allowed(key, todo), self.type_of, self.tp,
                       self.devices).astype(np.int16)
            for r, e in zip(todo, E):
                self._cover_cache[key, float(r)] = e
        return [self._cover_cache[key, float(r)] for r in R]

    def _allowed(self, key: tuple, R: np.ndarray) -> np.ndarray:
        link = self.case(key)[3][:, :, 1:self.u]
        cheapest_cut = link.min(axis=2) if link.shape[2] else np.zeros(link.shape[:2])
        return cheapest_cut[None] <= R[:, None, None]

    def _price_counts(self, pdev: np.ndarray, key: tuple, rounds: int):
        """As _price_key, but only pipelines within the device counts, priced per device (count_pricing.py)."""
        def cost(R: np.ndarray) -> np.ndarray:
            return np.array([cheapest(E[None], self.u, pdev)[0][0] for E in self._covers(key, R)])[:, None]

        batch = key[1]
        R, C, upper, ratio = self._ladder(key, batch, key[2][0] * float(pdev.min()), cost, rounds)
        if R is None:
            return None, upper, ratio
        val = batch / R - C[:, 0]
        r = int(np.argmax(val))
        if not np.isfinite(val[r]):
            return None, upper, ratio
        Rr = R[r: r + 1]
        E = self._covers(key, Rr)[0]
        _, [(t, counts)] = cheapest(E[None], self.u, pdev)
        found = backtrack(E, self.reach(key, Rr)[0], self._allowed(key, Rr)[0], self.type_of, self.tp,
                          t, counts, self.u)
        if found is None:
            return None, upper, ratio
        return Column(*found, batch, self.relaxed_tok_s(*found, "both", batch)), upper, ratio
