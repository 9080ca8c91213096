"""Speculative decoding in the search: the workload of a round, the solve over a draft + target chain,
and the per-round exchange between a drafter and its verifier.

A round proposes K tokens and the target verifies them in one step of K + 1 positions per
sequence (simulate.Workload's spec_tokens), gaining (1 − α^(K+1)) / (1 − α) tokens
(hetc.speculation). With a draft model the solver places the chain draft → target
(capture/draft.py): the draft's units on devices of their own or in the target's first stage, one
drafter per pipeline replica (plan.json: `speculation.drafter` and `drafters`, one per pipeline).
Prefill/decode pools are not combined with speculation.
"""

from __future__ import annotations

from dataclasses import replace

from hetc.cluster import Cluster
from hetc.partitioner.capture.draft import TOKEN_ID_BYTES, draft_chain
from hetc.partitioner.capture.units import Unit
from hetc.partitioner.cost_models.links import hops, transfer_time
from hetc.partitioner.cost_models.analytic import Step
from hetc.partitioner.estimate.simulate import Workload, stage_time
from hetc.partitioner.search.mix import Caps
from hetc.partitioner.search.solver import Candidate, Solution, solve
from hetc.scheduling import Disaggregate
from hetc.speculation import expected_tokens_per_step

__all__ = ["draft_step_ms", "exchange_seconds", "solve_speculative", "speculative_workload"]


def speculative_workload(wl: Workload, k: int, alpha: float, proposal_rate: float = 1.0) -> Workload:
    """`wl` with K proposals per round, verified at per-token acceptance α, on a share
    `proposal_rate` of the decode steps (the rest gain one token). Every decode step is priced as a
    round of K + 1 positions: where n-gram lookup proposes on few steps this overprices the others,
    which on decode steps bound by weight reads is a small share of the step."""
    return replace(wl, spec_tokens=k, spec_yield=expected_tokens_per_step(alpha, k, proposal_rate))


def solve_speculative(
    target: list[Unit],
    draft: list[Unit] | None,
    cluster: Cluster,
    wl: Workload,
    k: int,
    alpha: float,
    caps: Caps,
    proposal_rate: float = 1.0,
    **kw: object,
) -> tuple[Solution, list[Unit], Workload]:
    """The best speculative plan for the objective in `kw` (solver.solve's keywords): (its solution,
    the chain it placed — the draft's units first, if any — and the speculative workload).

    Args:
        draft: the draft model's units; None for n-gram lookup (no model: the target chain alone).
        k: proposals per round.
        alpha: per-token acceptance.
        caps: the power / price caps.
        proposal_rate: rounds over decode steps (hetc.speculation.expected_tokens_per_step).
    """
    spec = speculative_workload(wl, k, alpha, proposal_rate)
    chain = draft_chain(draft, target, k) if draft else target
    kw = {**kw, "disaggregate": Disaggregate.OFF}
    sol = solve(chain, cluster, spec, caps=caps, **kw)  # type: ignore[arg-type]  # solve's own keywords
    return sol, chain, spec


def exchange_seconds(cand: Candidate, chain: list[Unit], cluster: Cluster, wl: Workload) -> float:
    """Per round and micro-batch: the K proposals of its sequences from the drafter's last stage to
    the target's first, and the accepted count back from the target's last stage (0 where a device
    holds both ends)."""
    d = sum(1 for u in chain if u.draft)
    if not d:
        return 0.0
    stages = cand.stages
    drafter = next(i for i, s in enumerate(stages) if s.last >= d - 1)
    first = next(i for i, s in enumerate(stages) if s.last >= d)
    seqs = cand.estimate.batch / max(1, cand.estimate.micro_batches)
    out = transfer_time(seqs * wl.spec_tokens * TOKEN_ID_BYTES, hops(cluster, stages[drafter].node, stages[first].node)) if first != drafter else 0.0
    back = transfer_time(seqs * TOKEN_ID_BYTES, hops(cluster, stages[-1].node, stages[drafter].node)) if len(stages) - 1 != drafter else 0.0
    return out + back


def draft_step_ms(cand: Candidate, chain: list[Unit], wl: Workload) -> float:
    """One draft decode step of a micro-batch on the drafter's stages, its step overheads included."""
    seqs = cand.estimate.batch / max(1, cand.estimate.micro_batches)
    step = Step(seqs, seqs, wl.decode_ctx)
    total = 0.0
    for sp in cand.stages:
        us = [u for u in chain[sp.first : sp.last + 1] if u.draft]
        if us:
            total += stage_time(us, sp.node, sp.tp, step, wl) + sp.node.profile.step_overhead
    return total * 1e3
