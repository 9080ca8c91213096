"""A prefill pool counts at most what its KV can feed from its *last* stage's type (kv_feed.py): a
cell refined per end group is worth the most over chains of min(its tok/s, its end type's feed), not
its fastest chain within the best feed of any type it holds."""

import itertools

import numpy as np
import pytest

from hetc.partitioner.bounds.cell_bound import _Cells
from hetc.partitioner.bounds.cells import CountSpace
from hetc.partitioner.bounds.kv_feed import route_caps
from hetc.partitioner.bounds.stage_costs import StageCosts
from hetc.partitioner.estimate.simulate import Workload
from hetc.partitioner.estimate.tables import Tables, kinds_of
from hetc.scheduling import Phase
from tests.conftest import two_type_cluster

WL = Workload(32, 16, "fp32", "fp32", prefill_chunk=32)


def _brute(costs: StageCosts, counts: np.ndarray, feed: np.ndarray) -> float:
    """The most any prefill pool on exactly `counts` feeds: over every order of its devices and every
    cut, min(output tok/s at its bottleneck, the feed of its last stage's type)."""
    n, U = int(counts.sum()), costs.u
    case = costs.case(Phase.PREFILL, n, 1, fit=n)
    kinds = [g for g in range(len(costs.kinds)) if costs.tp[g] == 1 and np.isfinite(case.P[g, -1])]
    best = 0.0
    for ks in itertools.product(kinds, repeat=n):
        if (np.bincount(costs.type_of[list(ks)], minlength=len(costs.types)) != counts).any():
            continue
        for cuts in itertools.combinations(range(1, U), n - 1):
            bd = (0, *cuts, U)
            if any(bd[s + 1] > case.jfit[g, bd[s]] for s, g in enumerate(ks)):
                continue
            R = max(case.P[g, bd[s + 1]] - case.P[g, bd[s]] + case.over[g] for s, g in enumerate(ks))
            R = max([R] + [case.cheapest[costs.type_of[x], costs.type_of[y]] for x, y in zip(ks, ks[1:])])
            best = max(best, min(WL.output_len / R, feed[costs.type_of[ks[-1]]]))
    return best


def test_a_prefill_cell_is_worth_its_best_chain_per_end_type_within_that_types_feed(tmp_path, tiny):
    """The big device's KV feeds at half the fastest chain's tok/s: every cell refined to the end is
    worth exactly the brute force's most, and the cell of all four devices less than its fastest chain
    within the best feed of its types (what the bound counted before: that chain ends on the big one,
    341k tok/s against 329k ending on a fast one)."""
    slow = 1
    cluster = two_type_cluster(tmp_path, "0.8 MB", "2 MB", a_count=3)
    costs = StageCosts(Tables(tiny.units, WL), kinds_of(cluster), cluster)
    space = CountSpace(costs.devices)
    fastest = max(_brute(costs, c, np.full(2, np.inf)) for c in space.cells[1:])
    costs.feed_across = np.where(np.arange(2) == slow, fastest / 2, np.inf)
    costs.feed_inside = np.zeros(2)
    costs.feed_to = np.full((2, 2), np.inf)  # every set of routes feeds a type at its route across
    cells = _Cells(costs, space, Phase.PREFILL, max_stages=4, ceiling=64)
    while cells.rows.left:
        cells.rows.step()
    cells.refresh()
    for c in range(1, len(space)):
        while cells.V[:, c].max() > 0 or cells.pieces.get(c):
            cells.refine(c)
    caps, _, feeds = route_caps(costs, space)
    got = cells.under(caps[0], feeds[0])
    before = np.minimum(cells.ub, caps[0])
    looser = 0
    for c in range(1, len(space)):
        want = _brute(costs, space.cells[c], feeds[0])
        assert got[c] == pytest.approx(want, rel=1e-9), space.cells[c]
        looser += before[c] > want * (1 + 1e-6)
    assert looser
