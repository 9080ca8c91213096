"""The throughput bound prices prefill pools' KV routes (cell_bound.route_caps): a prefill pool feeds
at most what its prompts' KV can cross to a decode pool, over the fastest route a plan could give
it. Checked on a small-block case on a slow network (small2011 on 1 Gbit/s) against a brute force over
every pool and pipeline on its four devices whose pools are valued as the solver values them (each prefill pool at its slowest route to a
decode pool: kv_routes.kv_transfers, feed_caps)."""

from __future__ import annotations

import numpy as np
import pytest

from hetc.cluster import TP_SIZES
from hetc.partitioner.bounds import cell_bound
from hetc.partitioner.bounds.cells import CountSpace
from hetc.partitioner.bounds.stage_costs import StageCosts
from hetc.partitioner.estimate.tables import Tables, kinds_of
from hetc.partitioner.search import solver as solver_module
from hetc.partitioner.search.solver import solve
from hetc.scheduling import Phase
from tests.brute_force import optimum_with_kv
from tests.brute_force import bench_module as _module


def _uncapped(monkeypatch) -> None:
    """The bound as it was: no KV route caps a prefill pool."""
    init = StageCosts.__init__

    def wide(self, *a, **k):
        init(self, *a, **k)
        self.feed_across = np.full(len(self.types), np.inf)
        self.feed_inside = np.full(len(self.types), np.inf)
        self.feed_to = np.full((len(self.types), len(self.types)), np.inf)

    monkeypatch.setattr(StageCosts, "__init__", wide)


def _slow(tmp, paired: bool):
    """small2011 (two MI355X and two H100, one layer of llama-2-70b at fp8) on a 1 Gbit/s network, a
    prompt's KV slower across it than its prefill: every node single, or the MI355X paired on
    Infinity Fabric (a route inside a node, for decode pools starting on an MI355X only)."""
    gen, scenarios = _module("generated_clusters"), _module("solver_scenarios")
    sc = gen.generate_small(2011)
    sc.case.cluster["network"] = {"default": {"bandwidth": "1 Gbit/s", "latency": "10 us"}}
    if paired:
        sc.case.cluster["nodes"] = [{"name": "a0", "device": "mi355x", "count": 2, "link": "infinity-fabric"}] + sc.case.cluster["nodes"][2:]
    units, cluster, wl = gen.small_instance(sc, tmp, scenarios.engine_for(sc.case).value)
    return sc, units, cluster, wl


@pytest.fixture(scope="module")
def case(tmp_path_factory):
    return _slow(tmp_path_factory.mktemp("kv"), paired=False)


@pytest.fixture(scope="module")
def paired(tmp_path_factory):
    return _slow(tmp_path_factory.mktemp("kv"), paired=True)


def test_pools_bound_is_above_the_optimum_with_kv_links_and_tighter_than_without(case, monkeypatch):
    sc, units, cluster, wl = case
    opt = optimum_with_kv(units, cluster, wl, sc.max_num_seqs, (Phase.PREFILL, Phase.DECODE))
    sol = solve(units, cluster, wl, disaggregate="on", max_num_seqs=sc.max_num_seqs)
    assert opt > 0 and sol.output_tok_s <= opt * (1 + 1e-9)
    assert sol.bound >= opt * (1 - 1e-9)
    _uncapped(monkeypatch)
    before = solve(units, cluster, wl, disaggregate="on", max_num_seqs=sc.max_num_seqs)
    assert sol.bound < before.bound * (1 - 1e-3)


def test_auto_bound_is_above_the_optimum_with_kv_links(case):
    sc, units, cluster, wl = case
    opt = optimum_with_kv(units, cluster, wl, sc.max_num_seqs)
    sol = solve(units, cluster, wl, disaggregate="auto", max_num_seqs=sc.max_num_seqs)
    assert sol.bound >= opt * (1 - 1e-9)


@pytest.mark.parametrize("disaggregate", ["on", "auto"])
def test_a_kv_route_inside_a_node_is_counted_and_the_bound_holds(paired, disaggregate, monkeypatch):
    """The MI355X pair's route inside its node: the sets of routes decode pools open (route_caps)
    keep the bound above the optimum, and below the bound with no route priced. With pools only the
    optimum (19,988 tok/s) hands KV inside the node: a bound that priced only the network's route
    would read 15,250, as the single nodes' case does."""
    sc, units, cluster, wl = paired
    costs = StageCosts(Tables(units, wl), kinds_of(cluster, TP_SIZES), cluster)
    caps, admit, _ = cell_bound.route_caps(costs, CountSpace(costs.devices))
    assert len(caps) == 3 and admit[-1].all() and not admit[0].all()  # decode pools starting on one type (each), on both
    phases = (Phase.PREFILL, Phase.DECODE) if disaggregate == "on" else tuple(Phase)
    opt = optimum_with_kv(units, cluster, wl, sc.max_num_seqs, phases)
    sol = solve(units, cluster, wl, disaggregate=disaggregate, max_num_seqs=sc.max_num_seqs)
    assert sol.bound >= opt * (1 - 1e-9)
    _uncapped(monkeypatch)
    assert sol.bound <= solve(units, cluster, wl, disaggregate=disaggregate, max_num_seqs=sc.max_num_seqs).bound


@pytest.mark.parametrize("which", ["case", "paired"])
@pytest.mark.parametrize("disaggregate", ["on", "auto"])
def test_column_generation_prices_the_kv_routes_and_the_bound_holds(which, disaggregate, request, monkeypatch):
    """Column generation (colgen.py, routes.py) caps each prefill column at its route across nodes, and
    counts a route inside a node only for pools within one node's devices: its bound stays above the
    optimum with the solver's KV caps, single nodes or the MI355X pair. With pools only on single nodes
    it reads 17,318 against the optimum's 15,250, where with no route priced (column generation before:
    it priced none) 36,147; with the pair (a route inside) and with pipelines doing both phases beside
    the pools, no tighter."""
    sc, units, cluster, wl = request.getfixturevalue(which)
    monkeypatch.setattr(solver_module, "MAX_CELLS", 1)
    phases = (Phase.PREFILL, Phase.DECODE) if disaggregate == "on" else tuple(Phase)
    opt = optimum_with_kv(units, cluster, wl, sc.max_num_seqs, phases)
    sol = solve(units, cluster, wl, disaggregate=disaggregate, max_num_seqs=sc.max_num_seqs)
    assert "column generation" in sol.bound_method
    assert opt > 0 and sol.bound >= opt * (1 - 1e-9)
    if which == "case" and disaggregate == "on":
        _uncapped(monkeypatch)
        before = solve(units, cluster, wl, disaggregate=disaggregate, max_num_seqs=sc.max_num_seqs)
        assert sol.bound < before.bound * 0.6
