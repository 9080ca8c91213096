"""A user-given placement (`--placement`) evaluated with the planner's own saturation model: the
same predictions as a solved plan, with the solver's bound and its own choice beside it."""

from __future__ import annotations

import time

from hetc.cluster import Cluster
from hetc.errors import Infeasible
from hetc.placement import GivenPipeline
from hetc.partitioner.estimate.batches import MAX_BATCH
from hetc.partitioner.estimate.simulate import StagePlan, Workload, estimate_pipeline
from hetc.partitioner.search.solver import Candidate, Solution
from hetc.partitioner.estimate.split import Slot, batch_options, split_chain
from hetc.partitioner.capture.units import Unit
from hetc.scheduling import Phase

__all__ = ["evaluate_placement"]


def _layer_split(units: list[Unit], p: GivenPipeline, cluster: Cluster) -> list[StagePlan]:
    """Stage unit ranges from the @L layer counts (the embedding with the first stage, the head with the last)."""
    out, start = [], 0
    for k, st in enumerate(p.stages):
        first = 0 if k == 0 else next(i for i, u in enumerate(units) if u.layer >= start)
        start += st.layers or 0
        out.append(StagePlan(cluster.node(st.node), first, 0, st.tp))
    ends = [s.first - 1 for s in out[1:]] + [len(units) - 1]
    return [StagePlan(s.node, s.first, e, s.tp) for s, e in zip(out, ends)]


def evaluate_placement(
    units: list[Unit], cluster: Cluster, wl: Workload, given: list[GivenPipeline], batch: int | None = None, ceiling: int = MAX_BATCH
) -> Solution:
    """Predict a given placement: each pipeline at `batch` (default: its best batch up to `ceiling`),
    with its stages' layers as given (default: the best split over its devices, as the solver would
    cut them).

    Raises:
        Infeasible: a pipeline does not fit its devices (at `batch`, when given).
    """
    t0 = time.perf_counter()
    cands = []
    for i, p in enumerate(given):
        chain = [Slot(cluster.node(s.node), s.tp) for s in p.stages]
        fixed = _layer_split(units, p, cluster) if p.stages[0].layers is not None else None

        def split(b: int, chain=chain, fixed=fixed) -> list[StagePlan] | None:
            return fixed if fixed is not None else split_chain(units, chain, cluster, wl, b)

        if batch is not None:
            stages = split(batch)
            est = estimate_pipeline(units, stages, cluster, wl, batch) if stages else None
        else:
            opts = batch_options(units, chain, cluster, wl, split=split, ceiling=ceiling)
            best = max(opts, key=lambda f: f.estimate.output_tok_s, default=None)
            stages, est = (best.stages, best.estimate) if best else (None, None)
        if est is None:
            at = f" at --batch {batch}" if batch else ""
            raise Infeasible(
                f"pipeline {i} of --placement does not fit its devices{at}: its stages' weights, KV "
                "and activations exceed their memory. Give it more devices or layers elsewhere, or a "
                "smaller --batch."
            )
        cands.append(Candidate(stages, p.replicas, est, [s.first for s in p.stages], "given", Phase.BOTH))  # type: ignore[arg-type]
    tok = sum(c.estimate.output_tok_s * c.replicas for c in cands)
    return Solution(cands, tok, time.perf_counter() - t0, bound=0.0, bound_method="", status="GIVEN", batch_ceiling=ceiling)
