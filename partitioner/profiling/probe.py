"""The overhead probe: what a step costs beyond its ops' work, per kernel and per step.

Eager frameworks pay host time for every op (dispatch plus their own Python between ops)
and once per step (masks, rotary tables, positions, cache bookkeeping); a compiled executor
pays less per op (fused) and its own per-call cost. A Llama of width
64 is run at 1, 2 and 4 layers, one token at a time; its ops' modelled work (tiny) is
subtracted, and the rest is fitted as `step_overhead + kernels × launch_overhead`, the
kernels counted by the same capture the planner uses.
"""

from __future__ import annotations

import json
import tempfile
from dataclasses import dataclass
from pathlib import Path

from hetc.cluster import Profile
from hetc.partitioner.cost_models.analytic import units_time
from hetc.partitioner.profiling.bench import Case
from hetc.partitioner.profiling.fit import fit_overheads
from hetc.partitioner.profiling.hf_steps import build_llama, decode_case, llama_config, prefill_case
from hetc.partitioner.capture.units import Unit

__all__ = ["ProbeFit", "probe_cases", "fit_probe", "capture_config"]

_DECODE_CTX = 32  # a short cache: attention work stays negligible


def capture_config(cfg: dict, dtype: str = "fp32") -> list[Unit]:
    """The planner's units for a config.json dict (captured from a temporary model dir)."""
    from hetc.partitioner.capture.capture import capture

    with tempfile.TemporaryDirectory() as d:
        (Path(d) / "config.json").write_text(json.dumps(cfg))
        return capture(d, dtype=dtype).units


def probe_cases(depths: list[int], shape: dict, *, device: str = "cpu", executor: str = "torch", threads: int | None = None) -> list[Case]:
    """Prefill of one token and decode of one sequence for the probe Llama at each depth, run by
    `executor` (torch eager: transformers' model; openvino: the model compiled as a served stage)."""
    cases = []
    for depth in depths:
        cfg = llama_config(
            hidden=shape["hidden"],
            layers=depth,
            heads=shape["heads"],
            kv_heads=shape["kv_heads"],
            intermediate=shape["intermediate"],
            vocab=shape["vocab"],
            max_positions=512,
        )
        units = capture_config(cfg)
        if executor == "openvino":
            from hetc.partitioner.profiling.compiled_steps import OpenVinoLlama

            ov = OpenVinoLlama(cfg, units=units, threads=threads)
            steps = (ov.prefill_case(1, 1), ov.decode_case(1, _DECODE_CTX))
        else:
            model = build_llama(cfg, device=device)
            steps = (prefill_case(model, 1, 1, device=device), decode_case(model, 1, _DECODE_CTX, device=device))
        for c in steps:
            c.name = f"probe {depth} layer(s) {c.name}"
            c.reps = 15
            c.meta.update(depth=depth, units=units, kernels=sum(u.kernels for u in units))
            cases.append(c)
    return cases


@dataclass
class ProbeFit:
    launch_overhead: float
    step_overhead: float
    points: list[dict]  # per probe step: kernels, measured, modelled work, residual


def fit_probe(cases: list[Case], work_profile: Profile, dtype: str = "fp32") -> ProbeFit:
    """Fit the two overheads to the probe timings.

    Args:
        cases: timed `probe_cases`.
        work_profile: the profile with its fitted curves and zero overheads: prices the ops' work.
        dtype: the probe's dtype.
    """
    points = []
    for c in cases:
        step = c.meta["step"]
        work = units_time(c.meta["units"], work_profile, step, dtype=dtype, kv_dtype=dtype)
        points.append({"name": c.name, "kernels": c.meta["kernels"], "measured_s": c.seconds, "work_s": work, "residual_s": c.seconds - work})
    launch, per_step = fit_overheads([p["kernels"] for p in points], [p["residual_s"] for p in points])
    return ProbeFit(launch, per_step, points)
