"""`hetc compare`: plans (or clusters, each planned once) side by side — what each predicts at
saturation, per device, per user, in dollars and joules — as a table, CSV, JSON or one
self-contained HTML page with each placement drawn."""

from __future__ import annotations

import base64
import html
import io
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

from hetc.plan import Plan, load_plan

__all__ = ["Row", "rows_of", "plan_clusters", "write_html"]


@dataclass(frozen=True, slots=True)
class Row:
    name: str
    cluster: str
    devices: int
    output_tok_s: float
    tok_s_per_device: float
    tok_s_per_user: float
    ttft_ms: float
    tpot_ms: float
    usd_per_mtok: float
    watts: float
    joule_per_tok: float
    bound_output_tok_s: float
    plan_over_bound: float
    status: str

    def as_dict(self) -> dict:
        return asdict(self)


def _row(name: str, plan: Plan) -> Row:
    p = plan.predicted
    devices = sum(len(s.devices) * pl.replicas for pl in plan.pipelines for s in pl.stages)
    bound = plan.solver.upper_bound
    return Row(name=name, cluster=plan.cluster.get("name", "?"), devices=devices, output_tok_s=p.output_tok_s,
               tok_s_per_device=p.output_tok_s / devices, tok_s_per_user=1e3 / p.tpot_ms if p.tpot_ms else 0.0,
               ttft_ms=p.ttft_ms, tpot_ms=p.tpot_ms, usd_per_mtok=p.usd_per_mtok, watts=p.watts,
               joule_per_tok=p.watts / p.output_tok_s if p.output_tok_s else 0.0, bound_output_tok_s=bound,
               plan_over_bound=p.output_tok_s / bound if bound else 0.0, status=plan.solver.status)


def rows_of(plans: dict[str, Plan]) -> list[Row]:
    """One row per plan, in the order given."""
    return [_row(name, plan) for name, plan in plans.items()]


def load_plans(paths: list[str]) -> dict[str, Plan]:
    return {Path(p).stem if [Path(q).stem for q in paths].count(Path(p).stem) == 1 else p: load_plan(p) for p in paths}


def plan_clusters(model: str, clusters: list[str], plan_kwargs: dict,
                  progress: Callable[[str], None] | None = None) -> dict[str, Plan]:
    """Plan `model` on each cluster (the capture is done once and cached for the others)."""
    from hetc.partitioner.planner import PlanRequest, make_plan

    out = {}
    for c in clusters:
        if progress:
            progress(f"planning on {c}")
        out[Path(c).stem] = make_plan(PlanRequest(model=model, profiles=c, **plan_kwargs))
    return out


def write_html(plans: dict[str, Plan], rows: list[Row], path: str) -> None:
    """A page that opens anywhere offline: the table, a bar chart, and each placement drawn (PNG inlined)."""
    from hetc.report import _pyplot, plot_plan

    plt = _pyplot("--html")

    def png(fig_or_path) -> str:
        return base64.b64encode(fig_or_path).decode()

    head = ["plan", "cluster", "devices", "output tok/s", "tok/s/device", "tok/s/user", "TTFT ms", "TPOT ms",
            "USD/M tok", "W", "J/tok", "plan/bound"]
    body = "".join(
        "<tr>" + "".join(f"<td>{html.escape(str(v))}</td>" for v in (
            r.name, r.cluster, r.devices, f"{r.output_tok_s:,.0f}", f"{r.tok_s_per_device:,.1f}",
            f"{r.tok_s_per_user:.1f}", f"{r.ttft_ms:,.0f}", f"{r.tpot_ms:.1f}", f"{r.usd_per_mtok:.3f}",
            f"{r.watts:,.0f}", f"{r.joule_per_tok:.2f}", f"{r.plan_over_bound:.3f}")) + "</tr>" for r in rows)
    fig, axes = plt.subplots(1, 3, figsize=(13, 3.5))
    for ax, (key, label) in zip(axes, (("output_tok_s", "output tok/s"), ("usd_per_mtok", "USD per M output tokens"),
                                       ("joule_per_tok", "J per output token"))):
        ax.bar([r.name for r in rows], [getattr(r, key) for r in rows], color="#4477aa")
        ax.set_title(label)
        ax.tick_params(axis="x", rotation=20)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100)
    plt.close(fig)
    pictures = []
    for name, plan in plans.items():
        tmp = io.BytesIO()
        plot_plan(plan, tmp)
        pictures.append(f"<h3>{html.escape(name)}</h3><img alt='placement of {html.escape(name)}' "
                        f"src='data:image/png;base64,{png(tmp.getvalue())}'>")
    Path(path).write_text(f"""<!doctype html><html><head><meta charset="utf-8"><title>hetc compare</title>
<style>body{{font-family:sans-serif;margin:2em}}table{{border-collapse:collapse}}td,th{{border:1px solid #ccc;
padding:4px 8px;text-align:right}}img{{max-width:100%}}</style></head><body>
<h1>hetc compare</h1><p>Predictions at saturation for each plan's workload (input/output lengths as planned);
power is every used device at its profile's power.</p>
<table><tr>{"".join(f"<th>{h}</th>" for h in head)}</tr>{body}</table>
<h2>Side by side</h2><img alt="throughput, cost and energy" src="data:image/png;base64,{png(buf.getvalue())}">
<h2>Placements</h2>{"".join(pictures)}</body></html>""")
