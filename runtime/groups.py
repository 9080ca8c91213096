"""Process groups per pipeline unit, so a unit can be re-formed alone after a worker dies.

A unit is one lane (a pipeline replica, or a disaggregated plan's prefill or decode pool):
each has its own gloo group — the frontend (group rank 0) and the lane's workers in rank
order — formed under the job's store at the prefix `unit<U>/gen<G>/`. A restart forms
generation G+1 with fresh worker processes; the old generation's keys are never reused, and
the other units' groups are untouched. A tensor-parallel stage's members form their own
group under the unit's prefix; pools move KV over links of their own (kvlinks.py), so a
dead decode pool does not take its prefill pools down.

Every group is gloo on host tensors, with one exception: a tensor-parallel stage of cuda or rocm
devices (one vendor's GPUs of one host) also forms an NCCL group (RCCL under torch's ROCm build,
the same API) for its all-reduces and all-gathers on device tensors; its gloo group still carries
the messages its leader broadcasts. Stage-to-stage sends stay gloo. Untested on several GPUs: the
lent machines have one.
"""

from __future__ import annotations

import datetime as dt
from enum import StrEnum

from hetc.runtime.topology import Lane, StageSpec
from hetc.runtime.transport import GlooTransport

__all__ = ["FORM_TIMEOUT_S", "Collectives", "compute_collectives", "form_group", "gloo_group", "group_ranks", "stage_groups", "unit_of_lane", "units"]

# the least time a group's members are given to join once every one of them loaded (loading
# itself has no deadline while they live: loading.py); the job's store waits this long for a key
FORM_TIMEOUT_S = 120.0


def units(lanes: list[Lane]) -> list[tuple[int, ...]]:
    """Lane ids of each unit, in lane order: every lane is a unit of its own."""
    return [(l.id,) for l in lanes]


def unit_of_lane(lanes: list[Lane]) -> dict[int, int]:
    """Lane id → its unit's index in `units(lanes)`."""
    return {lane: u for u, ids in enumerate(units(lanes)) for lane in ids}


def group_ranks(lanes: list[Lane], unit: int) -> list[int]:
    """Job-wide rank of each group rank of `unit`'s group: the frontend (0), then its workers."""
    ids = set(units(lanes)[unit])
    return [0, *sorted(r for l in lanes if l.id in ids for s in l.stages for r in s.ranks)]


def _prefix(unit: int, generation: int) -> str:
    return f"unit{unit}/gen{generation}/"


def _gloo(store, rank: int, size: int, timeout_s: float, bind: str | None):
    """A gloo group whose sockets listen on `bind` (an address of this host; None: gloo's
    default, the host name's address or GLOO_SOCKET_IFNAME)."""
    import torch.distributed as dist

    timeout = dt.timedelta(seconds=timeout_s)
    if bind is None:
        return dist.ProcessGroupGloo(store, rank, size, timeout)
    opts = dist.ProcessGroupGloo._Options()  # type: ignore[attr-defined]  # private, not in the stubs
    opts._devices = [dist.ProcessGroupGloo.create_device(hostname=bind)]
    opts._timeout = timeout
    return dist.ProcessGroupGloo(store, rank, size, opts)


def form_group(store, lanes: list[Lane], unit: int, generation: int, rank: int, timeout_s: float, bind: str | None = None) -> GlooTransport:
    """Join `unit`'s group of `generation` as job-wide `rank`; returns once every member joined.

    Args:
        store: the job's store (rendezvous.open_store).
        lanes: the plan's lanes (topology).
        unit: index in `units(lanes)`.
        generation: 1 at start, +1 per restart of the unit.
        rank: this process's job-wide rank (0: the frontend).
        timeout_s: every later send's and receive's limit; the members get at least
            FORM_TIMEOUT_S to join.
        bind: the address this process's gloo sockets listen on (None: gloo's default).
    """
    return gloo_group(store, _prefix(unit, generation), group_ranks(lanes, unit), rank, timeout_s, bind)


def gloo_group(store, prefix: str, ranks: list[int], rank: int, timeout_s: float, bind: str | None = None) -> GlooTransport:
    """Join the group of job-wide `ranks` under the store's `prefix` as `rank`; returns once every
    member joined (they get at least FORM_TIMEOUT_S), as a transport whose sends and receives
    wait at most `timeout_s`."""
    import torch.distributed as dist

    # a connection of its own: a formation waits on the store, and other threads use it meanwhile
    pg = _gloo(dist.PrefixStore(prefix, store.clone()), ranks.index(rank), len(ranks), max(timeout_s, FORM_TIMEOUT_S), bind)
    return GlooTransport(pg, ranks, timeout_s)


class Collectives(StrEnum):
    GLOO = "gloo"  # host tensors: across vendors and hosts, and CPU, Gaudi and emulated stages
    NCCL = "nccl"  # device tensors of one vendor's GPUs of one host (RCCL on ROCm builds: the same name)


def compute_collectives(stage: StageSpec, emulate: bool) -> Collectives:
    """What a tensor-parallel stage's collectives on activations run on (its devices are one kind,
    on one host, by the plan's contract)."""
    gpu = stage.backend in ("cuda", "rocm") and not emulate
    return Collectives.NCCL if stage.tp > 1 and gpu else Collectives.GLOO


def stage_groups(store, unit: int, generation: int, stage: StageSpec, tp_rank: int, timeout_s: float, bind: str | None = None, emulate: bool = False) -> tuple:
    """A tensor-parallel stage's own groups (its members, leader first): (control, compute). The
    control group (gloo) carries the leader's broadcast messages; the compute group runs the
    stage's all-reduces and all-gathers — the same gloo group, or NCCL (`compute_collectives`).
    Collectives wait up to max(timeout_s, FORM_TIMEOUT_S): a member that died fails them at once;
    one that hangs is caught by the pipeline's receives (timeout_s)."""
    import torch.distributed as dist

    prefix = f"{_prefix(unit, generation)}tp{stage.rank}/"
    wait = max(timeout_s, FORM_TIMEOUT_S)
    control = _gloo(dist.PrefixStore(prefix, store.clone()), tp_rank, stage.tp, wait, bind)
    if compute_collectives(stage, emulate) is Collectives.GLOO:
        return control, control
    return control, _nccl(dist.PrefixStore(f"{prefix}nccl/", store.clone()), tp_rank, stage.tp, wait)


def _nccl(store, rank: int, size: int, timeout_s: float):
    """An NCCL group on the current CUDA device (the worker sets it to its own)."""
    import torch.distributed as dist

    opts = dist.ProcessGroupNCCL.Options()
    opts._timeout = dt.timedelta(seconds=timeout_s)
    return dist.ProcessGroupNCCL(store, rank, size, opts)
