"""What a prefill pool's KV can feed the decode pools, as the cell bound counts it.

A prefill pool hands each prompt's KV from its last stage to a decode pool's first
(search/kv_routes.py), so it counts at most what that route carries (`StageCosts.feed_across`,
`feed_inside`: the latter only to a decode pool starting on the same type, inside a node). Before
refinement a cell's cap is the best feed of any type it holds (its pool could end on any);
refinement finds, per group of types alike in every set of routes (`end_groups`), the best chain
ending on that group (`_Cells` in cell_bound.py keeps them), and a cell is then worth the most
over groups of min(best chain ending there, the group's feed) under each set of routes: a pool
whose fastest chain ends on a type fed over 10 GbE is not credited a faster type's route.
"""

from __future__ import annotations

import numpy as np

from hetc.partitioner.bounds.cells import CountSpace, closure, combine
from hetc.partitioner.bounds.stage_costs import StageCosts

__all__ = ["ROUTE_TYPES", "combine_sets", "end_groups", "every_route", "feed_cap", "route_caps", "under_routes"]

ROUTE_TYPES = 8  # device types whose decode pools' routes are counted apart (a set each, and one for several: 3 closures each a round); past it, one set


def feed_cap(costs: StageCosts, space: CountSpace, inside: np.ndarray) -> np.ndarray:
    """Per cell: the most output tok/s one prefill pool on its devices can feed, its last stage on
    the cell's type of the fastest KV route (`StageCosts.feed_across`; `feed_inside` too for the
    types `inside` marks, those a decode pool starts on); 0 for the empty cell. A pool's tok/s above
    it never reaches a decode pool, so the knapsack does not credit it.

    Args:
        inside: per type, whether a decode pool may start on it (a KV route inside a node).
    """
    return np.where(space.cells > 0, _feed(costs, inside), 0.0).max(axis=1)


def _feed(costs: StageCosts, inside: np.ndarray) -> np.ndarray:
    """Per type, the most a pool ending on it feeds, with the routes inside a node `inside` marks."""
    return np.where(inside, np.maximum(costs.feed_across, costs.feed_inside), costs.feed_across)


def _sets(costs: StageCosts) -> tuple[list[np.ndarray], list[int | None]]:
    """Per set of routes a plan's decode pools may open: each type's feed, and the one type every
    decode pool starts on (None: several, or any). A prefill pool is capped at its slowest route to
    any decode pool (`kv_routes.feed_caps`), so where every decode pool starts on type u, a pool
    ending on t feeds at most r[t, u]: the fastest route from a node of t to another of u
    (`StageCosts.feed_to`), or for t = u inside one node too (`feed_inside`); where they start on
    two types or more, at most the smaller of the two, so the second largest of r[t, ·]. Past
    ROUTE_TYPES types, one set: every route open (valid, looser)."""
    T = len(costs.types)
    if T > ROUTE_TYPES:
        return [_feed(costs, np.ones(T, dtype=bool))], [None]
    r = costs.feed_routes()
    if T == 1:
        return [r[:, 0]], [0]
    return [r[:, u] for u in range(T)] + [np.sort(r, axis=1)[:, -2]], [*range(T), None]


def route_caps(costs: StageCosts, space: CountSpace) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The prefill pools' KV caps per set of routes (`_sets`), the decode cells each set admits, and
    each set's feed per type: ([sets, cells] caps, [sets, cells] bools, [sets, types] feeds). Under
    the set of decode pools starting on u only decode cells holding u count (a pool starting on u
    holds one); under the set of several types, every decode cell."""
    feeds, starts = _sets(costs)
    caps = np.stack([np.where(space.cells > 0, f, 0.0).max(axis=1) for f in feeds])
    admit = np.stack([np.ones(len(space), dtype=bool) if u is None else space.cells[:, u] > 0 for u in starts])
    return caps, admit, np.stack(feeds)


def every_route(costs: StageCosts, space: CountSpace) -> tuple[np.ndarray, np.ndarray]:
    """The prefill pools' caps per cell and feeds per type with every route inside a node open, for
    every decode cell: looser than each of `route_caps`' sets (the cell bound's rounds steer by it
    until they settle)."""
    every = np.ones(len(costs.types), dtype=bool)
    return feed_cap(costs, space, every), _feed(costs, every)


def combine_sets(
    space: CountSpace, both: np.ndarray, decode: np.ndarray, prefill: list[np.ndarray], admit: list[np.ndarray]
) -> tuple[float, tuple, int, np.ndarray, np.ndarray, np.ndarray]:
    """The knapsack's best over sets of routes: max over s of both + min(decode pools on the cells
    `admit[s]` allows, prefill pools under s) (cells.combine). Returns (value, its (c1, c2, c3), s,
    and under s the decode pools' per-cell bounds and closure, and the prefill pools' closure).

    Args:
        both: the closure of pipelines doing both phases.
        decode, prefill: per-cell bounds of one decode pool, and of one prefill pool per set.
    """
    best: tuple | None = None
    for s, (p, a) in enumerate(zip(prefill, admit)):
        d = np.where(a, decode, 0.0)
        Kd, Kp = closure(space, d), closure(space, p)
        value, cells = combine(space, both, Kd, Kp[None], np.zeros(len(space), dtype=np.int64))
        if best is None or value > best[0]:
            best = (value, cells, s, d, Kd, Kp)
    assert best is not None  # at least one set
    return best


def end_groups(costs: StageCosts) -> list[np.ndarray]:
    """Masks over types whose pools' KV feeds alike under every set of routes (`route_caps`): a
    prefill pool's chain is refined once per group its last stage may lie in."""
    feeds = np.stack(_sets(costs)[0]).T  # [types, sets]
    keys = {tuple(row) for row in feeds}
    return [np.array([tuple(row) == k for row in feeds]) for k in sorted(keys)]


def under_routes(ub: np.ndarray, cap: np.ndarray, feed: np.ndarray, ends: dict[int, tuple[np.ndarray, float]], groups: list[np.ndarray]) -> np.ndarray:
    """Each prefill cell's bound under one set of routes: min(its bound, its cap), and for a cell
    refinement reached, the most over end groups of min(best chain ending there, the group's feed),
    or what it has not refined (within the cap), whichever is more.

    Args:
        ub, cap: per cell, the bound with every route open and the cap under this set.
        feed: per type, what a pool ending on it feeds under this set.
        ends: per refined cell, (best tok/s per end group, what its unrefined pieces bound).
        groups: `end_groups`.
    """
    out = np.minimum(ub, cap)
    per_group = np.array([feed[g].max() for g in groups])
    for c, (best, rest) in ends.items():
        out[c] = min(out[c], max(float(np.minimum(best, per_group).max()), min(rest, cap[c])))
    return out
