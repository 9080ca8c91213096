"""The throughput bound prices prefill pools' KV routes (cell_bound.route_caps): a prefill pool feeds
at most what its prompts' KV can cross to a decode pool, over the fastest route a plan could give
it. Checked on a small-block case on a slow network (small2011 on 1 Gbit/s) against a brute force over
every pool and pipeline on its four devices whose pools are valued as the solver values them (each prefill pool at its slowest route to a
decode pool: solver._kv_transfers, _feed_caps)."""

from __future__ import annotations

import numpy as np
import pytest

from hetc.cluster import TP_SIZES, Node
from hetc.partitioner.bounds import cell_bound
from hetc.partitioner.bounds.cells import CountSpace
from hetc.partitioner.bounds.stage_costs import StageCosts
from hetc.partitioner.cost_models.links import hops, transfer_time
from hetc.partitioner.estimate.tables import Tables, kinds_of
from hetc.partitioner.search.solver import solve
from hetc.scheduling import Phase
from tests.brute_force import options
from tests.unit_tests.test_solver_small_block import _module


def _optimum_with_kv(units, cluster, wl, max_num_seqs: int, phases: tuple[Phase, ...] = tuple(Phase)) -> float:
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


def _uncapped(monkeypatch) -> None:
    """The bound as it was: no KV route caps a prefill pool."""
    init = StageCosts.__init__

    def wide(self, *a, **k):
        init(self, *a, **k)
        self.feed_across = np.full(len(self.types), np.inf)
        self.feed_inside = np.full(len(self.types), np.inf)

    monkeypatch.setattr(StageCosts, "__init__", wide)


@pytest.fixture(scope="module")
def case(tmp_path_factory):
    """small2011 (two single-MI355X and two single-H100 nodes, one layer of llama-2-70b at fp8) on a
    1 Gbit/s network: every KV route crosses it, and a prompt's KV takes longer than its prefill."""
    gen, scenarios = _module("generated_clusters"), _module("solver_scenarios")
    sc = gen.generate_small(2011)
    sc.case.cluster["network"] = {"default": {"bandwidth": "1 Gbit/s", "latency": "10 us"}}
    units, cluster, wl = gen.small_instance(sc, tmp_path_factory.mktemp("kv"), scenarios.engine_for(sc.case).value)
    assert all(n.count == 1 for n in cluster.nodes)
    return sc, units, cluster, wl


def test_pools_bound_is_above_the_optimum_with_kv_links_and_tighter_than_without(case, monkeypatch):
    sc, units, cluster, wl = case
    opt = _optimum_with_kv(units, cluster, wl, sc.max_num_seqs, (Phase.PREFILL, Phase.DECODE))
    sol = solve(units, cluster, wl, disaggregate="on", max_num_seqs=sc.max_num_seqs)
    assert opt > 0 and sol.output_tok_s <= opt * (1 + 1e-9)
    assert sol.bound >= opt * (1 - 1e-9)
    _uncapped(monkeypatch)
    before = solve(units, cluster, wl, disaggregate="on", max_num_seqs=sc.max_num_seqs)
    assert sol.bound < before.bound * (1 - 1e-3)


def test_auto_bound_is_above_the_optimum_with_kv_links(case):
    sc, units, cluster, wl = case
    opt = _optimum_with_kv(units, cluster, wl, sc.max_num_seqs)
    sol = solve(units, cluster, wl, disaggregate="auto", max_num_seqs=sc.max_num_seqs)
    assert sol.bound >= opt * (1 - 1e-9)


def test_a_kv_route_inside_a_node_counts_only_where_decode_pools_take_its_type(case):
    """route_caps: a type whose KV route inside a node beats the network's speeds its prefill pools up
    only in the set where decode pools hold that type; every set caps at least as tightly as all routes."""
    _, units, cluster, wl = case
    costs = StageCosts(Tables(units, wl), kinds_of(cluster, TP_SIZES), cluster)
    space = CountSpace(costs.devices)
    caps, route = cell_bound.route_caps(costs, space)
    assert (caps <= caps[-1] + 1e-9).all()  # the last set opens every route
    assert route[0] == 0 and route.max() == len(caps) - 1
