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
units: a dynamic program over where each stage ends, with the cheapest link any two stages can
have between them. Device counts and the shared batch are relaxed. The costs are the bound's
(tables.py: a profile's envelope where its curves fall, never more than the model), so the
bound holds for every plan with any integer batch.
"""

from __future__ import annotations

import numpy as np

from hetc.cluster import Cluster
from hetc.partitioner.cost_models.links import hops
from hetc.partitioner.simulate import Round
from hetc.partitioner.tables import Kind, Tables

__all__ = ["tpot_bound"]


def _cheapest_links(tables: Tables, cluster: Cluster, r: Round) -> np.ndarray:
    """link[v]: the least seconds per round any two consecutive stages' link takes for unit v's
    output (the stage before ends at unit v)."""
    paths = [hops(cluster, a, b) for a in cluster.nodes for b in cluster.nodes if a is not b or a.count > 1]
    return np.array([min((r.link_time(x.out_bytes_per_token, p) for p in paths), default=0.0) for x in tables.units])


def tpot_bound(tables: Tables, kinds: list[Kind], cluster: Cluster) -> float:
    """Seconds: no pipeline over `kinds` has a smaller TPOT, at any batch (module docstring).

    Args:
        tables: the units' per-kind costs and memory fits (the planner's workload).
        kinds: the stage kinds plans may use (device type × tp degree).
    """
    u = len(tables.units)
    r = Round.of(tables.wl, 1, 1)
    share = r.tpot_share
    link = _cheapest_links(tables, cluster, r) * share
    best = np.full(u + 1, np.inf)  # best[i]: the least TPOT share of units i … u−1
    best[u] = 0.0
    per_kind = []
    for g in kinds:
        cost, over = tables.unit_costs(g, 1, 1)
        per_kind.append((np.concatenate([[0.0], np.cumsum(cost)]) * share, over * share, tables.fits(g, 1)))
    for i in range(u - 1, -1, -1):
        ends = np.arange(i + 1, u + 1)  # the stage holds units i … end − 1
        after = best[ends] + np.where(ends < u, link[ends - 1], 0.0)  # the last stage sends nothing on
        for prefix, over, fits in per_kind:
            ok = fits[i, ends - i]
            if ok.any():
                best[i] = min(best[i], float(np.min((prefix[ends] - prefix[i] + over + after)[ok])))
    return float(best[0])
