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

from hetc.partitioner.bounds.cells import CountSpace
from hetc.partitioner.bounds.stage_costs import StageCosts

__all__ = ["ROUTE_TYPES", "end_groups", "feed_cap", "route_caps", "under_routes"]

ROUTE_TYPES = 4  # types whose KV route inside a node beats the network's, counted apart (2^this prefill closures a round); past it, one set


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


def _sets(costs: StageCosts) -> tuple[np.ndarray, list[np.ndarray]]:
    """(`gain`: the types whose route inside a node beats the network's, the sets of them decode pools
    may open: one per subset of `gain` where at most 2^ROUTE_TYPES, else one opening every route)."""
    gain = np.flatnonzero(costs.feed_inside > costs.feed_across)
    T = len(costs.types)
    if len(gain) > ROUTE_TYPES:
        return gain, [np.ones(T, dtype=bool)]
    return gain, [np.isin(np.arange(T), gain[[k for k in range(len(gain)) if s >> k & 1]]) for s in range(1 << len(gain))]


def route_caps(costs: StageCosts, space: CountSpace) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The prefill pools' KV caps per set of decode types, which set each cell of decode pools opens,
    and each set's feed per type: ([sets, cells] caps, [cells] set index, [sets, types] feeds). A
    prefill pool hands its KV inside a node only to a decode pool starting on its own type, so the
    types a route inside a node speeds up (`gain`) count only where the decode pools' devices hold
    them: a set per subset of those, where at most 2^ROUTE_TYPES; past that, one set opening every
    route (valid, looser)."""
    gain, subsets = _sets(costs)
    caps = np.stack([feed_cap(costs, space, s) for s in subsets])
    feeds = np.stack([_feed(costs, s) for s in subsets])
    if len(subsets) == 1:
        return caps, np.zeros(len(space), dtype=np.int64), feeds
    route = (space.cells[:, gain] > 0) @ (1 << np.arange(len(gain)))  # the subset of `gain` each cell holds
    return caps, route.astype(np.int64), feeds


def end_groups(costs: StageCosts) -> list[np.ndarray]:
    """Masks over types whose pools' KV feeds alike under every set of routes (`route_caps`): a
    prefill pool's chain is refined once per group its last stage may lie in."""
    _, subsets = _sets(costs)
    feeds = np.stack([_feed(costs, s) for s in subsets]).T  # [types, sets]
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
