"""Per-kind stage costs for one operating point, as the bound's relaxation counts them.

For a phase, a batch and m micro-batches, `StageCosts.case` gives per stage kind the
prefix sums of its units' busy seconds per round (simulate.unit_round_costs), its fixed
overhead per round, the furthest unit a stage starting at each unit can hold in memory,
and the link busy time between two types at each cut (the fastest path between any of
their nodes; within a type, its node's fabric). `feed_across` and `feed_inside` bound what a prefill
pool ending on each type can hand a decode pool: its prompts' KV over the fastest route a plan
could give it, across nodes or inside one.

Devices are counted per type: `group` (per kind) and `devices` (per type) name the count a
stage draws on (the cell bound enumerates vectors of them up to cell_bound.MAX_CELLS; past
that, column generation bounds without enumerating them).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from hetc.cluster import TP_SIZES, Cluster
from hetc.partitioner.cost_models.links import hops, transfer_time
from hetc.partitioner.estimate.tables import Kind, Tables
from hetc.scheduling import Phase

__all__ = ["Case", "StageCosts", "SLACK"]

INF = np.inf
SLACK = 1e-9
SHIFT = 1 << 22  # more than any `most` (tables.MOST): rows of most apart in one sorted array


@dataclass(frozen=True, slots=True)
class Case:
    """Costs at one operating point. P[g, i]: busy seconds per round of units [0, i) on kind g
    (inf where g can't serve this phase); over[g]: fixed seconds per round; jfit[g, i]: the
    furthest end (exclusive) of a memory-feasible stage of kind g starting at unit i;
    link[t', t, i]: seconds per round the link from type t' to type t is busy at cut i;
    cheapest[t', t]: the same at its cheapest cut."""

    P: np.ndarray
    over: np.ndarray
    jfit: np.ndarray
    link: np.ndarray
    cheapest: np.ndarray


class StageCosts:
    """Stage kinds grouped into device types, and their costs per (phase, batch, m), cached."""

    def __init__(self, tables: Tables, kinds: list[Kind], cluster: Cluster) -> None:
        self.tables, self.kinds, self.u = tables, kinds, len(tables.units)
        self.types = list(dict.fromkeys(k.type_key for k in kinds))
        first = [next(k for k in kinds if k.type_key == t) for t in self.types]
        per_type = np.array([sum(nd.count for nd in k.nodes) for k in first], dtype=np.int64)
        self.devices = per_type
        self.room = np.array([k.profile.usable_memory for k in first], dtype=float)  # per type: usable bytes
        self.type_of = np.array([self.types.index(k.type_key) for k in kinds])
        self.group = self.type_of  # per kind: the device count it draws on
        self.tp = np.array([k.tp for k in kinds], dtype=np.int64)
        self.paths = {(a, b): _paths(cluster, ka, kb) for a, ka in enumerate(first) for b, kb in enumerate(first)}
        self.out_bytes = np.array([u.out_bytes_per_token for u in tables.units])
        self.period = _period(tables.units)
        # [T, T, paths]: each path's latency and 1/bandwidth summed over its hops (0 for a path of none); inf
        # latency pads a pair with fewer paths. Only each pair's Pareto front: a link's time is messages·lat +
        # bytes·inv with both factors ≥ 0, so a path no faster in either never is the least (gen25: 36 → 1-2 a pair)
        fronts = {ab: _front([(sum(h.latency for h in p), sum(1 / h.bandwidth for h in p)) for p in paths]) for ab, paths in self.paths.items()}
        width = max(len(f) for f in fronts.values())
        T = len(self.types)
        lat, inv = np.full((T, T, width), INF), np.zeros((T, T, width))
        for (a, b), front in fronts.items():
            for j, (la, iv) in enumerate(front):
                lat[a, b, j], inv[a, b, j] = la, iv
        self._alpha_beta = (lat, inv)
        self.feed_across, self.feed_inside, self.feed_to = _feeds(tables, cluster, first)
        self._most: dict = {}
        self._cases: dict = {}
        self._memory: dict = {}
        self._link: dict = {}
        self._ranges: dict = {}

    def devices_of(self, kinds: Sequence[int]) -> np.ndarray:
        """[types]: the devices of each type a chain of `kinds` (indices into self.kinds) takes."""
        ks = list(kinds)
        return np.bincount(self.type_of[ks], weights=self.tp[ks], minlength=len(self.types))

    def feed_routes(self, inside: bool = True) -> np.ndarray:
        """[types, types] r[t, u]: the most output tok/s a prefill pool ending on t feeds where every decode pool
        starts on u: the fastest route from a node of t to another node of u (`feed_to`, at most `feed_across`),
        and with `inside`, for t = u inside one of its nodes too (`feed_inside`)."""
        r = np.minimum(self.feed_to, self.feed_across[:, None])
        if inside:
            r[np.diag_indices(len(r))] = np.maximum(r.diagonal(), self.feed_inside)
        return r

    def case(self, phase: Phase, batch: int, m: int, use: np.ndarray | None = None, fit: int | None = None, floor: bool = False) -> Case | None:
        """Costs for `phase` at `batch` sequences in flight (prefill pools: prompts) and m
        micro-batches, with memory at `fit` sequences (default `batch`; batches.py: costs at an
        interval's top, memory at its first batch), for the kinds `use` marks (default all; the
        others cost inf); None if no kind holds any unit. Pools are one device per stage."""
        fit = batch if fit is None else fit
        key = (phase, batch, m, fit, None if use is None else use.tobytes(), floor)
        if key not in self._cases:
            mem = self.memory(phase, fit)
            P, over = mem.P.copy(), np.zeros(len(self.kinds))
            for g, kind in enumerate(self.kinds):
                if use is not None and not use[g]:
                    P[g] = INF
                elif np.isfinite(P[g, -1]):
                    cost, over[g] = self.tables.unit_costs(kind, m, batch, phase, floor)
                    P[g, 1:] = np.cumsum(cost)
            link, cheapest = self.links(phase, batch, m, floor)
            self._cases[key] = None if np.isinf(P).all() else Case(P, over, mem.jfit, link, cheapest)
        return self._cases[key]

    def memory(self, phase: Phase, batch: int) -> Case:
        """Memory only, at `batch`: stage costs and links 0 where a kind can serve `phase` (inf where
        not), so a cover at any R says whether some chain fits."""
        key = (phase, batch)
        if key not in self._memory:
            u, G, T = self.u, len(self.kinds), len(self.types)
            if phase not in self._most:  # every kind's most[i, 1:] (nonincreasing: most shrinks with the range), row
                # after row in one sorted array: −most, each row (g, i) shifted by its index × SHIFT
                most = np.stack([self.tables.most(kind, phase)[:u, 1:] for kind in self.kinds]).reshape(G * u, u)
                self._most[phase] = (np.arange(G * u)[:, None] * SHIFT - most).ravel()
            row = np.arange(G * u) * SHIFT
            ks = (np.searchsorted(self._most[phase], row - batch, side="right") - np.arange(G * u) * u).reshape(G, u)
            jfit = np.arange(u) + ks  # the stages from i holding at least `batch` sequences end by i + ks
            pools = np.array([phase != Phase.BOTH and kind.tp > 1 for kind in self.kinds])
            P = np.where((~ks.any(axis=1) | pools)[:, None], INF, np.zeros((G, u + 1)))
            self._memory[key] = Case(P, np.zeros(G), jfit, np.zeros((T, T, u + 1)), np.zeros((T, T)))
        return self._memory[key]

    def links(self, phase: Phase, batch: int, m: int, floor: bool = False) -> tuple[np.ndarray, np.ndarray]:
        """link[t', t, i] and cheapest[t', t] (see Case) at one operating point, cached (`floor`: past the budget, at
        its floor per sequence: budget_floor.py)."""
        key = (phase, batch, m, floor)
        if key not in self._link:
            u = self.u
            messages, tokens = self.tables.traffic(m, batch, phase, max(TP_SIZES), floor)  # the most budget: the fewest messages any pipeline sends
            T = len(self.types)
            link = np.zeros((T, T, u + 1))
            ob = self.out_bytes[: u - 1]  # crossing cut i: the output of unit i − 1
            lat, inv = self._alpha_beta  # Round.link_time, vectorized over type pairs, paths and cuts (α–β per hop)
            link[:, :, 1:u] = (messages * lat[..., None] + tokens * ob * inv[..., None]).min(axis=2)
            self._link[key] = (link, link[:, :, 1:u].min(axis=2) if u > 1 else np.zeros((T, T)))
        return self._link[key]

    def ranges(self, case: Case, g: int) -> tuple[np.ndarray, np.ndarray]:
        """(starts, ends) of the memory-feasible stages of kind g, one of each distinct content:
        inside the model's repeating middle a range equals its copy one period earlier."""
        key = case.jfit[g].tobytes()  # memory alone decides them: shared by every cost at one fit
        if key not in self._ranges:
            U = self.u
            i = np.arange(U)
            n = np.maximum(case.jfit[g] - i, 0)
            ii = np.repeat(i, n)
            jj = ii + 1 + np.arange(n.sum()) - np.repeat(np.cumsum(n) - n, n)
            a, b, p = self.period
            keep = ~((ii >= a + p) & (jj <= b))
            self._ranges[key] = ii[keep], jj[keep]
        return self._ranges[key]

    def reach(self, case: Case, R: float) -> np.ndarray:
        """reach[g, i]: the furthest end of a stage of kind g starting at unit i within R and memory
        (i where none). R is widened by a relative 1e-9: equal stage times summed in another
        order differ in their last bits."""
        U = self.u
        R = R * (1 + SLACK)
        out = np.tile(np.arange(U), (len(self.kinds), 1))
        for g in range(len(self.kinds)):
            if np.isfinite(case.P[g, 0]):
                j = np.searchsorted(case.P[g], case.P[g, :U] + (R - case.over[g]), side="right") - 1
                out[g] = np.maximum(np.minimum(j, case.jfit[g]), np.arange(U))
        return out


def _paths(cluster: Cluster, ka: Kind, kb: Kind) -> list[list]:
    """The paths a link from a stage of ka's type to a stage of kb's can take (the bound takes the
    fastest). Two stages of one type share a node only where it holds two devices, else they cross
    the network between two of its nodes: a type of single-device nodes is not priced as if its
    stages talked inside one (a free link, which let the bound chain them over a 10 GbE network).
    """
    if ka.type_key != kb.type_key:
        return [hops(cluster, x, y) for x in ka.nodes for y in kb.nodes]
    inside = [hops(cluster, x, x) for x in ka.nodes if x.count > 1]
    across = [hops(cluster, x, y) for x in ka.nodes for y in ka.nodes if x.name != y.name]
    return inside + across or [hops(cluster, ka.nodes[0], ka.nodes[0])]  # one device: no two stages of the type anyway


def _front(paths: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """The (latency, 1/bandwidth) pairs no other pair is at most in both (one of equal pairs kept)."""
    out: list[tuple[float, float]] = []
    for la, iv in sorted(set(paths)):  # latency ascending: a pair stays where its 1/bandwidth is below every kept one's
        if not out or iv < out[-1][1]:
            out.append((la, iv))
    return out


def _feeds(tables: Tables, cluster: Cluster, first: list[Kind]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per type, the most output tok/s one prefill pool whose last stage is of that type can feed, its
    prompts' KV sent over the fastest route any plan could give it (search/kv_routes.py's `kv_transfers` sends
    it from the pool's last stage to a decode pool's first, on other devices, and caps the pool at its
    slowest route's rate: every real pool is within this): (across, inside). across: to a device of
    another node, of any type; inside: to another device of one of its own nodes, which only a decode
    pool starting on the same type can be (0 where no node of the type holds two devices); and [types,
    types] to: across to a device of another node of the second type (kv_feed.py's sets of routes).

    Args:
        first: one kind of each type, in the order of `StageCosts.types`.
    """
    wl = tables.wl
    nbytes = wl.input_len * (wl.kv_bytes(tables.units, wl.input_len) / wl.input_len)  # as the solver prices a route

    def rate(paths: list[list]) -> float:
        seconds = min((transfer_time(nbytes, p) for p in paths), default=INF)
        return wl.output_len / seconds if seconds > 0 else INF

    to = np.array([[rate([hops(cluster, x, y) for y in kb.nodes for x in ka.nodes if x.name != y.name]) for kb in first] for ka in first])
    inside = [rate([hops(cluster, x, x) for x in ka.nodes if x.count > 1]) for ka in first]
    return to.max(axis=1), np.array(inside), to


def _period(units: list) -> tuple[int, int, int]:
    """(a, b, p): units [a, b) repeat with period p (the longest such run, p ≤ 8); (0, 0, 1) if none."""
    sig = [(u.cost_key, u.param_bytes, u.kv_bytes_per_token, u.kind, u.out_bytes_per_token, u.draft) for u in units]
    ids = np.array([{s: k for k, s in enumerate(dict.fromkeys(sig))}[s] for s in sig])
    best = (0, 0, 1)
    for p in range(1, min(8, len(ids) - 1) + 1):
        same = np.concatenate([[False], ids[p:] == ids[:-p], [False]])
        edges = np.flatnonzero(np.diff(same.astype(np.int8)))
        for start, stop in zip(edges[::2], edges[1::2]):  # same[u] for u in [start, stop): ids[u] == ids[u+p]
            if stop + p - start > best[1] - best[0]:
                best = (int(start), int(stop + p), p)
    return best
