"""What the capacity commands show a person: evaluate, compare, pareto and buy tables, the
frontier chart."""

from __future__ import annotations

from typing import TYPE_CHECKING, cast

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from hetc.quantity import Kind, format_quantity
from hetc.report import _pyplot

if TYPE_CHECKING:
    from hetc.capacity.buy import Checked, Purchase
    from hetc.requests import BuyRequest
    from hetc.capacity.evaluate import Evaluation
    from hetc.capacity.pareto import Metric, Point
    from hetc.catalog import Catalog

__all__ = ["fmt_ms", "print_evaluation", "print_compare", "print_purchase", "print_pareto", "plot_pareto"]


def print_compare(rows: list, load: str, console: Console) -> None:
    t = Table(title=f"hetc compare under one load (simulated): {load}", title_justify="left")
    for col in (
        "plan",
        "cluster",
        "engine",
        "devices",
        "output tok/s",
        "tok/s/device",
        "tok/s/user",
        "TTFT p50/p99 ms",
        "TPOT p50/p99 ms",
        "429",
        "prefix hits",
        "spec accept / tok/round",
        "goodput req/s",
        "USD/M tok",
        "kW",
        "J/tok",
        "saturation (plan)",
        "plan/bound",
    ):
        t.add_column(col, justify="left" if col in ("plan", "cluster", "engine") else "right")
    best = max(r.output_throughput for r in rows)
    for r in rows:
        t.add_row(
            r.name,
            r.cluster,
            r.engine,
            str(r.devices),
            ("[bold]" if r.output_throughput == best else "") + f"{r.output_throughput:,.0f}",
            f"{r.tok_s_per_device:,.1f}",
            _num(r.tok_s_per_user, ".1f"),
            f"{fmt_ms(r.median_ttft_ms)} / {fmt_ms(r.p99_ttft_ms)}",
            f"{fmt_ms(r.median_tpot_ms)} / {fmt_ms(r.p99_tpot_ms)}",
            str(r.refused_429),
            _hits(r),
            _spec(r),
            _num(r.distserve_goodput, ",.2f"),
            _num(r.usd_per_mtok, ".3f"),
            f"{r.watts / 1e3:.1f}",
            _num(r.joule_per_tok, ".2f"),
            f"{r.saturation_output_tok_s:,.0f}",
            f"{r.plan_over_bound:.3f}",
        )
    console.print(t)
    for r in rows:
        console.print(f"{r.name}: figures over {r.window}", markup=False)


def _hits(r) -> str:
    """The prefix-cache hit rate, and the throughput and TTFT p50 the same load gets without the cache."""
    if r.prefix_cache_hit_rate is None:
        return "—"
    if r.no_caching_output_throughput is None:
        return f"{r.prefix_cache_hit_rate:.0%}"
    return f"{r.prefix_cache_hit_rate:.0%} (off: {r.no_caching_output_throughput:,.0f} tok/s, {fmt_ms(r.no_caching_median_ttft_ms)} ms)"


def _spec(r) -> str:
    """Speculation's acceptance and tokens per round, and the throughput the same load gets without it."""
    if r.spec_tokens_per_round is None:
        return "—"
    return f"{r.spec_acceptance:.0%} / {r.spec_tokens_per_round:.2f} (off: {r.no_spec_output_throughput:,.0f} tok/s)"


def _num(v: float | None, fmt: str) -> str:
    return "—" if v is None else format(v, fmt)


def print_purchase(p: Purchase, catalog: Catalog, req: BuyRequest, console: Console) -> None:
    slo = ", ".join(f"{k} ≤ {v:g} ms" for k, v in (("TTFT", req.ttft_slo_ms), ("TPOT", req.tpot_slo_ms)) if v)
    t = Table(
        title=f"buy: {req.rate:g} req/s × {req.output_len} output tokens = {req.output_tok_s:,.0f} output tok/s" + (f", {slo}" if slo else ""),
        title_justify="left",
    )
    for col in ("device", "buy", "of", "USD/h each"):
        t.add_column(col, justify="left" if col == "device" else "right")
    for i, e in enumerate(catalog.entries):
        t.add_row(e.profile, str(p.counts.get(i, 0)), str(e.max), e.price or "profile's")
    console.print(t)
    head = f"fleet: [bold]{p.usd_h:,.2f} USD/h[/], predicted {p.output_tok_s:,.0f} output tok/s at saturation"
    if p.bound_tok_s is not None:
        met = "meets" if p.output_tok_s >= req.output_tok_s else "does not meet"
        console.print(
            f"{head} ({met} the rate); no fleet within {req.budget_usd_h:,.2f} USD/h serves more than "
            f"{p.bound_tok_s:,.0f} output tok/s (plan/bound {p.ratio:.3f})"
        )
    else:
        console.print(f"{head}; no fleet serving this load costs less than {p.bound_usd_h:,.2f} USD/h (bound/cost {p.ratio:.3f})")


def print_tries(got: Checked, console: Console) -> None:
    """The purchases `hetc buy` made before the last, where its simulation sent it back for more."""
    if len(got.tries) < 2:
        return
    t = Table(title="purchases (each simulated at the rate; a miss buys for rate / goodput more)", title_justify="left")
    for col in ("try", "asked tok/s", "devices", "USD/h", "within SLOs", "goodput req/s"):
        t.add_column(col, justify="right")
    for i, x in enumerate(got.tries, 1):
        t.add_row(str(i), f"{x.floor_tok_s:,.0f}", str(x.devices), f"{x.usd_h:,.2f}", _num(x.attainment, ".1%"), _num(x.goodput, ",.2f"))
    console.print(t)


def print_slo_check(ev: Evaluation, req: BuyRequest, console: Console, stopped: str | None = None) -> None:
    """The fleet served at the rate, simulated: whether the latency SLOs hold for `req.attainment` of requests.

    Args:
        stopped: why `hetc buy` stopped buying more while they miss.
    """
    m = ev.metrics
    line = (
        f"simulated at {req.rate:g} req/s ({ev.load}): output {m['output_throughput']:,.0f} tok/s, TTFT p50/p99 "
        f"{fmt_ms(m['median_ttft_ms'])}/{fmt_ms(m['p99_ttft_ms'])} ms, TPOT p50/p99 {fmt_ms(m['median_tpot_ms'])}/"
        f"{fmt_ms(m['p99_tpot_ms'])} ms, 429s {m['refused_429']}"
    )
    att = m.get("slo_attainment")
    if att is None:
        console.print(line + " (no SLO given)")
        return
    ok = att >= req.attainment
    console.print(
        line
        + f"; {att:.1%} of requests meet the SLOs: "
        + (
            "[green]met[/]"
            if ok
            else f"[red]missed[/] (needs {req.attainment:.0%}; stopped: {stopped or 'the budget buys no more'} — "
            "loosen --tpot-slo/--ttft-slo, lower --rate or add to the catalog)"
        )
        + f"; DistServe goodput {m['distserve_goodput']:,.2f} req/s"
    )


def print_pareto(points: list[Point], front: list[Point], metric: Metric, console: Console) -> None:
    t = Table(title=f"frontier: tok/s per user against {metric.value}", title_justify="left")
    for col in ("series", "TPOT ≤ ms / batch ≤", "tok/s/user", "tok/s/device", "devices", "USD/M tok", "J/tok", "TTFT ms", "placement"):
        t.add_column(col, justify="left" if col in ("series", "placement") else "right")
    for p in front:
        limit = (f"b ≤ {p.batch_cap}" if p.batch_cap else "plan") if p.tpot_ceiling_ms is None else f"{p.tpot_ceiling_ms:.1f}"
        t.add_row(
            p.series,
            limit,
            f"{p.tok_s_per_user:.1f}",
            f"{p.tok_s_per_device:,.0f}",
            str(p.devices),
            f"{p.usd_per_mtok:.3f}",
            f"{p.joule_per_tok:.2f}",
            f"{p.ttft_ms:,.0f}",
            p.placement,
        )
    console.print(t)
    engines = sorted({p.engine for p in points})
    console.print(f"{len(points)} plans, {len(front)} on the frontier; 'plan' marks what `hetc plan` picks (no TPOT ceiling); engine {', '.join(engines)}")


def plot_pareto(points: list[Point], front: list[Point], metric: Metric, title: str, path: str) -> None:
    """Every plan of the sweep by series, the frontier as a line (and, with a speculative series, the
    frontier without it), `hetc plan`'s choice circled."""
    from hetc.capacity.pareto import SPECULATIVE, frontier

    plt = _pyplot("--png")
    fig, ax = plt.subplots(figsize=(8, 5.5))
    for series, color in (("aggregated", "#1f77b4"), ("disaggregated", "#d62728"), ("batch caps", "#2ca02c"), (SPECULATIVE, "#9467bd")):
        ps = [p for p in points if p.series == series]
        if ps:
            ax.scatter([p.tok_s_per_user for p in ps], [getattr(p, metric.value) for p in ps], color=color, label=series, alpha=0.7)
    plain = [p for p in points if p.series != SPECULATIVE]
    if len(plain) < len(points):  # both frontiers in one picture: with speculation allowed, and without
        without = frontier(plain, metric)
        ax.plot([p.tok_s_per_user for p in without], [getattr(p, metric.value) for p in without], "k:", lw=1, label="frontier without speculation")
    ax.plot([p.tok_s_per_user for p in front], [getattr(p, metric.value) for p in front], "k--", lw=1, label="frontier")
    plans = [p for p in points if p.tpot_ceiling_ms is None and p.batch_cap is None]
    pick = [p for p in plans if p.series == "disaggregated"] or plans
    if pick:
        ax.scatter([pick[0].tok_s_per_user], [getattr(pick[0], metric.value)], s=220, facecolors="none", edgecolors="k", label="hetc plan")
    ax.set_xlabel("output tok/s per user (1000 / TPOT ms)")
    ax.set_ylabel(
        {"tok_s_per_device": "output tok/s per device", "usd_per_mtok": "USD per M output tokens", "joule_per_tok": "J per output token"}[metric.value]
    )
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def fmt_ms(v: float | None) -> str:
    """Milliseconds to 3 significant figures (whole numbers from 100 up); — for none."""
    if v is None:
        return "—"
    return f"{v:,.0f}" if abs(v) >= 100 else f"{v:.3g}"


def print_evaluation(ev: Evaluation, console: Console) -> None:
    """vLLM's serving figures, then per device/user, cost, energy, goodput and the stages."""
    m = ev.metrics
    console.print(f"[bold]{escape(ev.name)}[/] under {escape(ev.load)} (simulated)")
    console.print(f"figures over {ev.window}; stages over the whole run; engine {ev.engine}", markup=False)
    console.print(
        f"completed {m['completed']}, refused 429 {m['refused_429']}, rejected 400 {m['rejected_400']}, "
        f"preemptions {m['preemptions']}, duration {m['duration_s']:.2f} s"
    )
    console.print(
        f"request_throughput {m['request_throughput']:,.2f} req/s, output_throughput "
        f"[bold]{m['output_throughput']:,.1f}[/] tok/s, total_token_throughput {m['total_token_throughput']:,.1f} tok/s"
    )
    hit = m.get("prefix_cache_hit_rate")
    if hit is not None:
        line = f"prefix cache: {hit:.1%} of prompt tokens looked up were cached (their prefill skipped)"
        from hetc.capacity.evaluate import NO_CACHING as off

        if m.get(f"{off}output_throughput") is not None:
            line += (
                f"; without it: output_throughput {m[f'{off}output_throughput']:,.1f} tok/s, TTFT median/p99 "
                f"{fmt_ms(m[f'{off}median_ttft_ms'])}/{fmt_ms(m[f'{off}p99_ttft_ms'])} ms, preemptions {m[f'{off}preemptions']}"
            )
        console.print(line)
    if m.get("spec_tokens_per_round") is not None:
        from hetc.capacity.evaluate import NO_SPEC as ns

        console.print(
            f"speculation: {m['spec_acceptance']:.1%} of proposals accepted (per-token α {m['spec_alpha']:.2f}, the plan's {m['spec_plan_acceptance']:.2f}), "
            f"{m['spec_tokens_per_round']:.2f} tokens per round (expected {m['spec_expected_tokens_per_round']:.2f}), "
            f"rounds on {m['spec_proposal_rate']:.0%} of decode steps (the plan's {m['spec_plan_proposal_rate']:.0%}); "
            f"without it: output_throughput {m[f'{ns}output_throughput']:,.1f} tok/s, TPOT median {fmt_ms(m[f'{ns}median_tpot_ms'])} ms "
            f"(gain ×{m['speculation_gain']:.2f})"
        )
    t = Table(title="latency (ms)", title_justify="left")
    for col in ("", "mean", "median", "p90", "p99"):
        t.add_column(col, justify="left" if not col else "right")
    for name in ("ttft", "tpot", "itl", "e2el"):
        t.add_row(name.upper(), *(fmt_ms(m[f"{k}_{name}_ms"]) for k in ("mean", "median", "p90", "p99")))
    console.print(t)
    per_user = m["tok_s_per_user"]
    console.print(
        f"{m['devices']} devices: {m['output_throughput_per_device']:,.1f} output tok/s per device, "
        f"{'—' if per_user is None else f'{per_user:,.1f}'} tok/s per user (1000 / median TPOT)"
    )
    usd, j = m["usd_per_mtok"], m["joule_per_output_token"]
    console.print(
        f"cost {m['usd_per_hour']:,.2f} USD/h → {'—' if usd is None else f'{usd:,.3f}'} USD per M output tokens; "
        f"power {cast(float, m['watts']) / 1e3:,.2f} kW (board power of every device × PUE {m['pue']:g}: an upper "
        f"estimate) → {'—' if j is None else f'{j:,.3f}'} J per output token"
    )
    if m.get("request_goodput") is not None:
        console.print(
            f"goodput (TTFT ≤ {m['ttft_slo_ms']} ms, TPOT ≤ {m['tpot_slo_ms']} ms): request_goodput "
            f"{m['request_goodput']:,.2f} req/s at this load (attainment {m['slo_attainment']:.1%}); "
            f"DistServe: [bold]{m['distserve_goodput']:,.2f} req/s[/] with ≥ {m['attainment']:.0%} "
            f"meeting the SLOs ({m['distserve_goodput_per_device']:,.3f} per device)"
        )
    t = Table(title="stages", title_justify="left")
    for col in ("pipeline", "replica", "stage", "devices", "busy", "mean step ms", "memory headroom", "KV peak"):
        t.add_column(col, justify="left" if col == "devices" else "right")
    b = ev.bottleneck
    for s in ev.stages:
        mark = "[bold]" if s is b else ""
        t.add_row(
            str(s.pipeline),
            str(s.replica),
            str(s.stage),
            ", ".join(s.devices),
            f"{mark}{s.busy_share:.0%}",
            f"{s.step_ms:.2f}",
            f"{format_quantity(s.memory_headroom_bytes, Kind.BYTES)} ({s.memory_headroom_share:.0%})",
            f"{s.kv_peak_share:.0%}",
        )
    console.print(t)
    console.print(f"saturates first: pipeline {b.pipeline} replica {b.replica} stage {b.stage} ({', '.join(b.devices)})")
    console.print("serving overheads modelled: " + "; ".join(f"{k}: {v}" for k, v in ev.overheads.items()))
    for note in ev.notes:
        console.print(f"note: {note}", markup=False)
