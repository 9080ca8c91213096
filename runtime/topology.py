"""A plan's structure as processes: lanes (pipeline replicas), stages, devices, ranks.

Rank 0 is the frontend (HTTP server, tokenizer, schedulers). Workers take ranks 1.. in
plan order — pipeline, replica, stage, then device within the stage — so a worker finds
its rank from its device name and the plan alone, whatever order processes start in.
Replica j of a stage uses devices first + j·tp of the stage's node (the planner's rule).
A stage with tp = k is k workers; the first (its leader) talks to the neighbouring
stages, the group shares the work through collectives.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from hetc.batching import looks_ahead
from hetc.errors import BadInput
from hetc.plan import Plan
from hetc.scheduling import Phase

__all__ = ["Lane", "StageSpec", "WorkerSpec", "attention_owners", "build_topology", "hosts_of_nodes", "tp_groups", "worker_of_device", "workers"]


@dataclass(frozen=True, slots=True)
class StageSpec:
    lane: int
    index: int  # position in the lane's pipeline
    n_stages: int
    devices: tuple[str, ...]  # plan device names, NODE:INDEX; devices[0] leads
    ranks: tuple[int, ...]  # one per device
    prev_rank: int  # the previous stage's leader; 0: the frontend
    next_rank: int  # the next stage's leader; 0: the frontend
    backend: str
    profile: str
    node: str
    units: tuple[int, int]
    layers: tuple[int, int]
    kv_budget: float  # bytes per device (plan memory_bytes.kv)
    weight_bytes: float  # per device (plan memory_bytes.weights)
    predicted_ms: tuple[float, float]  # (prefill, decode) step at the plan's operating point

    @property
    def tp(self) -> int:
        return len(self.devices)

    @property
    def device(self) -> str:
        return self.devices[0]

    @property
    def rank(self) -> int:
        return self.ranks[0]


@dataclass(frozen=True, slots=True)
class WorkerSpec:
    """One worker process: a device of a stage."""

    stage: StageSpec
    tp_rank: int

    @property
    def device(self) -> str:
        return self.stage.devices[self.tp_rank]

    @property
    def rank(self) -> int:
        return self.stage.ranks[self.tp_rank]

    @property
    def device_index(self) -> int:
        return int(self.device.rsplit(":", 1)[1])


@dataclass(frozen=True, slots=True)
class Lane:
    id: int
    pipeline: int
    replica: int
    batch: int  # the plan's sequences in flight for this pipeline
    stages: tuple[StageSpec, ...]
    phase: Phase = Phase.BOTH
    targets: tuple[int, ...] = ()  # a prefill lane: the decode lanes its KV may go to

    @property
    def lookahead(self) -> bool:
        """Its scheduler sends decode steps before their input token is back (hetc.batching.looks_ahead)."""
        return looks_ahead(self.phase)


def attention_owners(lane: Lane, kinds: list[tuple[str, int]]) -> dict[int, int]:
    """Model layer → rank of the lane's worker holding that layer's attention (and its KV).

    Args:
        kinds: the unit table as (kind, layer) per unit.
    """
    out = {}
    for s in lane.stages:
        for kind, layer in kinds[s.units[0] : s.units[1] + 1]:
            if kind == "attention":
                out[layer] = s.rank
    return out


def build_topology(plan: Plan, file: str = "plan.json") -> list[Lane]:
    """Lanes with ranks. Raises BadInput for plan features this runtime does not run yet.

    In a disaggregated plan a prefill lane sends each prompt's KV to a decode lane of a
    pipeline its `kv_transfer` entries name (any decode lane when the plan names none).
    """
    phases = {p.phase for p in plan.pipelines}
    if phases & {Phase.PREFILL, Phase.DECODE}:
        if not {Phase.PREFILL, Phase.DECODE} <= phases:
            raise BadInput(
                f"the plan has {' and '.join(sorted(phases))} pipelines; a disaggregated plan needs both a prefill and a decode pool.",
                file=file,
                field="pipelines",
                fix="regenerate the plan with `hetc plan`.",
            )
        for p in plan.pipelines:
            if p.phase != Phase.BOTH and any(s.tp != 1 for s in p.stages):
                raise BadInput(
                    f"pipeline {p.id} ({p.phase} pool) has a tensor-parallel stage; this version of `hetc serve` moves KV between pools of tp=1 stages only.",
                    file=file,
                    field=f"pipelines.{p.id}",
                    fix="plan with `--tp 1`.",
                )
    lanes: list[Any]
    seen: dict[Any, Any]
    lanes, rank, seen = [], 1, {}
    for p in plan.pipelines:
        for r in range(p.replicas):
            n = len(p.stages)
            first_ranks, dev_lists = [], []
            for i, s in enumerate(p.stages):
                node, first = s.devices[0].rsplit(":", 1)
                devs = tuple(f"{node}:{int(first) + r * s.tp + j}" for j in range(s.tp))
                for d in devs:
                    if d in seen:
                        raise BadInput(
                            f"device {d} is used by two stages ({seen[d]} and pipeline {p.id} replica {r} stage {i}).",
                            file=file,
                            field="pipelines",
                            fix="regenerate the plan with `hetc plan`.",
                        )
                    seen[d] = f"pipeline {p.id} replica {r} stage {i}"
                dev_lists.append(devs)
                first_ranks.append(rank)
                rank += s.tp
            specs = []
            for i, s in enumerate(p.stages):
                specs.append(
                    StageSpec(
                        lane=len(lanes),
                        index=i,
                        n_stages=n,
                        devices=dev_lists[i],
                        ranks=tuple(range(first_ranks[i], first_ranks[i] + s.tp)),
                        prev_rank=0 if i == 0 else first_ranks[i - 1],
                        next_rank=0 if i == n - 1 else first_ranks[i + 1],
                        backend=s.backend,
                        profile=s.profile,
                        node=s.node,
                        units=tuple(s.units),  # type: ignore[arg-type]  # [first, last] pairs
                        layers=tuple(s.layers),  # type: ignore[arg-type]
                        kv_budget=s.memory_bytes.kv,
                        weight_bytes=s.memory_bytes.weights,
                        predicted_ms=(s.predicted_ms.prefill, s.predicted_ms.decode),
                    )
                )
            lanes.append(Lane(len(lanes), p.id, r, p.batch, tuple(specs), p.phase))
    decode = [l for l in lanes if l.phase == Phase.DECODE]
    out = []
    for l in lanes:
        if l.phase == Phase.PREFILL:
            named = {t.to_pipeline for t in plan.kv_transfer if t.from_pipeline == l.pipeline}
            targets = tuple(d.id for d in decode if not named or d.pipeline in named)
            if not targets:
                raise BadInput(
                    f"pipeline {l.pipeline} (prefill) sends its KV to no decode pipeline of the plan.",
                    file=file,
                    field="kv_transfer",
                    fix="regenerate the plan with `hetc plan`.",
                )
            l = Lane(l.id, l.pipeline, l.replica, l.batch, l.stages, l.phase, targets)
        out.append(l)
    return out


def hosts_of_nodes(plan: Plan, nnodes: int, file: str = "plan.json") -> dict[str, int]:
    """Which host (node rank) runs each plan node: the cluster's nodes in order, in nnodes
    contiguous groups as even as possible (one host → everything)."""
    names = [n.name for n in plan.cluster.nodes]
    used = {s.node for p in plan.pipelines for s in p.stages}
    names += sorted(used - set(names))
    if nnodes > len(names):
        raise BadInput(
            f"--nnodes {nnodes} but the plan's cluster has {len(names)} node(s); each host runs at least one plan node.",
            file=file,
            field="cluster.nodes",
            fix=f"use --nnodes ≤ {len(names)}.",
        )
    return {name: i * nnodes // len(names) for i, name in enumerate(names)}


def workers(lanes: list[Lane]) -> list[WorkerSpec]:
    """Every worker process, in rank order."""
    return [WorkerSpec(s, j) for lane in lanes for s in lane.stages for j in range(s.tp)]


def worker_of_device(lanes: list[Lane], device: str) -> WorkerSpec:
    for w in workers(lanes):
        if w.device == device:
            return w
    raise KeyError(f"device {device} runs no stage of this plan")


def tp_groups(lanes: list[Lane]) -> list[tuple[int, ...]]:
    """Ranks of each tensor-parallel group, in the order every process creates them."""
    return [s.ranks for lane in lanes for s in lane.stages if s.tp > 1]
