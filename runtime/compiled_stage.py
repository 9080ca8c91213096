"""A stage served through a vendor toolchain: the compiled step (hetc/stage.py's signature) behind
the same calls as the eager StageModel (`step_meta`, then the step), with the paged KV cache
still owned here.

`paged` form (OpenVINO): the packed micro-batch goes in as it is (PagedMeta) with this worker's
KV blocks, which the toolchain's paged-attention op reads in place and writes the new rows into.
`gather` form (IREE, AOTInductor, ONNX Runtime): the packed micro-batch becomes the signature's
padded [B, Q] layout, the compiled step runs, its new K/V rows are written into this worker's
blocks at the micro-batch's slots, and its output is packed again. Artifacts come from `hetc
compile` (`--artifacts DIR`, checked against the manifest) or are built at start into the stage
cache, keyed by everything they embed.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import time
from pathlib import Path

import torch

from hetc.backends.decoder import eager_only
from hetc.backends.stage import FunctionalStage, export_stage, stage_class, weight_specs
from hetc.backends.toolchain import Artifact
from hetc.backends.toolchains import toolchain
from hetc.errors import BadInput
from hetc.weights import MetaWeights, mapped_weights
from hetc.backends.paged_attention import PagedMeta
from hetc.runtime.kv_cache import AttnMeta, KVPool
from hetc.scheduling import KV_BLOCK_TOKENS
from hetc.stage import CPU_EXECUTOR, AttentionForm

__all__ = ["CompiledStage", "PagedCompiledStage", "build_compiled_stage", "emulation_toolchain", "prebuild_stages", "stage_artifact", "stage_executor"]


_CACHE_LAYOUT = 3  # bumped when what an entry holds changes (2: IREE modules without their weights;
# 3: AOTInductor packages with their non-weight constants beside them)


def emulation_toolchain(backend: str) -> str:
    """What runs a stage of `backend` on the host CPU under --emulate: its vendor's CPU lowering
    (Intel: OpenVINO, AMD: IREE llvm-cpu, NVIDIA: Inductor), else (cpu, Gaudi) the fastest CPU
    executor measured on this host."""
    return {"openvino": "openvino", "rocm": "iree", "cuda": "inductor"}.get(backend, CPU_EXECUTOR)


class CompiledStage:
    """A `gather`-form artifact as a drop-in for StageModel in the worker loop (step_meta, call, .kv,
    .param_bytes, .param_names)."""

    def __init__(self, step, stage: FunctionalStage, kv: KVPool, executor: str, param_bytes: int, n_params: int):
        self.step, self.kv, self.executor = step, kv, executor
        self.selects, self.head = stage.selects, stage.head
        self.first, self.attention_layers = stage.first_stage, stage.attention_layers
        self.after_select = not stage.selects and not stage.first_stage and stage.kinds[0][0] == "head"
        self.param_bytes, self.param_names, self.tp_group = param_bytes, [None] * n_params, None

    @staticmethod
    def step_meta(starts: list[int], n_new: list[int], block_tables: list[list[int]], sample: list[bool]) -> AttnMeta:
        return AttnMeta.build(starts, n_new, block_tables, sample)

    def __call__(self, x: torch.Tensor, meta: AttnMeta) -> torch.Tensor:
        b, q = meta.mask.shape[0], meta.mask.shape[2]  # mask: [B, 1, Q, keys]
        if self.after_select:  # the rows were cut to the sampled tokens upstream: [S, H] → [S, 1, H]
            s = x.shape[0]
            z = torch.zeros(s, 1, dtype=torch.long)
            return self.step(x[:, None], z, z[:, 0], z)[0][:, 0]
        idx = meta.q_index if meta.q_index is not None else torch.arange(b * q).view(b, q)  # [B, Q] packed rows
        valid = meta.q_valid if meta.q_valid is not None else torch.ones(b, q, dtype=torch.bool)
        starts = meta.positions[idx[:, 0]]  # [B] cached tokens per sequence
        n_new = valid.sum(1)
        qi = torch.arange(q)[None, :]
        positions = torch.where(valid, starts[:, None] + qi, starts[:, None] + q + 1)  # padding after the real ones
        xb = x[idx]  # [B, Q] ids or [B, Q, H]
        table = meta.blocks.view(b, -1)
        args = [xb, positions, starts, table]
        if self.selects:
            args.append(n_new - 1)
        for layer in self.attention_layers:  # KVPool keeps [blocks · BS, KVH, D]: the signature's [NB, BS, KVH, D]
            args += [p.view(-1, KV_BLOCK_TOKENS, *p.shape[1:]) for p in (self.kv.k[layer], self.kv.v[layer])]
        out, *new_kv = self.step(*args)
        for i, layer in enumerate(self.attention_layers):  # the new rows into this worker's blocks
            for pool, rows in ((self.kv.k[layer], new_kv[2 * i]), (self.kv.v[layer], new_kv[2 * i + 1])):
                pool[meta.slots] = rows[valid].to(pool.dtype)
        if self.selects:  # [B, H or V]: keep the sequences whose next token is sampled
            ends = torch.cumsum(n_new, 0) - 1  # each sequence's last packed row
            keep = torch.ones(b, dtype=torch.bool) if meta.sample_rows is None else torch.isin(ends, meta.sample_rows)
            return out[keep]
        return out[valid]  # [T, H] packed again


class PagedCompiledStage(CompiledStage):
    """A `paged`-form artifact: the packed micro-batch and this worker's KV blocks go in as they are."""

    @staticmethod
    def step_meta(  # type: ignore[override]
        starts: list[int],
        n_new: list[int],
        block_tables: list[list[int]],
        sample: list[bool],
    ) -> PagedMeta:
        return PagedMeta.build(starts, n_new, block_tables, sample)

    def __call__(self, x: torch.Tensor, meta: PagedMeta) -> torch.Tensor:  # type: ignore[override]
        args = [x, *meta.inputs()]
        if self.selects:
            args.append(meta.select)
        for layer in self.attention_layers:
            args += [self.kv.k[layer], self.kv.v[layer]]
        return self.step(*args)[0]


def _weights_id(model_dir: str | None, width: int) -> str:
    if model_dir is None:
        return f"random/width{width}"
    files = sorted(Path(model_dir).glob("*.safetensors"))
    return json.dumps([(f.name, f.stat().st_size, f.stat().st_mtime_ns) for f in files] + [width])


def stage_executor(executor: str, backend: str, *, emulate: bool, tp: int, eager: bool = False) -> str:
    """What runs a stage: `torch` (eager) or a toolchain's name.

    Under `--executor auto`, an emulated stage runs its vendor's CPU lowering (emulation_toolchain),
    a real `cpu` stage the fastest CPU executor; a real accelerator stage runs torch on its device,
    and tensor-parallel stages stay eager (no sharded lowering yet: said in /v1/models), as do stages
    that need the eager stage (`eager`: backends/decoder.py's eager_only — MoE, sliding windows, MLA).
    """
    if executor != "auto" or tp > 1 or eager:
        return "torch"
    if emulate:
        return emulation_toolchain(backend)
    return CPU_EXECUTOR if backend == "cpu" else "torch"


def stage_artifact(
    *, hf_cfg, units, first: int, last: int, dtype: torch.dtype, kv_dtype: torch.dtype, weights, name: str, graph_hash: str, model_dir: str | None, width: int
) -> tuple[Artifact, Path]:
    """Stage [first, last] lowered by toolchain `name`, from the stage cache (keyed by everything the
    artifact embeds), built now when missing. Built in a folder of its own and renamed into place:
    a concurrent or interrupted build never leaves a half-written entry.

    Returns:
        The artifact and its folder.
    """
    tc = toolchain(name)
    key = hashlib.sha256(
        json.dumps([_CACHE_LAYOUT, graph_hash, first, last, name, str(dtype), str(kv_dtype), _weights_id(model_dir, width), tc.version()]).encode()
    ).hexdigest()[:24]
    folder = _stage_cache() / key
    if not (folder / "artifact.json").is_file():
        folder.parent.mkdir(parents=True, exist_ok=True)
        work = Path(tempfile.mkdtemp(dir=folder.parent, prefix=f".{key}."))
        scratch = Path(tempfile.mkdtemp(dir=folder.parent, prefix=f".{key}.weights."))
        try:  # built from views of a mapped file, as `hetc compile` builds (hetc.weights.mapped_weights)
            mapped = mapped_weights(weights, weight_specs(hf_cfg, units, first, last, dtype), scratch)
            stage = stage_class(tc.form)(hf_cfg, units, first, last, dtype=dtype, weights=mapped).eval()
            with torch.no_grad():
                ep = export_stage(stage, hidden=hf_cfg.hidden_size, vocab=hf_cfg.vocab_size, dtype=dtype, kv_dtype=kv_dtype)
            art = tc.build(ep, work, target="CPU" if name != "iree" else "gfx942", stem="stage", weight_names=stage.weight_names)
            (work / "artifact.json").write_text(
                json.dumps({"toolchain": art.toolchain, "version": art.version, "target": art.target, "files": [str(f) for f in art.files]})
            )
            if folder.is_dir() and not (folder / "artifact.json").is_file():  # left by an interrupted older build
                shutil.rmtree(folder, ignore_errors=True)
            os.replace(work, folder)
        except OSError:  # another process put the same entry in place first
            if not (folder / "artifact.json").is_file():
                raise
        finally:
            shutil.rmtree(work, ignore_errors=True)
            shutil.rmtree(scratch, ignore_errors=True)
    return _artifact(json.loads((folder / "artifact.json").read_text())), folder


def prebuild_stages(c, log) -> None:
    """Compile, before the workers start, every stage of this host that runs a toolchain and is not
    in the stage cache yet (a worker then only loads it: compiling inside a worker would hold up
    its group's formation). Nothing to do with `--artifacts`.

    Args:
        c: the server's checked plan (runtime.launch.Checked).
        log: where to say what is being compiled.
    """
    from hetc.runtime.model_runner import TORCH_DTYPES
    from hetc.weights import stage_weights

    if c.o.artifacts:
        return
    done: set[tuple] = set()
    for w in c.mine:
        s = w.stage
        name = stage_executor(c.o.executor, s.backend, emulate=c.o.emulate, tp=s.tp, eager=eager_only(c.hf_cfg, c.units[s.units[0] : s.units[1] + 1]))
        if name == "torch" or (name, *s.units) in done:
            continue
        done.add((name, *s.units))
        t0 = time.perf_counter()
        _, folder = stage_artifact(
            hf_cfg=c.hf_cfg,
            units=c.units,
            first=s.units[0],
            last=s.units[1],
            dtype=TORCH_DTYPES[c.plan.model.dtype],
            kv_dtype=TORCH_DTYPES[c.plan.model.kv_dtype],
            weights=stage_weights(c.hf_cfg, c.model_dir if not c.o.random_weights else None),
            name=name,
            graph_hash=c.plan.model.graph_hash,
            model_dir=c.model_dir if not c.o.random_weights else None,
            width=c.width,
        )
        log(f"stage {s.lane}.{s.index} (units {s.units[0]}–{s.units[1]}): {name} artifact ready in {time.perf_counter() - t0:.1f} s ({folder})")


def build_compiled_stage(
    *,
    hf_cfg,
    units,
    first: int,
    last: int,
    dtype: torch.dtype,
    kv_dtype: torch.dtype,
    num_blocks: int,
    weights,
    name: str,
    graph_hash: str,
    model_dir: str | None,
    width: int,
    artifacts: str | None,
    stem: str,
    threads: int | None,
) -> CompiledStage:
    """Load stage [first, last] lowered by toolchain `name` (built into the stage cache if missing).

    Args:
        artifacts: a `hetc compile` output folder to load from (checked against its manifest).
        stem: the stage's name in that manifest (p<pipeline>s<stage>).
    """
    tc = toolchain(name)
    if artifacts:
        art, folder = _from_manifest(Path(artifacts), stem, name, graph_hash, first, last)
    else:
        art, folder = stage_artifact(
            hf_cfg=hf_cfg,
            units=units,
            first=first,
            last=last,
            dtype=dtype,
            kv_dtype=kv_dtype,
            weights=weights,
            name=name,
            graph_hash=graph_hash,
            model_dir=model_dir,
            width=width,
        )
    # its layout and parameter sizes only: the weights are the artifact's
    stage = stage_class(tc.form)(hf_cfg, units, first, last, dtype=dtype, weights=MetaWeights())
    paged = tc.form is AttentionForm.PAGED
    kv = KVPool(stage.attention_layers, num_blocks if stage.attention_layers else 0, stage.kv_heads, stage.head_dim, kv_dtype, paged=paged)
    n = sum(1 for _ in stage.parameters())
    pb = sum(p.numel() * p.element_size() for p in stage.parameters())
    step = tc.load(art, folder, threads=threads, kv_dtype=kv_dtype, weights=weights)
    return (PagedCompiledStage if paged else CompiledStage)(step, stage, kv, name, pb, n)


def _artifact(d: dict) -> Artifact:
    return Artifact(toolchain=d["toolchain"], version=d["version"], target=d["target"], files=[Path(f) for f in d["files"]], runnable_here=True)


def _stage_cache() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(os.environ.get("HETC_STAGE_CACHE") or Path(base) / "hetc" / "stages")


def _from_manifest(folder: Path, stem: str, name: str, graph_hash: str, first: int, last: int) -> tuple[Artifact, Path]:
    file = folder / "manifest.json"
    try:
        manifest = json.loads(file.read_text())
    except (OSError, ValueError) as e:
        raise BadInput(f"cannot read the manifest ({e}).", file=str(file), fix="run `hetc compile` into that folder.") from None
    if manifest.get("graph_hash") != graph_hash:
        raise BadInput(
            "the artifacts were compiled for another model or dtype (graph_hash differs).",
            file=str(file),
            field="graph_hash",
            fix="compile this plan again with `hetc compile`.",
        )
    st = next((s for s in manifest["stages"] if s["stage"] == stem and s["units"] == [first, last]), None)
    a = next((a for a in (st or {}).get("artifacts", []) if a["toolchain"] == name and a["built"]), None)
    if a is None:
        raise BadInput(
            f"stage {stem} has no built {name} artifact.",
            file=str(file),
            field="stages",
            fix="compile the plan again on a host with that toolchain, or serve with --executor torch.",
        )
    for f in a["files"]:
        if hashlib.sha256((folder / f["path"]).read_bytes()).hexdigest() != f["sha256"]:
            raise BadInput(
                f"{f['path']} does not match its sha256 in the manifest.",
                file=str(file),
                field=f"stages.{stem}",
                fix="compile the plan again; artifacts were changed.",
            )
    return Artifact(toolchain=name, version=a["version"], target=a["target"], files=[Path(f["path"]) for f in a["files"]], runnable_here=True), folder
