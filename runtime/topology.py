"""A plan's structure as processes: lanes (pipeline replicas), stages, devices, ranks.

Rank 0 is the frontend (HTTP server, tokenizer, schedulers). Workers take ranks 1.. in
plan order — pipeline, replica, stage, then device within the stage — so a worker finds
its rank from its device name and the plan alone, whatever order processes start in.
Replica j of a stage uses devices first + j·tp of the stage's node (the planner's rule).
"""

from __future__ import annotations

from dataclasses import dataclass

from hetc.errors import BadInput
from hetc.plan import Plan

__all__ = ["Lane", "StageSpec", "build_topology", "kv_blocks", "stage_of_device"]


@dataclass(frozen=True, slots=True)
class StageSpec:
    lane: int
    index: int  # position in the lane's pipeline
    n_stages: int
    device: str  # plan device name, NODE:INDEX
    rank: int
    prev_rank: int  # 0: the frontend
    next_rank: int  # 0: the frontend
    backend: str
    profile: str
    node: str
    units: tuple[int, int]
    layers: tuple[int, int]
    kv_budget: float  # bytes (plan memory_bytes.kv)
    weight_bytes: float  # plan memory_bytes.weights
    predicted_ms: tuple[float, float]  # (prefill, decode) step at the plan's operating point

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


def build_topology(plan: Plan, file: str = "plan.json") -> list[Lane]:
    """Lanes with ranks. Raises BadInput for plan features this runtime does not run yet."""
    if plan.kv_transfer or any(p.phase != "both" for p in plan.pipelines):
        raise BadInput("the plan is disaggregated (separate prefill and decode pools); this version of `hetc serve` "
                       "runs pipelines with phase 'both' only.", file=file, field="pipelines",
                       fix="plan with `--disaggregate off`.")
    for p in plan.pipelines:
        for i, s in enumerate(p.stages):
            if s.tp != 1:
                raise BadInput(f"pipeline {p.id} stage {i} is tensor-parallel (tp={s.tp}); this version of "
                               "`hetc serve` runs tp=1 stages only.", file=file, field=f"pipelines.{p.id}.stages.{i}.tp",
                               fix="plan with `--tp 1`.")
    lanes, rank, seen = [], 1, {}
    for p in plan.pipelines:
        for r in range(p.replicas):
            n = len(p.stages)
            specs = []
            for i, s in enumerate(p.stages):
                node, first = s.devices[0].rsplit(":", 1)
                device = f"{node}:{int(first) + r * s.tp}"
                if device in seen:
                    raise BadInput(f"device {device} is used by two stages ({seen[device]} and pipeline {p.id} "
                                   f"replica {r} stage {i}).", file=file, field="pipelines",
                                   fix="regenerate the plan with `hetc plan`.")
                seen[device] = f"pipeline {p.id} replica {r} stage {i}"
                specs.append(dict(lane=len(lanes), index=i, n_stages=n, device=device, rank=rank + i,
                                  prev_rank=0 if i == 0 else rank + i - 1, next_rank=0 if i == n - 1 else rank + i + 1,
                                  backend=s.backend, profile=s.profile, node=s.node, units=tuple(s.units),
                                  layers=tuple(s.layers), kv_budget=s.memory_bytes.kv, weight_bytes=s.memory_bytes.weights,
                                  predicted_ms=(s.predicted_ms.prefill, s.predicted_ms.decode)))
            rank += n
            lanes.append(Lane(len(lanes), p.id, r, p.batch, tuple(StageSpec(**d) for d in specs)))
    return lanes


def stage_of_device(lanes: list[Lane], device: str) -> StageSpec:
    for lane in lanes:
        for s in lane.stages:
            if s.device == device:
                return s
    raise KeyError(f"device {device} runs no stage of this plan")


def kv_blocks(lane: Lane, attention_layers_of: dict[int, int], bytes_per_token_per_layer: int,
              block_size: int) -> tuple[int, list[int]]:
    """KV blocks the lane's block manager hands out, and each stage's own capacity.

    Every stage holding attention keeps one block per sequence block, so the lane gets
    the smallest stage capacity; stages without attention hold no KV.

    Args:
        attention_layers_of: stage index → attention layers it holds.
        bytes_per_token_per_layer: K+V bytes of one token in one layer, as stored.
    """
    caps = []
    for s in lane.stages:
        n = attention_layers_of.get(s.index, 0)
        caps.append(int(s.kv_budget // (block_size * n * bytes_per_token_per_layer)) if n else -1)
    real = [c for c in caps if c >= 0]
    return (min(real) if real else 0), caps
