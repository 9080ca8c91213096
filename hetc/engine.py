"""The serving engine a prediction assumes: part of the cluster contract (docs/profile.md, "Engines").

A profile (hardware_profiles/NAME.yaml) describes a chip: memory, bandwidth, peaks and the
achievable efficiencies measured on it. What differs between the engines that run a model on that
chip — which kernels they fuse, which steps they replay as graphs, what the host pays per kernel and
per step, how well their attention kernels do — is the engine's, described per backend in
hardware_profiles/engines/NAME.yaml with a source for every figure:

- `execution`: the keys of hetc/execution.py's `Execution` the engine sets (fusion, graphs, launch,
  kernel_overhead); the rest stay the profile's.
- `launch_overhead`, `step_overhead`: host time per un-graphed kernel and per engine step; absent:
  the profile's (the catalog's were measured or estimated for a torch-based engine, vLLM).
- `matmul`, `attention`: the engine's GEMM and attention kernels relative to the profile's
  achievable efficiencies (1: the profile's figures as they are).
- `experts`: the engine's MoE layer (grouped expert GEMMs, with the permute and finalize around them)
  relative to its dense GEMMs at the same rows: a factor on the efficiency of the routed experts' GEMMs
  only, over `matmul` (1: as the dense ones).
- `collective`: the engine's tensor-parallel all-reduce time over the link model's (1: the link
  model's; only a fitted release sets it); `collectives`: the engine's all-reduce path, in words.

An engine may name releases (`releases: {"0.10": {rocm: {...}}}`) whose figures replace its base
figures on a backend (or on one architecture of it, `rocm:gfx942`): `vllm@0.10`. `ENGINE@fit` is the engine with its kernel figures fitted on
public results under a declared split (hardware_profiles/engines/fit.yaml, written by
benchmarks/engine_calibration.py, each figure with the training rows it came from); `ENGINE@REL` for a
release of it the public rows name (`vllm@0.9`: the figures fitted on the training rows measured with
that release, FIT_RELEASES_FILE, benchmarks/engine_releases.py; on a backend with too few such rows,
the engine's `fit` figures, saying so). The catalog profiles were written for vLLM (their `execution`
defaults and launch cost describe it), so `vllm` on cuda, rocm and gaudi changes nothing: plans
made under it are the plans made before engines were an input.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from functools import cache
from importlib import resources
from typing import Annotated, Any

import yaml
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError, model_validator

from hetc.errors import BadInput
from hetc.execution import Execution
from hetc.experts import ExpertLayout, StepBudget
from hetc.quantity import Kind, parse_quantity

__all__ = [
    "EngineName",
    "Engine",
    "EngineFigures",
    "EngineSpec",
    "WindowKV",
    "ExpertLayouts",
    "load_engine",
    "engine_figures",
    "default_engine",
    "ASSUMED_BEFORE",
    "ENGINE_DIR",
    "FIT",
    "FIT_FILE",
    "FIT_HEADER",
    "FIT_RELEASES_FILE",
    "SAME_AS",
]

ENGINE_DIR = resources.files("hetc.hardware_profiles") / "engines"
Seconds = Annotated[float, BeforeValidator(lambda v: parse_quantity(v, Kind.TIME)), Field(ge=0)]
Scale = Annotated[float, Field(gt=0, le=2)]


class EngineName(StrEnum):
    HETC = "hetc"
    VLLM = "vllm"
    SGLANG = "sglang"
    TRTLLM = "trtllm"


# The engine each backend's figures assumed before the engine was an input (plan.json files written
# then carry no `engine`): the catalog's GPU profiles describe vLLM; cpu and openvino profiles are
# measured by `hetc profile` on hetc's own executor.
ASSUMED_BEFORE: dict[str, EngineName] = {
    "cuda": EngineName.VLLM,
    "rocm": EngineName.VLLM,
    "gaudi": EngineName.VLLM,
    "openvino": EngineName.HETC,
    "cpu": EngineName.HETC,
}


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=False)


class EngineFigures(_Strict):
    """What one engine changes about a profile of one backend (see the module docstring)."""

    execution: dict[str, Any] = {}
    launch_overhead: Seconds | None = None
    step_overhead: Seconds | None = None
    matmul: Scale = 1.0
    attention: Scale = 1.0
    experts: Annotated[float, Field(gt=0, le=1)] = 1.0  # × the GEMM efficiency for the routed experts' GEMMs (Efficiency.experts)
    collective: Annotated[float, Field(gt=0, le=4)] = 1.0  # × the link model's tensor-parallel all-reduce time (Execution.collective)
    collectives: str = ""
    calibrated_on: list[str] = []  # the training rows a calibrated figure came from (benchmarks/engine_calibration.py)
    sources: list[str] = Field(min_length=1)

    @model_validator(mode="after")
    def _check_execution(self) -> EngineFigures:
        _execution(self.execution)  # unknown keys or values fail at load, naming the engine file
        return self

    def over(self, base: EngineFigures) -> EngineFigures:
        """These (a release's) figures over `base` (the engine's): the keys this one sets win."""
        mine = {k: getattr(self, k) for k in self.model_fields_set}
        return base.model_copy(update={**mine, "execution": {**base.execution, **self.execution}, "sources": [*base.sources, *self.sources]})

    @property
    def changes_nothing(self) -> bool:
        untouched = self.launch_overhead is None and self.step_overhead is None
        return not self.execution and untouched and self.matmul == self.attention == self.collective == self.experts == 1.0


class WindowKV(StrEnum):
    """What an engine keeps of a sliding-window layer's K/V (gpt-oss's sliding layers, mistral)."""

    WINDOW = "window"  # the blocks behind the window are freed and never read: at most the window per sequence
    FULL = "full"  # every token's, as a full-attention layer's


class SlidingWindows(_Strict):
    kv: WindowKV
    source: str = Field(min_length=1)


class ExpertLayouts(_Strict):
    """The MoE layouts (hetc/experts.py) an engine serves a tensor-parallel group's experts in, and the
    one it runs unless told (what `hetc plan` plans by default)."""

    layouts: list[ExpertLayout] = Field(min_length=1)
    default: ExpertLayout
    source: str = Field(min_length=1)
    dp_budget: StepBudget  # a data-parallel group's step budget: one for the group, or each rank's own
    dp_budget_source: str = Field(min_length=1)

    @model_validator(mode="after")
    def _check_default(self) -> ExpertLayouts:
        if self.default not in self.layouts:
            raise ValueError(f"default {self.default.value} is not among the layouts {[x.value for x in self.layouts]}")
        return self


class EngineSpec(_Strict):
    """hardware_profiles/engines/NAME.yaml: an engine and its figures per backend it serves."""

    name: EngineName
    description: str
    sliding_windows: SlidingWindows  # one rule for every backend: the engine's KV manager, not a kernel
    experts: ExpertLayouts  # one rule for every backend, as sliding_windows
    backends: dict[str, EngineFigures]  # a backend this engine serves -> its figures there
    # release -> {backend, or BACKEND:TARGET for the devices of one architecture (an engine's build per GPU
    # family, as SGLang's ROCm images for gfx942 and gfx950): its figures there}
    releases: dict[str, dict[str, EngineFigures]] = {}


@dataclass(frozen=True, slots=True)
class Engine:
    """An engine as a plan names it: `vllm`, or with a release, `vllm@0.10`."""

    name: EngineName
    release: str | None = None

    def __str__(self) -> str:
        return f"{self.name.value}@{self.release}" if self.release else self.name.value

    @classmethod
    def parse(cls, text: str, field: str = "--engine", file: str | None = None) -> Engine:
        """`NAME` or `NAME@RELEASE`, checked against the engines' files.

        Raises:
            BadInput: an unknown engine or release, naming the known ones.
        """
        name, _, release = str(text).partition("@")
        try:
            eng = EngineName(name)
        except ValueError:
            raise BadInput(f"unknown engine {name!r}.", file=file, field=field, fix=f"use one of {', '.join(e.value for e in EngineName)}.") from None
        spec = load_engine(eng)
        if release and release not in spec.releases:
            known = ", ".join(f"{eng.value}@{r}" for r in spec.releases) or "none"
            raise BadInput(f"engine {eng.value} has no release {release!r} in its figures.", file=file, field=field, fix=f"use {eng.value} or one of: {known}.")
        return cls(eng, release or None)


FIT = "fit"  # the release name of the figures fitted on public results (FIT_FILE)
FIT_FILE = ENGINE_DIR / "fit.yaml"  # {engine: {BACKEND or BACKEND:TARGET: figures}}, written by the two scripts FIT_HEADER names
FIT_HEADER = (
    "# Written by `python benchmarks/engine_calibration.py --write` (BACKEND keys) and\n"
    "# `python benchmarks/moe_public.py --fit --write` (BACKEND:TARGET keys): do not edit by hand.\n"
)
# {engine: {release: {BACKEND or BACKEND:TARGET: figures, or {same_as: fit, why: ...}}}}: figures fitted per
# engine release on the training rows that name it (benchmarks/engine_releases.py --write); a backend with
# too few rows of that release takes the engine's `fit` figures, saying so (`same_as`), so that
# `vllm@0.6` means one thing on every backend the engine's fit covers
FIT_RELEASES_FILE = ENGINE_DIR / "fit_releases.yaml"
SAME_AS = "same_as"


@cache
def load_engine(name: EngineName) -> EngineSpec:
    """The engine's figures (hardware_profiles/engines/NAME.yaml), read once per process, with the
    figures fitted on public results for it (FIT_FILE) as its release `fit`."""
    path = ENGINE_DIR / f"{name.value}.yaml"
    try:
        spec = EngineSpec.model_validate(yaml.safe_load(path.read_text()))
        fitted = (yaml.safe_load(FIT_FILE.read_text()) or {}).get(name.value) if FIT_FILE.is_file() else None
        if fitted:
            spec = spec.model_copy(update={"releases": {**spec.releases, FIT: {b: EngineFigures.model_validate(f) for b, f in fitted.items()}}})
        per_release = (yaml.safe_load(FIT_RELEASES_FILE.read_text()) or {}).get(name.value) if FIT_RELEASES_FILE.is_file() else None
        if per_release:
            rels = {r: {b: _fitted_or_fit(spec, r, b, f) for b, f in backends.items()} for r, backends in per_release.items()}
            spec = spec.model_copy(update={"releases": {**spec.releases, **rels}})
        return spec
    except ValidationError as e:  # a repository file: its own test keeps it valid
        raise BadInput(f"engine file is invalid: {e}", file=str(path)) from None


def _fitted_or_fit(spec: EngineSpec, release: str, backend: str, fig: dict[str, Any]) -> EngineFigures:
    """A fitted release's figures on `backend`, or (`same_as: fit`) the engine's `fit` figures there with the reason."""
    if SAME_AS not in fig:
        return EngineFigures.model_validate(fig)
    if fig[SAME_AS] != FIT or backend not in spec.releases.get(FIT, {}):
        raise BadInput(f"{spec.name.value}@{release} on {backend}: same_as {fig[SAME_AS]!r} names no `fit` figures there.", file=str(FIT_RELEASES_FILE))
    fit = spec.releases[FIT][backend]
    return fit.model_copy(update={"sources": [*fit.sources, f"{spec.name.value}@{release} on {backend}: {fig['why']}"]})


def engine_figures(engine: Engine, backend: str, file: str | None = None, field: str = "engine", target: str | None = None) -> EngineFigures:
    """The figures of `engine` on a device of `backend` and architecture `target`: its own, under its
    release's BACKEND figures, under the release's BACKEND:TARGET figures (each where it has them).

    Raises:
        BadInput: the engine does not run on that backend.
    """
    spec = load_engine(engine.name)
    base = spec.backends.get(backend)
    if base is None:
        raise BadInput(
            f"engine {engine} does not serve {backend} devices (its figures cover {', '.join(spec.backends)}).",
            file=file,
            field=field,
            fix=f"choose an engine that serves {backend}: {', '.join(e.value for e in EngineName if backend in load_engine(e).backends)}.",
        )
    release = spec.releases.get(engine.release or "", {})
    for rel in (release.get(backend), release.get(f"{backend}:{target}")):
        base = rel.over(base) if rel is not None else base
    return base


def default_engine(backend: str) -> Engine:
    """The engine a plan on `backend` is served with unless told: hetc, which serves every backend."""
    assert backend in load_engine(EngineName.HETC).backends, backend
    return Engine(EngineName.HETC)


def _scaled(table: BaseModel, k: float) -> BaseModel:
    """A curve table with every efficiency × k."""
    return table.model_copy(update={"eff": [[v * k for v in row] for row in table.eff]})  # type: ignore[attr-defined]


def apply_engine(profile: Any, fig: EngineFigures) -> Any:
    """`profile` (hetc.cluster.Profile) as `fig`'s engine runs it: the same object where the figures
    change nothing, else a copy with the engine's execution, host overheads and kernel efficiencies."""
    if fig.changes_nothing:
        return profile
    keys = {**fig.execution, **({"collective": fig.collective} if fig.collective != 1.0 else {})}
    update: dict[str, Any] = {"execution": profile.execution.model_copy(update=_execution(keys))}
    if fig.launch_overhead is not None:
        update["launch_overhead"] = fig.launch_overhead
    if fig.step_overhead is not None:
        update["step_overhead"] = fig.step_overhead
    if fig.matmul != 1.0 or fig.experts != 1.0:
        e = profile.efficiency
        update["efficiency"] = e.model_copy(
            update={
                "matmul": e.matmul * fig.matmul,
                "matmul_by_dtype": {d: v * fig.matmul for d, v in e.matmul_by_dtype.items()},
                "experts": e.experts * fig.experts,
            }
        )
    c = profile.efficiency_curves
    if c is not None and (fig.matmul != 1.0 or fig.attention != 1.0):
        update["efficiency_curves"] = c.model_copy(
            update={
                "matmul": {d: _scaled(t, fig.matmul) for d, t in c.matmul.items()},
                "attention": {d: _scaled(t, fig.attention) for d, t in c.attention.items()},
                "attention_decode": {d: _scaled(t, fig.attention) for d, t in c.attention_decode.items()},
            }
        )
    return profile.model_copy(update=update)


def _execution(keys: dict[str, Any]) -> dict[str, Any]:
    """The execution keys an engine sets, parsed (units, literals) as the profile's own are."""
    return {k: getattr(Execution.model_validate(keys), k) for k in keys}
