"""First pass of the cell bound: an order-free relaxation of one pipeline, for every count vector.

Fix a phase, a batch interval [B, top] (costs and tokens at top, memory at B: valid for every
batch between, batches.py) and a class [lo, hi] of pipeline lengths, and cost every stage with
m = min(lo, top) micro-batches (fewer micro-steps than any pipeline of the class runs: cheaper).
A pipeline whose busiest stage takes R covers the units with contiguous ranges, each within
R and its device's memory. For any weights w ≥ 0 on the units, each range then weighs at
most cap_g(R) = the heaviest memory-feasible range of its kind g within R, so

    Σ over stages of cap_{g_s}(R) ≥ Σ_u w_u          (for every w)

is necessary. Weights used: each one-device kind's own unit costs, the units' memory at B,
one per unit, and one per unit kind (attention, MLP, …: the alternation that a range's start
decides). For pipelines of one-device stages the stage counts are the device counts; with
tensor-parallel kinds the left side is bounded by its LP over stage counts (at most hi
stages, devices per type), through its dual min_λ λ·hi + Σ_t c_t·max(0, max_g (cap_g − λ)/tp_g).
R*(c), the least R at which a cell's counts satisfy every w, gives τ ≤ top / R*(c) for every
pipeline on exactly those devices in the class (links and the loop term dropped).
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import numpy as np

from hetc.partitioner.bounds.cells import CountSpace
from hetc.partitioner.bounds.stage_costs import SLACK, Case, StageCosts
from hetc.partitioner.estimate.batches import Regimes, octaves
from hetc.scheduling import Phase

__all__ = ["FirstPass", "Key", "Rows", "cell_per_octave", "classes", "keys", "first_pass", "most_sequences"]

INF = np.inf
EXACT = 8  # pipeline lengths up to this are classes of their own; longer ones grow by GROWTH (refinement splits a class per length)
GROWTH = 1.15
NEAR = 0.9  # a key that can't give a cell this share of its best bound so far is not bisected
PER_OCTAVE = 1  # batch intervals per octave (batches.octaves): exact wherever memory admits the top; SPLITS covers the rest
# the cell bound's first pass: narrower intervals where it can afford them (`cell_per_octave`). Memory at an interval's first
# batch then rules out the cells whose pipelines hold far fewer sequences than the cells' memory in all (stages of uneven
# weights): at one per octave a cell of 15 L40S / L4 / A100 / H200 for mixtral-8x7b read 15.7k tok/s (costed at 3,561
# sequences, memory at 2,048) against 13.3k attained, and each such cell needed a chain DP per key to come down
CELL_PER_OCTAVE = (4, 2)  # the finest first
FIRST_PASS_WORK = 0.6  # a row's work per key × cell × unit (cell_bound.WORK_PER_SECOND's unit; measured 15 ns on gen8 and gen3066)
FINE_SHARE = 0.75  # of the refinement budget, the most a finer first pass may cost: gen8 (53 devices, 163 units) at 4 per octave cut its pass at 30 CPU s
SPLITS = 2  # sub-intervals of a key, for the cells whose memory maximum lies inside it


class Key(NamedTuple):
    """An operating point that covers a class of pipelines: costs and rate at `top` sequences in
    flight with `m` micro-batches, memory at `batch` sequences (batches.py: valid for every batch
    in [batch, top]), pipeline lengths lo … hi. Prefill pools: `batch` = `top` = prompts in
    flight (the class's shortest length), rate = output_len per prompt."""

    phase: Phase
    batch: int
    top: int
    m: int
    lo: int
    hi: int

    def rate(self, output_len: int) -> int:
        """Output tokens per round (seconds of its bottleneck) of one pipeline at this key."""
        return output_len if self.phase == Phase.PREFILL else self.top


def classes(max_stages: int) -> list[tuple[int, int]]:
    out, n = [], 1
    while n <= max_stages:
        hi = n if n <= EXACT else min(max_stages, math.floor(n * GROWTH))
        out.append((n, hi))
        n = hi + 1
    return out


def keys(phase: Phase, max_stages: int, ceiling: int, regimes: Regimes, per_octave: int = PER_OCTAVE) -> list[Key]:
    """Operating points that cover every pipeline of `phase` at every batch up to `ceiling`
    (prefill pools keep one prompt per stage, so at most `ceiling` stages); no key straddles a
    change of its shortest pipelines' step regime, and a class whose lengths prefill in
    different chunks somewhere in a key is split into single lengths there (batches.Regimes).
    Where the steps are full one key runs to the ceiling: priced at the floor, a chain's tok/s is the
    same at every batch there, so octaves would only repeat it (budget_floor.py). `per_octave`: batch
    intervals per octave (any partition of the batches is valid: batches.py)."""
    out = []
    for lo, hi in classes(max_stages):
        if phase == Phase.PREFILL:
            if lo <= ceiling:
                out.append(Key(phase, lo, lo, 1, lo, min(hi, ceiling)))
            continue
        full = regimes.floor_from(lo)
        spans = [(b, min(top, full - 1)) for b, top in octaves(ceiling, per_octave) if b < full] + [(full, ceiling)]
        for b, top in spans:
            for rb, rt in regimes.runs(lo, b, top):
                if regimes.shared(lo, hi, rb, rt):
                    out.append(Key(phase, rb, rt, min(lo, rt), lo, hi))
                    continue
                out += [Key(phase, nb, nt, min(n, nt), n, n) for n in range(lo, hi + 1) for nb, nt in regimes.runs(n, rb, rt)]
    merged: dict = {}  # classes whose lo ≥ the top share m = top: one key from the first such lo up
    for k in out:
        had = merged.get(k[:4])
        merged[k[:4]] = k if had is None else k._replace(lo=min(k.lo, had.lo), hi=max(k.hi, had.hi))
    return list(merged.values())


def cell_per_octave(costs: StageCosts, space: CountSpace, phases: tuple[Phase, ...], max_stages: int, ceiling: int, budget: float) -> int:
    """The finest of CELL_PER_OCTAVE whose first pass over every phase's keys is estimated to cost at most
    FINE_SHARE of `budget` (work: keys × cells × units, deterministic); else PER_OCTAVE."""
    regimes = {ph: Regimes(costs.tables.wl, ph, ceiling) for ph in phases}
    for per in CELL_PER_OCTAVE:
        rows = sum(len(keys(ph, max_stages, ceiling, regimes[ph], per)) for ph in phases)
        if rows * len(space) * costs.u * FIRST_PASS_WORK <= FINE_SHARE * budget:
            return per
    return PER_OCTAVE


def weightings(costs: StageCosts, case: Case, phase: str, batch: int, gs: list[int]) -> np.ndarray:
    """Prefix sums [U+1, W] of each unit weighting."""
    units = costs.tables.units
    wl = costs.tables.wl
    own, shared = wl.kv_tokens(Phase(phase)), wl.shared_tokens(Phase(phase))
    cols = [case.P[g] for g in gs if np.isfinite(case.P[g, -1])]
    cols.append(np.concatenate([[0.0], np.cumsum([u.param_bytes + batch * u.kv_bytes(own, wl.windowed) + u.kv_bytes(shared, wl.windowed) for u in units])]))
    cols.append(np.arange(len(units) + 1, dtype=float))
    for kind in sorted({u.kind for u in units}):
        ind = np.array([u.kind == kind for u in units], dtype=float)
        if ind.sum() > 1:
            cols.append(np.concatenate([[0.0], np.cumsum(ind)]))
    return np.stack(cols, axis=1)


def kind_caps(costs: StageCosts, case: Case, g: int, Wc: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """Every memory-feasible range of kind g: busy seconds sorted, and the running max of its
    weights [1 + ranges, W] after a row of zeros (cap_g at R = the row of the last range within
    R, 0 where none is)."""
    P = case.P[g]
    if not np.isfinite(P[-1]):
        return None
    ii, jj = costs.ranges(case, g)
    if not len(ii):
        return None
    cost = P[jj] - P[ii] + case.over[g]
    order = np.argsort(cost, kind="stable")
    gain = np.maximum.accumulate((Wc[jj] - Wc[ii])[order], axis=0)
    keep = np.ones(len(gain), dtype=bool)  # only the ranges that raise some weight's cap
    keep[1:] = (gain[1:] > gain[:-1]).any(axis=1)
    return cost[order][keep], np.vstack([np.zeros((1, gain.shape[1])), gain[keep]])


def _per_device(caps: list, group: np.ndarray, tp: np.ndarray, G: int) -> list:
    """Per device type, the step function max over its kinds g of cap_g / tp_g (what one
    device of the group adds to every weighting's cover at R), as kind_caps gives one kind's."""
    out: list = []
    for k in range(G):
        parts = [(cg[0], cg[1][1:] / tp[g]) for g, cg in enumerate(caps) if cg is not None and group[g] == k]
        if not parts:
            out.append(None)
            continue
        cost = np.concatenate([p[0] for p in parts])
        order = np.argsort(cost, kind="stable")
        gain = np.maximum.accumulate(np.concatenate([p[1] for p in parts])[order], axis=0)
        out.append((cost[order], np.vstack([np.zeros((1, gain.shape[1])), gain])))
    return out


def _caps_at(caps: list, R: np.ndarray, W: int) -> np.ndarray:
    """[G, cells, W]: each kind's cap at each cell's R (0 for kinds that hold nothing)."""
    out = np.zeros((len(caps), len(R), W))
    R = R * (1 + SLACK)
    for g, cg in enumerate(caps):
        if cg is not None:
            out[g] = cg[1][np.searchsorted(cg[0], R, side="right")]
    return out


def most_sequences(costs: StageCosts, space: CountSpace, phase: Phase) -> np.ndarray:
    """Per cell, the most sequences any pipeline on exactly its devices holds: their memory less one
    copy of the weights (and of the shared prefixes' KV), over one sequence's KV (prefill pools: no cap,
    their batch is their length)."""
    units, wl = costs.tables.units, costs.tables.wl
    per_seq = wl.kv_bytes(units, wl.kv_tokens(phase))
    if phase == Phase.PREFILL or per_seq <= 0:
        return np.full(len(space), np.inf)
    params: dict[str, float] = {}
    for u in units:
        params.update(u.params)
    return np.floor((space.cells @ costs.room - sum(params.values()) - wl.kv_bytes(units, wl.shared_tokens(phase))) / per_seq)


class FirstPass:
    """The first pass for one phase: `row(key)` bounds every cell at one key (vectorized over cells)."""

    def __init__(self, costs: StageCosts, space: CountSpace, phase: Phase) -> None:
        self.costs, self.space, self.phase = costs, space, phase
        self.kinds = [g for g in range(len(costs.kinds)) if phase == Phase.BOTH or costs.tp[g] == 1]
        self.G = len(costs.devices)  # device types
        self.one = [g for g in self.kinds if costs.tp[g] == 1]
        self.one_of = [[g for g in self.one if costs.group[g] == k] for k in range(self.G)]
        self.tp_mode = any(costs.tp[g] > 1 for g in self.kinds)
        top_tp = np.array([max(costs.tp[g] for g in self.kinds if costs.group[g] == k) for k in range(self.G)])
        self.s_min = np.ceil(space.cells / top_tp).sum(axis=1)
        self.most = most_sequences(costs, space, phase)

    def row(self, key: Key, best: np.ndarray) -> np.ndarray:
        """An upper bound on the tok/s of every pipeline of the key's class, at any batch it covers,
        on exactly the devices of each cell (0 where none fits). A cell whose memory holds fewer
        sequences than the key's top is costed at the end of the sub-interval its most falls in
        (SPLITS per interval): no pipeline on it runs more. A cell that can't reach NEAR × its bound
        so far (`best`) gets that value (still a bound) instead of a bisection."""
        out = np.zeros(len(self.space))
        batch, lo = key.batch, key.lo
        idx = self.cells(key)
        if self.phase == Phase.PREFILL or key.top == batch:
            tops = np.full(len(idx), key.top)
        else:
            ends = np.unique(np.minimum(key.top, np.ceil(batch * 2.0 ** (np.arange(1, SPLITS + 1) * np.log2((key.top + 1) / batch) / SPLITS)) - 1)).astype(
                np.int64
            )
            ends = ends[ends >= batch]
            tops = ends[np.searchsorted(ends, np.minimum(key.top, self.most[idx]))]
        for top in np.unique(tops):
            part = idx[tops == top]
            out[part] = self._bound(key._replace(top=int(top), m=min(lo, int(top))), part, best)
        return out

    def cells(self, key: Key) -> np.ndarray:
        """The cells whose devices can run a pipeline of the key's class at its first batch: lengths
        within the class, every type holding some unit in memory, the sequences within memory."""
        costs, space, G = self.costs, self.space, self.G
        usable = np.array([any(np.isfinite(costs.memory(self.phase, key.batch).P[g, -1]) for g in self.kinds if costs.group[g] == k) for k in range(G)])
        sel = (space.total >= key.lo) & ((self.s_min <= key.hi) if self.tp_mode else (space.total <= key.hi))
        sel &= ~(space.cells[:, ~usable] > 0).any(axis=1)
        sel &= self.most >= key.batch
        return np.nonzero(sel)[0]

    def rest(self, key: Key) -> np.ndarray:
        """A cheaper, looser bound than `row` on the same pipelines, for the keys a CPU deadline leaves
        no time to bound by `row` (its cost is the key's stage costs alone). A stage of kind g
        (type t, tp_g devices) busy at most R covers units whose tp_g·c_g(u) sum to at most tp_g·R,
        so with a_t(u) = min over t's kinds of tp_g·c_g(u), the units a type covers sum to at most
        R·n_t; weighting each type by y_t ≥ 0, R ≥ Σ_u min_t y_t·a_t(u) / Σ_t y_t·n_t (y_t = one
        over t's total: the LP's balance when types differ by a speed alone). Also R ≥ every unit's
        least busy time on a kind that holds it alone."""
        out = np.zeros(len(self.space))
        costs, idx = self.costs, self.cells(key)
        case = costs.case(self.phase, key.top, key.m, fit=key.batch, floor=True)
        if case is None or not len(idx):
            return out
        kk = np.array([g for g in self.kinds if np.isfinite(case.P[g, -1])], dtype=np.int64)
        holds = case.jfit[kk] > np.arange(costs.u)  # kind g holds unit u alone
        busy = np.where(holds, np.diff(case.P[kk], axis=1), INF)  # [K, U]
        least = (busy + case.over[kk][:, None]).min(axis=0).max()
        a = np.full((self.G, costs.u), INF)
        for i, g in enumerate(kk):
            np.minimum(a[costs.group[g]], costs.tp[g] * busy[i], out=a[costs.group[g]])
        if not np.isfinite(least):  # some unit no kind holds alone: no pipeline at this key
            return out
        finite = np.isfinite(a)
        total = np.where(finite, a, 0.0).sum(axis=1)
        y = np.where(finite.any(axis=1) & (total > 0), 1.0 / np.where(total > 0, total, 1.0), 0.0)
        W = float(np.where(finite, y[:, None] * np.where(finite, a, 0.0), INF).min(axis=0).sum())
        cap = self.space.cells[idx] @ y
        R = np.maximum(least, np.divide(W, cap, out=np.full(len(idx), INF), where=cap > 0)) / (1 + SLACK)
        out[idx] = np.divide(float(key.rate(costs.tables.wl.output_len)), R, out=np.zeros(len(idx)), where=np.isfinite(R))
        return out

    def _bound(self, key: Key, idx: np.ndarray, best: np.ndarray) -> np.ndarray:
        """FirstPass.row at one key for the cells `idx`."""
        costs, kinds, G = self.costs, self.kinds, self.G
        out = np.zeros(len(idx))
        batch, hi = key.batch, key.hi
        case = costs.case(self.phase, key.top, key.m, fit=batch, floor=True)
        if case is None or not len(idx):
            return out
        rate = np.full(len(idx), float(key.rate(costs.tables.wl.output_len)))
        Wc = weightings(costs, case, self.phase, batch, self.one)
        total = Wc[-1] * (1 - 1e-12)
        caps = [kind_caps(costs, case, g, Wc) if g in kinds else None for g in range(len(costs.kinds))]
        if all(c is None for c in caps):
            return out
        cnt = self.space.cells[idx].astype(float)
        tp_mode, one_of = self.tp_mode, self.one_of

        members = [[g for g in kinds if costs.group[g] == k] for k in range(G)]

        def per_group(cap: np.ndarray, lam) -> np.ndarray:
            """[groups, n, W]: max(0, max over the group's kinds g of (cap_g − λ) / tp_g)."""
            out = np.zeros((G,) + cap.shape[1:])
            for k, gs in enumerate(members):
                if gs:
                    np.maximum(out[k], ((cap[gs] - lam) / costs.tp[gs][:, None, None]).max(axis=0), out=out[k])
            return out

        per_device = _per_device(caps, costs.group, costs.tp, G)

        def feasible(R: np.ndarray, rows: np.ndarray) -> np.ndarray:
            c = cnt[rows]
            ok = (np.einsum("nk,knw->nw", c, _caps_at(per_device, R, Wc.shape[1])) >= total).all(axis=1)  # λ = 0: exact when ≤ hi devices
            big = np.nonzero(ok & (c.sum(axis=1) > hi))[0] if tp_mode else np.zeros(0, dtype=np.int64)
            cap: Any = _caps_at(caps, R[big], Wc.shape[1]) if len(big) else None  # [kinds, big, W]
            for k in range(G) if len(big) else ():  # a binding stage budget: λ = each group's one-device cap
                lam = np.max([cap[g] for g in one_of[k]], axis=0)
                held = (lam * hi + np.einsum("nk,knw->nw", c[big], per_group(cap, lam)) >= total).all(axis=1)
                ok[big[~held]] = False  # each λ only rules cells out: the next one checks those still standing
                big, cap = big[held], cap[:, held]
                if not len(big):
                    break
            return ok

        cand = np.unique(np.concatenate([c[0] for c in caps if c is not None]))
        rows = np.arange(len(idx))
        known = best[idx] > 0
        if known.any():  # can this key come near the bound so far? not if infeasible where it would
            near = feasible(rate[known] / (NEAR * best[idx[known]]), rows[known])
            out[rows[known][~near]] = NEAR * best[idx[known][~near]]
            rows = np.concatenate([rows[known][near], rows[~known]])
        rows = rows[feasible(np.full(len(rows), cand[-1]), rows)]
        lo_i, hi_i = np.zeros(len(rows), dtype=np.int64), np.full(len(rows), len(cand) - 1)
        while len(rows) and (lo_i < hi_i).any():
            act = lo_i < hi_i
            mid = (lo_i + hi_i) // 2
            f = feasible(cand[mid], rows)
            hi_i = np.where(act & f, mid, hi_i)
            lo_i = np.where(act & ~f, mid + 1, lo_i)
        out[rows] = rate[rows] / cand[lo_i]
        return out


class Rows:
    """The first pass of one phase, row by row, so that a CPU deadline can cut it: V [keys, cells]
    holds `FirstPass.row` for the first `done` keys (from the largest batch down, so that later keys
    can skip cells far below the bound so far) and, once `cut`, `FirstPass.rest` for the others,
    which `step` tightens to `row` later (taking the least of the two: both are bounds)."""

    def __init__(
        self,
        costs: StageCosts,
        space: CountSpace,
        phase: Phase,
        max_stages: int,
        ceiling: int,
        regimes: Regimes | None = None,
        per_octave: int = PER_OCTAVE,
    ) -> None:
        self.fp = FirstPass(costs, space, phase)
        regimes = regimes or Regimes(costs.tables.wl, phase, ceiling)
        self.keys = sorted(keys(phase, max_stages, ceiling, regimes, per_octave), key=lambda k: (-k.rate(costs.tables.wl.output_len), k.lo))
        self.V = np.zeros((len(self.keys), len(space)))
        self.best = np.zeros(len(space))  # the least bound so far from `row`s
        self.done, self.cut = 0, False
        self.rested: dict[int, np.ndarray] = {}  # `rest` of keys timed before the pass (cell_bound._rest_cost): kept for `cut_here`

    @property
    def left(self) -> int:
        return len(self.keys) - self.done

    def step(self) -> None:
        """`row` of the next key."""
        ki = self.done
        got = self.fp.row(self.keys[ki], self.best)
        self.V[ki] = np.minimum(self.V[ki], got) if self.cut else got  # a cut row may be refined (0) meanwhile: kept
        np.maximum(self.best, got, out=self.best)
        self.done += 1

    def cut_here(self) -> None:
        """`rest` for every key not yet bounded by `row`."""
        for ki in range(self.done, len(self.keys)):
            self.V[ki] = self.rested[ki] if ki in self.rested else self.fp.rest(self.keys[ki])
        self.cut = True


def first_pass(
    costs: StageCosts, space: CountSpace, phase: Phase, max_stages: int, ceiling: int, regimes: Regimes | None = None, per_octave: int = PER_OCTAVE
) -> tuple[list[Key], np.ndarray]:
    """The keys of `phase` and V [keys, cells] (`Rows` to the end)."""
    rows = Rows(costs, space, phase, max_stages, ceiling, regimes, per_octave)
    while rows.left:
        rows.step()
    return rows.keys, rows.V
