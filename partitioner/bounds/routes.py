"""Prefill pools' KV routes in column generation (colgen.py), as the cell bound's `route_caps` count them.

A prefill pool sends each prompt's KV from its last stage to a decode pool's first stage
(search/kv_routes.py), and the solver caps the pool at its slowest route. A pool ending on type t
thus feeds at most A_t output tok/s (`StageCosts.feed_across`: the fastest route to another node),
unless every decode pool starts inside its node, on its own type t, where it feeds at most I_t
(`feed_inside`). With r_p the tok/s pricing gave prefill column p (t(p) its last stage's type), d_q
a decode column's (t(q) its first stage's), the master's feed rows are

    F ≤ Σ_q d_q·x_q                                          (μ_d)
    F ≤ Σ_p min(r_p, A_t(p))·x_p + Σ_t i_t                   (μ_p)
    i_t ≤ Σ_{p: t(p) = t} (min(r_p, I_t) − min(r_p, A_t))·w_p  (ρ_t)
    i_t ≤ Σ_{q: t(q) = t} d_q·z_q                             (β_t)
    w_p ≤ x_p,  z_q ≤ x_q,  Σ_t (Σ_{p: t(p) = t} w_p + Σ_{q: t(q) = t} z_q) / M_t ≤ 1   (κ)

with an i_t only for the types `inside` marks (a route inside beats the network's), M_t the largest
node of type t. Every plan is a point of them: its pools' feeds over the network go in the first sum;
where a pool's route is inside a node, every decode pool starts in that node, on its type t (one
node, then), and its feed past A_t, trimmed to what the decode pools take, is an i_t within their
tok/s; w and z count those pools, each on its own device of the node. The last row matters: with
per-type rows alone the master fed 3.6 decode pools from 10.4 prefill pools inside Gaudi 3 nodes of
at most 8 (gen41: LP 225,898 against 221,921 with it, over the same columns). Without these rows (before) column
generation credited a pool its whole tok/s: gen41 of the generated clusters (25 GbE, llama-3.1-8b,
128 MB of KV per prompt) ran single-Gaudi 3 prefill pools of 16,088 tok/s whose KV crosses at 5,959.

Pricing values a prefill pool ending on t at μ_p·min(r, A_t) + (ρ_t·(min(r, I_t) − A_t)⁺ − κ/M_t)⁺ and
a decode pool starting on t at μ_d·d + (β_t·d − κ/M_t)⁺ (the w and z columns' duals at their least),
each priced by a pricer restricted to those types (`groups`); the Lagrangian bound adds κ and needs
the duals of F and i_t feasible, μ_d + μ_p ≥ 1 and μ_p ≤ ρ_t + β_t (`feasible`). Where no one-device
prefill pool can outrun its route across nodes (`where_slow`) column generation keeps its plain feed rows.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
from ortools.linear_solver import pywraplp

from hetc.partitioner.bounds.pricing import KeyPricer, Worth
from hetc.partitioner.bounds.stage_costs import StageCosts
from hetc.scheduling import Phase

__all__ = ["Group", "Routes"]

INF = np.inf


@dataclass(frozen=True, slots=True)
class Group:
    """Pools of one phase priced together: their first (decode) or last (prefill) stage's types."""

    first: np.ndarray | None  # [T] bools; None: any
    last: np.ndarray | None
    inside: int = -1  # the type whose i_t the pools feed (prefill) or take (decode); −1: none
    across: float = INF  # prefill: the cap over the network of every type in the group


@dataclass(frozen=True, slots=True)
class Routes:
    """Per type: A_t (inf where no pool can exceed it), I_t, whether it has an i_t, and M_t."""

    across: np.ndarray
    inside_rate: np.ndarray
    inside: np.ndarray
    type_of: np.ndarray  # per kind
    node: np.ndarray  # per type: its largest node's devices
    starts: np.ndarray | None = None  # per type: whether a decode pool may start on it (None: any)

    @staticmethod
    def of(costs: StageCosts, most: float) -> Routes:
        """The routes of `costs`' cluster where no prefill pool feeds more than `most` tok/s: a cap at or
        above it never binds, nor does a route inside that would beat it."""
        across = np.where(costs.feed_across >= most, INF, costs.feed_across)
        inside = (costs.feed_inside > across) & np.isfinite(across)
        node = np.zeros(len(across))
        for g, k in enumerate(costs.kinds):
            node[costs.type_of[g]] = max(node[costs.type_of[g]], max(n.count for n in k.nodes))
        return Routes(across, costs.feed_inside, inside, costs.type_of, node)

    @staticmethod
    def where_slow(costs: StageCosts, prefill: list[KeyPricer]) -> Routes | None:
        """`of` over the prefill keys' pricers (`prefill`), where a one-device pool could outrun its route across
        nodes (gen41: 25 GbE, 16,088 tok/s against 5,959), else None: a pricer per type costs passes, and on a
        fast network (gen13: RoCE 100G) the bound no longer converged within the limit (0.995 -> 0.863)."""
        alone = max([p.rate / max(p.least, p.busy()) for p in prefill if p.key.lo == 1 and len(p.cand)], default=0.0)
        if not (costs.feed_across < alone).any():
            return None
        return Routes.of(costs, max([p.rate / p.least for p in prefill if len(p.cand)], default=0.0))

    def split(self, costs: StageCosts, alone: list[int]) -> list[Routes]:
        """These routes as sets that every plan's decode pools lie in one of (pools7's sets in kv_feed.py): per
        type u of `alone`, decode pools starting on u only, a prefill pool ending on t capped at r[t, u] (the
        fastest route from a node of t to another node of u; for t = u, inside one node too: an i_u); and one
        set for the rest: decode pools starting on several types (each pool capped at its slowest route, so at
        most the second largest of r[t, ·]) or on one type not in `alone` (r[t, u], an i_u as here). The
        bound is the largest of the sets' bounds."""
        T = len(self.across)
        r, full = costs.feed_routes(inside=False), costs.feed_routes()
        never = np.isinf(self.across)  # no pool outruns even the fastest route
        out = []
        for u in alone:
            one = np.arange(T) == u
            across = np.where(never, INF, r[:, u])
            out.append(replace(self, across=across, inside=one & (self.inside_rate > across) & np.isfinite(across), starts=one))
        others = np.ones(T, dtype=bool)
        others[alone] = False
        across = np.maximum(np.sort(full, axis=1)[:, -2], np.where(others[None, :], r, 0.0).max(axis=1))
        across = np.where(never, INF, across)
        out.append(replace(self, across=across, inside=others & (self.inside_rate > across) & np.isfinite(across), starts=None))
        return out

    def groups(self, phase: Phase) -> list[Group]:
        """The pricers a pool key of `phase` takes: one per type with an i_t, one per cap over the rest."""
        T = len(self.across)
        mine = []
        for t in np.nonzero(self.inside)[0]:
            one = np.arange(T) == t
            mine.append(Group(None, one, int(t), float(self.across[t])) if phase == Phase.PREFILL else Group(one, None, int(t)))
        rest = ~self.inside if self.starts is None else self.starts & ~self.inside
        if phase == Phase.DECODE:
            return mine + ([Group(rest if mine or self.starts is not None else None, None)] if rest.any() else [])
        for cap in np.unique(self.across[rest]):
            last = rest & (self.across == cap)
            mine.append(Group(None, None if last.all() else last, -1, float(cap)))
        return mine

    def worth(self, phase: Phase, g: Group, mu: np.ndarray, rho: np.ndarray, beta: np.ndarray, kappa: np.ndarray) -> Worth:
        """What the tok/s of a pool of group `g` are worth at the duals (mu: μ_d, μ_p; kappa: [κ])."""
        t = g.inside
        if t < 0:
            return Worth(mu[0]) if phase == Phase.DECODE else Worth(mu[1], g.across)
        toll = float(kappa[0]) / self.node[t]
        if phase == Phase.DECODE:
            return Worth(mu[0], INF, beta[t], INF, 0.0, toll)
        return Worth(mu[1], g.across, rho[t], self.inside_rate[t], g.across, toll)

    def rows(self, s: pywraplp.Solver, pipes: list, x: list, prefill: pywraplp.Constraint) -> tuple[dict, dict, pywraplp.Constraint]:
        """The feed rows past `prefill` (F − Σ … ≤ 0, no pool in it yet) over `pipes` (cell_bound.Pipeline
        per column, x its variable): (ρ rows, β rows) per type with an i_t, and the κ row."""
        inf = s.infinity()
        rho, beta = {}, {}
        node = s.Constraint(-inf, 1.0)

        def within(v: pywraplp.Variable, t: int) -> pywraplp.Variable:  # w_p or z_q: at most x, on a device of the node
            u = s.NumVar(0, inf, "")
            below = s.Constraint(-inf, 0.0)
            below.SetCoefficient(u, 1.0)
            below.SetCoefficient(v, -1.0)
            node.SetCoefficient(u, 1.0 / self.node[t])
            return u

        for t in np.nonzero(self.inside)[0].tolist():
            i_t = s.NumVar(0, inf, "")
            prefill.SetCoefficient(i_t, -1.0)
            rho[t], beta[t] = s.Constraint(-inf, 0.0), s.Constraint(-inf, 0.0)
            rho[t].SetCoefficient(i_t, 1.0)
            beta[t].SetCoefficient(i_t, 1.0)
        for p, v in zip(pipes, x):
            if p.phase == Phase.PREFILL:
                t = int(self.type_of[p.kinds[-1]])
                prefill.SetCoefficient(v, -min(p.tok_s, self.across[t]))
                if t in rho:
                    rho[t].SetCoefficient(within(v, t), -(min(p.tok_s, self.inside_rate[t]) - min(p.tok_s, self.across[t])))
            elif p.phase == Phase.DECODE and self.starts is not None and not self.starts[self.type_of[p.kinds[0]]]:
                v.SetUb(0.0)  # a decode pool this set of routes has none of
            elif p.phase == Phase.DECODE and (t := int(self.type_of[p.kinds[0]])) in beta:
                beta[t].SetCoefficient(within(v, t), -p.tok_s)
        return rho, beta, node

    def feasible(self, mu: np.ndarray, rho: np.ndarray, beta: np.ndarray) -> np.ndarray:
        """ρ raised where μ_p > ρ_t + β_t (GLOP's duals within its tolerance, or none yet): the i_t columns'
        dual rows, which the bound needs; raising ρ only raises what pricing values pools at."""
        return np.where(self.inside, np.maximum(rho, mu[1] - beta), rho)
