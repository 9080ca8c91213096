"""Pipeline templates: chains of stage slots that the solver may replicate.

A template names device types and tp degrees, not devices; `allocate` later gives each
replica real devices. Templates come from three places:
- homogeneous: a chains of a groups of one kind (one type, one tp degree);
- even mixes: every device (or tensor-parallel group of one degree) of a subset of types split evenly
  over r replicas;
- the pipelines of the bound's optimum (cell_bound.py, colgen.py), and with a floor on cost or
  energy past the cell bound every mix of two of their kinds in any counts (`uneven`);
- on tiny clusters, every ordered chain of devices (so small instances are solved exactly).
"""

from __future__ import annotations

import itertools
from typing import Any
from collections import Counter
from dataclasses import dataclass, replace

from hetc.partitioner.bounds.cell_bound import Pipeline
from hetc.partitioner.estimate.split import Slot
from hetc.partitioner.estimate.tables import Kind, type_key
from hetc.scheduling import Phase

__all__ = ["Template", "fits", "generate", "usage"]

SMALL = 4  # clusters with at most this many devices get every ordered chain as a template
MIXED_GROUP_TYPES = 3  # even mixes of tensor-parallel groups span at most this many device types


@dataclass(frozen=True, slots=True)
class Template:
    label: str
    chain: tuple[Slot, ...]
    phase: Phase = Phase.BOTH  # or a disaggregated pool: "prefill" / "decode"
    batches: tuple[int, ...] = ()  # where the cell bound found chains of these kinds best (tried besides the search's)
    early: bool = False  # a mix of kinds the bound's optimum runs: tried right after its pipelines

    @property
    def key(self) -> tuple:
        """What tells templates apart: the phase and each stage's device type and tp degree. Labels
        name profiles only, so they repeat where one profile sits on two intra-node links (a node of
        two H200 on NVLink and single H200 nodes are two types, both "1×h200-sxm")."""
        return (self.phase, *((type_key(s.node), s.tp) for s in self.chain))


def usage(t: Template) -> Counter:
    """Stages per (device type, tp) that one replica takes."""
    return Counter((type_key(s.node), s.tp) for s in t.chain)


def _chain(parts: list[tuple[Kind, int]]) -> tuple[Slot, ...]:
    """Groups of each kind, kinds in cluster order, on their first node (allocate moves them)."""
    return tuple(Slot(k.nodes[0], k.tp) for k, a in parts for _ in range(a))


def _label(parts: list[tuple[Kind, int]]) -> str:
    return " + ".join(f"{a}×{k.name}" for k, a in parts if a)


def generate(
    kinds: list[Kind],
    pipelines: list[Pipeline],
    max_stages: int,
    phases: tuple[Phase, ...] = (Phase.BOTH,),
    uneven: list[Pipeline] | None = None,
) -> list[Template]:
    """Templates for each phase in `phases` (pools of a disaggregated plan: homogeneous
    one-device-stage chains and the cell bound's pools).

    Args:
        uneven: the pipelines the bound's optimum runs: every two kinds of `pipelines` are mixed
            in any counts up to the longest of these (mixes of two kinds they run first): a floor
            is met with whole replicas, and the cheapest fleet tops up with mixes the relaxation
            splits evenly or not at all (e.g. 1 MI300X + 4 Gaudi2 beside 3 + 3, 4 H100×TP2 +
            1 H200 beside 3 H100×TP2 + 1 H100).
    """
    out: dict[tuple, Template] = {}

    def add_chain(chain: tuple[Slot, ...], label: str | None = None, phase: Phase = Phase.BOTH, batch: int = 0, early: bool = False) -> None:
        name = label or " → ".join(s.node.profile.name for s in chain)
        made = Template(name if phase == Phase.BOTH else f"{phase}: {name}", chain, phase)
        key = made.key
        t = out.setdefault(key, made)
        if batch and batch not in t.batches:
            t = out[key] = replace(t, batches=t.batches + (batch,))
        if early and not t.early:
            out[key] = replace(t, early=True)

    def add(parts: list[tuple[Kind, int]], phase: Phase = Phase.BOTH, early: bool = False) -> None:
        parts = [(k, a) for k, a in parts if a > 0]
        if parts and sum(a for _, a in parts) <= max_stages:
            add_chain(_chain(parts), _label(parts), phase, early=early)

    for phase in (p for p in phases if p != Phase.BOTH):  # disaggregated pools, homogeneous
        for k in (k for k in kinds if k.tp == 1):
            for a in range(1, k.groups + 1):
                add([(k, a)], phase)
    if Phase.BOTH in phases:
        _pipelines(kinds, max_stages, add, add_chain)
    fitting = [p for p in pipelines if fits(p.kinds, kinds)]  # column generation's may not fit one replica
    uneven = [p for p in uneven or [] if fits(p.kinds, kinds)]
    if uneven and Phase.BOTH in phases:
        _two_kinds(kinds, fitting, uneven, min(max_stages, max(len(p.kinds) for p in uneven)), add)
    for p in fitting:  # the bound's pipelines, as chains of kinds
        add_chain(tuple(Slot(kinds[g].nodes[0], kinds[g].tp) for g in p.kinds), phase=p.phase, batch=p.batch)
    return list(out.values())


def fits(chain: tuple[int, ...], kinds: list[Kind]) -> bool:
    """Whether one replica of a chain of kinds (indices into `kinds`) fits each kind's groups and each type's devices."""
    groups, devices = Counter(chain), Counter[Any]()
    for g, k in groups.items():
        devices[kinds[g].type_key] += k * kinds[g].tp
    have = Counter[Any]()
    for kind in kinds:
        have[kind.type_key] = max(have[kind.type_key], kind.groups * kind.tp)
    return all(k <= kinds[g].groups for g, k in groups.items()) and all(d <= have[t] for t, d in devices.items())


def _two_kinds(kinds: list[Kind], pipelines: list[Pipeline], runs: list[Pipeline], longest: int, add) -> None:
    """Every chain of a groups of one kind and b of another (a, b ≥ 1, a + b ≤ `longest`), both
    kinds used by `pipelines`, that fits one replica; early where both are used by `runs`."""
    used = sorted({g for p in pipelines for g in p.kinds})
    run = {g for p in runs for g in p.kinds}
    for g, h in itertools.combinations(used, 2):
        for a in range(1, longest):
            for b in range(1, longest - a + 1):
                if fits((g,) * a + (h,) * b, kinds):
                    add([(kinds[g], a), (kinds[h], b)], early=g in run and h in run)


def _pipelines(kinds: list[Kind], max_stages: int, add, add_chain) -> None:
    """Pipelines that prefill and decode: homogeneous, even mixes of single devices and of
    tensor-parallel groups (one degree; e.g. an H200 TP8 group feeding a Gaudi 3 TP8 group, a
    data-parallel MoE pipeline the bound's own pipelines need not name), every chain on tiny clusters."""
    for k in kinds:  # homogeneous
        for a in range(1, k.groups + 1):
            add([(k, a)])
    for tp in sorted({k.tp for k in kinds}):  # even mixes of one degree: single devices over any types, groups over 2-3
        grouped = {k.type_key: k for k in kinds if k.tp == tp}
        most = len(grouped) if tp == 1 else MIXED_GROUP_TYPES
        for size in range(2, min(most, len(grouped)) + 1):
            for mix in itertools.combinations(grouped.values(), size):
                low = min(k.groups for k in mix)
                for r in (d for d in range(1, low + 1) if low % d == 0):
                    add([(k, k.groups // r) for k in mix])
    if sum(k.groups for k in kinds if k.tp == 1) <= SMALL:  # tiny clusters: every chain of devices
        pool = [k for k in kinds if k.tp == 1]
        for size in range(1, max_stages + 1):
            for combo in itertools.product(pool, repeat=size):
                use = Counter(k.type_key for k in combo)
                if all(use[k.type_key] <= k.groups for k in pool):
                    add_chain(tuple(Slot(k.nodes[0], 1) for k in combo))
