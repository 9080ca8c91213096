"""A lower bound on the latency objective: the least TPOT of any pipeline the solver can build.

A pipeline of n stages at batch b keeps m = min(n, b) micro-batches of s = b/k seats in
flight (k ≥ m micro-steps per pass, simulate.Round.of), and its TPOT is its round × the share
of the round a decoding sequence waits, at least the loop term: TPOT ≥ (k/m)·Σ_i A_i(s) +
Σ_i links, where A_i(s) is stage i's busy time per round × that share — a seat's mean step on
the stage (its decode and mixed steps weighted as the round holds them), the step overhead
included — and k/m ≥ 1. Two properties carry it down to one sequence (s = 1, b = 1):
- a link's time is affine and nondecreasing in its bytes, which grow with s (proved);
- A_i(s) ≥ A_i(1): a seat's mean step does not get faster as a step takes more seats. In the
  analytic model a step's time grows with its rows and context where efficiency curves do not
  rise faster than their rows; that is measured, not proved (test_latency_bound.py: every
  catalog profile, tp 1 and 4, every seat count of several workloads), as batches.py measures
  its per-sequence property.
At one sequence every stage's A_i is additive over its units (simulate.unit_round_costs), so
the least TPOT over all chains of stages — any kind per stage, tensor-parallel groups
included, each stage's units within its memory at one sequence — is a shortest path over the
units: a dynamic program over where each stage ends and its kind, with the cheapest link
between the two kinds' nodes. Device counts and the shared batch are relaxed. The costs are the bound's
(tables.py: a profile's envelope where its curves fall, never more than the model), so the
bound holds for every plan with any integer batch.
"""

from __future__ import annotations

import itertools

import numpy as np

from hetc.cluster import Cluster
from hetc.partitioner.cost_models.links import hops
from hetc.partitioner.simulate import Round
from hetc.partitioner.tables import Kind, Tables

__all__ = ["tpot_bound"]


def _links(tables: Tables, kinds: list[Kind], cluster: Cluster, r: Round) -> dict[float, np.ndarray]:
    """{bytes per token: L}: L[g, h] the least seconds per round a stage of kind g sends that many
    bytes per token to a next stage of kind h (any two of their nodes; one node where it holds both)."""
    out: dict[float, np.ndarray] = {}
    for x in {u.out_bytes_per_token for u in tables.units}:
        cost = np.full((len(kinds), len(kinds)), np.inf)
        for (gi, g), (hi, h) in itertools.product(enumerate(kinds), repeat=2):
            for a, b in itertools.product(g.nodes, h.nodes):
                if a is not b or a.count >= g.tp + h.tp:
                    cost[gi, hi] = min(cost[gi, hi], r.link_time(x, hops(cluster, a, b)))
        out[x] = cost
    return out


def tpot_bound(tables: Tables, kinds: list[Kind], cluster: Cluster) -> float:
    """Seconds: no pipeline over `kinds` has a smaller TPOT, at any batch (module docstring).

    Args:
        tables: the units' per-kind costs and memory fits (the planner's workload).
        kinds: the stage kinds plans may use (device type × tp degree).
    """
    u, n = len(tables.units), len(kinds)
    r = Round.of(tables.wl, 1, 1)
    share = r.tpot_share
    links = {x: cost * share for x, cost in _links(tables, kinds, cluster, r).items()}
    best = np.full((u + 1, n), np.inf)  # best[i, g]: the least TPOT share of units i … u−1, a stage of kind g first
    after = np.full((u + 1, n), np.inf)  # after[e, g]: what follows a stage of kind g that ends before unit e
    after[u] = 0.0
    per_kind = []
    for g in kinds:
        cost, over = tables.unit_costs(g, 1, 1)
        per_kind.append((np.concatenate([[0.0], np.cumsum(cost)]) * share, over * share, tables.fits(g, 1)))
    for i in range(u - 1, -1, -1):
        ends = np.arange(i + 1, u + 1)  # the stage holds units i … end − 1
        for gi, (prefix, over, fits) in enumerate(per_kind):
            ok = fits[i, ends - i]
            if ok.any():
                best[i, gi] = float(np.min((prefix[ends] - prefix[i] + over + after[ends, gi])[ok]))
        if i:  # a stage ending before unit i sends unit i − 1's output to the next, of any kind h
            after[i] = np.min(links[tables.units[i - 1].out_bytes_per_token] + best[i][None, :], axis=1)
    return float(best[0].min())
