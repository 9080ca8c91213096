"""Brute force over tiny instances, shared by the solver tests: every ordered chain of slots (a
device, or a tensor-parallel group of one node's consecutive devices), every split into
contiguous unit ranges, every phase and every integer batch that fits, each predicted by the
saturation model; then the best plan of disjoint pipelines for an objective."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from hetc.cluster import Cluster
from hetc.partitioner.bounds.aggregate import Rows
from hetc.partitioner.bounds.cells import CountSpace
from hetc.partitioner.bounds.stage_costs import StageCosts
from hetc.partitioner.estimate.tables import type_key
from hetc.partitioner.estimate.simulate import PipelineEstimate, StagePlan, Workload, estimate_pipeline
from hetc.partitioner.capture.units import Unit
from hetc.scheduling import Phase

Devices = frozenset  # of (node name, index)


@dataclass(frozen=True, slots=True)
class Option:
    """One pipeline: its devices, phase, batch and prediction."""

    devices: Devices
    phase: Phase
    estimate: PipelineEstimate
    stages: tuple[StagePlan, ...]

    def watts(self) -> float:
        return sum(s.node.profile.power * s.tp for s in self.stages)

    def usd_h(self, cluster: Cluster) -> float:
        return sum(cluster.price(s.node.profile) * s.tp for s in self.stages)


def _slots(cluster: Cluster, tp: bool) -> list[tuple]:
    """Single devices, and with `tp` each aligned group of 2, 4, 8 of a node with a link."""
    out = [((n, i),) for n in cluster.nodes for i in range(n.count)]
    if tp:
        out += [tuple((n, i) for i in range(first, first + k)) for n in cluster.nodes if n.link for k in (2, 4, 8) for first in range(0, n.count - k + 1, k)]
    return out


def options(
    units: list[Unit], cluster: Cluster, wl: Workload, *, tp: bool = False, phases: tuple[Phase, ...] = (Phase.BOTH,), max_num_seqs: int | None = None
) -> Iterator[Option]:
    """Every pipeline: chains of disjoint slots, splits, phases (pools: one device a stage) and
    batches (each integer up to what memory admits and `max_num_seqs`)."""
    slots = _slots(cluster, tp)
    for size in range(1, len(slots) + 1):
        for chain in itertools.permutations(slots, size):
            used = [(d[0].name, d[1]) for s in chain for d in s]
            if len(set(used)) != len(used):
                continue
            for cuts in itertools.combinations(range(1, len(units)), size - 1):
                bounds = (0, *cuts, len(units))
                stages = tuple(StagePlan(s[0][0], a, b - 1, len(s)) for s, a, b in zip(chain, bounds, bounds[1:]))
                for phase in phases:
                    if phase != Phase.BOTH and any(len(s) > 1 for s in chain):
                        continue
                    batch = 1
                    while max_num_seqs is None or batch <= max_num_seqs:
                        if phase == Phase.PREFILL and max_num_seqs and size > max_num_seqs:
                            break
                        est = estimate_pipeline(units, list(stages), cluster, wl, batch, phase)
                        if est is None:
                            break
                        yield Option(frozenset(used), phase, est, stages)
                        if phase == Phase.PREFILL:  # one prompt per stage: no other batch
                            break
                        batch += 1


def best_per_set(opts: Iterator[Option], value: Callable[[Option], float] = lambda o: o.estimate.output_tok_s) -> dict[tuple[Devices, Phase], Option]:
    """The option of largest `value` for each device set and phase."""
    best: dict[tuple[Devices, Phase], Option] = {}
    for o in opts:
        cur = best.get((o.devices, o.phase))
        if cur is None or value(o) > value(cur):
            best[(o.devices, o.phase)] = o
    return best


def packings(best: dict[tuple[Devices, Phase], Option], devices: list) -> dict[Devices, float]:
    """{device set S: the most output tok/s of disjoint pipelines that prefill and decode inside S}."""
    tok = {s: o.estimate.output_tok_s for (s, p), o in best.items() if p == Phase.BOTH}
    out: dict[Devices, float] = {frozenset(): 0.0}
    for size in range(1, len(devices) + 1):
        for s in map(frozenset, itertools.combinations(devices, size)):
            first = min(s)
            rest = s - {first}
            val = out[rest]  # the first device idle
            for k in range(len(rest) + 1):
                for others in itertools.combinations(sorted(rest), k):
                    chain = frozenset((first, *others))
                    val = max(val, tok.get(chain, 0.0) + out[s - chain])
            out[s] = val
    return out


def best_with_pools(best: dict[tuple[Devices, Phase], Option]) -> float:
    """The most Σ both + min(Σ decode, Σ prefill feed) over sets of disjoint pipelines."""
    items = [(s, p, o.estimate.output_tok_s) for (s, p), o in best.items()]

    def search(i: int, taken: frozenset, sums: tuple) -> float:
        val = sums[0] + min(sums[1], sums[2])
        for j in range(i, len(items)):
            devs, phase, tok = items[j]
            if not devs & taken:
                add = {Phase.BOTH: (tok, 0, 0), Phase.DECODE: (0, tok, 0), Phase.PREFILL: (0, 0, tok)}[phase]
                val = max(val, search(j + 1, taken | devs, tuple(a + b for a, b in zip(sums, add))))
        return val

    return search(0, frozenset(), (0.0, 0.0, 0.0))


def all_devices(cluster: Cluster) -> list:
    return [(n.name, i) for n in cluster.nodes for i in range(n.count)]


def rows_bound_every_option(units: list[Unit], cluster: Cluster, wl: Workload, costs: StageCosts, space: CountSpace, phase: Phase, *rows: Rows) -> int:
    """Checks every brute-forced pipeline of `phase` of at most 4 stages and 40 sequences: each key of
    each of `rows` covering its length and batch is at least its tok/s on the cell of its devices.
    Returns how many pipelines it checked."""
    node_type = {n.name: costs.types.index(type_key(n)) for n in cluster.nodes}
    checked = 0
    for o in options(units, cluster, wl, tp=True, phases=(phase,), max_num_seqs=40):
        if len(o.stages) > 4:
            continue
        counts = [0] * len(costs.types)
        for name, _ in o.devices:
            counts[node_type[name]] += 1
        c = int(sum(n * s for n, s in zip(counts, space.strides)))
        n, b = len(o.stages), o.estimate.batch
        for r in rows:
            covering = [ki for ki, k in enumerate(r.keys) if k.lo <= n <= k.hi and k.batch <= b <= k.top]
            assert covering, (n, b)
            for ki in covering:
                assert r.V[ki, c] >= o.estimate.output_tok_s * (1 - 1e-9), (r.keys[ki], counts, b)
        checked += 1
    return checked
