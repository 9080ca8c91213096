"""The cluster contract: hardware profiles, links and cluster.yaml (docs/cluster.md, docs/profile.md).

Files are parsed strictly (quantities need units, unknown keys are errors) and every
problem becomes a `BadInput` naming the file, the field path and the fix. The resolved
`Cluster` can be written into plan.json (`to_json`) and read back (`Cluster.from_json`)
without the files it came from.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Annotated, Any, Literal, get_args

import yaml
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError, model_validator

from hetc.experts import ExpertLayout, StepBudget
from hetc.engine import ASSUMED_BEFORE, Engine, WindowKV, apply_engine, default_engine, engine_figures, load_engine
from hetc.efficiency import AttentionCurve, Curve1D, Curve2D, Efficiency, EfficiencyCurves, GatherCurve
from hetc.errors import BadInput
from hetc.execution import Execution, execution_for
from hetc.quantity import Kind, format_quantity, parse_quantity
from hetc.serving import ServingOverheads

__all__ = [
    "ClusterSpec",
    "Profile",
    "Efficiency",
    "EfficiencyCurves",
    "Curve1D",
    "Curve2D",
    "AttentionCurve",
    "GatherCurve",
    "Link",
    "Node",
    "Device",
    "Cluster",
    "load_profile",
    "load_links",
    "load_cluster",
    "defaults_notes",
    "profile_names",
    "PROFILE_DIR",
    "TP_SIZES",
]

PROFILE_DIR = resources.files("hetc.hardware_profiles")
TP_SIZES = (1, 2, 4, 8)  # the tensor-parallel group sizes a device kind may form (plans, placements, purchases)


def _q(kind: Kind):
    return BeforeValidator(lambda v: parse_quantity(v, kind))


Bytes = Annotated[float, _q(Kind.BYTES)]
PositiveBytes = Annotated[float, _q(Kind.BYTES), Field(gt=0)]
PositiveBandwidth = Annotated[float, _q(Kind.BANDWIDTH), Field(gt=0)]
PositiveFlops = Annotated[float, _q(Kind.FLOPS), Field(gt=0)]
Bandwidth = Annotated[float, _q(Kind.BANDWIDTH)]
Flops = Annotated[float, _q(Kind.FLOPS)]
Seconds = Annotated[float, _q(Kind.TIME)]
Watts = Annotated[float, _q(Kind.POWER)]
UsdPerHour = Annotated[float, _q(Kind.PRICE)]
DType = Literal["fp32", "tf32", "bf16", "fp16", "fp8", "int8"]
Backend = Literal["cuda", "rocm", "gaudi", "openvino", "cpu"]
BACKEND_NAMES = get_args(Backend)


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=False)


class Link(_Strict):
    """A link: per-direction bandwidth, per-message latency, shared (aggregate) or per peer."""

    bandwidth: PositiveBandwidth
    latency: Seconds
    scope: Literal["aggregate", "per_peer"] = "aggregate"
    source: str | None = None
    name: str | None = None


# What a hand-written profile may leave out, and the safe value it then gets. A figure that
# was defaulted is listed in `Profile.defaulted` (kept in plan.json), and the outputs that
# depend on it (USD/M tokens on price, kW on power) say so.
RESERVED_FRACTION = 0.10  # reserved_memory: 10% of memory (runtime context, workspaces, fragmentation)
DEFAULTS: dict[str, Any] = {
    "launch_overhead": "10 us",  # a kernel launch without graphs; the cost model errs slow
    "power": "0 W",  # unknown: J/token is not reported as a measurement
    "price": "0 USD/h",  # unknown: USD/M tokens is not reported as a measurement
    "host_link": "pcie4",
    "sources": ["hand-written profile (no sources given)"],
}


# What runs where the device has no peak of its own for a weight dtype: fp8 weights are dequantized
# to 16-bit (weight-only, as vLLM does on Ampere); bf16 and fp16 substitute for each other.
COMPUTE_SUBSTITUTES: dict[str, tuple[str, ...]] = {"fp8": ("fp8", "bf16", "fp16"), "bf16": ("bf16", "fp16"), "fp16": ("fp16", "bf16"), "fp32": ("fp32",)}


class Profile(_Strict):
    """One device model (hardware_profiles/NAME.yaml). Values in base units.

    Only the physical figures are required (memory, memory_bandwidth, peak_flops,
    efficiency, vendor, backend, name); see DEFAULTS for the rest.
    """

    name: str
    vendor: Literal["nvidia", "amd", "intel", "cpu"]
    backend: Backend
    target: str | None = None  # what `hetc compile` builds for: gfx942, sm_90, GPU, CPU, ... (see compile_target)
    memory: PositiveBytes
    reserved_memory: Bytes
    memory_bandwidth: PositiveBandwidth
    peak_flops: dict[DType, PositiveFlops]
    efficiency: Efficiency
    efficiency_curves: EfficiencyCurves | None = None
    launch_overhead: Seconds
    step_overhead: Seconds = 0.0
    execution: Execution = Execution()  # how the backend runs a step; keys left out come from the backend's defaults
    serving: ServingOverheads = ServingOverheads()  # the serving runtime's host work per step (hetc/serving.py)
    host_link: str | Link
    power: Watts
    price: UsdPerHour
    sources: list[str] = Field(min_length=1)
    defaulted: list[str] = []  # the fields above that took their default (set on load)

    @model_validator(mode="before")
    @classmethod
    def _defaults(cls, raw: Any) -> Any:
        if not isinstance(raw, dict):
            return raw
        if raw.get("backend") in BACKEND_NAMES and (raw.get("execution") is None or isinstance(raw.get("execution"), dict)):
            raw = {**raw, "execution": execution_for(raw["backend"], raw.get("execution"))}
        missing = [k for k in (*DEFAULTS, "reserved_memory") if k not in raw]
        if not missing:
            return raw
        out = {**{k: v for k, v in DEFAULTS.items() if k in missing}, **raw}
        if "reserved_memory" in missing:
            try:
                out["reserved_memory"] = f"{parse_quantity(raw.get('memory'), Kind.BYTES) * RESERVED_FRACTION:.6g} B"
            except ValueError:
                pass  # memory itself is reported
        out["defaulted"] = sorted({*raw.get("defaulted", []), *missing}) if isinstance(raw.get("defaulted", []), list) else missing
        return out

    @model_validator(mode="after")
    def _check(self) -> "Profile":
        if self.reserved_memory >= self.memory:
            raise ValueError(f"reserved_memory: must be smaller than memory ({format_quantity(self.memory, Kind.BYTES)})")
        if not self.peak_flops:
            raise ValueError("peak_flops: names no dtype; give the dense FLOP/s of each dtype the device runs, e.g. `{bf16: 989 TFLOP/s}`")
        return self

    def compute_dtype(self, dtype: str) -> str | None:
        """The dtype whose peak applies to weights of `dtype` here (itself or its substitute,
        `COMPUTE_SUBSTITUTES`); None when the profile names neither."""
        return next((d for d in COMPUTE_SUBSTITUTES.get(dtype, (dtype,)) if d in self.peak_flops), None)

    @property
    def compile_target(self) -> str:
        """The profile's `target`, or the one its backend implies where that is unambiguous.

        Raises:
            BadInput: a cuda or rocm profile without `target` (the GPU architecture is not implied).
        """
        if self.target:
            return self.target
        implied = {"cpu": "CPU", "openvino": "GPU", "gaudi": "hpu"}.get(self.backend)
        if implied is None:
            example = "sm_90" if self.backend == "cuda" else "gfx942"
            raise BadInput(
                f"profile {self.name} (backend {self.backend}) names no compile target.",
                field="target",
                fix=f"add `target: {example}` (the device's GPU architecture) to the profile.",
            )
        return implied

    @property
    def usable_memory(self) -> float:
        """Bytes available for weights, KV and activations."""
        return self.memory - self.reserved_memory


# ---------------------------------------------------------------- file helpers


def _read_yaml(path: Path) -> Any:
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise BadInput("file not found.", file=str(path), fix="check the path.") from None
    except OSError as e:
        raise BadInput(f"cannot read the file ({e.strerror}).", file=str(path)) from None
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        at = f"line {mark.line + 1}, column {mark.column + 1}" if mark else "unknown position"
        problem = getattr(e, "problem", None) or str(e).splitlines()[0]
        raise BadInput(
            f"YAML syntax error at {at}: {problem}.", file=str(path), fix="correct the YAML syntax at that position (indentation, colons, quotes)."
        ) from None


def _known_fields(model: type[BaseModel], parts: list) -> list[str]:
    """The field names of the (nested) model that `parts` leads to inside `model`."""
    for p in parts:
        if isinstance(p, int):
            continue
        info = model.model_fields.get(str(p))
        if info is None:
            return []
        nested = [
            t
            for t in (info.annotation, *get_args(info.annotation), *(a for t in get_args(info.annotation) for a in get_args(t)))
            if isinstance(t, type) and issubclass(t, BaseModel)
        ]
        if not nested:
            return []
        model = nested[0]
    return list(model.model_fields)


def _validation_error(e: ValidationError, file: str, prefix: str = "", model: type[BaseModel] | None = None) -> BadInput:
    errs = e.errors()
    # a misspelt key also shows as a missing field: report the unknown key (with its did-you-mean) first
    err = next((x for x in errs if x["type"] == "extra_forbidden"), errs[0])
    # pydantic's union branch names ("str", "dict[any,any]") are not fields
    parts = [p for p in err["loc"] if not (isinstance(p, str) and (p in ("str", "int", "float") or "[" in p))]
    loc = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in parts).lstrip(".")
    path = ".".join(p for p in (prefix, loc) if p)
    msg = err["msg"].removeprefix("Value error, ")
    named = re.match(r"([a-z_]+): (.*)", msg, re.S) if not parts else None
    if named:  # a cross-field check of a model validator names its field first
        parts, msg = [named.group(1)], named.group(2)
        path = ".".join(p for p in (prefix, named.group(1)) if p)
    if err["type"] == "missing":
        return BadInput("required field is missing.", file=file, field=path, fix=f"add `{parts[-1]}`.")
    if err["type"] == "extra_forbidden":
        near = difflib.get_close_matches(str(parts[-1]), _known_fields(model, parts[:-1]), n=1, cutoff=0.6) if model else []
        fix = f"did you mean `{near[0]}`?" if near else "remove it or correct its spelling."
        return BadInput("unknown field.", file=file, field=path, fix=fix)
    more = f" ({len(e.errors()) - 1} more problem(s) after this one.)" if len(e.errors()) > 1 else ""
    return BadInput(f"{msg}.{more}", file=file, field=path or None, fix="correct the value as described.")


def _unknown(kind: str, name: str, known: list[str], file: str, fld: str) -> BadInput:
    near = difflib.get_close_matches(name, known, n=3, cutoff=0.5)
    fix = f"did you mean {', '.join(repr(n) for n in near)}?" if near else f"known {kind}s: {', '.join(sorted(known))}."
    return BadInput(f"unknown {kind} {name!r}.", file=file, field=fld, fix=fix + f" A {kind} can also be given as a path to its YAML file" * (kind == "device"))


# ---------------------------------------------------------------- profiles and links


def profile_names() -> list[str]:
    return sorted(p.name[:-5] for p in PROFILE_DIR.iterdir() if p.name.endswith(".yaml") and p.name != "links.yaml")


@cache
def load_links() -> dict[str, Link]:
    """The named links of hardware_profiles/links.yaml."""
    path = Path(str(PROFILE_DIR / "links.yaml"))
    raw = _read_yaml(path) or {}
    out = {}
    for name, spec in raw.items():
        try:
            out[name] = Link.model_validate({**spec, "name": name})
        except ValidationError as e:
            raise _validation_error(e, str(path), name, Link) from None
    return out


def resolve_link(spec: Any, file: str, fld: str) -> Link:
    """A link given by name (links.yaml) or inline `{bandwidth, latency[, scope]}` (or already parsed)."""
    if isinstance(spec, Link):  # a profile's inline host_link, parsed with the profile
        return spec
    if isinstance(spec, str):
        links = load_links()
        if spec not in links:
            raise _unknown("link", spec, list(links), file, fld)
        return links[spec]
    if isinstance(spec, dict):
        try:
            return Link.model_validate(spec)
        except ValidationError as e:
            raise _validation_error(e, file, fld, Link) from None
    raise BadInput(
        f"expected a link name or {{bandwidth, latency}}, got {spec!r}.", file=file, field=fld, fix=f"use one of: {', '.join(sorted(load_links()))}."
    )


def _profile_from_dict(raw: Any, file: str) -> Profile:
    if not isinstance(raw, dict):
        raise BadInput("a profile must be a YAML mapping.", file=file, fix="see docs/profile.md.")
    if "name" not in raw and file.endswith((".yaml", ".yml")):  # a hand-written file is named by its stem
        raw = {"name": Path(file).stem, **raw}
    try:
        prof = Profile.model_validate(raw)
    except ValidationError as e:
        raise _validation_error(e, file, model=Profile) from None
    resolve_link(prof.host_link, file, "host_link")  # validate the reference now, not at plan time
    return prof


def defaults_notes(profiles: list[Profile] | list[dict]) -> list[str]:
    """One line per profile that took defaults: which fields, and which outputs that affects.

    Args:
        profiles: parsed profiles, or their plan.json copies.
    """
    notes = []
    for p in profiles:
        name, used = (p.get("name"), p.get("defaulted") or []) if isinstance(p, dict) else (p.name, p.defaulted)
        if not used:
            continue
        affects = [
            what
            for k, what in (("price", "USD/M tokens"), ("power", "kW and J/token"), ("launch_overhead", "predicted times"), ("reserved_memory", "memory fit"))
            if k in used
        ]
        notes.append(f"profile {name}: default {', '.join(used)} (see docs/profile.md, defaults)" + (f"; {', '.join(affects)} rest on them" if affects else ""))
    return notes


def load_profile(ref: str) -> Profile:
    """A profile by catalog name (hardware_profiles/NAME.yaml) or by path to a YAML file.

    Catalog profiles are read once per process; files given by path are read every time.
    """
    if ref.endswith((".yaml", ".yml")) or "/" in ref:
        return _profile_from_dict(_read_yaml(Path(ref)), ref)
    return _catalog_profile(ref)


def _device_path(ref: str, cluster_file: str) -> str | None:
    """The profile file a node's `device` names as a path (relative to the cluster file); None for a catalog name."""
    if not (ref.endswith((".yaml", ".yml")) or "/" in ref):
        return None
    return ref if Path(ref).is_absolute() else str(Path(cluster_file).parent / ref)


@cache
def _catalog_profile(name: str) -> Profile:
    path = Path(str(PROFILE_DIR / f"{name}.yaml"))
    if not path.is_file():
        raise _unknown("device", name, profile_names(), "", "device")
    return _profile_from_dict(_read_yaml(path), str(path))


# ---------------------------------------------------------------- cluster


@dataclass(frozen=True, slots=True)
class Node:
    name: str
    profile: Profile  # the device as `engine` runs it: the hardware profile with the engine's figures (hetc/engine.py)
    count: int
    link: Link | None  # between devices of this node; None for a single-device node
    profile_file: str = ""  # where the profile was read (named in errors about its figures)
    engine: Engine | None = None  # the serving engine the node's figures assume


@dataclass(frozen=True, slots=True)
class Device:
    id: str  # "NODE:INDEX"
    node: str
    index: int
    profile: Profile


@dataclass(kw_only=True)
class Cluster:
    name: str
    nodes: list[Node]
    network: Link | None  # between nodes; None for a single-node cluster
    network_per: Literal["device", "node"] = "device"
    pairs: dict[frozenset[str], Link] = field(default_factory=dict)
    prices: dict[str, float] = field(default_factory=dict)  # profile name -> USD/h override
    raw: dict[str, Any] = field(default_factory=dict)  # the resolved document, for plan.json

    @property
    def devices(self) -> list[Device]:
        return [Device(f"{n.name}:{i}", n.name, i, n.profile) for n in self.nodes for i in range(n.count)]

    def node(self, name: str) -> Node:
        return next(n for n in self.nodes if n.name == name)

    def price(self, profile: Profile) -> float:
        return self.prices.get(profile.name, profile.price)

    def link_between(self, a: str, b: str) -> Link:
        """The link between two nodes (the node's own link when a == b)."""
        if a == b:
            link = self.node(a).link
            if link is None:
                raise ValueError(f"node {a} has one device and no intra-node link")
            return link
        return self.pairs.get(frozenset((a, b))) or self.network  # type: ignore[return-value]

    def to_json(self) -> dict[str, Any]:
        return self.raw

    def require_flops(self, dtype: str, flag: str = "--dtype") -> None:
        """Every node's profile names a peak for weights of `dtype` (or its substitute): a plan asks
        only for the dtypes it runs.

        Raises:
            BadInput: naming the first profile without one, the field and the two ways out.
        """
        for n in self.nodes:
            if n.profile.compute_dtype(dtype) is not None:
                continue
            wanted = COMPUTE_SUBSTITUTES.get(dtype, (dtype,))
            has = sorted(n.profile.peak_flops)
            raise BadInput(
                f"node {n.name}'s device {n.profile.name} names no peak for {dtype} weights"
                + (f" (nor {' or '.join(wanted[1:])}, which would stand in)" if len(wanted) > 1 else "")
                + f"; its peak_flops names {', '.join(has)}.",
                file=n.profile_file or None,
                field=f"peak_flops.{dtype}",
                fix=f"add `{dtype}: <FLOP/s>` (the device's dense {dtype} rate, with its source) to peak_flops, or plan with {flag} {'/'.join(has)}.",
            )

    @property
    def windowed_kv(self) -> bool:
        """Whether a sliding-window layer keeps at most its window of K/V: where every node's engine
        frees the blocks behind it (hetc/engine.py `sliding_windows`). A cluster mixing such engines
        with one that does not is priced as keeping it all (one rule for every stage: the bounds'
        and the plan's memory agree)."""
        return all(n.engine is not None and load_engine(n.engine.name).sliding_windows.kv == WindowKV.WINDOW for n in self.nodes)

    @property
    def expert_layouts(self) -> list[ExpertLayout]:
        """The MoE layouts every node's engine serves (hetc/engine.py `experts`), in hetc/experts.py's order; a node
        built without an engine (tests) splits experts as everything else (`tp`)."""
        served = [set(load_engine(n.engine.name).experts.layouts) if n.engine is not None else {ExpertLayout.TP} for n in self.nodes]
        return [lay for lay in ExpertLayout if all(lay in s for s in served)]

    @property
    def expert_layout(self) -> ExpertLayout:
        """The layout the cluster's engines run unless told: every node's engine's default where they
        agree, else the first layout all serve (a node built without an engine: `tp`)."""
        defaults = {load_engine(n.engine.name).experts.default if n.engine is not None else ExpertLayout.TP for n in self.nodes}
        served = self.expert_layouts
        return defaults.pop() if len(defaults) == 1 and defaults <= set(served) else (served or [ExpertLayout.TP])[0]

    @property
    def dp_budget(self) -> StepBudget:
        """Whose token budget a data-parallel group's step fills: each rank's own where every node's engine
        schedules its ranks so (hetc/engine.py `dp_budget`), else the group's one (a node built without an
        engine: one)."""
        per_rank = all(n.engine is not None and load_engine(n.engine.name).experts.dp_budget == StepBudget.PER_RANK for n in self.nodes)
        return StepBudget.PER_RANK if per_rank else StepBudget.SHARED

    @property
    def engines(self) -> str:
        """The engines the cluster's figures assume, in words: `hetc`, or `a: vllm, b: hetc`."""
        names = {str(n.engine) for n in self.nodes}
        return names.pop() if len(names) == 1 else ", ".join(f"{n.name}: {n.engine}" for n in self.nodes)

    @classmethod
    def from_json(cls, doc: ClusterSpec | dict[str, Any], file: str = "plan.json", engine: str | None = None) -> "Cluster":
        """Rebuild from the document `to_json` wrote (profiles inline, links inline), each node under the
        engine it names (a document without one: the engine its figures assumed then), or `engine`."""
        if isinstance(doc, ClusterSpec):
            doc = doc.model_dump()
        return _build_cluster(doc, file, inline_profiles=doc.get("profiles", {}), engine=engine, embedded=True)


class _NodeSpec(_Strict):
    name: str = Field(min_length=1)
    device: str
    count: int = Field(gt=0, strict=True)
    link: Any = None  # a links.yaml name or an inline {bandwidth, latency}: checked by resolve_link
    engine: str | None = None  # this node's serving engine (hetc/engine.py); default: the cluster's


class _PairSpec(_Strict):
    nodes: list[str] = Field(min_length=2, max_length=2)
    link: Any


class _NetworkSpec(_Strict):
    default: Any
    per: Literal["device", "node"] = "device"
    pairs: list[_PairSpec] = []


class ClusterSpec(_Strict):
    """A cluster document: cluster.yaml as written, or the resolved copy plan.json embeds (`Cluster.to_json`:
    profiles and links inline, with units, so it parses strictly again)."""

    name: str | None = None
    engine: str | None = None  # every node's serving engine unless the node names its own; default: hetc
    nodes: list[_NodeSpec] = Field(min_length=1)
    network: _NetworkSpec | None = None
    prices: dict[str, str] = {}
    profiles: dict[str, dict] = {}  # only in plan.json's embedded copy


def _node_engine(spec: ClusterSpec, n: _NodeSpec, i: int, prof: Profile, file: str, engine: str | None, embedded: bool) -> Engine:
    """The engine node `n` runs: `engine` (the command's --engine) over the node's field over the
    cluster's, else the default for its backend — or, in a plan.json written before engines were an
    input (no field anywhere), the engine its figures assumed then."""
    if engine is not None:
        return Engine.parse(engine)
    if n.engine is not None:
        return Engine.parse(n.engine, field=f"nodes[{i}].engine", file=file)
    if spec.engine is not None:
        return Engine.parse(spec.engine, field="engine", file=file)
    return Engine(ASSUMED_BEFORE[prof.backend]) if embedded else default_engine(prof.backend)


def _build_cluster(
    raw: Any, file: str, inline_profiles: dict[str, dict] | None = None, stem: str = "cluster", engine: str | None = None, embedded: bool = False
) -> Cluster:
    if not isinstance(raw, dict):
        raise BadInput("a cluster file must be a YAML mapping with `nodes:`.", file=file, fix="see docs/cluster.md for the layout.")
    try:
        spec = ClusterSpec.model_validate(raw)
    except ValidationError as e:
        raise _validation_error(e, file, model=ClusterSpec) from None
    inline_profiles = inline_profiles or {}
    nodes, seen, profiles_raw = [], set(), {}
    for i, n in enumerate(spec.nodes):
        fld = f"nodes[{i}]"
        if n.name in seen:
            raise BadInput(f"duplicate node name {n.name!r}.", file=file, field=f"{fld}.name", fix="give every node a unique name.")
        if ":" in n.name:
            raise BadInput(
                f"node name {n.name!r} contains ':'.", file=file, field=f"{fld}.name", fix="use letters, digits, '-' or '_' (device ids are NODE:INDEX)."
            )
        seen.add(n.name)
        if n.device in inline_profiles:
            where = f"{file} (profiles.{n.device})"
            prof = _profile_from_dict(inline_profiles[n.device], where)
        else:
            path = _device_path(n.device, file)
            where = path or str(PROFILE_DIR / f"{n.device}.yaml")
            if path is not None and not Path(path).is_file():  # the cluster file's field is wrong, not a profile
                raise BadInput(
                    f"device {n.device!r} names the profile file {path}, which {'is not a file' if Path(path).exists() else 'does not exist'}.",
                    file=file,
                    field=f"{fld}.device",
                    fix="give a profile YAML path (relative to this cluster file) or a catalog device name (`hetc devices` lists them).",
                )
            try:
                prof = load_profile(path or n.device)
            except BadInput as e:
                if e.file:  # the profile file itself is bad
                    raise
                raise _unknown("device", n.device, profile_names(), file, f"{fld}.device") from None
        profiles_raw[prof.name] = prof
        if n.link is None and n.count > 1:
            raise BadInput(
                f"node {n.name!r} has {n.count} devices but no `link` between them.",
                file=file,
                field=f"{fld}.link",
                fix=f"add e.g. `link: nvlink4` (names: {', '.join(sorted(load_links()))}).",
            )
        link = resolve_link(n.link, file, f"{fld}.link") if n.link is not None else None
        eng = _node_engine(spec, n, i, prof, file, engine, embedded)
        fig = engine_figures(
            eng, prof.backend, file=None if engine is not None else file, field="--engine" if engine is not None else f"{fld}.engine", target=prof.target
        )
        nodes.append(Node(n.name, apply_engine(prof, fig), n.count, link, where, eng))
    network, pairs = None, {}
    if spec.network is not None:
        network = resolve_link(spec.network.default, file, "network.default")
        for j, p in enumerate(spec.network.pairs):
            for k, nn in enumerate(p.nodes):
                if nn not in seen:
                    raise _unknown("node", nn, list(seen), file, f"network.pairs[{j}].nodes[{k}]")
            if p.nodes[0] == p.nodes[1]:
                raise BadInput(
                    f"a pair names node {p.nodes[0]!r} twice.",
                    file=file,
                    field=f"network.pairs[{j}].nodes",
                    fix="name two different nodes; a node's own devices use its `link`.",
                )
            if frozenset(p.nodes) in pairs:
                raise BadInput(
                    f"nodes {p.nodes[0]!r} and {p.nodes[1]!r} already have a link.",
                    file=file,
                    field=f"network.pairs[{j}]",
                    fix="give each pair of nodes one entry.",
                )
            pairs[frozenset(p.nodes)] = resolve_link(p.link, file, f"network.pairs[{j}].link")
    elif len(nodes) > 1:
        raise BadInput(
            "a cluster with several nodes needs `network.default`.",
            file=file,
            field="network",
            fix="add `network: {default: roce-400g}` (a links.yaml name or {bandwidth, latency}).",
        )
    prices = {}
    for dev, text in spec.prices.items():
        if dev not in profiles_raw:
            raise _unknown("device", dev, list(profiles_raw), file, f"prices.{dev}")
        try:
            prices[dev] = parse_quantity(text, Kind.PRICE)
        except ValueError as e:
            raise BadInput(f"{e}.", file=file, field=f"prices.{dev}", fix='write a price like "2.95 USD/h".') from None

    resolved = {
        "name": spec.name or stem,
        "nodes": [{"name": n.name, "device": n.profile.name, "count": n.count, "link": _link_text(n.link), "engine": str(n.engine)} for n in nodes],
        "network": None
        if network is None
        else {
            "default": _link_text(network),
            "per": spec.network.per if spec.network else "device",
            "pairs": [{"nodes": sorted(k), "link": _link_text(v)} for k, v in pairs.items()],
        },
        "prices": dict(spec.prices),
        "profiles": {k: _profile_text(v) for k, v in profiles_raw.items()},  # the hardware, before any engine's figures
    }
    return Cluster(
        name=spec.name or stem,
        nodes=nodes,
        network=network,
        network_per=spec.network.per if spec.network else "device",
        pairs=pairs,
        prices=prices,
        raw=resolved,
    )


def _link_text(link: Link | None) -> dict | None:
    """A link as an inline spec with units, so the embedded copy parses strictly again."""
    if link is None:
        return None
    out = {"bandwidth": f"{link.bandwidth:.6g} B/s", "latency": f"{link.latency * 1e6:.6g} us", "scope": link.scope}
    if link.name:
        out["name"] = link.name
    return out


def _profile_text(prof: Profile) -> dict:
    """A profile rewritten with explicit units, so the embedded copy parses strictly again."""
    p = prof.model_dump(mode="json")
    out = dict(p)
    for k, unit in (("memory", "B"), ("reserved_memory", "B"), ("memory_bandwidth", "B/s"), ("power", "W"), ("price", "USD/h")):
        out[k] = f"{p[k]:.6g} {unit}"
    out["launch_overhead"] = f"{p['launch_overhead'] * 1e6:.6g} us"
    out["step_overhead"] = f"{p['step_overhead'] * 1e6:.6g} us"
    out["execution"] = {**p["execution"], "kernel_overhead": f"{p['execution']['kernel_overhead'] * 1e6:.6g} us"}
    out["serving"] = prof.serving.as_text()
    out["peak_flops"] = {k: f"{v:.6g} FLOP/s" for k, v in p["peak_flops"].items()}
    curves = out.get("efficiency_curves")
    if curves is None:
        out.pop("efficiency_curves", None)
    else:
        out["efficiency_curves"] = {**curves, **{k: f"{curves[k] * 1e6:.6g} us" for k in ("dispatch_overhead",) if curves.get(k) is not None}}
    if isinstance(prof.host_link, Link):
        out["host_link"] = _link_text(prof.host_link)
    return out


def load_cluster(path: str | Path, engine: str | None = None) -> Cluster:
    """Load and validate a cluster.yaml.

    Args:
        path: the cluster file.
        engine: the serving engine of every node (`--engine`: over the file's `engine` fields); None:
            the file's, else hetc (hetc/engine.py).

    Raises:
        BadInput: any problem, naming the file, the field path and the fix.
    """
    path = Path(path)
    return _build_cluster(_read_yaml(path), str(path), stem=path.stem, engine=engine)
