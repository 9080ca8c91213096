"""A lower bound on the latency objective: the least TPOT of any pipeline the solver can build.

A pipeline of n stages at batch b keeps m = min(n, b) micro-batches in flight (k ≥ m
micro-steps per pass, simulate.Round.of), and its TPOT is its round × the share of the round a
decoding sequence waits, at least the loop term: TPOT ≥ (k/m)·Σ_i S_i + links, where S_i is a
seat's mean step on stage i (its decode and mixed steps weighted as the round holds them, the
step overhead included) and k/m ≥ 1. A mean is at least its least step, so:
- every step of stage i, whatever its seats, rows and prompt chunks, costs at least one decode
  step of one sequence on the stage's units in the stage's profile made flat (envelope.flat_node:
  every efficiency curve at its maximum along the step's size, so no op costs more than the
  profile says at any size, and an op's time grows with its rows, bytes and context), attending
  to the shorter of the decode and the prompt-chunk contexts (`least_step`); a step with
  prompt tokens is not replayed as a graph and pays every launch. That the flat decode step of one
  sequence is the least is measured, not proved, for the mixed steps' prefill part
  (test_latency_bound.py: every catalog profile, tp 1 and 4, every step of every round of many
  batches and pipeline lengths) — the profile's own curves are not enough: on the NVIDIA profiles
  a GEMM of 32 rows runs faster than one of 1, so a step of more sequences can cost 5% less;
- a link's time is affine and nondecreasing in its bytes.
(The round's mean at one sequence is no bound: there each prompt chunk is a step of its own,
while at a larger batch prompts ride in the decode steps, whose weights stream once.) One
sequence's step is additive over units (simulate.unit_round_costs), so the least TPOT over all
chains of stages — any kind per stage, tensor-parallel groups and their all-reduces included,
each stage's units within its memory at one sequence — is a shortest path over the units: a
dynamic program over where each stage ends and its kind, with the cheapest link between the two
kinds' nodes. Device counts and the shared batch are relaxed.
"""

from __future__ import annotations

import itertools

import numpy as np

from hetc.cluster import Cluster
from hetc.partitioner.cost_models.links import hops
from hetc.partitioner.envelope import flat_node
from hetc.partitioner.cost_models.analytic import Step
from hetc.partitioner.simulate import Round, Workload, unit_round_costs
from hetc.partitioner.tables import Kind, Tables

__all__ = ["least_step", "tpot_bound"]


def least_step(wl: Workload) -> Round:
    """One decode step of one sequence, attending to the shorter of a decode's mean context and a
    prompt chunk's (a mixed step's prompt part attends to the prompt's first half)."""
    return Round(((1, Step(1, 1, min(wl.decode_ctx, wl.input_len / 2))),))


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
    r = least_step(tables.wl)
    links = _links(tables, kinds, cluster, r)
    best = np.full((u + 1, n), np.inf)  # best[i, g]: the least time of units i … u−1, a stage of kind g first
    after = np.full((u + 1, n), np.inf)  # after[e, g]: what follows a stage of kind g that ends before unit e
    after[u] = 0.0
    per_kind = []
    for g in kinds:
        cost, over = unit_round_costs(tables.units, flat_node(g.nodes[0]), g.tp, tables.wl, r)
        per_kind.append((np.concatenate([[0.0], np.cumsum(cost)]), over, tables.fits(g, 1)))
    for i in range(u - 1, -1, -1):
        ends = np.arange(i + 1, u + 1)  # the stage holds units i … end − 1
        for gi, (prefix, over, fits) in enumerate(per_kind):
            ok = fits[i, ends - i]
            if ok.any():
                best[i, gi] = float(np.min((prefix[ends] - prefix[i] + over + after[ends, gi])[ok]))
        if i:  # a stage ending before unit i sends unit i − 1's output to the next, of any kind h
            after[i] = np.min(links[tables.units[i - 1].out_bytes_per_token] + best[i][None, :], axis=1)
    return float(best[0].min())
