"""Tables for `hetc profile`: what was fitted, and the fidelity report."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from hetc.cluster import Profile
from hetc.partitioner.cost_models.curves import LogTable

__all__ = ["print_calibration", "print_fidelity"]


def _us(s: float) -> str:
    return f"{s * 1e6:.3g} µs"


def print_calibration(prof: Profile, details: dict, path: str | None, console: Console) -> None:
    """The fitted profile's headline figures (the curves themselves are in the YAML)."""
    c = prof.efficiency_curves
    t = Table(title=f"profile {prof.name}" + (f" → {path}" if path else ""), show_header=False)
    t.add_column("what")
    t.add_column("value", justify="right")
    t.add_column("how", style="dim")
    t.add_row("threads", str(c.threads if c else "?"), "intra-op threads measured with")
    t.add_row("peak fp32", f"{prof.peak_flops['fp32'] / 1e9:.1f} GFLOP/s", "nominal (or fastest measured matmul)")
    t.add_row("memory bandwidth", f"{prof.memory_bandwidth / 1e9:.1f} GB/s", "copy of a buffer far larger than cache")
    t.add_row("best matmul", f"{prof.efficiency.matmul:.0%} of peak", "efficiency.matmul")
    if c and "fp32" in c.matmul:
        mm = LogTable(c.matmul["fp32"])
        effs = " / ".join(f"{mm(m, 1 << 20):.0%}" for m in (1, 16, 256))
        t.add_row("matmul M=1 / 16 / 256", effs, "of peak, 1024×1024 weight: skinny GEMMs reach far less")
    if c and c.dispatch_overhead is not None:
        t.add_row("dispatch", _us(c.dispatch_overhead), "one op alone in a loop")
    t.add_row("launch overhead", _us(prof.launch_overhead), "per op inside a model step (probe fit)")
    t.add_row("step overhead", _us(prof.step_overhead), "per engine step (probe fit)")
    sv = prof.serving
    if sv.step or sv.row or sv.sample_logit:
        t.add_row(
            "serving host work",
            f"{_us(sv.step)} + {_us(sv.row)}/seq + {_us(sv.token)}/token",
            "a stage worker's per-step work around its forward (runtime functions, timed)",
        )
        t.add_row("sampling", f"{sv.sample_logit * 1e9:.3g} ns/logit", "the last stage's sampler, per row × vocabulary")
    link = details.get("p2p_link")
    if link and "error" not in link:
        t.add_row("process → process", f"{link['bandwidth']}, {link['latency']}", "gloo send/recv on localhost")
    console.print(t)


def print_fidelity(report, console: Console) -> None:
    """Per case and per class: predicted vs measured, with the targets."""
    t = Table(
        title=f"cost-model fidelity: profile {report.profile} on {report.machine.get('cpu')} "
        f"({report.machine.get('threads')} thread(s)), held-out shapes, measured in a separate process"
    )
    for col, just in (("class", "left"), ("case", "left"), ("predicted ms", "right"), ("measured ms", "right"), ("pred/meas", "right")):
        t.add_column(col, justify=just)  # type: ignore[arg-type]
    for r in report.rows:
        style = "red" if r.error > (0.10 if r.cls.endswith("step") else 0.15) else None
        t.add_row(r.cls, r.case, f"{r.predicted_s * 1e3:.4g}", f"{r.measured_s * 1e3:.4g}", f"{r.ratio:.3f}", style=style)
    console.print(t)
    s = Table(title="median |predicted/measured − 1| per class")
    cols = (("class", "left"), ("cases", "right"), ("median", "right"), ("max", "right"), ("target", "right"), ("", "left"), ("vs fitted shapes", "right"))
    for col, just in cols:
        s.add_column(col, justify=just)  # type: ignore[arg-type]
    for cls, v in report.classes().items():
        vs = f"{v['error_vs_fitted']:.1%} (fitted {v['fitted_ratio']:.2f})" if "fitted_ratio" in v else "–"
        s.add_row(
            cls, str(v["cases"]), f"{v['median_error']:.1%}", f"{v['max_error']:.1%}", f"≤ {v['target']:.0%}", "[green]ok[/]" if v["ok"] else "[red]over[/]", vs
        )
    console.print(s)
    moved = {g: f for g, f in report.fitted_ratio().items() if abs(f - 1.0) > 0.10}
    if moved:
        console.print(
            "shapes the profile was fitted on, measured again beside these, read predicted ÷ measured "
            + ", ".join(f"{g} {f:.2f}" for g, f in moved.items())
            + ": this machine runs at another speed than when it was profiled, and the errors above"
            " carry that; 'vs fitted shapes' reads each class against its fitted shapes now. Re-profile on a quiet machine to compare."
        )
    load = report.machine.get("foreign_load")
    if load is not None:
        console.print(
            f"other processes used {load:.0%} of this machine's CPU time while it measured"
            + (" — timings from a busy machine are slower than the profile predicts" if load > 0.1 else "")
        )
