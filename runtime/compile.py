"""`hetc compile`: every stage of a plan exported and lowered by its device's toolchain (and to
ONNX), with a manifest and, for what runs on this host, a numerical check against eager.

Per stage of each pipeline (replicas share one artifact): build the stage from the model's weights
(backends/stage.py), `torch.export` it with dynamic batch, token and context dims — once per
attention form its toolchains take (the `gather` form saved as `.pt2`, without its weights) — and lower it with the
toolchain of its profile's backend for the profile's `target`, with the toolchain that runs it
under `--emulate` where that differs, and with ONNX. An artifact that has a CPU lowering here is run on the same
inputs as torch eager — a prefill from an empty cache and a decode step with mixed past lengths,
both over non-contiguous blocks — and the largest absolute difference is recorded. A toolchain
that cannot build here is a manifest entry with the reason, never a silent skip.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import os
import shutil
import tempfile
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

from hetc import __version__
from hetc.backends.exported import WEIGHT_TABLE, save_without_weights
from hetc.backends.stage import example_inputs, export_stage, stage_class, weight_specs
from hetc.backends.toolchain import ToolchainUnavailable
from hetc.backends.toolchains import EVERY_STAGE, TOOLCHAIN_NAMES, device_toolchain, toolchain
from hetc.cluster import Cluster, Profile
from hetc.errors import BadInput, first_line
from hetc.plan import load_plan
from hetc.runtime.compiled_stage import emulation_toolchain
from hetc.partitioner.capture.graph import TORCH_DTYPES
from hetc.stage import AttentionForm, StageSignature, stage_signature

__all__ = ["CompileOptions", "compile_plan"]

SCHEMA = "hetc.compile/1"
# |compiled − eager| accepted: atol + rtol · max |eager|, by the dtype the stage computes in (a bf16 or
# fp16 stage is checked at its own precision: rounding differs between kernel libraries)
_TOLERANCE = {torch.float32: (1e-4, 1e-5), torch.bfloat16: (0.0, 3e-2), torch.float16: (0.0, 5e-3)}

# the manifest's word on the `.pt2`'s weights
_EXPORTED_WEIGHTS = (
    f"none: saved as meta tensors; its {WEIGHT_TABLE} names the model weights they are (hetc.backends.exported.load_with_weights fills them from the model)"
)

# what a plan's dtype becomes in each toolchain ({w}: the stage's compute dtype: fp8 plans are lowered
# with bf16 weights and math, as the runtime computes them — no toolchain here takes fp8 weights yet)
_PRECISION = {
    "openvino": "weights at {w} in the IR's .bin; the CPU plugin computes f32 (pinned: INFERENCE_PRECISION_HINT f32), the GPU plugin at its own default (f16)",
    "onnx": "weights and math at {w}; ONNX Runtime's CPU provider has no bf16 kernels, its GPU providers do",
    "iree": "weights and math at {w} for the GPU target; the llvm-cpu twin emulates bf16 math where the CPU lacks it",
    "inductor": "weights and math at {w} (Triton on the GPU, C++ on the CPU twin)",
    "hpu": "weights and math at {w} on the HPU bridge",
}


def precision_note(toolchain_name: str, plan_dtype: str) -> str:
    """What a plan of `plan_dtype` becomes in `toolchain_name` (a manifest line)."""
    w = {"fp8": "bf16"}.get(plan_dtype, plan_dtype)
    head = "an fp8 plan is lowered at bf16 (fp8 weights computed in bf16); " if plan_dtype == "fp8" else ""
    return head + _PRECISION[toolchain_name].format(w=w)


@dataclass(kw_only=True, slots=True)
class CompileOptions:
    plan: str
    out_dir: str
    model_dir: str | None = None
    random_weights: bool = False
    check: bool = True  # run each CPU-runnable artifact against eager
    only: tuple[str, ...] = ()  # build only these toolchains; each must build for every stage it applies to

    def __post_init__(self) -> None:
        unknown = [t for t in self.only if t not in TOOLCHAIN_NAMES]
        if unknown:
            raise BadInput(f"unknown toolchain(s) {', '.join(unknown)}.", field="--only", fix=f"choose from {', '.join(TOOLCHAIN_NAMES)}.")


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _files(out: Path, names: list[Path]) -> list[dict]:
    return [{"path": str(n), "sha256": _sha256(out / n), "bytes": (out / n).stat().st_size} for n in names]


def compile_plan(o: CompileOptions, progress: Callable[[str], None] | None = None) -> dict:
    """Lower every stage of the plan; write the artifacts and `manifest.json` into `o.out_dir`.

    Returns:
        The manifest.

    Raises:
        BadInput: unreadable plan, no weights (and no --random-weights), a profile without a target.
    """
    from hetc.partitioner.capture.capture import load_hf_config
    from hetc.runtime.launch import check_hash, resolve_model
    from hetc.weights import DATA_ALIGNMENT, mapped_weights, stage_weights

    say = progress or (lambda _m: None)
    plan = load_plan(o.plan)
    model_ref, weights_dir = resolve_model(plan, o.model_dir, o.random_weights)
    check_hash(plan, model_ref, o.plan)
    cfg, _ = load_hf_config(model_ref)
    # serve's own weights: the same seeded random ones under --random-weights (the IR's .bin and ONNX's
    # external data hold them, the other artifacts draw them again at load)
    weights = stage_weights(cfg, weights_dir if not o.random_weights else None)
    units = plan.units
    dtype, kv_dtype = TORCH_DTYPES[plan.model.dtype], TORCH_DTYPES[plan.model.kv_dtype]
    out = Path(o.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    profiles = {n.profile.name: n.profile for n in Cluster.from_json(plan.cluster, o.plan).nodes}
    stages = []
    with warnings.catch_warnings():  # export and the exporters warn about their own internals
        warnings.simplefilter("ignore")
        for p in plan.pipelines:
            for s, st in enumerate(p.stages):
                stem = f"p{p.id}s{s}"
                say(f"stage {stem}: exporting units {st.units[0]}–{st.units[1]}")
                scratch = out / f".{stem}.weights.partial"
                names = _toolchains(st.backend, o.only)
                # IREE's CPU device reads a mapped parameter in place only at 64 bytes, else copies the stage
                align = DATA_ALIGNMENT if o.check and "iree" in names else 1
                try:  # the stage's weights as views of a mapped file: file pages, not private memory
                    mapped = mapped_weights(weights, weight_specs(cfg, units, *st.units, dtype), scratch, align=align)  # type: ignore[arg-type]
                    stages.append(
                        _compile_stage(stem, p, st, profiles[st.profile], cfg, units, dtype, kv_dtype, mapped, out, o.check, say, names, plan.model.dtype)
                    )
                finally:
                    shutil.rmtree(scratch, ignore_errors=True)
    manifest = {
        "schema": SCHEMA,
        "hetc_version": __version__,
        "torch": torch.__version__,
        "created": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "plan": str(Path(o.plan).resolve()),
        "graph_hash": plan.model.graph_hash,
        "model": model_ref,
        "weights": weights_dir if weights_dir and not o.random_weights else "random",
        "dtype": plan.model.dtype,
        "stages": stages,
    }
    with tempfile.NamedTemporaryFile("w", dir=out, suffix=".tmp", delete=False) as f:
        json.dump(manifest, f, indent=2)
    os.replace(f.name, out / "manifest.json")
    missed = [(s["stage"], a) for s in stages for a in s["artifacts"] if not a["built"]]
    if o.only and missed:
        stage, a = missed[0]
        raise BadInput(
            f"stage {stage}: {a['toolchain']} did not build ({a['reason']}).",
            field="--only",
            fix=f"install what it needs, or leave {a['toolchain']} out of --only ({len(missed)} artifact(s) missing in all; the manifest lists them).",
        )
    return manifest


def _toolchains(backend: str, only: tuple[str, ...]) -> list[str]:
    """What lowers a stage of `backend`: its device's toolchain, what runs it under --emulate where that
    differs (cpu, Gaudi), and ONNX — those of them in `only` when given."""
    names = dict.fromkeys((device_toolchain(backend), emulation_toolchain(backend), *EVERY_STAGE))
    return [n for n in names if not only or n in only]


def _compile_stage(
    stem: str,
    p,
    st,
    profile: Profile,
    cfg,
    units,
    dtype,
    kv_dtype,
    weights,
    out: Path,
    check: bool,
    say: Callable[[str], None],
    names: list[str],
    plan_dtype: str,
) -> dict:
    target = profile.compile_target
    forms: dict[AttentionForm, _Form] = {}

    def form(f: AttentionForm) -> _Form:
        """The stage exported in one attention form (each form once), its check inputs and eager outputs."""
        if f not in forms:
            forms[f] = _export_form(f, stem, st, cfg, units, dtype, kv_dtype, weights)
        return forms[f]

    gather = form(AttentionForm.GATHER)
    save_without_weights(gather.program, out / f"{stem}.pt2", gather.weight_names)
    entry = {
        "stage": stem,
        "pipeline": p.id,
        "replicas": p.replicas,
        "devices": st.devices,
        "profile": st.profile,
        "backend": st.backend,
        "target": target,
        "tp": st.tp,
        "units": st.units,
        "layers": st.layers,
        "signature": gather.signature.to_json(),
        "exported": _files(out, [Path(f"{stem}.pt2")])[0] | {"weights": _EXPORTED_WEIGHTS},
        "artifacts": [],
    }
    if st.tp > 1:
        entry["notes"] = [f"tensor-parallel stage (tp={st.tp}): lowered unsharded; per-rank shards are not lowered yet"]
    for name in names:
        say(f"stage {stem}: {name}")
        try:
            f = form(toolchain(name).form)
        except ToolchainUnavailable as e:
            entry["artifacts"].append({"toolchain": name, "built": False, "target": target, "reason": str(e)})
            continue
        doc = _lower(
            name, f.program, out, target if name != "onnx" else "any", stem, f.cases if check else {}, f.eager, dtype, kv_dtype, weights, f.weight_names
        )
        if f.signature.form is not AttentionForm.GATHER:
            doc["signature"] = f.signature.to_json()
        doc["precision"] = precision_note(name, plan_dtype)
        entry["artifacts"].append(doc)
    return entry


@dataclass(slots=True)
class _Form:
    signature: StageSignature
    program: torch.export.ExportedProgram
    cases: dict[str, list[torch.Tensor]]  # check inputs (caches are copied per run: paged stages write them)
    eager: dict[str, list[torch.Tensor]]
    weight_names: dict[str, str]  # the program's parameters → the model's weights


def _export_form(form: AttentionForm, stem: str, st, cfg, units, dtype, kv_dtype, weights) -> _Form:
    stage = stage_class(form)(cfg, units, st.units[0], st.units[1], dtype=dtype, weights=weights).eval()
    sig = stage_signature(
        form=form,
        first=stage.first_stage,
        selects=stage.selects,
        head=stage.head,
        attention_layers=stage.attention_layers,
        hidden=cfg.hidden_size,
        vocab=cfg.vocab_size,
        kv_heads=stage.kv_heads,
        head_dim=stage.head_dim,
        dtype=str(dtype).removeprefix("torch."),
        kv_dtype=str(kv_dtype).removeprefix("torch."),
    )
    try:
        with torch.no_grad():
            ep = export_stage(stage, hidden=cfg.hidden_size, vocab=cfg.vocab_size, dtype=dtype, kv_dtype=kv_dtype)
    except Exception as e:  # torch.export raises many types; all mean "this stage does not export"
        raise BadInput(
            f"stage {stem} (units {st.units[0]}–{st.units[1]}) does not export: {first_line(e, 400)}",
            field="model",
            fix="serve it with --executor torch, or report the model to hetc",
        ) from None
    g = torch.Generator().manual_seed(0)
    common = dict(hidden=cfg.hidden_size, vocab=cfg.vocab_size, dtype=dtype, kv_dtype=kv_dtype, generator=g)
    cases = {
        "prefill": example_inputs(stage, batch=2, new=7, past=[0, 0], num_blocks=5, **common),
        "decode": example_inputs(stage, batch=3, new=1, past=[37, 5, 18], num_blocks=9, **common),
    }
    with torch.no_grad():
        eager = {k: [t.float() for t in _outputs(stage(*_fresh(args)))] for k, args in cases.items()}
    return _Form(sig, ep, cases, eager, stage.weight_names)


def _fresh(args: list[torch.Tensor]) -> list[torch.Tensor]:
    """Inputs a run may write (the paged form's caches) copied, so every run sees the same."""
    return [t.clone() for t in args]


def _outputs(out) -> tuple[torch.Tensor, ...]:
    return out if isinstance(out, (tuple, list)) else (out,)  # type: ignore[return-value]


def _lower(name: str, ep, out: Path, target: str, stem: str, cases: dict, eager: dict, dtype, kv_dtype, weights, weight_names: dict[str, str]) -> dict:
    work = out / f".{stem}.{name}.partial"  # built apart, moved in whole: nothing half-written looks complete
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir()
    try:
        tc = toolchain(name)
        art = tc.build(ep, work, target=target, stem=stem, weight_names=weight_names)
        for f in art.files:
            os.replace(work / f, out / f)
    except ToolchainUnavailable as e:
        return {"toolchain": name, "built": False, "target": target, "reason": str(e)}
    except Exception as e:  # a toolchain that rejects this graph or dtype: recorded, the others go on
        return {"toolchain": name, "built": False, "target": target, "reason": f"{name} failed: {first_line(e, 400)}"}
    finally:
        shutil.rmtree(work, ignore_errors=True)
    doc = {
        "toolchain": name,
        "built": True,
        "version": art.version,
        "target": art.target,
        "files": _files(out, art.files),
        "notes": art.notes,
        "runnable_here": art.runnable_here,
    }
    if art.runnable_here and cases:
        try:
            step = tc.load(art, out, kv_dtype=kv_dtype, weights=weights, lean=True)
            worst = {k: max(float((got.float() - want).abs().max()) for got, want in zip(step(*_fresh(args)), eager[k])) for k, args in cases.items()}
            scale = max(float(t.abs().max()) for ts in eager.values() for t in ts)
        except ToolchainUnavailable as e:
            doc["check"] = {"ran": False, "reason": str(e)}
        except Exception as e:  # built, but its CPU runtime cannot run it here (e.g. no bf16 kernel)
            doc["check"] = {"ran": False, "reason": f"could not run here: {first_line(e, 400)}"}
        else:
            atol, rtol = _TOLERANCE[dtype]
            tol = atol + rtol * scale
            doc["check"] = {
                "ran": True,
                "max_abs_diff": worst,
                "tolerance": tol,
                "max_abs_eager": scale,
                "ok": all(v <= tol for v in worst.values()),
                "inputs": "prefill of 7 tokens × 2 from an empty cache; decode × 3 at past 37/5/18; random non-contiguous block tables",
            }
    return doc
