"""Which expert layouts (hetc/experts.py) a plan of an MoE model compares, and the one it keeps.

The layout is one per plan: every tensor-parallel group of it runs its MoE layers the same way, as
one engine deployment does. By default the planner plans the layout the engines run unless told;
`--experts auto` solves each layout they serve in its share of `--time-limit` and keeps the best by
the objective (plan.json's `experts` lists every layout's figure, so a reader sees why). A throughput
plan's bound is the largest of the layouts' bounds: a valid bound on every plan of any of them; the
other objectives' bounds are the kept layout's (the plan's notes say so).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from hetc.cluster import TP_SIZES, Cluster
from hetc.errors import BadInput
from hetc.experts import IMBALANCE_SOURCE, DEFAULT_IMBALANCE, ExpertLayout
from hetc.partitioner.capture.units import Unit
from hetc.partitioner.estimate.simulate import Workload
from hetc.partitioner.search.solver import Solution
from hetc.plan import Experts, LayoutOption, Plan, UnitKind
from hetc.requests import PlanRequest
from hetc.scheduling import Objective

__all__ = ["LayoutRun", "chosen_layout", "expert_layouts", "experts_record"]


@dataclass(slots=True)
class LayoutRun:
    """One layout's search: its workload, its plan (None: no plan fits it), its baselines."""

    layout: ExpertLayout
    wl: Workload
    solution: Solution | None
    baselines: dict = field(default_factory=dict)
    note: str = ""  # why no plan fits
    value: float | None = None  # the objective's figure (chosen_layout)
    bound: float | None = None  # its own throughput bound, before the plan's becomes the largest


def _groups_possible(cluster: Cluster, tp: str) -> bool:
    """Whether any stage may span several devices (a node of ≥ 2 with a link, and --tp auto)."""
    return tp == "auto" and any(n.link is not None and n.count >= min(t for t in TP_SIZES if t > 1) for n in cluster.nodes)


def expert_layouts(req: PlanRequest, cluster: Cluster, units: list[Unit]) -> list[ExpertLayout]:
    """The layouts to solve: [TP] for a dense model or a cluster whose stages are single devices (every
    layout prices alike there); else `--experts`'s: the engines' default layout, one named, or (auto)
    every one the cluster's engines serve.

    Raises:
        BadInput: `--experts` names a layout an engine of the cluster does not serve.
    """
    if not any(u.moe for u in units) or not _groups_possible(cluster, req.tp):
        return [ExpertLayout.TP]
    served = cluster.expert_layouts
    if req.experts == "default":
        return [cluster.expert_layout]
    if req.experts == "auto":
        if not served:
            raise BadInput(
                f"the cluster's engines ({cluster.engines}) share no expert layout.", field="engine", fix="plan the cluster with one engine (--engine)."
            )
        if ExpertLayout.TP in served:  # ep costs what tp does plus the busiest device's imbalance, in the same memory
            return [x for x in served if x != ExpertLayout.EP]
        return served
    lay = ExpertLayout(req.experts)
    if lay not in served:
        raise BadInput(
            f"--experts {lay.value}: the cluster's engines ({cluster.engines}) serve {', '.join(x.value for x in served) or 'none'}.",
            field="--experts",
            fix=f"use --experts auto or one of {', '.join(x.value for x in served)}, or --engine vllm (it serves every layout).",
        )
    return [lay]


def chosen_layout(runs: list[LayoutRun], req: PlanRequest, value: Callable[[Solution], float], maximise: bool) -> LayoutRun:
    """The run whose plan is best by the objective (`value`, larger is better where `maximise`), the
    first on ties; a throughput plan's bound becomes the largest of the runs' bounds."""
    for r in runs:
        r.value = value(r.solution) if r.solution is not None else None
        r.bound = r.solution.bound if r.solution is not None and req.objective == Objective.THROUGHPUT else None
    feasible = [r for r in runs if r.value is not None]
    best = (max if maximise else min)(feasible, key=lambda r: r.value)  # type: ignore[arg-type, return-value]
    if req.objective == Objective.THROUGHPUT and len(feasible) > 1:
        assert best.solution is not None
        best.solution.bound = max(r.solution.bound for r in feasible if r.solution is not None)
    return best


DOMINATED = (
    "not solved: with tensor-parallel attention, whole experts cost what split ones do (the same memory, one grouped "
    "kernel over the same touched weights) plus the busiest device's imbalance, so tp's plans are at least as good"
)


def experts_record(runs: list[LayoutRun], best: LayoutRun, req: PlanRequest, plan: Plan, cluster: Cluster) -> Experts | None:
    """plan.json's `experts` (None for a dense model's plan): the layout kept, its imbalance and source,
    and every layout compared with its figure (and its own bound, throughput)."""
    if not any(u.kind == UnitKind.MOE for u in plan.units):
        return None
    source = IMBALANCE_SOURCE if req.imbalance == DEFAULT_IMBALANCE else "given by --expert-imbalance"
    options = [LayoutOption(layout=r.layout, objective=r.value, bound=r.bound, chosen=r is best, note=r.note) for r in runs]
    if len(runs) > 1 and req.objective != Objective.THROUGHPUT:
        plan.solver.notes.append(f"the {req.objective} bound covers plans of the kept layout ({best.layout.value}) only; the other layouts: experts.options")
    if len(runs) > 1 and ExpertLayout.EP in cluster.expert_layouts and all(r.layout != ExpertLayout.EP for r in runs):
        options.insert(1, LayoutOption(layout=ExpertLayout.EP, objective=None, note=DOMINATED))
    return Experts(layout=best.layout, imbalance=req.imbalance, imbalance_source=source, dp_budget=best.wl.dp_budget, options=options if len(runs) > 1 else [])
