"""What the CLI shows a person: plan summaries, unit tables, device lists, plan plots."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, BinaryIO

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from hetc.host import cpu_name
from hetc.cluster import defaults_notes
from hetc.plan import Plan
from hetc.scheduling import Phase

if TYPE_CHECKING:
    from hetc.partitioner.capture.capture import CapturedModel

__all__ = ["print_plan", "plot_plan", "inspect_rows", "print_inspect", "print_devices", "print_manifest"]


def _gb(x: float) -> str:
    return f"{x / 1e9:.1f}"


def _si(x: float) -> str:
    for unit, f in (("P", 1e15), ("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(x) >= f:
            return f"{x / f:.3g}{unit}"
    return f"{x:.3g}"


def _bar(frac: float, width: int = 12) -> str:
    full = max(0, min(width, round(frac * width)))
    return "█" * full + "░" * (width - full)


def plan_engines(plan: Plan) -> str:
    """The engines a plan's figures assume, in words (a plan written before engines were an input: the
    engine its profiles assumed then, hetc/engine.py ASSUMED_BEFORE)."""
    from hetc.engine import ASSUMED_BEFORE  # noqa: PLC0415

    profiles = plan.cluster.profiles
    named = [(n.name, n.engine or f"{ASSUMED_BEFORE[profiles[n.device]['backend']].value} (assumed before engines were an input)") for n in plan.cluster.nodes]
    names = {e for _, e in named}
    return names.pop() if len(names) == 1 else ", ".join(f"{n}: {e}" for n, e in named)


def print_plan(plan: Plan, console: Console) -> None:
    m, pr, s = plan.model, plan.predicted, plan.solver
    console.print(
        f"[bold]{escape(m.ref)}[/] ({m.params / 1e9:.2f}B params, {m.num_layers} layers, {m.num_units} units, "
        f"{m.dtype}, KV {m.kv_dtype}) on [bold]{escape(plan.cluster.name or '?')}[/] — "
        f"input {plan.workload.input_len} / output {plan.workload.output_len} tokens"
    )
    console.print(f"engine: {plan_engines(plan)} (the serving engine the figures assume; --engine)", markup=False)
    if plan.experts is not None:
        ex = plan.experts
        figures = [(o.layout.value, o.objective) for o in ex.options if o.objective is not None]
        compared = "; ".join(f"{name} {v:,.0f}" if v >= 100 else f"{name} {v:.3g}" for name, v in figures)
        console.print(
            f"experts: {ex.layout.value} on tensor-parallel groups, imbalance {ex.imbalance:g}"
            + (f" (compared, {plan.objective.unit}: {compared})" if compared else "")
            + " — docs/moe.md",
            markup=False,
        )
    profiles = plan.cluster.profiles
    for p in plan.pipelines:
        role = {Phase.BOTH: "", Phase.PREFILL: " — prefill pool, one prompt per stage", Phase.DECODE: " — decode pool"}[p.phase]
        t = Table(title=f"pipeline {p.id}: {p.replicas} replica(s), batch {p.batch}, {p.micro_batches} micro-batches" + role, title_justify="left")
        for col in ("stage", "devices", "profile", "layers", "units", "memory (GB)", "", "decode ms", "prefill ms"):
            t.add_column(col, justify="right" if col.endswith(("ms", ")")) else "left")
        for i, st in enumerate(p.stages):
            cap = float(profiles[st.profile]["memory"].split()[0])
            t.add_row(
                str(i),
                _replica_devices(st.devices, p.replicas),
                st.profile,
                f"{st.layers[0]}–{st.layers[1]}",
                f"{st.units[0]}–{st.units[1]}",
                f"{_gb(st.memory_bytes.total)} / {_gb(cap)}",
                _bar(st.memory_bytes.total / cap),
                f"{st.predicted_ms.decode:.2f}",
                f"{st.predicted_ms.prefill:.1f}",
            )
        console.print(t)
    for k in plan.kv_transfer:
        console.print(
            f"KV: pipeline {k.from_pipeline} → {k.to_pipeline} over {k.link}, "
            f"{k.predicted_ms_per_seq:.1f} ms per prompt ({k.bytes_per_token / 1e3:,.0f} kB per token)"
        )
    sp = plan.speculation
    if sp is not None:
        console.print(
            f"speculation: {sp.method.value}, K={sp.num_speculative_tokens}, α={sp.acceptance:.4g} ({sp.acceptance_source.value}: {sp.acceptance_from}), "
            f"{sp.expected_tokens_per_round:.2f} tokens per round"
            + (f" on {sp.proposal_rate:.0%} of decode steps" if sp.proposal_rate < 1 else "")
            + f", exchange {sp.exchange_ms:.3f} ms",
            markup=False,
        )
        for d in [sp.drafter, *sp.drafters] if sp.drafter else []:
            where = "; ".join(f"{','.join(st.devices)} ({st.profile}, units {st.units[0]}–{st.units[1]})" for st in d.stages)
            console.print(f"drafter of pipeline {d.pipeline}: {d.model.ref} on {where}, {d.predicted_ms_per_token:.2f} ms per draft step", markup=False)
    console.print(
        f"predicted: [bold]{pr.output_tok_s:,.0f} output tok/s[/] ({pr.total_tok_s:,.0f} total), "
        f"TTFT {pr.ttft_ms:.0f} ms, TPOT {pr.tpot_ms:.1f} ms, {pr.usd_per_mtok:.3f} USD/M tok, "
        f"{pr.watts / 1e3:.1f} kW"
    )
    console.print(
        f"solver: {s.status}, {plan.objective.name} {s.objective:,.4g} {plan.objective.unit}, bound {s.bound:,.4g} (gap {s.gap:.1%}), {s.seconds:.2f} s"
    )
    for note in getattr(s, "notes", None) or []:
        console.print(f"note: {note}", markup=False)
    for note in defaults_notes(list(profiles.values())):  # outputs that rest on a defaulted figure say so
        console.print(f"note: {note}", markup=False)
    if plan.baselines:
        parts = [f"{k} {v.output_tok_s:,.0f}" if v.feasible else f"{k} infeasible" for k, v in plan.baselines.items()]
        console.print("baselines (output tok/s): " + ", ".join(parts))


def print_manifest(manifest: dict, console: Console) -> None:
    """One row per stage and toolchain: built or why not, the target, and the check against eager."""
    t = Table(title=f"hetc compile: {escape(manifest['model'])} ({manifest['dtype']}, weights {manifest['weights']})", title_justify="left")
    for col in ("stage", "devices", "backend", "toolchain", "target", "artifact", "max |Δ| vs eager"):
        t.add_column(col)
    for s in manifest["stages"]:
        for a in s["artifacts"]:
            if not a["built"]:
                t.add_row(s["stage"], ", ".join(s["devices"]), s["backend"], a["toolchain"], a["target"], "[yellow]not built[/]", escape(a["reason"]))
                continue
            chk = a.get("check")
            diff = (
                "not runnable here"
                if chk is None
                else (escape(chk["reason"]) if not chk["ran"] else ("[green]" if chk["ok"] else "[red]") + f"{max(chk['max_abs_diff'].values()):.1e}[/]")
            )
            size = sum(f["bytes"] for f in a["files"])
            t.add_row(
                s["stage"],
                ", ".join(s["devices"]),
                s["backend"],
                a["toolchain"],
                a["target"],
                f"{', '.join(f['path'] for f in a['files'])} ({size / 1e6:.1f} MB)",
                diff,
            )
    console.print(t)


def _replica_devices(devices: list[str], replicas: int) -> str:
    """Replica 0's devices, and where the others are (replica j: indices + j·tp)."""
    node, first = devices[0].split(":")
    tp = len(devices)
    if replicas == 1:
        return ",".join(devices)
    last = int(first) + replicas * tp - 1
    return f"{node}:{first}–{last}" + (f" (tp{tp} groups)" if tp > 1 else "")


def _pyplot(flag: str):
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        from hetc.errors import BadInput

        raise BadInput(f"{flag} needs matplotlib.", field=flag, fix="pip install 'hetc[plot]'.") from None
    return plt


def plot_plan(plan: Plan, path: str | BinaryIO) -> None:
    """One row per pipeline stage: layers held, coloured by vendor, annotated with memory use."""
    plt = _pyplot("--plot")
    colors = {"nvidia": "#76b900", "amd": "#ed1c24", "intel": "#0071c5", "cpu": "#888888"}
    rows = [(p, i, st) for p in plan.pipelines for i, st in enumerate(p.stages)]
    fig, ax = plt.subplots(figsize=(12, 0.4 * len(rows) + 1.5))
    for y, (p, _, st) in enumerate(rows):
        vendor = plan.cluster.profiles[st.profile]["vendor"]
        ax.barh(y, st.layers[1] - st.layers[0] + 1, left=st.layers[0], color=colors.get(vendor, "#555"))
        ax.text(
            st.layers[1] + 1.2,
            y,
            f"{_replica_devices(st.devices, p.replicas)} {st.profile} · {st.memory_bytes.total / 1e9:.0f} GB · {st.predicted_ms.decode:.1f} ms",
            va="center",
            fontsize=7,
        )
    ax.set_yticks(range(len(rows)), [f"p{p.id} s{i}" + (f" ×{p.replicas}" if p.replicas > 1 else "") for p, i, _ in rows], fontsize=7)
    ax.set_xlim(0, plan.model.num_layers * 1.45)
    ax.invert_yaxis()
    ax.set_xlabel("layers")
    ax.set_title(f"{plan.model.ref}: {plan.predicted.output_tok_s:,.0f} output tok/s (bound {plan.solver.bound:,.0f})")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def inspect_rows(model: "CapturedModel", input_len: int, output_len: int) -> tuple[list[dict], dict]:
    """Per-unit figures: prefill FLOPs/token average over a causal prompt, decode at mean context."""
    pre_ctx = (input_len + 1) / 2
    dec_ctx = input_len + output_len / 2
    rows: list[dict[str, Any]] = []
    for u in model.units:
        rows.append(
            {
                "index": u.index,
                "kind": u.kind,
                "layer": u.layer,
                "params": model.count_params(u.params),
                "param_bytes": u.param_bytes,
                "prefill_flops_per_token": u.flops.per_token + u.attention_flops_per_ctx * pre_ctx,
                "decode_flops_per_token": u.flops.per_token + u.attention_flops_per_ctx * dec_ctx,
                "matmul_flops_per_token": u.matmul_flops.per_token,
                "attention_flops_per_ctx": u.attention_flops_per_ctx,
                "act_bytes_per_token": u.act_bytes.per_token,
                "out_bytes_per_token": u.out_bytes_per_token,
                "kv_bytes_per_token": u.kv_bytes_per_token,
                "kv_window": u.kv_window,  # a sliding layer's window (tokens); null: full attention
                "kernels": u.kernels,
                "fused_kernels": u.fused_kernels,
            }
        )
    keys = ("param_bytes", "prefill_flops_per_token", "decode_flops_per_token", "act_bytes_per_token", "kv_bytes_per_token", "kernels", "fused_kernels")
    totals: dict[str, float] = {k: sum(r[k] for r in rows) for k in keys}
    totals["param_bytes"] = model.param_bytes  # tied weights once
    totals["params"] = model.num_params
    return rows, totals


def kernels_per_layer(rows: list[dict]) -> tuple[int, int] | None:
    """(eager, fused) kernels of a middle layer (the most common per-layer count), None without layers."""
    layers: dict[int, list[int]] = {}
    for r in rows:
        k = layers.setdefault(r["layer"], [0, 0])
        k[0] += r["kernels"]
        k[1] += r["fused_kernels"]
    if len(layers) < 3:
        return None
    mid = [(v[0], v[1]) for layer, v in layers.items() if 0 < layer < max(layers)]
    return max(set(mid), key=mid.count) if mid else None


def print_inspect(model: "CapturedModel", rows: list[dict], totals: dict, console: Console) -> None:
    t = Table(
        title=f"{model.ref}: {model.num_params / 1e9:.3f}B params, {model.num_layers} layers, {len(rows)} units ({model.dtype}, KV {model.kv_dtype})",
        title_justify="left",
    )
    for col in ("unit", "kind", "layer", "params", "prefill FLOP/tok", "decode FLOP/tok", "act B/tok", "KV B/tok", "out B/tok", "kernels", "fused"):
        t.add_column(col, justify="left" if col in ("kind",) else "right")
    for r in rows:
        t.add_row(
            str(r["index"]),
            r["kind"],
            str(r["layer"]),
            _si(r["params"]),
            _si(r["prefill_flops_per_token"]),
            _si(r["decode_flops_per_token"]),
            _si(r["act_bytes_per_token"]),
            _si(r["kv_bytes_per_token"]),
            _si(r["out_bytes_per_token"]),
            str(r["kernels"]),
            str(r["fused_kernels"]),
        )
    t.add_section()
    t.add_row(
        "total",
        "",
        "",
        _si(totals["params"]),
        _si(totals["prefill_flops_per_token"]),
        _si(totals["decode_flops_per_token"]),
        _si(totals["act_bytes_per_token"]),
        _si(totals["kv_bytes_per_token"]),
        "",
        str(totals["kernels"]),
        str(totals["fused_kernels"]),
    )
    console.print(t)
    per_layer = kernels_per_layer(rows)
    if per_layer:
        before, after = per_layer
        console.print(
            f"kernels per layer: {before} exported ops (torch eager: the cpu backend) → {after} after the fusion "
            "serving engines perform (cuda, rocm, gaudi, openvino backends; partitioner/capture/fusion.py)"
        )
    for n in model.notes:
        console.print(f"note: {n}", markup=False)


def print_devices(console: Console) -> None:
    import torch

    from hetc.cluster import load_profile, profile_names

    t = Table(title="local devices", title_justify="left")
    for col in ("device", "name", "memory"):
        t.add_column(col)
    t.add_row("cpu", cpu_name(), f"{_host_memory() / 1e9:.0f} GB")
    if torch.cuda.is_available():
        for i in range(torch.cuda.device_count()):
            p = torch.cuda.get_device_properties(i)
            t.add_row(f"cuda:{i}", p.name, f"{p.total_memory / 1e9:.0f} GB")
    if hasattr(torch, "xpu") and torch.xpu.is_available():
        for i in range(torch.xpu.device_count()):
            t.add_row(f"xpu:{i}", torch.xpu.get_device_name(i), "")
    console.print(t)
    k = Table(title="known profiles (hardware_profiles/)", title_justify="left")
    for col in ("profile", "vendor", "backend", "memory", "bandwidth", "bf16/fp16 peak", "price"):
        k.add_column(col)
    for name in profile_names():
        prof = load_profile(name)
        peak = prof.peak_flops.get("bf16") or prof.peak_flops.get("fp16", 0.0)
        k.add_row(
            name,
            prof.vendor,
            prof.backend,
            f"{prof.memory / 1e9:.0f} GB",
            f"{prof.memory_bandwidth / 1e12:.2f} TB/s",
            f"{peak / 1e12:.0f} TFLOP/s",
            f"{prof.price:.2f} USD/h",
        )
    console.print(k)


def _host_memory() -> float:
    import os

    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
