"""`hetc plan` end to end: capture → units → solve → plan.json."""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Callable
from dataclasses import dataclass

from hetc import __version__
from hetc.cluster import TP_SIZES, Cluster, ClusterSpec, load_cluster
from hetc.errors import BadInput
from hetc.plan import (
    SCHEMA,
    Baseline,
    GivenPlacement,
    KVTransfer,
    MemoryBytes,
    ModelInfo,
    ObjectiveInfo,
    Pipeline,
    Plan,
    PlanUnit,
    Predicted,
    SolverInfo,
    Stage,
    StageTimes,
)
from hetc.plan import Workload as PlanWorkload
from hetc.partitioner.search.baselines import run_baselines
from hetc.partitioner.capture.capture import CapturedModel, capture
from hetc.partitioner.bounds.bound import cost_bound, least_holding
from hetc.partitioner.bounds.latency_bound import tpot_floor_bound
from hetc.partitioner.estimate.simulate import Workload
from hetc.partitioner.search.given import evaluate_placement
from hetc.partitioner.search.solver import OBJECTIVES, Caps, Solution, solve
from hetc.requests import PlanRequest
from hetc.placement import parse_placement
from hetc.partitioner.estimate.tables import Tables, kinds_of, type_key
from hetc.scheduling import Objective, Phase

__all__ = ["PlanRequest", "Totals", "make_plan", "build_plan", "totals"]


def make_plan(req: PlanRequest, progress: Callable[[str], None] | None = None) -> Plan:
    """Run the whole planning flow for a request."""
    t0 = time.perf_counter()
    cluster = load_cluster(req.profiles)
    cluster.require_flops(req.dtype)  # before the capture: the profile's figures, then the model
    if progress:
        progress(f"capturing {req.model}")
    model = capture(req.model, dtype=req.dtype, kv_dtype=req.kv_dtype)
    wl = Workload.of(req.input_len, req.output_len, req.dtype, model.kv_dtype, req.prefix_len, req.prefix_groups)
    given = parse_placement(req.placement, cluster, model.num_layers) if req.placement else None
    if req.objective == Objective.ENERGY or req.power_budget_w:
        unknown = sorted({n.profile.name for n in cluster.nodes if n.profile.power <= 0})
        if unknown:
            raise BadInput(
                f"profile(s) {', '.join(unknown)} give no power figure; the energy objective and --power-budget need every device's.",
                file=req.profiles,
                field="power",
                fix="add `power: 700 W` (the board power, with its source) to each profile.",
            )
    searched = solve(
        model.units,
        cluster,
        wl,
        objective=req.objective,
        min_tok_s=req.min_tok_s,
        ttft_slo_s=req.ttft_slo_ms / 1e3 if req.ttft_slo_ms else None,
        tpot_slo_s=req.tpot_slo_ms / 1e3 if req.tpot_slo_ms else None,
        tp=req.tp,
        disaggregate=req.disaggregate,
        time_limit=req.time_limit,
        caps=Caps(watts=req.power_budget_w),
        max_num_seqs=req.max_num_seqs,
        progress=(lambda s: progress(f"solving: {s}")) if progress else None,
    )
    sol, ceiling = searched, searched.batch_ceiling
    if given is not None:
        sol = evaluate_placement(model.units, cluster, wl, given, req.batch, ceiling)
        sol.bound, sol.bound_method, sol.least_spend = searched.bound, searched.bound_method, searched.least_spend
        sol.notes = [
            f"placement given by the user; the solver's own plan predicts {searched.output_tok_s:,.0f} "
            f"output tok/s ({sol.output_tok_s / searched.output_tok_s:.2f}× of it)"
        ] + searched.notes
    baselines = run_baselines(
        model.units,
        cluster,
        wl,
        req.objective,
        ceiling,
        ttft_slo_s=req.ttft_slo_ms / 1e3 if req.ttft_slo_ms else None,
        tpot_slo_s=req.tpot_slo_ms / 1e3 if req.tpot_slo_ms else None,
    )
    if req.power_budget_w:
        sol.notes.append(f"baselines use every device, ignoring --power-budget {req.power_budget_w:g} W")
    plan = build_plan(model, cluster, wl, req, sol, baselines)
    if req.placement:  # recorded as given, beside the predictions
        plan.placement = GivenPlacement(given=req.placement, batch=req.batch)
    plan.solver.cpu_seconds = searched.cpu_seconds
    plan.solver.command_seconds = time.perf_counter() - t0
    return plan


def _bound(model: CapturedModel, cluster: Cluster, wl: Workload, sol: Solution | None, objective: str, tp: str, ceiling: int, min_tok_s: float = 0.0) -> float:
    """The bound in the objective's unit (throughput: the solver's). Latency: the least TPOT at
    which fleets give `min_tok_s` (latency_bound.py; without a floor, of any one pipeline). Cost
    and energy: the LP relaxation (bound.py) of USD/h (watts) per tok/s — with a floor F, of the least USD/h (watts) of any plan giving F, over F,
    and at least the cheapest devices that hold the model, over F."""
    if objective == Objective.THROUGHPUT:
        return sol.bound  # type: ignore[union-attr]  # throughput always has a solution here
    kinds = kinds_of(cluster, TP_SIZES if tp == "auto" else (1,))
    tables = Tables(model.units, wl)
    if objective == Objective.LATENCY:
        return 1e3 * tpot_floor_bound(tables, kinds, cluster, min_tok_s, ceiling)
    max_stages = min(len(model.units), sum(n.count for n in cluster.nodes))
    of = {type_key(n): n.profile.power if objective == Objective.ENERGY else cluster.price(n.profile) for n in cluster.nodes}
    least = cost_bound(tables, kinds, max_stages, of, ceiling, floor=min_tok_s)  # per tok/s
    if min_tok_s:  # a fleet has a pipeline: it spends at least what the cheapest devices holding the model do;
        # and at least the cell bound's least spend giving the floor (devices and pipelines whole; few types), or
        # column generation's (a Lagrangian bound over whole pipelines; past MAX_CELLS count vectors)
        least = max(least, least_holding(model.units, wl, cluster, of) / min_tok_s, (sol.least_spend if sol else 0.0) / min_tok_s)
    if objective == Objective.ENERGY:  # tokens per joule ≤ 1 / (the least W any plan draws per output tok/s)
        return 1.0 / least if least > 0 else float("inf")
    return least / 3600 * 1e6


def objective_value(objective: str, tok_s: float, tpot_s: float, usd_h: float, watts: float, min_tok_s: float = 0.0) -> float:
    """The plan's figure for `objective` (plan.json solver.objective): tok/s, TPOT ms, USD per M
    output tokens, output tokens per J. With a floor F, cost and energy are at the demand F names
    (the fleet's USD/h or W over the min(F, its tok/s) it serves), what the solver minimises (mix.py)."""
    served = min(min_tok_s, tok_s) if min_tok_s else tok_s
    return {"throughput": tok_s, "latency": tpot_s * 1e3, "cost": usd_h / (served * 3600) * 1e6 if served else 0.0, "energy": served / watts if watts else 0.0}[
        objective
    ]


@dataclass(frozen=True, slots=True)
class Totals:
    """What a solution's pipelines use and predict, over all replicas."""

    devices: int
    usd_h: float
    watts: float  # every device at its profile's power (board power): the plan's stated utilization model
    ttft_s: float  # the slowest pipeline's (a prefill pool's includes its KV transfer)
    tpot_s: float  # the slowest pipeline's that decodes


def totals(sol: Solution, cluster: Cluster) -> Totals:
    used = [(sp.node.profile, sp.tp * c.replicas) for c in sol.pipelines for sp in c.stages]
    kv_s = max((k.seconds_per_seq for k in sol.kv_transfers), default=0.0)
    return Totals(
        devices=sum(k for _, k in used),
        usd_h=sum(cluster.price(p) * k for p, k in used),
        watts=sum(p.power * k for p, k in used),
        ttft_s=max(c.estimate.ttft_s + (kv_s if c.phase == Phase.PREFILL else 0.0) for c in sol.pipelines if c.phase != Phase.DECODE),
        tpot_s=max(c.estimate.tpot_s for c in sol.pipelines if c.phase != Phase.PREFILL),
    )


def build_plan(model: CapturedModel, cluster: Cluster, wl: Workload, req: PlanRequest, sol: Solution, baselines: dict[str, Baseline]) -> Plan:
    """The plan.json document for a solution: its pipelines, predictions, bound and the inputs they rest on."""
    pipelines = []
    for pid, cand in enumerate(sol.pipelines):
        stages = []
        for sp, est, first in zip(cand.stages, cand.estimate.stages, cand.first_device):
            us = model.units[sp.first : sp.last + 1]
            mem = est.memory
            stages.append(
                Stage(
                    devices=[f"{sp.node.name}:{i}" for i in range(first, first + sp.tp)],
                    profile=sp.node.profile.name,
                    backend=sp.node.profile.backend,
                    node=sp.node.name,
                    tp=sp.tp,
                    units=(sp.first, sp.last),
                    layers=(us[0].layer, us[-1].layer),
                    memory_bytes=MemoryBytes(weights=mem.weights, kv=mem.kv, activations=mem.activations, total=mem.total),
                    predicted_ms=StageTimes(prefill=est.prefill_s * 1e3, decode=est.decode_s * 1e3),
                )
            )
        pipelines.append(
            Pipeline(id=pid, phase=cand.phase, replicas=cand.replicas, batch=cand.estimate.batch, micro_batches=cand.estimate.micro_batches, stages=stages)
        )
    kv_transfer = [
        KVTransfer(from_pipeline=k.source, to_pipeline=k.target, bytes_per_token=k.bytes_per_token, link=k.link, predicted_ms_per_seq=k.seconds_per_seq * 1e3)
        for k in sol.kv_transfers
    ]
    tok_s, t = sol.output_tok_s, totals(sol, cluster)
    sense, unit = OBJECTIVES[req.objective]
    floor = req.min_tok_s if req.objective in (Objective.COST, Objective.ENERGY) else 0.0
    value = objective_value(req.objective, tok_s, t.tpot_s, t.usd_h, t.watts, floor)
    ceiling = sol.batch_ceiling
    bound = _bound(model, cluster, wl, sol, req.objective, req.tp, ceiling, req.min_tok_s)
    gap = max(0.0, (bound - value) / bound if sense == "max" else (value - bound) / value) if bound and value else 0.0
    return Plan(
        schema=SCHEMA,
        hetc_version=__version__,
        created=dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        model=ModelInfo(
            ref=model.ref,
            dtype=model.dtype,
            kv_dtype=model.kv_dtype,
            num_layers=model.num_layers,
            num_units=len(model.units),
            params=model.num_params,
            graph_hash=model.graph_hash,
            kind=model.kind,
            notes=model.notes,
        ),
        cluster=ClusterSpec.model_validate(cluster.to_json()),
        workload=PlanWorkload(
            input_len=wl.input_len,
            output_len=wl.output_len,
            max_num_seqs=req.max_num_seqs,
            prefix_len=req.prefix_len,
            prefix_groups=req.prefix_groups,
        ),
        objective=ObjectiveInfo(name=req.objective, sense=sense, unit=unit),
        pipelines=pipelines,
        kv_transfer=kv_transfer,
        predicted=Predicted(
            output_tok_s=tok_s,
            total_tok_s=tok_s * (wl.input_len + wl.output_len) / wl.output_len,
            ttft_ms=t.ttft_s * 1e3,
            tpot_ms=t.tpot_s * 1e3,
            usd_per_mtok=t.usd_h / (tok_s * 3600) * 1e6 if tok_s else 0.0,
            watts=t.watts,
        ),
        solver=SolverInfo(
            status=sol.status,
            objective=value,
            bound=bound,
            upper_bound=sol.bound,
            gap=gap,
            seconds=sol.seconds,
            templates=sol.explored,
            bound_method=sol.bound_method,
            batch_ceiling=ceiling,
            search="pipeline templates (homogeneous, even mixes, the cell bound's pipelines; prefill and "
            f"decode pools with --disaggregate {req.disaggregate}) × best split × batch up to "
            f"{ceiling} sequences; CP-SAT chooses replicas",
            notes=sol.notes,
        ),
        baselines=baselines,
        units=[
            PlanUnit(
                index=u.index,
                kind=u.kind,
                layer=u.layer,
                param_bytes=u.param_bytes,
                kv_bytes_per_token=u.kv_bytes_per_token,
                out_bytes_per_token=u.out_bytes_per_token,
            )
            for u in model.units
        ],
    )
