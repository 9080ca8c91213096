"""Brute force over tiny instances, shared by the solver tests: every ordered chain of slots (a
device, or a tensor-parallel group of one node's consecutive devices), every split into
contiguous unit ranges, every phase and every integer batch that fits, each predicted by the
saturation model; then the best plan of disjoint pipelines for an objective."""

from __future__ import annotations

import importlib.util
import itertools
import sys
from pathlib import Path
from types import ModuleType
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np

from hetc.cluster import Cluster, Node
from hetc.partitioner.cost_models.links import hops, transfer_time
from hetc.partitioner.bounds.aggregate import Rows
from hetc.partitioner.bounds.cells import CountSpace
from hetc.partitioner.bounds.pricing import KeyPricer, Worth
from hetc.partitioner.bounds.stage_costs import StageCosts
from hetc.partitioner.estimate.tables import type_key
from hetc.partitioner.estimate.simulate import PipelineEstimate, StagePlan, Workload, estimate_pipeline
from hetc.partitioner.capture.units import Unit
from hetc.scheduling import Phase

Devices = frozenset  # of (node name, index)
BENCH = Path(__file__).resolve().parents[1] / "benchmarks"


def bench_module(name: str) -> ModuleType:
    """benchmarks/NAME.py as a module (the generated clusters, the scenarios): the benchmarks import each
    other by name, so their folder goes on the path and the module into sys.modules."""
    if name not in sys.modules:
        sys.path.insert(0, str(BENCH))
        spec = importlib.util.spec_from_file_location(name, BENCH / f"{name}.py")
        assert spec is not None and spec.loader is not None
        mod = importlib.util.module_from_spec(spec)
        sys.modules[name] = mod  # its dataclasses look their module up
        spec.loader.exec_module(mod)
    return sys.modules[name]


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


# ---- by node counts: the same enumeration where a node's devices are interchangeable (every chain of
# (node, tensor-parallel degree) stages, not of single devices), so instances of 6 devices stay enumerable

Usage = tuple  # devices a pipeline takes per node, in cluster.nodes order


@dataclass(frozen=True, slots=True)
class Best:
    """The best pipeline found on one node usage: its tok/s, its stages ((node, tp, first, last)) and batch."""

    tok_s: float
    stages: tuple
    batch: int


def _classes(cluster: Cluster) -> list[int]:
    """Each node's class: nodes of one profile, link and count that no network pair names are
    interchangeable (a chain through one of them costs what it costs through another)."""
    paired = {name for pair in cluster.pairs for name in pair}
    keys: dict = {}
    return [keys.setdefault((type_key(n), n.count) if n.name not in paired else n.name, len(keys)) for n in cluster.nodes]


def node_chains(cluster: Cluster, tp: bool, max_len: int) -> Iterator[tuple[tuple[int, int], ...]]:
    """Every chain of (node index, tp degree) stages within each node's count, up to `max_len` stages,
    one per class of interchangeable nodes: a node is entered first only where every node of its class
    before it is already in the chain."""
    cls = _classes(cluster)
    kinds = [(i, k) for i, n in enumerate(cluster.nodes) for k in (1, 2, 4, 8) if k == 1 or (tp and n.link and k <= n.count)]

    def grow(chain: tuple, left: list[int]) -> Iterator[tuple]:
        if chain:
            yield chain
        if len(chain) == max_len:
            return
        used = {i for i, _ in chain}
        for i, k in kinds:
            first_of_class = all(j in used for j in range(i) if cls[j] == cls[i])
            if k <= left[i] and (i in used or first_of_class):
                left[i] -= k
                yield from grow((*chain, (i, k)), left)
                left[i] += k

    yield from grow((), [n.count for n in cluster.nodes])


def best_per_usage(units: list[Unit], cluster: Cluster, wl: Workload, max_num_seqs: int, *, tp: bool = True, relax_loop: bool = False) -> dict[Usage, Best]:
    """The best pipeline that prefills and decodes on each node usage: every chain, split and batch up
    to `max_num_seqs`, by the saturation model; every usage a symmetry of the nodes maps onto included.

    Args:
        relax_loop: value each pipeline without its loop term (the round its busiest stage or link
            alone sets), as the throughput bound's relaxation does.
    """
    best: dict[Usage, Best] = {}
    for chain in node_chains(cluster, tp, len(units)):
        usage = [0] * len(cluster.nodes)
        for i, k in chain:
            usage[i] += k
        for cuts in itertools.combinations(range(1, len(units)), len(chain) - 1):
            bounds = (0, *cuts, len(units))
            stages = [StagePlan(cluster.nodes[i], a, b - 1, k) for (i, k), a, b in zip(chain, bounds, bounds[1:])]
            for batch in range(1, max_num_seqs + 1):
                est = estimate_pipeline(units, stages, cluster, wl, batch)
                if est is None:  # memory: a larger batch needs more
                    break
                tok = est.output_tok_s
                if relax_loop:
                    tok = batch / max(max(e.busy_s for e in est.stages), max(e.link_s for e in est.stages))
                if tok > best.get(tuple(usage), Best(0.0, (), 0)).tok_s:
                    best[tuple(usage)] = Best(tok, tuple((i, k, s.first, s.last) for (i, k), s in zip(chain, stages)), batch)
    return _symmetric(best, _classes(cluster))


def _symmetric(best: dict[Usage, Best], cls: list[int]) -> dict[Usage, Best]:
    """`best` with every usage that permuting interchangeable nodes gives (the same pipelines on other nodes)."""
    groups = [[i for i, c in enumerate(cls) if c == k] for k in sorted(set(cls))]
    out = dict(best)
    for usage, b in best.items():
        for perms in itertools.product(*(itertools.permutations(g) for g in groups)):
            moved = list(usage)
            for g, p in zip(groups, perms):
                for src, dst in zip(g, p):
                    moved[dst] = usage[src]
            if b.tok_s > out.get(tuple(moved), Best(0.0, (), 0)).tok_s:
                out[tuple(moved)] = b
    return out


def best_fleet(per_usage: dict[Usage, Best], counts: list[int]) -> float:
    """The most total tok/s of disjoint pipelines within each node's count (an unbounded knapsack over
    usage vectors: a vector's best is a pipeline on part of it plus the best of the rest)."""
    vectors = list(itertools.product(*(range(c + 1) for c in counts)))  # lexicographic: v - u comes before v
    best: dict[Usage, float] = {}
    for v in vectors:
        val = max([best[v[:i] + (v[i] - 1,) + v[i + 1 :]] for i in range(len(v)) if v[i]] or [0.0])
        for u, b in per_usage.items():
            if all(a <= x for a, x in zip(u, v)):
                val = max(val, b.tok_s + best[tuple(x - a for a, x in zip(u, v))])
        best[v] = val
    return best[tuple(counts)]


def best_reduced_cost(pricer: KeyPricer, prices, worth: Worth, padded: bool = False, fits: bool = False) -> float:
    """The best worth(rate / R) − price over every chain of the key's class its pricer allows (first and
    last stages' types) and every cut, R its bottleneck at the key's costs (busiest stage, or a link at
    its cheapest cut). `padded`: also chains shorter than the class, paying the cheapest kind's price
    for each stage short of it (price_dp.free_dp's relaxation). `fits`: only chains that take at most
    the fleet's devices of each type."""
    costs, key, case = pricer.costs, pricer.key, pricer.case
    U, best = costs.u, float("-inf")
    for n in range(1 if padded else key.lo, min(key.hi, U) + 1):
        for ks in itertools.product(pricer.kinds.tolist(), repeat=n):
            if pricer.first is not None and not pricer.first[costs.type_of[ks[0]]]:
                continue
            if pricer.last is not None and not pricer.last[costs.type_of[ks[-1]]]:
                continue
            if fits and (np.bincount(costs.type_of[list(ks)], weights=costs.tp[list(ks)], minlength=len(costs.devices)) > costs.devices).any():
                continue
            price = sum(prices[g] for g in ks) + max(0, key.lo - n) * prices[pricer.kinds].min()
            link = max([0.0] + [case.cheapest[costs.type_of[x], costs.type_of[y]] for x, y in zip(ks, ks[1:])])
            for cuts in itertools.combinations(range(1, U), n - 1):
                bd = (0, *cuts, U)
                if any(bd[s + 1] > case.jfit[g, bd[s]] for s, g in enumerate(ks)):
                    continue
                R = max([link] + [case.P[g, bd[s + 1]] - case.P[g, bd[s]] + case.over[g] for s, g in enumerate(ks)])
                best = max(best, float(worth.of(pricer.rate / R)) - price)
    return best


def optimum_with_kv(units, cluster, wl, max_num_seqs: int, phases: tuple[Phase, ...] = tuple(Phase)) -> float:
    """The most output tok/s of disjoint pipelines and pools, each prefill pool capped at its slowest
    KV route to the decode pools taken (as the solver prices a fleet). Pools are kept apart by the
    node their KV leaves (a prefill pool's last stage) or arrives at (a decode pool's first)."""
    best: dict[tuple, tuple[float, Node]] = {}
    for o in options(units, cluster, wl, tp=False, phases=phases, max_num_seqs=max_num_seqs):
        node = o.stages[-1].node if o.phase == Phase.PREFILL else o.stages[0].node
        key = (o.devices, o.phase, node.name)
        if key not in best or o.estimate.output_tok_s > best[key][0]:
            best[key] = (o.estimate.output_tok_s, node)
    nbytes = wl.input_len * (wl.kv_bytes(units, wl.input_len) / wl.input_len)
    items = [(devs, phase, tok, node) for (devs, phase, _), (tok, node) in best.items()]

    def value(pick: list) -> float:
        both = sum(tok for _, p, tok, _ in pick if p == Phase.BOTH)
        decode = [(tok, node) for _, p, tok, node in pick if p == Phase.DECODE]
        feed = sum(
            min(tok, wl.output_len / max(transfer_time(nbytes, hops(cluster, node, d)) for _, d in decode))
            for _, p, tok, node in pick
            if p == Phase.PREFILL and decode
        )
        return both + min(sum(t for t, _ in decode), feed)

    def search(i: int, taken: frozenset, pick: list) -> float:
        top = value(pick)
        for j in range(i, len(items)):
            if not items[j][0] & taken:
                top = max(top, search(j + 1, taken | items[j][0], pick + [items[j]]))
        return top

    return search(0, frozenset(), [])
