"""plan.json (schema "hetc.plan/1"): the one contract between planning and running.

Validated on load: a plan of another schema version, with missing fields, or whose
stages do not cover the model's units exactly once per pipeline is refused with the reason.
A plan written by another hetc version (`hetc_version`) stays usable: only the schema
version and, when serving, the model's `graph_hash` (runtime/launch.py) must match.
Written atomically (temp file + `os.replace`).
"""

from __future__ import annotations

import json
import os
import tempfile
from enum import StrEnum
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from hetc.cluster import ClusterSpec
from hetc.errors import BadInput
from hetc.experts import ExpertLayout, StepBudget
from hetc.scheduling import Objective, Phase
from hetc.speculation import MAX_SPECULATIVE_TOKENS, AcceptanceSource, SpeculationMethod, expected_tokens_per_round

SCHEMA: Literal["hetc.plan/1"] = "hetc.plan/1"

__all__ = [
    "SCHEMA",
    "Baseline",
    "Disaggregated",
    "Drafter",
    "Experts",
    "LayoutOption",
    "GivenPlacement",
    "Plan",
    "PlanUnit",
    "Pipeline",
    "Speculation",
    "Stage",
    "UnitKind",
    "load_plan",
    "save_plan",
]


class UnitKind(StrEnum):
    """What a unit of the model's chain is (partitioner/units.py classifies, the runtime builds by it)."""

    EMBED = "embed"
    ATTENTION = "attention"  # a layer's input norm and self-attention (+ residual)
    MLP = "mlp"  # a layer's post-attention norm and dense MLP (+ residual)
    MOE = "moe"  # the same with a mixture-of-experts block
    CONV = "conv"
    NORM = "norm"  # the final norm
    HEAD = "head"  # the LM head (or a non-LLM's last layer)


class _M(BaseModel):
    model_config = ConfigDict(extra="forbid")  # every key hetc writes is declared: a misspelt one is an error, not lost


class ModelInfo(_M):
    ref: str
    dtype: str
    kv_dtype: str
    num_layers: int = Field(gt=0)
    num_units: int = Field(gt=0)
    params: int = Field(ge=0)
    graph_hash: str
    kind: str = ""  # where the model came from: catalog | hf-dir | hf-cache | factory | pt2
    notes: list[str] = []


class PlanUnit(BaseModel):
    """One unit of the model's chain (an embedding, a layer's attention or MLP, a norm, the head): the
    runtime builds a stage from the units [first, last] of its plan stage."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    index: int = Field(ge=0)
    kind: UnitKind  # the runtime refuses what it cannot run
    layer: int = Field(ge=0)
    param_bytes: float = Field(0, ge=0)
    kv_bytes_per_token: float = Field(0, ge=0)
    out_bytes_per_token: float = Field(0, ge=0)


class MemoryBytes(_M):
    weights: float = Field(ge=0)
    kv: float = Field(ge=0)
    activations: float = Field(ge=0)
    total: float = Field(ge=0)


class StageTimes(_M):
    prefill: float = Field(ge=0)
    decode: float = Field(ge=0)


class Stage(_M):
    devices: list[str] = Field(min_length=1)
    profile: str
    backend: str
    node: str
    tp: int = Field(ge=1)
    units: tuple[int, int]
    layers: tuple[int, int]
    memory_bytes: MemoryBytes
    predicted_ms: StageTimes

    @model_validator(mode="after")
    def _check(self) -> "Stage":
        if self.units[0] > self.units[1] or self.layers[0] > self.layers[1]:
            raise ValueError("units and layers are inclusive [first, last] with first ≤ last")
        if len(self.devices) != self.tp:
            raise ValueError(f"tp={self.tp} but {len(self.devices)} devices")
        return self


class Pipeline(_M):
    id: int
    phase: Phase
    replicas: int = Field(ge=1)
    batch: int = Field(ge=1)
    micro_batches: int = Field(ge=1)
    stages: list[Stage] = Field(min_length=1)


class KVTransfer(_M):
    from_pipeline: int
    to_pipeline: int
    bytes_per_token: float
    link: str
    predicted_ms_per_seq: float


class Predicted(_M):
    output_tok_s: float = Field(ge=0)
    total_tok_s: float = Field(ge=0)
    ttft_ms: float = Field(ge=0)
    tpot_ms: float = Field(ge=0)
    usd_per_mtok: float = Field(ge=0)
    watts: float = Field(ge=0)


class SolverTime(_M):
    """How `--time-limit` (process CPU seconds, the capture excluded) went: the search's and the
    bound's CPU (the objective's own bound included), the rest (baselines, the plan), and which
    phases its deadline stopped before their work budgets did (none: the plan is the one these
    inputs always give)."""

    limit_cpu_s: float = Field(ge=0)
    cpu_s: float = Field(ge=0)  # all of it: search + bound + other
    search_cpu_s: float = Field(ge=0)  # templates, CP-SAT, placing replicas on devices
    bound_cpu_s: float = Field(ge=0)  # the bound's rounds, before and after the search, the caps' and the objective's bounds
    other_cpu_s: float = Field(ge=0)  # baselines, the plan's fields
    stopped_by_limit: list[str] = []  # phases the CPU deadline stopped: bound, templates, cp-sat, fill


class SolverInfo(_M):
    status: str
    objective: float
    bound: float
    upper_bound: float
    gap: float = Field(ge=0)
    seconds: float = Field(ge=0)
    bound_method: str
    templates: int = Field(0, ge=0)  # pipeline templates the search explored
    batch_ceiling: int | None = Field(default=None, ge=1)
    search: str = ""  # what was searched, in words
    notes: list[str] = []
    cpu_seconds: float | None = Field(default=None, ge=0)  # the solver's own CPU time: what a busy host does not stretch
    command_seconds: float | None = Field(default=None, ge=0)  # capture + solve + baselines, wall time
    time: SolverTime | None = None  # plans made before issue 31 have none


class ObjectiveInfo(_M):
    name: Objective
    sense: Literal["max", "min"]
    unit: str


class Workload(_M):
    input_len: int = Field(gt=0)
    output_len: int = Field(gt=0)
    max_num_seqs: int | None = Field(default=None, gt=0)  # the cap on sequences in flight per pipeline; None: memory's
    prefix_len: int = Field(default=0, ge=0)  # every prompt's first tokens are one of prefix_groups shared prefixes
    prefix_groups: int = Field(default=1, gt=0)


class Baseline(_M):
    """A simple placement the plan is compared with (partitioner/search/baselines.py), at its best batch."""

    feasible: bool
    output_tok_s: float = Field(ge=0)
    batch: int | None = Field(default=None, ge=1)
    ttft_ms: float | None = Field(default=None, ge=0)
    tpot_ms: float | None = Field(default=None, ge=0)
    stages: int | None = Field(default=None, ge=1)
    device: str | None = None  # best_homogeneous: the device type
    replicas: int | None = Field(default=None, ge=1)  # best_homogeneous: its devices in this many equal pipelines


class GivenPlacement(_M):
    """`hetc plan --placement`: the placement the user gave, recorded beside the predictions."""

    given: str
    batch: int | None = Field(default=None, ge=1)


class Drafter(_M):
    """A draft model's placement: its own stages (usually one), on devices of their own or on a target
    stage's devices (then `Stage.devices` repeat that stage's, and both share its memory)."""

    model: ModelInfo
    units: list[PlanUnit] = []
    stages: list[Stage] = Field(min_length=1)
    predicted_ms_per_token: float = Field(ge=0)  # one draft decode step at the plan's batch
    pipeline: int = Field(0, ge=0)  # the pipeline it drafts for: each of its replicas runs one, on devices offset as the replica's


class Speculation(_M):
    """How the plan speculates (hetc/speculation.py): K proposals per round, verified in one target step
    of K+1 positions; α, and where it came from, recorded so a reader can judge the predictions."""

    method: SpeculationMethod
    num_speculative_tokens: int = Field(ge=1, le=MAX_SPECULATIVE_TOKENS)
    acceptance: float = Field(ge=0, le=1)
    acceptance_source: AcceptanceSource
    acceptance_from: str = ""  # the flag or the metrics file α was read from
    expected_tokens_per_round: float = Field(ge=1)
    proposal_rate: float = Field(1.0, gt=0, le=1)  # rounds over decode steps (n-gram lookup proposes where it finds a match)
    exchange_ms: float = Field(0, ge=0)  # per round: K token ids to the verifier, the accepted count back
    drafter: Drafter | None = None
    drafters: list[Drafter] = []  # the drafters of further pipelines (a plan's replicas placed on other devices), one each

    @model_validator(mode="after")
    def _check(self) -> "Speculation":
        if (self.method is SpeculationMethod.DRAFT) != (self.drafter is not None):
            raise ValueError("drafter: a draft-model plan places its drafter; n-gram lookup has none")
        if self.drafters and self.drafter is None:
            raise ValueError("drafters: further drafters need the first (`drafter`)")
        seen = [d.pipeline for d in ([self.drafter] if self.drafter else []) + self.drafters]
        if len(set(seen)) != len(seen):
            raise ValueError(f"drafters: pipelines {seen} — one drafter per pipeline")
        want = expected_tokens_per_round(self.acceptance, self.num_speculative_tokens)
        if abs(self.expected_tokens_per_round - want) > 1e-6 * want:
            raise ValueError(f"expected_tokens_per_round: {self.expected_tokens_per_round} is not (1 − α^(K+1)) / (1 − α) = {want}")
        return self


class LayoutOption(_M):
    """One expert layout the planner solved: its plan's figure and bound in the objective's unit."""

    layout: ExpertLayout
    objective: float | None  # None: no plan of this layout fits (`note` says why)
    bound: float | None = None  # throughput: its own bound (the plan's is the largest)
    chosen: bool = False
    note: str = ""


class Disaggregated(_M):
    """Attention on one node, the MoE layers on another (partitioner/search/split_experts.py): its
    prediction at its best batch, each side's and the network's busy ms per round, and what the
    plan's pipelines on those two nodes alone give. An evaluated alternative: not placed."""

    attention_node: str
    experts_node: str
    batch: int = Field(ge=1)
    output_tok_s: float = Field(ge=0)
    attention_ms: float = Field(ge=0)
    experts_ms: float = Field(ge=0)
    network_ms: float = Field(ge=0)
    plan_tok_s: float = Field(ge=0)


class Experts(_M):
    """How the plan's tensor-parallel groups run the MoE layers (hetc/experts.py): one layout for every
    stage of tp > 1, the imbalance its expert-parallel prices assume and where that figure came from,
    and every layout the planner compared (the engines' own, or `--experts`)."""

    layout: ExpertLayout
    imbalance: float = Field(ge=1)
    imbalance_source: str
    dp_budget: StepBudget = StepBudget.SHARED  # a data-parallel group's step budget the figures assume (hetc/experts.py)
    options: list[LayoutOption] = []
    disaggregated: list[Disaggregated] = []  # attention and experts on different nodes, best first (throughput plans)


class Plan(_M):
    schema_: Literal["hetc.plan/1"] = Field(alias="schema")
    hetc_version: str
    created: str
    model: ModelInfo
    cluster: ClusterSpec  # resolved: profiles and links inline, so the plan runs without the files it was made from
    workload: Workload
    objective: ObjectiveInfo
    pipelines: list[Pipeline] = Field(min_length=1)
    kv_transfer: list[KVTransfer] = []
    predicted: Predicted
    solver: SolverInfo
    baselines: dict[str, Baseline] = {}
    units: list[PlanUnit] = []  # the unit table the stages' [first, last] refer to, unit i at position i
    placement: GivenPlacement | None = None
    speculation: Speculation | None = None  # None: one token per decode step
    experts: Experts | None = None  # None: a dense model, or a plan made before layouts (experts split as tp)

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    @model_validator(mode="after")
    def _cover(self) -> "Plan":
        n = self.model.num_units
        for i, u in enumerate(self.units):
            if u.index != i:
                raise ValueError(f"units[{i}]: unit index {u.index} at position {i}; the table lists unit i at position i")
        if self.units and len(self.units) != n:
            raise ValueError(f"units: {len(self.units)} units listed, model.num_units is {n}")
        for i, p in enumerate(self.pipelines):
            nxt = 0
            for s in p.stages:
                if s.units[0] != nxt:
                    raise ValueError(f"pipelines[{i}].stages: pipeline {p.id}'s stage starts at unit {s.units[0]}, expected {nxt}")
                nxt = s.units[1] + 1
            if nxt != n:
                raise ValueError(f"pipelines[{i}].stages: pipeline {p.id}'s stages end at unit {nxt - 1}, the model has {n} units")
        return self

    def to_json(self) -> str:
        return json.dumps(self.model_dump(by_alias=True, mode="json"), indent=2)


def save_plan(plan: Plan, path: str | Path) -> None:
    """Write plan.json atomically: a crash leaves the old file or the new one, never a truncated one.

    Args:
        plan: the plan to write.
        path: where; its directory is created when missing.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(plan.to_json() + "\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)  # atomic on POSIX and Windows within one filesystem
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def load_plan(path: str | Path) -> Plan:
    """Read and validate a plan.json; BadInput names the problem."""
    path = Path(path)
    try:
        doc = json.loads(path.read_text())
    except FileNotFoundError:
        raise BadInput("file not found.", file=str(path), fix="check the path, or make one with `hetc plan`.") from None
    except json.JSONDecodeError as e:
        raise BadInput(f"not valid JSON (line {e.lineno}, column {e.colno}: {e.msg}).", file=str(path), fix="regenerate it with `hetc plan`.") from None
    if not isinstance(doc, dict) or doc.get("schema") != SCHEMA:
        got = doc.get("schema") if isinstance(doc, dict) else None
        raise BadInput(
            f"schema is {got!r}, this hetc reads {SCHEMA!r}.", file=str(path), field="schema", fix="regenerate the plan with this version of `hetc plan`."
        )
    try:
        return Plan.model_validate(doc)
    except ValidationError as e:
        err = e.errors()[0]
        loc = ".".join(str(p) for p in err["loc"])
        msg = err["msg"].removeprefix("Value error, ")
        if not loc and ": " in msg:  # a cross-field check names its field first
            loc, msg = msg.split(": ", 1)
        raise BadInput(f"{msg}.", file=str(path), field=loc or None, fix="regenerate it with `hetc plan`; plans are not meant to be edited by hand.") from None
