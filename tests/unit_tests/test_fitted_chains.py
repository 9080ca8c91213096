"""Chains that fit (partitioner/search/fitted.py, issue 31): the fleets column generation's cluster gets
stay within each type's devices and each tp kind's groups, and each chain has the least bottleneck
within what was left (to the DP's grid); the allocation keeps a replica's stages of one type on one
node where it has room (single devices always, groups where the nodes hold whole groups)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from hetc.cluster import TP_SIZES
from hetc.partitioner.bounds.refine import best_chain
from hetc.partitioner.bounds.stage_costs import StageCosts
from hetc.partitioner.capture.capture import capture
from hetc.partitioner.estimate.simulate import Workload
from hetc.partitioner.estimate.split import Slot, batch_options
from hetc.partitioner.estimate.tables import Tables, kinds_of
from hetc.partitioner.search import fitted as F
from hetc.partitioner.search.mix import Option
from hetc.partitioner.bounds.cell_bound import METHOD as CELL_METHOD
from hetc.partitioner.search import solver as S
from hetc.partitioner.search.solver import _allocate
from hetc.partitioner.search.templates import Template, fits
from hetc.scheduling import Phase
from tests.conftest import FIXTURES
from tests.fixtures.fleets import write_cluster

WL = Workload(32, 16, "fp32", "fp32", prefill_chunk=32)
BATCH = 1  # one micro-batch whatever the length: the costs do not depend on it (fitted.py costs at the longest)


@pytest.fixture
def setup(tmp_path):
    """Fast devices on NVLink-less nodes of 4, 2 and 2 (one tp-4 group, four tp-2), and three single slow
    ones; each device holds a few of tiny-llama's units."""
    nodes = (
        "  - {name: a, device: ./fast.yaml, count: 4, link: pcie4}\n"
        "  - {name: b, device: ./fast.yaml, count: 2, link: pcie4}\n"
        "  - {name: c, device: ./fast.yaml, count: 2, link: pcie4}\n"
        "  - {name: d, device: ./slow.yaml, count: 1}\n  - {name: e, device: ./slow.yaml, count: 1}\n"
        "  - {name: f, device: ./slow.yaml, count: 1}\n"
    )
    cluster = write_cluster(tmp_path, nodes)
    units = capture(str(FIXTURES / "tiny-llama"), dtype="fp32").units
    kinds = kinds_of(cluster, TP_SIZES)
    return cluster, units, kinds, StageCosts(Tables(units, WL), kinds, cluster)


def _stage_bottleneck(costs: StageCosts, chain: tuple) -> float:
    case = costs.case(Phase.BOTH, BATCH, min(len(chain[0]), BATCH), fit=BATCH)
    for g, i, j in zip(chain[0], chain[1], chain[1][1:]):
        assert j <= case.jfit[g, i]  # the stage holds its units in memory
    return max(float(case.P[g, j] - case.P[g, i] + case.over[g]) for g, i, j in zip(chain[0], chain[1], chain[1][1:]))


def test_resources_count_the_groups_that_bind(setup):
    _, _, kinds, costs = setup
    res = F.Resources.of(costs, costs.devices)
    assert res.types == len(costs.types) and len(res.caps) == res.types + 1  # eight fast devices hold two tp-4 groups, the nodes one
    tp4 = next(g for g, k in enumerate(kinds) if k.tp == 4)
    assert res.caps[-1] == 1 and res.use[tp4, -1] == 1 and res.use[tp4, costs.type_of[tp4]] == 4


def test_a_fleet_fits_the_cluster_together(setup):
    _, _, kinds, costs = setup
    got, work = F.fleet(costs, BATCH, len(costs.kinds) * 4, costs.devices, budget=np.inf)
    assert len(got) >= 2 and work > 0
    used = np.zeros(len(costs.types), dtype=int)
    groups = 0
    for p in got:
        assert fits(p.kinds, kinds)
        assert p.cuts[0] == 0 and p.cuts[-1] == costs.u and all(a < b for a, b in zip(p.cuts, p.cuts[1:]))
        used += np.bincount(costs.type_of[list(p.kinds)], weights=costs.tp[list(p.kinds)], minlength=len(costs.types)).astype(int)
        groups += sum(1 for g in p.kinds if kinds[g].tp == 4)
    assert (used <= costs.devices).all() and groups <= 1


def test_each_chain_has_the_least_bottleneck_left(setup):
    """Against refine.best_chain over every length within the same devices (links counted there, so
    its least is at or above the fitted DP's, which leaves them to the templates)."""
    _, _, kinds, costs = setup
    counts = costs.devices.copy()
    for _ in range(2):
        res = F.Resources.of(costs, counts)
        n = int(counts.sum())
        chain, _ = F._best(costs, BATCH, n, res)
        assert chain is not None
        least = min(got[0][0] for m in range(1, n + 1) if (got := best_chain(costs, Phase.BOTH, BATCH, m, counts, True))[0] is not None)
        assert _stage_bottleneck(costs, chain) <= least * F.GRID * (1 + 1e-9)
        counts = counts - np.bincount(costs.type_of[list(chain[0])], weights=costs.tp[list(chain[0])], minlength=len(counts)).astype(int)


def test_fleets_only_where_the_best_seed_does_not_fit(setup):
    _, _, kinds, costs = setup
    from hetc.partitioner.bounds.cell_bound import Pipeline

    g = next(g for g, k in enumerate(kinds) if k.tp == 1)
    fit = Pipeline(Phase.BOTH, (g,), (0, costs.u), BATCH, 1.0)
    assert F.fitted(costs, [fit], 16, np.inf) == []
    tp4 = next(g for g, k in enumerate(kinds) if k.tp == 4)
    two = Pipeline(Phase.BOTH, (tp4, tp4), (0, 3, costs.u), BATCH, 1.0)  # two tp-4 groups: the nodes hold one
    assert not fits(two.kinds, kinds)
    out = F.fitted(costs, [two, fit], 16, np.inf)
    assert out and all(fits(p.kinds, kinds) for p in out)
    assert F.fitted(costs, [fit, two], 16, np.inf) == []  # the best seed fits


def test_fleets_take_at_most_the_unfit_seeds_stages(setup):
    """The cell bound's DP chose its seed's length (its stages costed at as many micro-batches): a fleet
    built with every device allowed as a stage took longer, slower chains (explore gen3119)."""
    _, kinds, costs = setup[0], setup[2], setup[3]
    from hetc.partitioner.bounds.cell_bound import Pipeline

    tp4 = next(g for g, k in enumerate(kinds) if k.tp == 4)
    two = Pipeline(Phase.BOTH, (tp4, tp4), (0, 3, costs.u), BATCH, 1.0)
    three = Pipeline(Phase.BOTH, (tp4, tp4, tp4), (0, 2, 4, costs.u), 2, 1.0)
    # two tp-4 groups are within the eight fast devices (the nodes hold one group): its length; three
    # take twelve (column generation's kind of seed): any length
    assert F.unfit_lengths(costs, [two, three, two]) == [(BATCH, 2), (2, None)]
    assert F.unfit_batches(costs, [two, three]) == [BATCH, 2]
    out = F.fitted(costs, [two], 16, np.inf)
    assert out and max(len(p.kinds) for p in out) <= 2 and all(fits(p.kinds, kinds) for p in out)
    assert max(len(p.kinds) for p in F.fleet(costs, BATCH, 16, costs.devices, budget=np.inf)[0]) > 2  # what 16 allowed


def test_the_solver_fits_the_cell_bounds_seeds_too(setup, monkeypatch):
    """The cell bound's chain DP counts devices per type, not tp groups per node: its best pipeline may
    need more tp-4 groups than the nodes hold (explore gen3119: three Gaudi 3 TP4 groups, two nodes of
    four), and `templates.fits` drops it; fleets that fit are sought from its seeds as from column
    generation's (here the bound's rounds are given such a best pipeline)."""
    cluster, units, kinds, costs = setup
    from hetc.partitioner.bounds.cell_bound import Pipeline

    tp4 = next(g for g, k in enumerate(kinds) if k.tp == 4)
    two = Pipeline(Phase.BOTH, (tp4, tp4), (0, 3, costs.u), BATCH, 1.0)  # two tp-4 groups: the nodes hold one
    rounds = S.cell_bound_rounds

    def unfit_first(*a, **k):
        for snap, pause in rounds(*a, **k):
            yield (lambda snap=snap: replace(got := snap(), pipelines=[two, *got.pipelines])), pause

    seen = []
    monkeypatch.setattr(S, "cell_bound_rounds", unfit_first)
    monkeypatch.setattr(S, "fitted", lambda costs, seeds, *a, **k: seen.append(seeds) or [])
    sol = S.solve(units, cluster, WL, time_limit=10)
    assert sol.bound_method == CELL_METHOD and len(seen) == 1 and seen[0][0] == two


def test_allocation_keeps_a_replicas_singles_on_one_node(setup, tmp_path):
    """Four single-device stages of one type on two nodes of two: placed one by one on the roomiest node
    they alternated (x, y, x, y: three network hops); beside their neighbours they cross it once."""
    _, units, _, _ = setup
    cluster = write_cluster(tmp_path, "  - {name: x, device: ./fast.yaml, count: 2, link: pcie4}\n  - {name: y, device: ./fast.yaml, count: 2, link: pcie4}\n")
    t = Template("four singles", (Slot(cluster.nodes[0], 1),) * 4)
    opt = Option(t, batch_options(units, list(t.chain), cluster, WL)[0])
    cands, notes = _allocate([(opt, 1)], units, cluster, WL)
    assert not notes and len(cands) == 1
    assert [s.node.name for s in cands[0].stages] == ["x", "x", "y", "y"]


def test_allocation_keeps_a_replicas_groups_on_one_node_where_nodes_hold_whole_groups(setup, tmp_path):
    """Four tp-2 groups on two nodes of four: x, y, x, y by the roomiest node, x, x, y, y beside their
    neighbours; nodes of three (a group and a spare device each) keep the roomiest node's rule and fit."""
    _, units, _, _ = setup
    for counts, want in (((4, 4), ["x", "x", "y", "y"]), ((3, 3, 3, 3), None)):
        nodes = "".join(f"  - {{name: {'xyzw'[i]}, device: ./fast.yaml, count: {c}, link: pcie4}}\n" for i, c in enumerate(counts))
        cluster = write_cluster(tmp_path, nodes)
        t = Template("four groups", (Slot(cluster.nodes[0], 2),) * 4)
        opt = Option(t, batch_options(units, list(t.chain), cluster, WL)[0])
        cands, notes = _allocate([(opt, 1)], units, cluster, WL)
        assert not notes and len(cands) == 1
        if want:
            assert [s.node.name for s in cands[0].stages] == want
