"""`hetc plan` end to end: capture → units → solve → plan.json."""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Callable
from dataclasses import dataclass, replace

from hetc import __version__
from hetc.cluster import TP_SIZES, Cluster, ClusterSpec, load_cluster
from hetc.errors import BadInput, Infeasible
from hetc.experts import ExpertLayout, StepBudget
from hetc.plan import (
    SCHEMA,
    Baseline,
    Drafter,
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
    SolverTime,
    Speculation,
    Stage,
    StageTimes,
)
from hetc.plan import Workload as PlanWorkload
from hetc.partitioner.search.baselines import run_baselines
from hetc.partitioner.capture.capture import CapturedModel, capture
from hetc.partitioner.capture.units import Unit
from hetc.partitioner.cost_models.memory import StageMemory, logits_per_token, stage_memory
from hetc.partitioner.bounds.bound import cost_bound, least_holding
from hetc.partitioner.bounds.latency_bound import tpot_floor_bound
from hetc.partitioner.estimate.batches import batch_ceiling
from hetc.partitioner.estimate.simulate import StagePlan, Workload
from hetc.partitioner.capture.draft import vocab_size
from hetc.partitioner.capture.terms import DTYPE_BYTES
from hetc.partitioner.search.speculate import draft_step_ms, exchange_seconds, solve_speculative
from hetc.partitioner.search.given import evaluate_placement
from hetc.partitioner.budget import OBJECTIVE_BOUND, CpuBudget, OutOfTime
from hetc.partitioner.search.layouts import chosen_layout, expert_layouts, experts_record, solve_layouts
from hetc.partitioner.search.split_experts import DISAGGREGATION, disaggregated, disaggregation_note
from hetc.partitioner.search.solver import BOUND, OBJECTIVES, SEARCH, TAIL_RESERVE, Caps, Solution, solve
from hetc.requests import PlanRequest
from hetc.placement import parse_placement
from hetc.partitioner.estimate.tables import Tables, kinds_of, type_key
from hetc.scheduling import Objective, Phase
from hetc.speculation import Acceptance, expected_tokens_per_round

__all__ = ["PlanRequest", "Totals", "make_plan", "build_plan", "capture_draft", "totals", "with_speculation"]

# of --time-limit (CPU seconds): what the solver leaves for the latency, cost or energy objective's
# own bound with a floor (LPs over fleets giving it: as long as the solver's bound, or longer; for
# latency the solver's own bound only seeds templates). Past the limit it keeps a looser valid bound.
OBJECTIVE_BOUND_RESERVE = 0.3
LATENCY_BOUND_RESERVE = 0.4  # latency with a floor: its LPs' intervals of seats (~400 on 48 devices) take ~9 CPU s
COST_BOUND_RESERVE = 0.15  # cost and energy without a floor: one LP (bound.cost_bound), a few CPU seconds on 48 devices
OVER_LIMIT_NOTE = 0.5  # CPU seconds past --time-limit that plan.json's solver notes explain
PLAIN_SHARE = 0.5  # speculating: the plain search's share of --time-limit; the speculative one gets what it leaves


def make_plan(req: PlanRequest, progress: Callable[[str], None] | None = None) -> Plan:
    """Run the whole planning flow for a request (speculating: `with_speculation` after the plan without)."""
    t0 = time.perf_counter()
    cluster = load_cluster(req.profiles, engine=req.engine)
    cluster.require_flops(req.dtype)  # before the capture: the profile's figures, then the model
    acceptance = req.spec.alpha() if req.spec.on else None  # a bad metrics file before any capture
    if progress:
        progress(f"capturing {req.model}")
    model = capture(req.model, dtype=req.dtype, kv_dtype=req.kv_dtype)
    draft = capture_draft(model, req.spec.draft, progress) if req.spec.draft else None
    cpu = CpuBudget(req.time_limit)  # --time-limit in CPU seconds from here: the capture is not counted
    wl = Workload.of(req.input_len, req.output_len, req.dtype, model.kv_dtype, req.prefix_len, req.prefix_groups, cluster.windowed_kv)
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
    plain = cpu.part(req.time_limit * PLAIN_SHARE) if acceptance is not None else cpu  # speculating: the plain search's share
    layouts = expert_layouts(req, cluster, model.units)
    # the latency bound is built for one step budget: a latency plan prices a data-parallel group's so (docs/moe.md)
    dp_budget = cluster.dp_budget if req.objective != Objective.LATENCY else StepBudget.SHARED
    # an MoE model: each layout solved in its share of the limit (several under throughput: plans first, then bounds), the best kept
    runs = solve_layouts(
        layouts,
        replace(wl, imbalance=req.imbalance, dp_budget=dp_budget),
        req,
        plain,
        lambda w, part, defer: _search(model.units, cluster, w, req, part, progress, defer),
        progress,
    )
    sense = OBJECTIVES[req.objective][0]
    best = chosen_layout(runs, req, lambda sol: _value(sol, req, cluster), maximise=sense == "max")
    wl, searched, baselines = best.wl, best.solution, best.baselines
    assert searched is not None
    plain.deadline(1.0)  # the plan and the objective's bound: the rest of the limit
    sol, ceiling = searched, searched.batch_ceiling
    if given is not None:
        sol = evaluate_placement(model.units, cluster, wl, given, req.batch, ceiling)
        sol.bound, sol.bound_method, sol.least_spend, sol.tables = searched.bound, searched.bound_method, searched.least_spend, searched.tables
        sol.notes = [
            f"placement given by the user; the solver's own plan predicts {searched.output_tok_s:,.0f} "
            f"output tok/s ({sol.output_tok_s / searched.output_tok_s:.2f}× of it)"
        ] + searched.notes
    if req.power_budget_w:
        sol.notes.append(f"baselines use every device, ignoring --power-budget {req.power_budget_w:g} W")
    plan = build_plan(model, cluster, wl, req, sol, baselines, cpu=plain)
    plan.experts = experts_record(runs, best, req, plan, cluster)
    if plan.experts is not None and req.objective == Objective.THROUGHPUT and given is None:
        plan.experts.disaggregated = disaggregated(model.units, cluster, replace(wl, experts=ExpertLayout.DP_EP), sol, plain)
        if DISAGGREGATION in plain.stopped:
            plan.solver.notes.append(
                "attention/expert disaggregation: the node pairs left when --time-limit ran out were not estimated; a longer limit estimates every pair"
            )
        if plan.experts.disaggregated:
            plan.solver.notes.append(disaggregation_note(plan.experts.disaggregated[0]))
    if req.placement:  # recorded as given, beside the predictions
        plan.placement = GivenPlacement(given=req.placement, batch=req.batch)
    plan.solver.cpu_seconds = searched.cpu_seconds
    if acceptance is not None:  # the speculative search: the CPU the plain one left
        plan = with_speculation(plan, model, draft, acceptance, cluster, wl, req, progress, cpu.part(max(0.0, req.time_limit - cpu.used)))
    plan.solver.time = SolverTime(
        limit_cpu_s=req.time_limit,
        cpu_s=cpu.used,
        search_cpu_s=cpu.spent.get(SEARCH, 0.0),
        bound_cpu_s=cpu.spent.get(BOUND, 0.0),
        other_cpu_s=max(0.0, cpu.used - cpu.spent.get(SEARCH, 0.0) - cpu.spent.get(BOUND, 0.0)),
        stopped_by_limit=cpu.stopped,
    )
    if cpu.used > req.time_limit + OVER_LIMIT_NOTE:  # the bound's cheapest pass, the baselines and a search do not fit it
        plan.solver.notes.append(
            f"--time-limit {req.time_limit:g} is shorter than this fleet's least planning work: {cpu.used:.1f} CPU s "
            "(the baselines, the bound's looser first pass over every pipeline class, one search); a longer limit holds"
        )
    plan.solver.command_seconds = time.perf_counter() - t0
    return plan


def _value(sol: Solution, req: PlanRequest, cluster: Cluster) -> float:
    """A solution's figure for the request's objective (plan.json solver.objective)."""
    t = totals(sol, cluster)
    floor = req.min_tok_s if req.objective in (Objective.COST, Objective.ENERGY) else 0.0
    return objective_value(req.objective, sol.output_tok_s, t.tpot_s, t.usd_h, t.watts, floor)


def _search(
    units: list[Unit], cluster: Cluster, wl: Workload, req: PlanRequest, cpu: CpuBudget, progress: Callable[[str], None] | None, defer: bool = False
) -> tuple:
    """The baselines and the solver's plan for `wl` within `cpu`. The baselines first: they need no plan,
    and run whole (not interruptible), so the deadlines after them hold where a fixed tail reserve did
    not (~1 CPU s on 64 devices, 6% of a 10 s limit). `defer`: a paused bound is left to the caller (solve's defer_bound)."""
    baselines = run_baselines(
        units,
        cluster,
        wl,
        req.objective,
        batch_ceiling(units, cluster, wl, req.max_num_seqs),
        ttft_slo_s=req.ttft_slo_ms / 1e3 if req.ttft_slo_ms else None,
        tpot_slo_s=req.tpot_slo_ms / 1e3 if req.tpot_slo_ms else None,
    )
    searched = solve(
        units,
        cluster,
        wl,
        disaggregate=req.disaggregate,
        caps=Caps(watts=req.power_budget_w),
        **{**_search_limits(req), "time_limit": min(req.time_limit, cpu.limit)},
        progress=(lambda s: progress(f"solving: {s}")) if progress else None,
        cpu=cpu,
        reserve=_reserve(req),
        defer_bound=defer,
    )
    return searched, baselines


def _reserve(req: PlanRequest) -> float:
    """The share of a search's CPU limit it leaves for the planner after it (baselines, the plan, the objective's own bound)."""
    if req.objective == Objective.THROUGHPUT or req.objective == Objective.LATENCY and not req.min_tok_s:
        return TAIL_RESERVE  # the solver's bound, or the least TPOT of one pipeline: no LP of its own
    if req.objective == Objective.LATENCY:
        return LATENCY_BOUND_RESERVE  # with a floor
    return OBJECTIVE_BOUND_RESERVE if req.min_tok_s else COST_BOUND_RESERVE


def _bound(
    units: list[Unit],
    cluster: Cluster,
    wl: Workload,
    sol: Solution | None,
    objective: str,
    tp: str,
    ceiling: int,
    min_tok_s: float = 0.0,
    cpu: CpuBudget | None = None,
) -> float:
    """The bound in the objective's unit (throughput: the solver's). Latency: the least TPOT at
    which fleets give `min_tok_s` (latency_bound.py; without a floor, of any one pipeline). Cost
    and energy: the LP relaxation (bound.py) of USD/h (watts) per tok/s — with a floor F, of the least USD/h (watts) of any plan giving F, over F,
    and at least the cheapest devices that hold the model, over F.

    Args:
        cpu: the planner's CPU budget: where its deadline stops the latency or cost LPs first, the
            bound without them (latency: of one pipeline; cost: the devices holding the model and
            the solver's least spend), named in `stopped_by_limit` and the notes.
    """
    if objective == Objective.THROUGHPUT:
        return sol.bound  # type: ignore[union-attr]  # throughput always has a solution here
    kinds = kinds_of(cluster, TP_SIZES if tp == "auto" else (1,))
    # the solver's tables where it searched these units: the unit costs it has are the ones these LPs need
    tables = sol.tables if sol is not None and sol.tables is not None else Tables(units, wl)
    cut = f"the {objective} bound's LPs did not end within --time-limit's CPU seconds; the bound without them is looser"
    if objective == Objective.LATENCY:
        try:
            return 1e3 * tpot_floor_bound(tables, kinds, cluster, min_tok_s, ceiling, cpu)
        except OutOfTime:
            _stopped(sol, cpu, cut)
            return 1e3 * tpot_floor_bound(tables, kinds, cluster, 0.0, ceiling)
    max_stages = min(len(units), sum(n.count for n in cluster.nodes))
    of = {type_key(n): n.profile.power if objective == Objective.ENERGY else cluster.price(n.profile) for n in cluster.nodes}
    try:
        least = cost_bound(tables, kinds, max_stages, of, ceiling, floor=min_tok_s, cpu=cpu)  # per tok/s
    except OutOfTime:
        _stopped(sol, cpu, cut)
        least = 0.0
    if min_tok_s:  # a fleet has a pipeline: it spends at least what the cheapest devices holding the model do;
        # and at least the cell bound's least spend giving the floor (devices and pipelines whole; few types), or
        # column generation's (a Lagrangian bound over whole pipelines; past MAX_CELLS count vectors)
        least = max(least, least_holding(units, wl, cluster, of) / min_tok_s, (sol.least_spend if sol else 0.0) / min_tok_s)
    if objective == Objective.ENERGY:  # tokens per joule ≤ 1 / (the least W any plan draws per output tok/s)
        return 1.0 / least if least > 0 else float("inf")
    return least / 3600 * 1e6


def _stopped(sol: Solution | None, cpu: CpuBudget | None, note: str) -> None:
    """Record that the CPU deadline cut the objective's own bound."""
    if cpu is not None:
        cpu.stop(OBJECTIVE_BOUND)
    if sol is not None:
        sol.notes.append(note)


def objective_value(objective: str, tok_s: float, tpot_s: float, usd_h: float, watts: float, min_tok_s: float = 0.0) -> float:
    """The plan's figure for `objective` (plan.json solver.objective): tok/s, TPOT ms, USD per M
    output tokens, output tokens per J. With a floor F, cost and energy are at the demand F names
    (the fleet's USD/h or W over the min(F, its tok/s) it serves), what the solver minimises (mix.py)."""
    served = min(min_tok_s, tok_s) if min_tok_s else tok_s
    return {"throughput": tok_s, "latency": tpot_s * 1e3, "cost": usd_h / (served * 3600) * 1e6 if served else 0.0, "energy": served / watts if watts else 0.0}[
        objective
    ]


def _parts(units: list[Unit], first: int, last: int) -> list[tuple[str | None, tuple[int, int], int]]:
    """A stage's units [first, last] as (part, its chain range, the chain index of the part's unit 0):
    part None where the chain is a model's own; "draft" and "target" where a drafter's units come
    first (a stage holding both is two plan stages on the same devices, sharing their memory)."""
    d = sum(1 for u in units if u.draft)
    if not d:
        return [(None, (first, last), 0)]
    out: list[tuple[str | None, tuple[int, int], int]] = []
    if first < d:
        out.append(("draft", (first, min(last, d - 1)), 0))
    if last >= d:
        out.append(("target", (max(first, d), last), d))
    return out


def _part_memory(us: list[Unit], sp: StagePlan, batch: int, wl: Workload, last: bool) -> StageMemory:
    """A drafter's or a target's share of the devices they share: its weights, its KV and the step's activations."""
    return stage_memory(
        us,
        batch=batch,
        context=wl.kv_tokens(),
        prefill_chunk=min(wl.prefill_chunk, wl.input_len),
        tp=sp.tp,
        logits_bytes_per_token=logits_per_token(us) if last else 0.0,
        shared_tokens=wl.shared_tokens(),
        windowed=wl.windowed,
        layout=wl.experts,
    )


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


def build_plan(
    model: CapturedModel,
    cluster: Cluster,
    wl: Workload,
    req: PlanRequest,
    sol: Solution,
    baselines: dict[str, Baseline],
    chain: list[Unit] | None = None,
    drafters: list[list[Stage]] | None = None,
    cpu: CpuBudget | None = None,
) -> Plan:
    """The plan.json document for a solution: its pipelines, predictions, bound and the inputs they rest on.

    Args:
        chain: the units the solution placed when they are not the model's own (speculation: a
            draft model's units, then the target's; capture/draft.py).
        drafters: filled, when given, with each pipeline's drafter stages (speculation).
    """
    units = model.units if chain is None else chain
    pipelines = []
    for pid, cand in enumerate(sol.pipelines):
        stages: list[Stage] = []
        drafted: list[Stage] = []
        for sp, est, first in zip(cand.stages, cand.estimate.stages, cand.first_device):
            for part, (lo, hi), offset in _parts(units, sp.first, sp.last):
                us = units[lo : hi + 1]
                whole = (lo, hi) == (sp.first, sp.last)
                mem = est.memory if whole else _part_memory(us, sp, cand.estimate.batch, wl, hi == len(units) - 1)
                stage = Stage(
                    devices=[f"{sp.node.name}:{i}" for i in range(first, first + sp.tp)],
                    profile=sp.node.profile.name,
                    backend=sp.node.profile.backend,
                    node=sp.node.name,
                    tp=sp.tp,
                    units=(lo - offset, hi - offset),
                    layers=(us[0].layer, us[-1].layer),
                    memory_bytes=MemoryBytes(weights=mem.weights, kv=mem.kv, activations=mem.activations, total=mem.total),
                    predicted_ms=StageTimes(prefill=est.prefill_s * 1e3, decode=est.decode_s * 1e3),
                )
                (drafted if part == "draft" else stages).append(stage)
        if drafters is not None:
            drafters.append(drafted)
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
    cpu = cpu or CpuBudget()
    with cpu.phase(BOUND):  # bound work (plan.json solver.time)
        bound = _bound(units, cluster, wl, sol, req.objective, req.tp, ceiling, req.min_tok_s, cpu)
    gap = max(0.0, (bound - value) / bound if sense == "max" else (value - bound) / value) if bound and value else 0.0
    return Plan(
        schema=SCHEMA,
        hetc_version=__version__,
        created=dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        model=model_info(model),
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
        units=plan_units(model.units),
    )


def _search_limits(req: PlanRequest) -> dict:
    """What a plan request asks of every search it runs (with or without speculation): the objective,
    its floor and SLOs (ms on the command line, seconds in the solver), tensor parallelism, time, seats."""
    return dict(
        objective=req.objective,
        min_tok_s=req.min_tok_s,
        ttft_slo_s=req.ttft_slo_ms / 1e3 if req.ttft_slo_ms else None,
        tpot_slo_s=req.tpot_slo_ms / 1e3 if req.tpot_slo_ms else None,
        tp=req.tp,
        time_limit=req.time_limit,
        max_num_seqs=req.max_num_seqs,
    )


def plan_units(units: list[Unit]) -> list[PlanUnit]:
    """plan.json's unit table of a model's own units."""
    return [
        PlanUnit(
            index=u.index,
            kind=u.kind,
            layer=u.layer,
            param_bytes=u.param_bytes,
            kv_bytes_per_token=u.kv_bytes_per_token,
            out_bytes_per_token=u.out_bytes_per_token,
        )
        for u in units
    ]


def model_info(model: CapturedModel) -> ModelInfo:
    """plan.json's record of a captured model."""
    return ModelInfo(
        ref=model.ref,
        dtype=model.dtype,
        kv_dtype=model.kv_dtype,
        num_layers=model.num_layers,
        num_units=len(model.units),
        params=model.num_params,
        graph_hash=model.graph_hash,
        kind=model.kind,
        notes=model.notes,
    )


def capture_draft(model: CapturedModel, ref: str, progress: Callable[[str], None] | None = None) -> CapturedModel:
    """The draft model `ref`, captured as the target `model` was (its dtypes), refused (BadInput, --draft)
    where its vocabulary is not the target's."""
    if progress:
        progress(f"capturing the draft {ref}")
    draft = capture(ref, dtype=model.dtype, kv_dtype=model.kv_dtype)
    want, got = (vocab_size(m.config, m.units, DTYPE_BYTES[m.dtype]) for m in (model, draft))
    if want != got:
        raise BadInput(
            f"the draft {ref} has a vocabulary of {got:,} tokens and the target {model.ref} of {want:,}; a drafter must share the target's tokenizer.",
            field="--draft",
            fix="give a draft model of the target's family (e.g. llama-3.1-8b for llama-3.1-70b), or --speculate ngram.",
        )
    return draft


def with_speculation(
    plan: Plan,
    model: CapturedModel,
    draft: CapturedModel | None,
    acceptance: Acceptance,
    cluster: Cluster,
    wl: Workload,
    req: PlanRequest,
    progress: Callable[[str], None] | None,
    cpu: CpuBudget | None = None,
) -> Plan:
    """`plan` (without speculation) against the best speculative plan for the same objective: the
    better one, the other recorded as a baseline (`speculation` / `no_speculation`) and the predicted
    gain in the notes; the bound is the larger (the smaller, minimising) of the two searches', so it
    holds over plans with and without a drafter.

    Args:
        draft: the draft model (None: n-gram lookup).
        acceptance: α, its source and the proposal rate, as SpecRequest.alpha gives them.
    """
    s, method = req.spec, req.spec.method
    assert method is not None  # speculating
    k = s.num_speculative_tokens
    alpha = acceptance.alpha
    rate = f", {acceptance.proposal_rate:g} of steps proposing" if acceptance.proposal_rate < 1 else ""
    label = f"{method.value}{f' {s.draft}' if draft else ''}, K={k}, α={alpha:g}{rate}"
    try:
        sol, chain, swl = solve_speculative(
            model.units,
            draft.units if draft else None,
            cluster,
            wl,
            k,
            alpha,
            Caps(watts=req.power_budget_w),
            acceptance.proposal_rate,
            **_search_limits(req),
            progress=(lambda m: progress(f"solving with speculation: {m}")) if progress else None,
            cpu=cpu,
            reserve=_reserve(req),
        )
    except Infeasible as e:
        plan.solver.notes.append(f"speculation ({label}): no plan ({e}); planned without it")
        return plan
    if cpu is not None:
        cpu.deadline(1.0)  # its bound: the rest of the limit
    drafters: list[list[Stage]] = []
    spec = build_plan(model, cluster, swl, req, sol, dict(plan.baselines), chain=chain, drafters=drafters, cpu=cpu)
    per_draft_step = [draft_step_ms(c, chain, swl) for c in sol.pipelines]
    placed = (
        [
            Drafter(model=model_info(draft), units=plan_units(draft.units), stages=st, predicted_ms_per_token=ms, pipeline=i)
            for i, (st, ms) in enumerate(zip(drafters, per_draft_step))
        ]
        if draft
        else []
    )
    spec.speculation = Speculation(
        method=method,
        num_speculative_tokens=k,
        acceptance=alpha,
        acceptance_source=acceptance.source,
        acceptance_from=acceptance.where,
        expected_tokens_per_round=expected_tokens_per_round(alpha, k),
        proposal_rate=acceptance.proposal_rate,
        exchange_ms=max(exchange_seconds(c, chain, cluster, swl) for c in sol.pipelines) * 1e3,
        drafter=placed[0] if placed else None,
        drafters=placed[1:],
    )
    sense = OBJECTIVES[req.objective][0]
    pick = max if sense == "max" else min
    better = pick((spec, plan), key=lambda p: p.solver.objective) if spec.solver.objective != plan.solver.objective else plan
    other = plan if better is spec else spec
    better.baselines["no_speculation" if better is spec else "speculation"] = Baseline(
        feasible=True,
        output_tok_s=other.predicted.output_tok_s,
        batch=other.pipelines[0].batch,
        ttft_ms=other.predicted.ttft_ms,
        tpot_ms=other.predicted.tpot_ms,
        stages=len(other.pipelines[0].stages),
    )
    sv, ov = better.solver, other.solver
    sv.bound, sv.upper_bound = pick(sv.bound, ov.bound), max(sv.upper_bound, ov.upper_bound)
    sv.gap = (
        max(0.0, (sv.bound - sv.objective) / sv.bound if sense == "max" else (sv.objective - sv.bound) / sv.objective) if sv.bound and sv.objective else 0.0
    )
    sv.seconds += ov.seconds
    sv.cpu_seconds = (plan.solver.cpu_seconds or 0.0) + sol.cpu_seconds
    sv.bound_method += f"; the {'larger' if sense == 'max' else 'smaller'} of the bounds with and without speculation ({label})"
    ps, pp = spec.predicted, plan.predicted
    sv.notes.append(
        f"speculation ({label}, {swl.spec_yield:.2f} tokens per step): {ps.output_tok_s:,.0f} output tok/s and "
        f"{1e3 / ps.tpot_ms if ps.tpot_ms else 0:,.1f} tok/s per user against {pp.output_tok_s:,.0f} and "
        f"{1e3 / pp.tpot_ms if pp.tpot_ms else 0:,.1f} without "
        f"(predicted gain {ps.output_tok_s / pp.output_tok_s if pp.output_tok_s else 0:.2f}× output tok/s, "
        f"{pp.tpot_ms / ps.tpot_ms if ps.tpot_ms else 0:.2f}× tok/s per user; {req.objective.value}: {'with' if better is spec else 'without'} speculation)"
    )
    return better
