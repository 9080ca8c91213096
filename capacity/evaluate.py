"""`hetc evaluate PLAN.json`: what a plan does under a load — vLLM's serving figures simulated,
plus tokens/s per device and per user, dollars and joules per output token, each stage's memory
headroom and busy share (the busiest saturates first), and goodput both ways (vLLM's at the
offered load, DistServe's highest rate meeting the SLO attainment).

A plan edited by hand is evaluated as it stands: its derived fields (each stage's memory and
predicted step times) are recomputed from its structure with the planner's model, and the
differences from the file are listed in the notes.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from functools import cache

from hetc.cluster import Cluster
from hetc.errors import BadInput
from hetc.partitioner.capture.capture import CapturedModel, capture
from hetc.partitioner.estimate.simulate import StagePlan, Workload, estimate_pipeline
from hetc.plan import Plan, load_plan
from hetc.requests import EvaluateRequest, LoadRequest, ServeLimits
from hetc.scheduling import Phase
from hetc.capacity.lanes import SimLane, lanes_of
from hetc.capacity.load import Arrivals, LengthDist, Load, Prefixes
from hetc.capacity.metrics import SLO, Latencies, serving_metrics, span_of
from hetc.capacity.simulator import RequestRecord, simulate, simulate_until
from hetc.capacity.speculation import sim_speculation
from hetc.capacity.window import WHOLE_RUN, Window

__all__ = [
    "NO_CACHING",
    "NO_CACHING_FIGURES",
    "NO_SPEC",
    "NO_SPEC_FIGURES",
    "Evaluation",
    "StageUse",
    "evaluate",
    "evaluate_plan",
    "load_for",
    "model_of",
    "rederive",
    "workload_of",
]

NO_CACHING = "no_prefix_caching_"  # the prefix of the figures of the same load simulated without the prefix cache
NO_CACHING_FIGURES = ("output_throughput", "request_throughput", "median_ttft_ms", "p99_ttft_ms", "median_tpot_ms", "preemptions")
NO_SPEC = "no_speculation_"  # the prefix of the figures of the same load simulated without the plan's speculation
NO_SPEC_FIGURES = ("output_throughput", "median_tpot_ms", "p99_tpot_ms", "median_ttft_ms")


@cache
def _capture(ref: str, dtype: str, kv_dtype: str) -> CapturedModel:
    return capture(ref, dtype=dtype, kv_dtype=kv_dtype)


def model_of(plan: Plan, file: str) -> CapturedModel:
    """The plan's model, captured once per process (and from the on-disk capture cache)."""
    m = _capture(plan.model.ref, plan.model.dtype, plan.model.kv_dtype)
    if m.graph_hash != plan.model.graph_hash:
        raise BadInput(
            f"model.graph_hash is {plan.model.graph_hash[:16]}…, but {plan.model.ref} ({plan.model.dtype}) "
            f"hashes to {m.graph_hash[:16]}…: the plan was made for another model or unit table.",
            file=file,
            field="model.graph_hash",
            fix=f"re-plan with `hetc plan {plan.model.ref}`.",
        )
    return m


def rederive(plan: Plan, model: CapturedModel, cluster: Cluster, file: str) -> tuple[Plan, list[str]]:
    """The plan with each stage's memory and predicted step times recomputed from its structure
    (pipelines, stages' devices and units, batch) by the planner's model, and what changed.

    Raises:
        BadInput: a pipeline does not fit its devices at its batch, or a device's profile names no
            peak for the plan's dtype.
    """
    cluster.require_flops(plan.model.dtype)
    wl = workload_of(plan, cluster)
    doc = plan.model_dump(by_alias=True)
    notes = []
    for p, pd in zip(plan.pipelines, doc["pipelines"]):
        stages = [StagePlan(cluster.node(s.node), s.units[0], s.units[1], s.tp) for s in p.stages]
        est = estimate_pipeline(model.units, stages, cluster, wl, p.batch, p.phase)
        if est is None:
            raise BadInput(
                f"pipeline {p.id} does not fit its devices at batch {p.batch}: weights, KV and activations exceed a stage's memory.",
                file=file,
                field=f"pipelines.{p.id}",
                fix="give it more devices or a smaller batch, or re-plan with `hetc plan`.",
            )
        for i, (s, e) in enumerate(zip(pd["stages"], est.stages)):
            new = {"weights": e.memory.weights, "kv": e.memory.kv, "activations": e.memory.activations, "total": e.memory.total}
            times = {"prefill": e.prefill_s * 1e3, "decode": e.decode_s * 1e3}
            for key, fresh in (("memory_bytes", new), ("predicted_ms", times)):
                old = s[key]
                moved = [k for k in fresh if not math.isclose(old[k], fresh[k], rel_tol=1e-3, abs_tol=1e-9)]
                if moved:
                    notes.append(f"pipeline {p.id} stage {i}: {key} recomputed ({', '.join(moved)} differed from the file)")
                s[key] = fresh
    return Plan.model_validate(doc), notes


def workload_of(plan: Plan, cluster: Cluster) -> Workload:
    """The workload the plan was priced for (its shared prefix included), on `cluster` (its engines:
    what a sliding layer keeps)."""
    w, ex = plan.workload, plan.experts
    if ex is None:  # a dense model, or a plan made before layouts: experts split as tp
        return Workload.of(w.input_len, w.output_len, plan.model.dtype, plan.model.kv_dtype, w.prefix_len, w.prefix_groups, cluster.windowed_kv)
    wl = Workload.of(
        w.input_len, w.output_len, plan.model.dtype, plan.model.kv_dtype, w.prefix_len, w.prefix_groups, cluster.windowed_kv, ex.layout, ex.imbalance
    )
    return dataclasses.replace(wl, dp_budget=ex.dp_budget)


def load_for(req: LoadRequest, plan: Plan) -> Load:
    """The load `req` describes, with the plan's lengths and shared prefix where it gives none."""
    if req.trace:
        return Load.trace(req.trace)
    ins = LengthDist.parse(req.input_len_dist or str(plan.workload.input_len), "--input-len-dist")
    outs = LengthDist.parse(req.output_len_dist or str(plan.workload.output_len), "--output-len-dist")
    if req.prefix_len is None:  # the plan's shared prefix (its groups, unless the request gives them)
        length, groups = plan.workload.prefix_len, req.prefix_groups or plan.workload.prefix_groups
    else:
        length, groups = req.prefix_len, req.prefix_groups or 1
    if not length and req.prefix_groups is not None:
        raise BadInput(
            f"--prefix-groups {req.prefix_groups} without a shared prefix (the plan has none).", field="--prefix-groups", fix="give --prefix-len N too."
        )
    prefixes = Prefixes(length, groups) if length else None
    if req.rate is not None:
        return Load.open(req.rate, req.requests, ins, outs, seed=req.seed, burstiness=req.burstiness, prefixes=prefixes)
    clients = req.concurrency or sum(p.batch * p.replicas for p in plan.pipelines if p.phase != Phase.DECODE)
    return Load.closed(clients, req.requests, ins, outs, seed=req.seed, prefixes=prefixes)


@dataclass(frozen=True, slots=True)
class StageUse:
    lane: int
    pipeline: int
    replica: int
    stage: int
    devices: list[str]
    busy_share: float  # of the run's duration
    step_ms: float  # its mean micro-batch step (KV transfer legs count in busy_share only)
    memory_headroom_bytes: float  # usable memory less the stage's weights, KV budget and activations
    memory_headroom_share: float
    kv_peak_share: float  # most of the lane's KV blocks in use at once


@dataclass(slots=True)
class Evaluation:
    name: str
    load: str
    metrics: dict[str, float | None]
    stages: list[StageUse]
    overheads: dict[str, str]
    notes: list[str] = field(default_factory=list)
    latencies: Latencies | None = None  # per request in the window, for the CDFs
    window: str = ""  # which part of the run the figures report, in words
    window_fields: dict = field(default_factory=dict)  # the same, for JSON
    engine: str = ""  # the serving engine(s) the figures assume (`Cluster.engines`)

    @property
    def bottleneck(self) -> StageUse:
        """The stage that saturates first as the load grows: the busiest one; where several are
        (nearly) always busy — continuous batching keeps a lane stepping whenever it holds a
        sequence — the one with the longest steps."""
        return max(self.stages, key=lambda s: (round(s.busy_share, 2), s.step_ms))

    def as_dict(self) -> dict:
        b = self.bottleneck
        return {
            "name": self.name,
            "load": self.load,
            "engine": self.engine,
            "window": self.window_fields,
            **self.metrics,
            "saturates_first": {"pipeline": b.pipeline, "replica": b.replica, "stage": b.stage, "devices": b.devices, "busy_share": b.busy_share},
            "stages": [asdict(s) for s in self.stages],
            "overheads": self.overheads,
            "notes": self.notes,
        }


def _describe(load: Load) -> str:
    r = load.requests
    ins, outs = sorted(x.input_len for x in r), sorted(x.output_len for x in r)
    lengths = f"input median {ins[len(ins) // 2]}, output median {outs[len(outs) // 2]} tokens"
    how = {
        Arrivals.CLOSED: f"{load.concurrency} concurrent clients",
        Arrivals.TRACE: f"a trace at {load.rate:.3g} req/s",
        Arrivals.POISSON: f"Poisson at {load.rate:g} req/s",
        Arrivals.GAMMA: f"gamma arrivals at {load.rate:g} req/s",
    }
    return f"{len(r)} requests, {how[load.arrivals]}, {lengths}"


def distserve_goodput(lanes: list[SimLane], cluster: Cluster, load: Load, limits: ServeLimits, slo: SLO, attainment: float, hint: float) -> float:
    """The highest request rate at which `attainment` of the requests meet the SLOs (DistServe):
    the load's requests (their lengths; a trace its shape) at other rates, bracketed from `hint`
    and bisected geometrically to 2%. Refused requests miss. A run stops as soon as more requests
    have missed than the attainment allows."""
    allowed = (1 - attainment) * len(load.requests)

    def missed(records: list[RequestRecord], now: float) -> bool:
        late = 0
        for r in records:
            if not r.served:
                late += 1
            elif r.token_times:
                first = (r.token_times[0] - r.arrival) * 1e3
                tpot = ((r.token_times[-1] - r.token_times[0]) * 1e3 / (r.output_len - 1)) if r.output_len > 1 else 0.0
                late += not slo.met(first, tpot if r.done else 0.0)
            elif slo.ttft_ms is not None and (now - r.arrival) * 1e3 > slo.ttft_ms:
                late += 1
        return late > allowed

    def ok(rate: float) -> bool:
        o = simulate_until(lanes, cluster, load.at_rate(rate), limits, missed)
        if o is None:
            return False
        a = serving_metrics(o, slo)["slo_attainment"]
        return a is not None and a >= attainment

    lo, hi = 0.0, hint
    if ok(hi):
        lo = hi
        for _ in range(12):
            hi = lo * 2
            if not ok(hi):
                break
            lo = hi
        else:
            return lo
    else:
        for _ in range(12):
            hi_next = hi / 2
            if ok(hi_next):
                lo = hi_next
                break
            hi = hi_next
        else:
            return 0.0
    while hi / lo > 1.02:
        mid = math.sqrt(lo * hi)
        lo, hi = (mid, hi) if ok(mid) else (lo, mid)
    return lo


def evaluate_plan(
    plan: Plan,
    file: str,
    load: Load,
    *,
    limits: ServeLimits | None = None,
    slo: SLO | None = None,
    attainment: float = 0.9,
    pue: float = 1.0,
    name: str | None = None,
    window: Window = WHOLE_RUN,
    engine: str | None = None,
) -> Evaluation:
    """Simulate serving `plan` under `load` and gather every figure `hetc evaluate` reports.

    Args:
        file: where the plan came from (named in errors and notes).
        limits: the server's settings.
        window: the part of the run the serving figures report (stages: the whole run; DistServe's
            goodput: its own runs, whole).
        slo: TTFT/TPOT limits for goodput; none: no goodput.
        attainment: DistServe's share of requests meeting the SLOs.
        pue: facility watts per device watt.
        engine: the serving engine to simulate the plan under (`--engine`); None: the one the plan names.
    """
    limits, slo = limits or ServeLimits(), slo or SLO()
    model = model_of(plan, file)
    cluster = Cluster.from_json(plan.cluster, file, engine=engine)
    plan, notes = rederive(plan, model, cluster, file)
    wl = workload_of(plan, cluster)
    lanes = lanes_of(plan, model.units, cluster, wl, num_kv_blocks=limits.num_kv_blocks, file=file)
    window.check(len(load.requests))
    spec = sim_speculation(plan)
    o = simulate(lanes, cluster, load, limits, spec)
    m = serving_metrics(o, slo, window)
    span = span_of(o, window)
    if limits.prefix_caching and load.shares_prefixes:  # what the hits are worth: the same run without the cache
        off = serving_metrics(simulate(lanes, cluster, load, dataclasses.replace(limits, prefix_caching=False), sim_speculation(plan)), slo, window)
        m.update({f"{NO_CACHING}{k}": off[k] for k in NO_CACHING_FIGURES})
    if spec is not None:  # what speculation is worth: the same run decoding one token per step
        assert plan.speculation is not None
        plain = serving_metrics(simulate(lanes, cluster, load, limits), slo, window)
        m.update({f"{NO_SPEC}{k}": plain[k] for k in NO_SPEC_FIGURES})
        m["spec_expected_tokens_per_round"] = plan.speculation.expected_tokens_per_round
        m["spec_plan_acceptance"] = plan.speculation.acceptance
        m["spec_plan_proposal_rate"] = plan.speculation.proposal_rate
        m["speculation_gain"] = (m["output_throughput"] or 0.0) / plain["output_throughput"] if plain["output_throughput"] else None
    devices = sum(l.devices for l in lanes)
    profiles = [(s.node.profile, s.tp) for l in lanes for s in l.stages]
    usd_h = sum(cluster.price(p) * k for p, k in profiles)
    watts = sum(p.power * k for p, k in profiles) * pue
    out = m["output_throughput"] or 0.0
    median_tpot = m["median_tpot_ms"] or 0.0
    m.update(
        {
            "devices": devices,
            "output_throughput_per_device": out / devices,
            "tok_s_per_user": 1e3 / median_tpot if median_tpot else None,
            "usd_per_hour": usd_h,
            "usd_per_mtok": usd_h / 3600 / out * 1e6 if out else None,
            "watts": watts,
            "joule_per_output_token": watts / out if out else None,
            "pue": pue,
        }
    )
    if slo.given:
        hint = max(plan.predicted.output_tok_s, out) / max(1.0, sum(r.output_len for r in load.requests) / len(load.requests))
        shape = load if load.arrivals is not Arrivals.CLOSED else Load.poisson(load.requests, hint, seed=0)
        g = distserve_goodput(lanes, cluster, shape, limits, slo, attainment, hint)
        m.update(
            {
                "distserve_goodput": g,
                "distserve_goodput_per_device": g / devices,
                "attainment": attainment,
                "ttft_slo_ms": slo.ttft_ms,
                "tpot_slo_ms": slo.tpot_ms,
            }
        )
    duration = o.end - o.start
    stages = []
    pipeline = {p.id: p for p in plan.pipelines}
    for l in lanes:
        for k, (st, ps) in enumerate(zip(l.stages, pipeline[l.pipeline].stages)):
            usable = st.node.profile.usable_memory
            stages.append(
                StageUse(
                    lane=l.id,
                    pipeline=l.pipeline,
                    replica=l.replica,
                    stage=k,
                    devices=st.devices,
                    busy_share=o.busy[(l.id, k)] / duration if duration > 0 else 0.0,
                    step_ms=o.stepped[(l.id, k)][0] / max(1, o.stepped[(l.id, k)][1]) * 1e3,
                    memory_headroom_bytes=usable - ps.memory_bytes.total,
                    memory_headroom_share=1 - ps.memory_bytes.total / usable,
                    kv_peak_share=o.kv_peak[l.id],
                )
            )
    served = [r for r in o.requests[span.first : span.stop] if r.served]
    return Evaluation(
        name=name or file,
        load=_describe(load),
        metrics=m,
        stages=stages,
        overheads=lanes[0].overheads.listed(),
        notes=notes,
        latencies=Latencies.of(served),
        window=window.describe(span),
        window_fields=window.as_dict(span),
        engine=cluster.engines,
    )


def evaluate(req: EvaluateRequest, progress: Callable[[str], None] | None = None) -> Evaluation:
    """`hetc evaluate`: the plan file under the request's load."""
    plan = load_plan(req.plan)
    if progress:
        progress(f"simulating {req.plan}")
    return evaluate_plan(
        plan,
        req.plan,
        load_for(req.load, plan),
        limits=req.limits,
        slo=SLO(req.slo.ttft_slo_ms, req.slo.tpot_slo_ms),
        attainment=req.slo.attainment,
        pue=req.pue,
        window=Window.parse(req.load.warmup, req.load.cooldown),
        engine=req.engine,
    )
