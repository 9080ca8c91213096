"""Which expert layouts (hetc/experts.py) a plan of an MoE model compares, and the one it keeps.

The layout is one per plan: every tensor-parallel group of it runs its MoE layers the same way, as
one engine deployment does. By default the planner plans the layout the engines run unless told;
`--experts auto` solves each layout they serve in its share of `--time-limit` and keeps the best by
the objective (plan.json's `experts` lists every layout's figure, so a reader sees why). A throughput
plan's bound is the largest of the layouts' bounds: a valid bound on every plan of any of them; the
other objectives' bounds are the kept layout's (the plan's notes say so).

Throughput over several layouts spends the limit where the plan's bound needs it: every layout's plan
first (its bound's first rounds included: they seed its templates), then the bound rounds the deadline
paused, a slice at a time to the layout whose bound is largest (it is the plan's bound). A layout whose
bound falls below the best plan of any layout stops there: the plan's bound, the largest of them, is at
least that plan already, so more work on it cannot lower the plan's (its option's note says so).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace

from hetc.cluster import TP_SIZES, Cluster
from hetc.errors import BadInput, Infeasible
from hetc.experts import IMBALANCE_SOURCE, DEFAULT_IMBALANCE, ExpertLayout
from hetc.partitioner.capture.units import Unit
from hetc.partitioner.estimate.simulate import Workload
from hetc.partitioner.budget import CpuBudget
from hetc.partitioner.search.solver import BOUND, TAIL_RESERVE, Solution
from hetc.plan import Experts, LayoutOption, Plan, UnitKind
from hetc.requests import PlanRequest
from hetc.scheduling import Objective

__all__ = ["LayoutRun", "bound_layouts", "chosen_layout", "expert_layouts", "experts_record", "solve_layouts"]

SLICE = 0.05  # of --time-limit: the bound work the layout of the largest bound gets at a time (doubled where a round needs more)


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
    cpu: CpuBudget | None = None  # its part of the limit (bound_layouts resumes its paused bound in it)
    slice: float = SLICE  # of the limit, its next turn of bound work


Search = Callable[[Workload, CpuBudget, bool], tuple[Solution, dict]]


def solve_layouts(
    layouts: list[ExpertLayout], wl: Workload, req: PlanRequest, cpu: CpuBudget, search: Search, progress: Callable[[str], None] | None = None
) -> list[LayoutRun]:
    """Every layout's plan, each in its share of what `cpu`'s limit has left (one layout: all of it);
    throughput over several: their searches without the bound (each ends early), then their bounds
    (`bound_layouts`) in what the searches left.

    Args:
        wl: the workload; each run replaces its layout.
        search: (workload, its CPU budget, whether to leave a paused bound to the caller) → (plan,
            baselines); raises Infeasible where no plan of the layout fits.

    Raises:
        Infeasible: no layout has a plan (the last one's reason).
    """
    defer = len(layouts) > 1 and req.objective == Objective.THROUGHPUT
    runs: list[LayoutRun] = []
    for k, lay in enumerate(layouts):
        lwl = replace(wl, experts=lay)
        part = cpu if len(layouts) == 1 else cpu.part(max(0.0, cpu.limit - cpu.used) / (len(layouts) - k))
        if progress and len(layouts) > 1:
            progress(f"experts {lay.value}: solving in {part.limit:.0f} of {req.time_limit:g} CPU s")
        try:
            sol, baselines = search(lwl, part, defer)
            runs.append(LayoutRun(lay, lwl, sol, baselines, cpu=part))
        except Infeasible as e:
            if len(layouts) == 1 or (k == len(layouts) - 1 and not any(r.solution for r in runs)):
                raise
            runs.append(LayoutRun(lay, lwl, None, {}, note=str(e)))
    if defer:
        bound_layouts(runs, cpu, progress)
    return runs


def bound_layouts(runs: list[LayoutRun], cpu: CpuBudget, progress: Callable[[str], None] | None = None, tail: float = TAIL_RESERVE) -> None:
    """Resume the bounds the deadline paused (`Solution.rounds`) until `cpu`'s limit less `tail` (the
    planner's plan): a slice at a time to the layout whose bound is largest, each until its rounds end, or
    its bound falls below the best plan of any layout (it no longer sets the plan's bound: said in its
    note), or the limit (named in `stopped_by_limit`).

    Args:
        runs: the layouts' runs, each with its part of `cpu`.
        tail: the share of the limit left after the bounds.
    """
    solved = [r for r in runs if r.solution is not None]
    if not solved:
        return
    top = max(solved, key=lambda r: r.solution.output_tok_s)  # type: ignore[union-attr]
    best = top.solution.output_tok_s  # type: ignore[union-attr]
    end = cpu.start + cpu.limit * (1 - tail)
    todo = [r for r in solved if r.solution.rounds is not None]  # type: ignore[union-attr]
    # every layout's first round (its first valid bound), the lesser plans first: one often shows theirs below the
    # best plan, and the best plan's layout, whose bound is the plan's, then has the rest of the limit
    first = sorted(todo, key=lambda r: r.solution.output_tok_s)  # type: ignore[union-attr]
    for k, r in enumerate(first):
        _advance(r, best, cpu.clock() + max(0.0, end - cpu.clock()) / (len(first) - k), progress)
    while todo:
        for r in todo:
            sol = r.solution
            assert sol is not None and r.cpu is not None
            if sol.bound < best:
                sol.rounds = None
                r.note = f"bound stopped once below the best plan ({best:,.0f} output tok/s, {top.layout.value}): it cannot raise the plan's"
            elif cpu.clock() >= end:
                sol.rounds = None
                r.cpu.stop(BOUND)
                r.note = "bound stopped by --time-limit's CPU seconds (valid, looser; a longer limit tightens it)"
        todo = [r for r in todo if r.solution.rounds is not None]  # type: ignore[union-attr]
        if todo:
            r = max(todo, key=lambda r: r.solution.bound)  # type: ignore[union-attr]
            _advance(r, best, min(end, cpu.clock() + r.slice * cpu.limit), progress)


def _advance(run: LayoutRun, best: float, until: float, progress: Callable[[str], None] | None) -> None:
    """Run's paused bound rounds until `until` (on its CPU clock), its bound below `best`, or their end."""
    sol, part = run.solution, run.cpu
    assert sol is not None and sol.rounds is not None and part is not None
    part.until, before, turns = until, sol.bound, 0
    with part.phase(BOUND):
        for snap, pause in sol.rounds:
            turns += 1
            sol.bound = min(sol.bound, snap().value)  # every round's bound is valid
            if pause or sol.bound < best:
                break
        else:
            sol.rounds = None  # ended within its work budget
    if turns == 1 and sol.bound >= before:  # no round fitted the slice: a longer one next time
        run.slice *= 2
    if sol.bound < before:
        sol.status = "OPTIMAL" if sol.bound - sol.output_tok_s <= 1e-6 * sol.bound else "FEASIBLE"
        sol.notes[:] = [n for n in sol.notes if not n.startswith(AFTER)] + [f"{AFTER}: {sol.bound:,.0f} tok/s"]
        if progress:
            progress(f"experts {run.layout.value}: bound {sol.bound:,.0f} tok/s")


AFTER = "the bound ran after every layout's search (in the CPU seconds they left), the layout of the largest bound first"


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
