"""Fidelity report: the cost model's predictions against held-out measurements.

The measurements come from a separate process (`fidelity_worker`) on shapes calibration
never timed (`shapes.held_out_shapes`), beside a few it did (`shapes.reference_shapes`): how far
those read from the profile now is how far the host moved since the fit. Each op is predicted by `analytic.op_time` from
its record plus one dispatch; each whole prefill or decode step of a small Llama is the
planner's own prediction — `units_time` over the captured units (the final norm and LM head
over the sampled rows only, as every executor runs them) plus the profile's `step_overhead` —
summed from the per-op model, never fitted to steps.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
from typing import Any
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from hetc.cluster import Profile
from hetc.errors import HetcError
from hetc.partitioner.profiling import hf_steps, microbench
from hetc.partitioner.cost_models.analytic import Step, cost_params, op_time, units_time
from hetc.partitioner.profiling.bench import ForeignLoad
from hetc.partitioner.profiling.probe import capture_config
from hetc.partitioner.profiling.shapes import STEP_MODEL, STEP_MODEL_QUICK, ShapeSet, held_out_shapes, reference_shapes
from hetc.stage import select_at

__all__ = ["Row", "FidelityReport", "validate", "TARGETS", "step_model_config", "sampled_step_time"]

# the acceptance thresholds: median |predicted/measured − 1| per class
TARGETS = {"op": 0.15, "step": 0.10}


@dataclass
class Row:
    cls: str  # op class or "prefill step" / "decode step"
    case: str
    predicted_s: float
    measured_s: float

    @property
    def ratio(self) -> float:
        return self.predicted_s / self.measured_s

    @property
    def error(self) -> float:
        return abs(self.ratio - 1.0)


def _group(cls: str) -> str:
    """The kind of fitted curve a class is priced from: matmul, attention, memory, or (whole) step."""
    return "matmul" if cls == "matmul" else "attention" if cls.startswith("attention") else "step" if cls.endswith("step") else "memory"


@dataclass
class FidelityReport:
    profile: str
    machine: dict
    rows: list[Row]
    model: dict = field(default_factory=dict)
    references: list[Row] = field(default_factory=list)  # fitted shapes, measured again beside the rows

    def fitted_ratio(self) -> dict[str, float]:
        """Per curve kind (matmul, attention, memory; step: all of them): the median predicted/measured
        of the fitted shapes measured again now — 1 where the host runs as when it was fitted."""
        out = {g: statistics.median(r.ratio for r in self.references if _group(r.cls) == g) for g in dict.fromkeys(_group(r.cls) for r in self.references)}
        if self.references:
            out["step"] = statistics.median(r.ratio for r in self.references)
        return out

    def classes(self) -> dict[str, dict]:
        """Per class: cases, median and max |predicted/measured − 1|, target and whether it is met;
        `fitted_ratio`, the same ratio of the class's fitted shapes now, and `error_vs_fitted`, the
        median error with the held-out ratios read against it (what the model gets wrong beside
        what the host moved since the fit)."""
        out: dict[str, dict] = {}
        fitted = self.fitted_ratio()
        for cls in dict.fromkeys(r.cls for r in self.rows):
            rows = [r for r in self.rows if r.cls == cls]
            errs = [r.error for r in rows]
            target = TARGETS["step" if cls.endswith("step") else "op"]
            med = statistics.median(errs)
            out[cls] = {"cases": len(errs), "median_error": med, "max_error": max(errs), "target": target, "ok": med <= target}
            if _group(cls) in fitted:
                f = fitted[_group(cls)]
                out[cls] |= {"fitted_ratio": f, "error_vs_fitted": statistics.median(abs(r.ratio / f - 1.0) for r in rows)}
        return out

    def to_json(self) -> dict:
        return {
            "profile": self.profile,
            "machine": self.machine,
            "model": self.model,
            "classes": self.classes(),
            "rows": [_row_json(r) for r in self.rows],
            "references": [_row_json(r) for r in self.references],
        }


def _row_json(r: Row) -> dict:
    return {"class": r.cls, "case": r.case, "predicted_ms": r.predicted_s * 1e3, "measured_ms": r.measured_s * 1e3, "ratio": r.ratio}


def step_model_config(quick: bool = False) -> dict:
    """config.json of the report's whole-step model (a smaller one for `--quick`)."""
    m = STEP_MODEL_QUICK if quick else STEP_MODEL
    return hf_steps.llama_config(
        hidden=m["hidden"], layers=m["layers"], heads=m["heads"], kv_heads=m["kv_heads"], intermediate=m["intermediate"], vocab=m["vocab"]
    )


def _measure(spec: dict, timeout_s: float) -> dict:
    with tempfile.TemporaryDirectory() as d:
        spec_path, out_path = Path(d) / "spec.json", Path(d) / "out.json"
        spec_path.write_text(json.dumps(spec))
        env = {**os.environ, "OMP_NUM_THREADS": str(spec["threads"])} if spec.get("threads") else dict(os.environ)
        proc = subprocess.run(
            [sys.executable, "-m", "hetc.partitioner.profiling.fidelity_worker", str(spec_path), str(out_path)],
            capture_output=True,
            text=True,
            timeout=timeout_s,
            env=env,
        )
        if proc.returncode != 0 or not out_path.exists():
            tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
            raise HetcError(f"the measuring process failed (exit {proc.returncode}): {' | '.join(tail)}")
        return json.loads(out_path.read_text())


def _op_rows(profile: Profile, shapes: ShapeSet, measured: dict[str, float]) -> list[Row]:
    cp = cost_params(profile, "fp32")
    curves = profile.efficiency_curves
    dispatch = curves.dispatch_overhead if curves and curves.dispatch_overhead is not None else profile.launch_overhead
    rows = []
    for m, n, k in shapes.matmul:
        rec, step = microbench.matmul_record(m, n, k, "fp32")
        rows.append(Row("matmul", f"{m}×{n}×{k}", op_time(rec, cp, step) + dispatch, measured[f"matmul {m}x{n}x{k} fp32"]))
    for s in shapes.attention:
        rec, step, kv = microbench.attention_record(s, "fp32")
        name = f"attention b{s.batch} h{s.heads}/{s.kv_heads} q{s.q} kv{s.kv}{' causal' if s.causal else ''}"
        cls = "attention (prefill)" if s.causal else "attention (decode)"
        label = f"b{s.batch} {'T' if s.causal else 'L'}={s.kv}"
        rows.append(Row(cls, label, op_time(rec, cp, step, kv) + dispatch, measured[name]))
    for op, r, w in shapes.memory:
        rec, step, _ = microbench.memory_record(op, r, w, "fp32")
        rows.append(Row(rec.kind, f"{op} {r}×{w}", op_time(rec, cp, step) + dispatch, measured[f"{op} {r}x{w}"]))
    return rows


def sampled_step_time(units, profile: Profile, step: Step) -> float:
    """One whole-model step as every executor runs it: the units before the first norm/head over the
    step's new tokens, the rest over one sampled row per sequence (`hetc.stage.select_at`), plus the
    profile's per-step overhead. A prompt's final norm and LM head run on its last token only.

    Args:
        units: the model's captured units, in order.
        step: the cost model's step (`seqs` sequences, one sampled row each).
    """
    cut = select_at([u.kind for u in units])
    kw: dict[str, Any] = {"dtype": "fp32", "kv_dtype": "fp32"}
    return units_time(units[:cut], profile, step, **kw) + units_time(units[cut:], profile, Step(step.seqs, step.seqs, 0.0), **kw) + profile.step_overhead


def _step_rows(profile: Profile, quick: bool, measured: dict[str, float], units) -> list[Row]:
    shapes = held_out_shapes(quick)
    rows = []
    for b, t, c in shapes.prefill_steps:
        pred = sampled_step_time(units, profile, hf_steps.prefill_step(b, t, c))
        rows.append(Row("prefill step", f"b{b} T={t}" + (f" after {c}" if c else ""), pred, measured[hf_steps.step_name(b, t, c)]))
    for b, c in shapes.decode_steps:
        pred = sampled_step_time(units, profile, hf_steps.decode_step(b, c))
        rows.append(Row("decode step", f"b{b} L={c}", pred, measured[f"decode b{b} ctx{c}"]))
    return rows


def validate(
    profile: Profile,
    *,
    quick: bool = False,
    threads: int | None = None,
    rounds: int | None = None,
    timeout_s: float = 1800.0,
    progress: Callable[[str], None] | None = None,
) -> FidelityReport:
    """Measure the held-out cases in a separate process and compare them with `profile`'s predictions.

    Args:
        profile: the profile to check (normally one `hetc profile` fitted on this machine).
        quick: the reduced held-out set.
        threads: threads to measure with; default: those the profile was measured with, else all cores.
        rounds: timing rounds per case (default 5, quick 2): more rounds, more chances to
            time each case while the machine is otherwise quiet.
        timeout_s: limit for the measuring process.
        progress: called with a short status line.
    """
    say = progress or (lambda s: None)
    curves = profile.efficiency_curves
    threads = threads or (curves.threads if curves and curves.threads else None)
    cfg = step_model_config(quick)
    spec = {"threads": threads, "quick": quick, "model": cfg, "rounds": rounds or (2 if quick else 5), "executor": curves.executor if curves else None}
    say("measuring held-out ops and steps in a separate process")
    load = ForeignLoad()
    out = _measure(spec, timeout_s)
    out["machine"]["foreign_load"] = load.share()
    say("predicting")
    units = capture_config(cfg)
    ops = dict((n, s) for n, s in out["ops"])
    steps = dict((n, s) for n, s in out["steps"])
    rows = _op_rows(profile, held_out_shapes(quick), ops) + _step_rows(profile, quick, steps, units)
    references = _op_rows(profile, reference_shapes(quick), dict((n, s) for n, s in out["references"]))
    model = {k: cfg[k] for k in ("hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads", "intermediate_size", "vocab_size")}
    return FidelityReport(profile.name, out["machine"], rows, model, references)
