"""`hetc pareto`: output tok/s per device against tok/s per user, the frontier and where `hetc
plan` sits on it.

A point is a whole plan: the solver maximizes output tok/s under a TPOT ceiling (tok/s per user
= 1000 / TPOT ms), searching placements, pipeline depths and batches as `hetc plan` does. A third
series keeps the unconstrained aggregated plan's placement and caps its batch (powers of two below
the plan's, as a server's `--max-num-seqs` would), predicted by the same saturation model. The
ceiling is swept geometrically from the fastest step any plan has to the slowest one the
unconstrained plan runs (the low end is the latency objective's plan), once with prefill/decode pools allowed (`--disaggregate auto`) and
once without, so the chart shows what disaggregation buys at each speed. The frontier is the
set of points no other point beats on both axes (or, with `metric="usd"` / `"joule"`, on tok/s
per user and USD per million output tokens / joules per output token).

With speculation (`spec`: a draft model or n-gram lookup, K and α as `hetc plan` takes them) a
fourth series sweeps the same ceilings over speculative plans (partitioner/search/speculate.py: the
drafter placed by the solver, its devices counted as the plan's), aggregated only; the frontier is
then over both, and the chart draws the frontier without speculation beside it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import asdict, dataclass
from enum import StrEnum
from typing import TypeVar

from hetc.cluster import load_cluster
from hetc.errors import Infeasible
from hetc.partitioner.capture.capture import capture
from hetc.partitioner.planner import capture_draft, totals
from hetc.partitioner.search.speculate import solve_speculative
from hetc.partitioner.estimate.simulate import Workload, estimate_pipeline
from hetc.partitioner.search.mix import NO_CAPS
from hetc.partitioner.search.solver import Solution, solve
from hetc.requests import SpecRequest
from hetc.scheduling import Disaggregate, Objective

__all__ = ["SPECULATIVE", "Metric", "Point", "sweep", "frontier", "undominated"]

SPECULATIVE = "speculative"  # the series of plans with a drafter (or n-gram lookup)


class Metric(StrEnum):
    """The chart's y axis."""

    PER_DEVICE = "tok_s_per_device"  # larger is better
    USD = "usd_per_mtok"  # smaller is better
    JOULE = "joule_per_tok"  # smaller is better


@dataclass(frozen=True, slots=True)
class Point:
    series: str  # "aggregated" | "disaggregated" | "batch caps" | SPECULATIVE
    tpot_ceiling_ms: float | None  # None: the unconstrained plan (what `hetc plan` picks)
    output_tok_s: float
    devices: int
    tok_s_per_device: float
    tok_s_per_user: float
    ttft_ms: float
    tpot_ms: float
    usd_per_mtok: float
    joule_per_tok: float
    placement: str
    batch_cap: int | None = None  # the "batch caps" series: the aggregated plan with at most this many sequences
    engine: str = ""  # the serving engine(s) the figures assume (`Cluster.engines`)

    def value(self, metric: Metric) -> float:
        """The metric, signed so that larger is better."""
        v = getattr(self, metric.value)
        return v if metric is Metric.PER_DEVICE else -v

    def as_dict(self) -> dict:
        return asdict(self)


def _placement(sol) -> str:
    parts = []
    for c in sol.pipelines:
        chain = "|".join(f"{sp.node.name}×{sp.tp}" if sp.tp > 1 else sp.node.name for sp in c.stages)
        parts.append(f"{c.phase[0]}:{chain} x{c.replicas} b{c.estimate.batch}")
    return "; ".join(parts)


def sweep(
    model_ref: str,
    profiles: str,
    *,
    input_len: int = 1024,
    output_len: int = 256,
    dtype: str = "bf16",
    kv_dtype: str | None = None,
    points: int = 10,
    time_limit: float = 10.0,
    spec: SpecRequest | None = None,
    engine: str | None = None,
    progress: Callable[[str], None] | None = None,
) -> list[Point]:
    """Plans along the TPOT ceiling, for aggregated and disaggregated serving (and speculative, with `spec`).

    Args:
        points: ceilings per series (geometric between the fastest and the unconstrained TPOT).
        time_limit: the solver's limit per plan.
        spec: speculative decoding to sweep as its own series (None or off: none).
        engine: the serving engine of every node (`--engine`; None: the cluster file's, else hetc).
    """
    cluster = load_cluster(profiles, engine=engine)
    acceptance = spec.alpha() if spec is not None and spec.on else None  # a bad metrics file before any capture
    model = capture(model_ref, dtype=dtype, kv_dtype=kv_dtype)
    draft = capture_draft(model, spec.draft, progress) if spec is not None and spec.draft else None
    wl = Workload(input_len, output_len, dtype, model.kv_dtype, windowed=cluster.windowed_kv, experts=cluster.expert_layout, dp_budget=cluster.dp_budget)
    out: list[Point] = []

    def point(sol: Solution, series: str, ceiling_ms: float | None, cap: int | None = None) -> Point:
        t = totals(sol, cluster)
        tok = sol.output_tok_s
        return Point(
            series=series,
            tpot_ceiling_ms=ceiling_ms,
            output_tok_s=tok,
            devices=t.devices,
            tok_s_per_device=tok / t.devices,
            tok_s_per_user=1.0 / t.tpot_s,
            ttft_ms=t.ttft_s * 1e3,
            tpot_ms=t.tpot_s * 1e3,
            usd_per_mtok=t.usd_h / (tok * 3600) * 1e6,
            joule_per_tok=t.watts / tok,
            placement=_placement(sol),
            batch_cap=cap,
            engine=cluster.engines,
        )

    def plan(series: str, disaggregate: Disaggregate, ceiling_ms: float | None, objective: Objective = Objective.THROUGHPUT) -> Point | None:
        slo = ceiling_ms / 1e3 if ceiling_ms else None
        try:
            if series == SPECULATIVE:
                assert spec is not None and acceptance is not None
                sol = solve_speculative(
                    model.units,
                    draft.units if draft else None,
                    cluster,
                    wl,
                    spec.num_speculative_tokens,
                    acceptance.alpha,
                    NO_CAPS,
                    acceptance.proposal_rate,
                    objective=objective,
                    time_limit=time_limit,
                    tpot_slo_s=slo,
                )[0]
            else:
                sol = solve(model.units, cluster, wl, objective=objective, disaggregate=disaggregate, time_limit=time_limit, tpot_slo_s=slo)
        except Infeasible:
            return None
        if ceiling_ms is None and disaggregate == Disaggregate.OFF and series != SPECULATIVE:
            unconstrained.append(sol)
        return point(sol, series, ceiling_ms)

    unconstrained: list[Solution] = []

    speculative = ((SPECULATIVE, Disaggregate.OFF),) if acceptance is not None else ()
    for series, dis in (("aggregated", Disaggregate.OFF), ("disaggregated", Disaggregate.AUTO), *speculative):
        if progress:
            progress(f"{series}: unconstrained plan")
        top = plan(series, dis, None)
        if top is None:
            continue
        out.append(top)
        fastest = plan(series, Disaggregate.OFF, None, objective=Objective.LATENCY)  # the latency objective: the smallest TPOT
        lo = min(fastest.tpot_ms if fastest else top.tpot_ms, top.tpot_ms)
        for i in range(points):
            ceiling = lo * (top.tpot_ms / lo) ** (i / max(1, points - 1))
            if progress:
                progress(f"{series}: TPOT ≤ {ceiling:.1f} ms ({i + 1}/{points})")
            p = plan(series, dis, ceiling * (1 + 1e-9))
            if p is not None:
                out.append(p)
    for sol in unconstrained:  # the aggregated plan's placement with its batches capped, as --max-num-seqs does
        top_batch = max(c.estimate.batch for c in sol.pipelines)
        for cap in [2**k for k in range(top_batch.bit_length()) if 2**k < top_batch][-points:]:
            if progress:
                progress(f"batch caps: at most {cap} sequences per pipeline")
            out.append(point(_capped(sol, cap, model.units, cluster, wl), "batch caps", None, cap))
    return out


def _capped(sol: Solution, cap: int, units: list, cluster, wl: Workload) -> Solution:
    """An aggregated solution with every pipeline at most `cap` sequences (the saturation model)."""
    cands = []
    for c in sol.pipelines:
        est = estimate_pipeline(units, c.stages, cluster, wl, min(cap, c.estimate.batch), c.phase)
        assert est is not None  # fewer sequences than a batch that fits also fit
        cands.append(dataclasses.replace(c, estimate=est))
    return Solution(cands, sum(c.estimate.output_tok_s * c.replicas for c in cands), 0.0, sol.bound, sol.bound_method, "GIVEN")


T = TypeVar("T")


def undominated(items: list[T], key: Callable[[T], tuple[float, float]]) -> list[T]:
    """The items no other beats on both coordinates of `key` (larger is better), by the first ascending."""
    best: list[T] = []
    for it in sorted(items, key=key, reverse=True):
        if not best or key(it)[1] > key(best[-1])[1]:
            best.append(it)
    return best[::-1]


def frontier(points: list[Point], metric: Metric = Metric.PER_DEVICE) -> list[Point]:
    """Points that no other point beats on both tok/s per user and `metric`, fastest users last."""
    return undominated(points, lambda p: (p.tok_s_per_user, p.value(metric)))
