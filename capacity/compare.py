"""`hetc compare`: plans (or clusters, each planned once) served side by side under one load,
simulated — output tok/s, per device, per user, TTFT and TPOT percentiles, 429s, goodput, dollars
and joules — beside each plan's own prediction at saturation; as a table, CSV, JSON or one
self-contained HTML page (the table, the latency CDFs, the Pareto chart and each placement drawn).

The load is the same for every plan: the request's arrivals, and where it gives no lengths the
first plan's; with no rate, concurrency or trace, a closed loop of as many clients as the largest
plan holds sequences, so every plan can be driven to its own saturation.
"""

from __future__ import annotations

import base64
import dataclasses
import html
import io
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from hetc.capacity.evaluate import NO_CACHING, NO_SPEC, Evaluation, evaluate_plan, load_for
from hetc.capacity.metrics import SLO
from hetc.capacity.pareto import undominated
from hetc.capacity.window import Window
from hetc.capacity_report import fmt_ms
from hetc.plan import Plan, load_plan
from hetc.requests import CompareRequest
from hetc.scheduling import Phase

__all__ = ["Comparison", "Row", "compare", "plan_clusters", "load_plans", "write_html"]


@dataclass(frozen=True, slots=True)
class Row:
    name: str
    cluster: str
    engine: str  # the serving engine(s) the figures assume
    devices: int
    # simulated under the common load
    output_throughput: float
    tok_s_per_device: float
    tok_s_per_user: float | None
    median_ttft_ms: float
    p99_ttft_ms: float
    median_tpot_ms: float
    p99_tpot_ms: float
    refused_429: int
    prefix_cache_hit_rate: float | None  # prompt tokens served from the prefix cache (None: it was off or never asked)
    no_caching_output_throughput: float | None  # the same load without the prefix cache (when the load shares prefixes)
    no_caching_median_ttft_ms: float | None
    spec_acceptance: float | None  # speculative rounds: accepted over drafted proposals (None: the plan does not speculate)
    spec_tokens_per_round: float | None
    no_spec_output_throughput: float | None  # the same load decoding one token per step
    request_goodput: float | None
    distserve_goodput: float | None
    usd_per_mtok: float | None
    watts: float
    joule_per_tok: float | None
    # the plan's own prediction at saturation
    saturation_output_tok_s: float
    plan_over_bound: float
    status: str
    window: str  # which part of the simulated run the figures report

    def as_dict(self) -> dict:
        return asdict(self)


def _row(name: str, plan: Plan, ev: Evaluation) -> Row:
    m = ev.metrics
    bound = plan.solver.upper_bound
    return Row(
        name=name,
        cluster=plan.cluster.name or "?",
        engine=ev.engine,
        devices=int(m["devices"] or 0),
        output_throughput=m["output_throughput"] or 0.0,
        tok_s_per_device=m["output_throughput_per_device"] or 0.0,
        tok_s_per_user=m["tok_s_per_user"],
        median_ttft_ms=m["median_ttft_ms"] or 0.0,
        p99_ttft_ms=m["p99_ttft_ms"] or 0.0,
        median_tpot_ms=m["median_tpot_ms"] or 0.0,
        p99_tpot_ms=m["p99_tpot_ms"] or 0.0,
        refused_429=int(m["refused_429"] or 0),
        prefix_cache_hit_rate=m["prefix_cache_hit_rate"],
        no_caching_output_throughput=m.get(f"{NO_CACHING}output_throughput"),
        no_caching_median_ttft_ms=m.get(f"{NO_CACHING}median_ttft_ms"),
        spec_acceptance=m.get("spec_acceptance"),
        spec_tokens_per_round=m.get("spec_tokens_per_round"),
        no_spec_output_throughput=m.get(f"{NO_SPEC}output_throughput"),
        request_goodput=m["request_goodput"],
        distserve_goodput=m.get("distserve_goodput"),
        usd_per_mtok=m["usd_per_mtok"],
        watts=m["watts"] or 0.0,
        joule_per_tok=m["joule_per_output_token"],
        saturation_output_tok_s=plan.predicted.output_tok_s,
        plan_over_bound=plan.predicted.output_tok_s / bound if bound else 0.0,
        status=plan.solver.status,
        window=ev.window,
    )


@dataclass(slots=True)
class Comparison:
    plans: dict[str, Plan]
    rows: list[Row]
    evaluations: list[Evaluation]
    load: str  # the common load, described

    def write_html(self, path: str) -> None:
        write_html(self.plans, self.rows, self.evaluations, self.load, path)


def compare(req: CompareRequest, progress: Callable[[str], None] | None = None) -> Comparison:
    """Every plan of `req` (or `req.model` planned on each cluster, captured once) under one load."""
    window = Window.parse(req.load.warmup, req.load.cooldown)
    if req.profiles:
        assert req.model is not None
        plans = plan_clusters(
            req.model,
            req.profiles,
            dict(
                dtype=req.dtype,
                input_len=req.input_len,
                output_len=req.output_len,
                time_limit=req.time_limit,
                engine=req.engine,
                prefix_len=req.load.prefix_len or 0,
                prefix_groups=req.load.prefix_groups or 1,
            ),
            progress=progress,
        )
        files = {n: f"{n} (planned)" for n in plans}
    else:
        plans, files = load_plans(req.plans)
    load = req.load
    if load.rate is None and load.concurrency is None and load.trace is None:
        held = max(sum(p.batch * p.replicas for p in plan.pipelines if p.phase != Phase.DECODE) for plan in plans.values())
        load = dataclasses.replace(load, concurrency=held)
    common = load_for(load, next(iter(plans.values())))
    slo = SLO(req.slo.ttft_slo_ms, req.slo.tpot_slo_ms)
    rows, evals = [], []
    for name, plan in plans.items():
        if progress:
            progress(f"simulating {name}")
        ev = evaluate_plan(
            plan, files[name], common, limits=req.limits, slo=slo, attainment=req.slo.attainment, pue=req.pue, name=name, window=window, engine=req.engine
        )
        rows.append(_row(name, plan, ev))
        evals.append(ev)
    return Comparison(plans, rows, evals, evals[0].load)


def load_plans(paths: list[str]) -> tuple[dict[str, Plan], dict[str, str]]:
    """name (the file's stem, or its path when two stems clash) → plan, and → its file."""
    stems = [Path(p).stem for p in paths]
    names = [s if stems.count(s) == 1 else p for s, p in zip(stems, paths)]
    return {n: load_plan(p) for n, p in zip(names, paths)}, dict(zip(names, paths))


def plan_clusters(model: str, clusters: list[str], plan_kwargs: dict, progress: Callable[[str], None] | None = None) -> dict[str, Plan]:
    """Plan `model` on each cluster (the capture is done once and cached for the others)."""
    from hetc.partitioner.planner import PlanRequest, make_plan

    out = {}
    for c in clusters:
        if progress:
            progress(f"planning on {c}")
        out[Path(c).stem] = make_plan(PlanRequest(model=model, profiles=c, **plan_kwargs))
    return out


def _png(fig) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100)
    return base64.b64encode(buf.getvalue()).decode()


def _charts(rows: list[Row], evals: list[Evaluation]) -> tuple[str, str]:
    """(latency CDFs, the Pareto chart) as inline PNGs."""
    from hetc.report import _pyplot

    plt = _pyplot("--html")
    fig, axes = plt.subplots(1, 2, figsize=(12, 4))
    for ev in evals:
        lat = ev.latencies
        assert lat is not None
        for ax, xs in zip(axes, (lat.ttft, lat.tpot[~np.isnan(lat.tpot)])):
            xs = sorted(xs)
            ax.step(xs, [(i + 1) / len(xs) for i in range(len(xs))], where="post", label=ev.name)
    for ax, title in zip(axes, ("TTFT (ms)", "TPOT (ms)")):
        ax.set_xlabel(title)
        ax.set_ylabel("share of requests")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle("latency CDFs under the common load (simulated)")
    fig.tight_layout()
    cdfs = _png(fig)
    plt.close(fig)
    fig, ax = plt.subplots(figsize=(7, 4.5))
    pts = [(r.tok_s_per_user or 0.0, r.tok_s_per_device, r.name) for r in rows]
    front = undominated([(u, d) for u, d, _ in pts], key=lambda p: p)
    for u, d, name in pts:
        ax.scatter([u], [d], s=60)
        ax.annotate(name, (u, d), textcoords="offset points", xytext=(5, 5), fontsize=8)
    ax.plot([u for u, _ in front], [d for _, d in front], "k--", lw=1, label="frontier")
    ax.set_xlabel("output tok/s per user (1000 / median TPOT ms)")
    ax.set_ylabel("output tok/s per device")
    ax.set_title("Pareto chart (simulated)")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    pareto = _png(fig)
    plt.close(fig)
    return cdfs, pareto


def write_html(plans: dict[str, Plan], rows: list[Row], evals: list[Evaluation], load: str, path: str) -> None:
    """One page that opens anywhere offline (no script, every picture inlined): the table, the latency
    CDFs, the Pareto chart and each placement drawn."""
    from hetc.report import plot_plan

    def f(v: float | None, fmt: str) -> str:
        return "—" if v is None else format(v, fmt)

    head = [
        "plan",
        "cluster",
        "devices",
        "output tok/s",
        "tok/s/device",
        "tok/s/user",
        "TTFT p50 / p99 ms",
        "TPOT p50 / p99 ms",
        "429",
        "goodput req/s",
        "USD/M tok",
        "kW",
        "J/tok",
        "saturation tok/s (plan)",
        "plan/bound",
    ]
    body = "".join(
        "<tr>"
        + "".join(
            f"<td>{html.escape(str(v))}</td>"
            for v in (
                r.name,
                r.cluster,
                r.devices,
                f"{r.output_throughput:,.0f}",
                f"{r.tok_s_per_device:,.1f}",
                f(r.tok_s_per_user, ".1f"),
                f"{fmt_ms(r.median_ttft_ms)} / {fmt_ms(r.p99_ttft_ms)}",
                f"{fmt_ms(r.median_tpot_ms)} / {fmt_ms(r.p99_tpot_ms)}",
                r.refused_429,
                f(r.distserve_goodput, ",.2f"),
                f(r.usd_per_mtok, ".3f"),
                f"{r.watts / 1e3:,.1f}",
                f(r.joule_per_tok, ".2f"),
                f"{r.saturation_output_tok_s:,.0f}",
                f"{r.plan_over_bound:.3f}",
            )
        )
        + "</tr>"
        for r in rows
    )
    cdfs, pareto = _charts(rows, evals)
    pictures = []
    for name, plan in plans.items():
        buf = io.BytesIO()
        plot_plan(plan, buf)
        pictures.append(
            f"<h3>{html.escape(name)}</h3><img alt='placement of {html.escape(name)}' src='data:image/png;base64,{base64.b64encode(buf.getvalue()).decode()}'>"
        )
    Path(path).write_text(f"""<!doctype html><html><head><meta charset="utf-8"><title>hetc compare</title>
<style>body{{font-family:sans-serif;margin:2em}}table{{border-collapse:collapse}}td,th{{border:1px solid #ccc;
padding:4px 8px;text-align:right}}img{{max-width:100%}}</style></head><body>
<h1>hetc compare</h1><p>Every plan served under the same load, simulated: {html.escape(load)}. Goodput is DistServe's
(the highest rate with the SLO attainment met); power is every used device at its profile's board power (an upper
estimate); "saturation" is each plan's own prediction. Figures over: {"; ".join(html.escape(f"{r.name}: {r.window}") for r in rows)}.</p>
<table><tr>{"".join(f"<th>{h}</th>" for h in head)}</tr>{body}</table>
<h2>Latency</h2><img id="cdf" alt="latency CDFs" src="data:image/png;base64,{cdfs}">
<h2>Pareto chart</h2><img id="pareto" alt="tok/s per device against tok/s per user" src="data:image/png;base64,{pareto}">
<h2>Placements</h2>{"".join(pictures)}</body></html>""")
