"""Prefill pools' KV on its way to decode pools: the routes of a fleet, and the output tok/s each
pool's KV links let it feed (the solver caps pools at their slowest route)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from hetc.cluster import Cluster, Node
from hetc.partitioner.capture.units import Unit
from hetc.partitioner.cost_models.links import hops, path_name, transfer_time
from hetc.partitioner.estimate.simulate import Workload
from hetc.partitioner.estimate.tables import type_key
from hetc.partitioner.search.mix import Option
from hetc.scheduling import Phase

if TYPE_CHECKING:
    from hetc.partitioner.search.solver import Candidate

__all__ = ["KVRoute", "cap_feeds", "feed_caps", "kv_transfers"]


@dataclass(frozen=True, slots=True)
class KVRoute:
    """A prefill pool's KV on its way to a decode pool."""

    source: int  # candidate index of the prefill pool
    target: int  # candidate index of a decode pool
    bytes_per_token: float
    link: str
    seconds_per_seq: float  # one prompt's KV over the link


def kv_transfers(units: list[Unit], cands: list[Candidate], cluster: Cluster, wl: Workload) -> list[KVRoute]:
    """A route from each prefill pool to each decode pool: a prompt's KV crosses the path from
    the pool's last stage's node to the decode pool's first node."""
    per_token = wl.kv_bytes(units, wl.input_len) / wl.input_len  # a sliding layer sends its window's
    out = []
    for i, c in enumerate(cands):
        for j, d in enumerate(cands):
            if c.phase == Phase.PREFILL and d.phase == Phase.DECODE:
                path = hops(cluster, c.stages[-1].node, d.stages[0].node)
                out.append(KVRoute(i, j, per_token, path_name(path), transfer_time(wl.input_len * per_token, path)))
    return out


def cap_feeds(units: list[Unit], opts: list[Option], cluster: Cluster, wl: Workload) -> None:
    """Set each prefill option's `feed`: the output tok/s one replica's KV can carry over the slowest
    route from a node of its last stage's type to a node of a type decode options start on (as
    `feed_caps` counts the chosen pools' routes), so that CP-SAT need not choose pools at rates their
    KV links then cap (gen7 of the generated clusters: pools chosen at 360k tok/s gave 308k). Slower
    than the allocation's routes may be: the solver keeps the better of the fleets with and without it."""
    per_token = wl.kv_bytes(units, wl.input_len) / wl.input_len
    by_type: dict[tuple, list[Node]] = {}
    for n in cluster.nodes:
        by_type.setdefault(type_key(n), []).append(n)
    targets = [n for t in {type_key(o.found.stages[0].node) for o in opts if o.template.phase == Phase.DECODE} for n in by_type[t]]
    slowest: dict[tuple, float] = {}
    for o in opts:
        if o.template.phase != Phase.PREFILL or not targets:
            continue
        t = type_key(o.found.stages[-1].node)
        if t not in slowest:
            slowest[t] = max(transfer_time(wl.input_len * per_token, hops(cluster, a, b)) for a in by_type[t] for b in targets)
        o.feed = wl.output_len / slowest[t] if slowest[t] > 0 else math.inf


def feed_caps(routes: list[KVRoute], wl: Workload) -> dict[int, float]:
    """Output tok/s each prefill pool's KV links let it feed (its slowest route, to be safe)."""
    slowest: dict[int, float] = {}
    for r in routes:
        slowest[r.source] = max(slowest.get(r.source, 0.0), r.seconds_per_seq)
    return {i: wl.output_len / s if s > 0 else float("inf") for i, s in slowest.items()}
