"""Chains of tp groups of different degrees over several device types (partitioner/search/degree_mixes.py):
the family takes every group of one kind per type, which no template family builds; the descent over each
set of types' kinds ends where no one change gains; the estimate is the chain DP's bottleneck at its cuts;
the fleet is the best set of disjoint sets of types (against a brute force over every partition)."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from hetc.cluster import TP_SIZES
from hetc.partitioner.bounds.cell_bound import Pipeline
from hetc.partitioner.bounds.refine import chain_round
from hetc.partitioner.bounds.stage_costs import StageCosts
from hetc.partitioner.capture.capture import capture
from hetc.partitioner.estimate.simulate import Workload
from hetc.partitioner.estimate.tables import Tables, kinds_of, type_key
from hetc.partitioner.search import degree_mixes as D
from hetc.partitioner.search.templates import fits, generate
from hetc.scheduling import Phase
from tests.conftest import FIXTURES
from tests.fixtures.fleets import write_cluster

WL = Workload(32, 16, "fp32", "fp32", prefill_chunk=32)


@pytest.fixture(scope="module")
def costs(tmp_path_factory):
    """Fast devices on a node of 4 (one tp-4 group), three single slow ones of another vendor and a node of
    two mid devices; each device holds a few of tiny-llama's units."""
    nodes = (
        "  - {name: a, device: ./fast.yaml, count: 4, link: pcie4}\n"
        "  - {name: d, device: ./slow.yaml, count: 1}\n  - {name: e, device: ./slow.yaml, count: 1}\n"
        "  - {name: f, device: ./slow.yaml, count: 1}\n"
        "  - {name: g, device: ./mid.yaml, count: 2, link: pcie4}\n"
    )
    cluster = write_cluster(tmp_path_factory.mktemp("mixes"), nodes, engine="hetc")
    units = capture(str(FIXTURES / "tiny-llama"), dtype="fp32").units
    return StageCosts(Tables(units, WL), kinds_of(cluster, TP_SIZES), cluster)


def _family(costs: StageCosts, max_stages: int = 16):
    """Every chain of the family: (types, picks, r, chain), every product of each type's kinds."""
    kinds = D._kinds_per_type(costs)
    for size in range(1, D.MAX_TYPES + 1):
        for types in itertools.combinations(range(len(costs.types)), size):
            for picks in itertools.product(*(kinds[t] for t in types)):
                common = math.gcd(*(int(costs.kinds[g].groups) for g in picks))
                for r in (d for d in range(1, common + 1) if common % d == 0):
                    chain = D._chain(costs, picks, r)
                    if len(chain) <= max_stages:
                        yield types, picks, r, chain


def test_a_chain_takes_every_group_of_one_kind_per_type(costs):
    mixed = 0
    for types, picks, r, chain in _family(costs):
        assert {int(costs.type_of[g]) for g in chain} == set(types) and fits(chain, costs.kinds)
        for g in picks:  # one kind per type, its groups over r replicas, wider groups first
            assert chain.count(g) * r == costs.kinds[g].groups
        assert list(costs.tp[list(chain)]) == sorted(costs.tp[list(chain)], reverse=True)
        mixed += len(set(costs.tp[list(chain)])) > 1 and len(types) > 1
    assert mixed  # a tp-4 group beside single devices of other types


def test_templates_build_no_mixed_degree_chain_across_types_the_mixes_do(costs):
    """The gap the family fills: templates.generate's families (homogeneous, even mixes of one degree) hold
    no chain of groups of different degrees on different types; the family's best chain over the fast and the
    slow devices is one (the fast tp-4 group, then the three slow devices)."""

    def mixed(kinds: list[int]) -> bool:
        return len({int(costs.tp[g]) for g in kinds}) > 1 and len({int(costs.type_of[g]) for g in kinds}) > 1

    index = {(k.type_key, k.tp): g for g, k in enumerate(costs.kinds)}
    made = generate(costs.kinds, [], 16)
    assert not any(mixed([index[(type_key(s.node), s.tp)] for s in t.chain]) for t in made)
    fast, slow = (int(costs.type_of[next(g for g, k in enumerate(costs.kinds) if k.profile.name == n)]) for n in ("fast", "slow"))
    got, _ = D._descend(D._Costs(costs, [64, 32, 16, 8, 4, 2, 1]), tuple(sorted((fast, slow))), D._kinds_per_type(costs), 16)
    assert got is not None and mixed(list(got[1].kinds))


def test_the_descent_ends_where_no_one_kind_changed_gains(costs):
    """Each set of types' chain is at least its widest kinds' and no change of one type's kind beats it."""
    priced = D._Costs(costs, [64, 32, 16, 8, 4, 2, 1])
    kinds = D._kinds_per_type(costs)
    for size in range(1, D.MAX_TYPES + 1):
        for types in itertools.combinations(range(len(costs.types)), size):
            got, work = D._descend(priced, types, kinds, 16)
            if got is None:
                continue
            assert work > 0
            value, pipe = got
            picks = tuple(sorted({g for g in pipe.kinds}, key=lambda g: [int(costs.type_of[g]) for g in pipe.kinds].index(int(costs.type_of[g]))))
            for i in range(len(picks)):
                for g in kinds[int(costs.type_of[picks[i]])]:
                    other = D._price(priced, D._chain(costs, tuple(sorted(picks[:i] + (g,) + picks[i + 1 :])), 1))
                    assert other is None or other[0] <= value * (1 + 1e-9)


def test_a_chains_price_is_the_chain_dps_round_at_its_cuts(costs):
    """The estimate's bottleneck is at or above refine.chain_round's at the cuts it found (a grid point that
    covers), within one step of the coarser grid, and every stage holds its units at the batch it names."""
    priced = D._Costs(costs, [64, 32, 16, 8, 4, 2, 1])
    seen = 0
    for _, _, _, chain in _family(costs):
        got = D._price(priced, chain)
        if got is None:
            continue
        tok_s, batch, work, cuts = got
        assert work > 0 and cuts[0] == 0 and cuts[-1] == costs.u and all(a < b for a, b in zip(cuts, cuts[1:]))
        jfit = costs.memory(Phase.BOTH, batch).jfit
        assert all(j <= jfit[g, i] for g, i, j in zip(chain, cuts, cuts[1:]))
        R = chain_round(costs, Phase.BOTH, batch, (chain, cuts))
        assert tok_s * (1 - 1e-9) <= batch / R <= tok_s * 1.1
        seen += 1
    assert seen > 10


def _brute_fleet(best: dict, T: int) -> float:
    """The most any set of disjoint type sets of `best` gives, over every subset of them."""
    sets, most = list(best), 0.0
    for k in range(1, len(sets) + 1):
        for pick in itertools.combinations(sets, k):
            if sum(pick) == np.bitwise_or.reduce(pick) and all(a & b == 0 for a, b in itertools.combinations(pick, 2)):
                most = max(most, sum(best[s][0] for s in pick))
    return most


def test_the_fleet_is_the_best_partition_of_the_types():
    rng = np.random.default_rng(7)
    T = 5
    for _ in range(30):
        masks = rng.choice(np.arange(1, 1 << T), size=8, replace=False)
        best = {int(m): (float(rng.uniform(1, 10)), Pipeline(Phase.BOTH, (0,), (0, 1), 1, 1.0)) for m in masks}
        got = D._fleet(best, T)
        assert all(a & b == 0 for a, b in itertools.combinations(got, 2))
        assert sum(best[s][0] for s in got) == pytest.approx(_brute_fleet(best, T))


def test_degree_mixes_hands_a_fleet_of_disjoint_chains(costs):
    out = D.degree_mixes(costs, [64], 16, np.inf)
    assert out and all(p.phase == Phase.BOTH and fits(p.kinds, costs.kinds) for p in out)
    first_types = [{int(costs.type_of[g]) for g in p.kinds} for p in out]
    assert all(fits(p.kinds, costs.kinds) for p in out)
    assert D.degree_mixes(costs, [], 16, np.inf) == [] and first_types
