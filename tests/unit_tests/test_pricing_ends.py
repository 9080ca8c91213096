"""Pricing restricted to the type of a pool's first or last stage, at a worth capped by its KV route
(pricing.KeyPricer.restricted, pricing.Worth, price_dp's `first` / `last`; colgen's routes.py), against
every chain of every key of short pools: an upper estimate above the best reduced cost of the chains
allowed, and a chain that is allowed and attains what pricing found, the best to 1e-9 (never more
than the best padded chain)."""

import numpy as np
import pytest

from hetc.partitioner.bounds.aggregate import keys
from hetc.partitioner.bounds.pricing import KeyPricer, Worth
from hetc.partitioner.bounds.stage_costs import StageCosts
from hetc.partitioner.estimate.batches import Regimes
from hetc.partitioner.estimate.tables import Tables, kinds_of
from hetc.scheduling import Phase
from tests.brute_force import best_reduced_cost
from tests.fixtures.fleets import WL, many_type_cluster


@pytest.mark.parametrize("phase", [Phase.PREFILL, Phase.DECODE])
def test_restricted_pricing_finds_the_best_allowed_chain(tmp_path, tiny, phase):
    cluster = many_type_cluster(tmp_path, 3)
    costs = StageCosts(Tables(tiny.units, WL), kinds_of(cluster), cluster)
    T = len(costs.types)
    rng = np.random.default_rng(7)
    checked = 0
    for key in keys(phase, 3, 40, Regimes(WL, phase, 40)):
        base = KeyPricer(costs, key, tp_groups=False)
        if not len(base.cand):
            continue
        free = base.rate / base.cand[0]  # the best tok/s of any chain: caps and prices around a share of it
        for t in range(T):
            one = np.arange(T) == t
            pricer = base.restricted(None, one) if phase == Phase.PREFILL else base.restricted(one, None)
            prices = rng.uniform(0.05, 0.6, len(costs.kinds)) * free * costs.tp
            if phase == Phase.PREFILL:  # capped across at 0.4 of the best tok/s, more inside up to 0.8 past a toll
                worth = Worth(0.6, 0.4 * free, 0.9, 0.8 * free, 0.4 * free, 0.02 * free)
            else:
                worth = Worth(0.6, np.inf, 0.3, np.inf, 0.0, 0.1 * free)
            want, padded = best_reduced_cost(pricer, prices, worth), best_reduced_cost(pricer, prices, worth, padded=True)
            got = pricer.price(prices, worth, -np.inf, 0.0)
            assert got.upper >= max(want, got.found) - 1e-9 * abs(want), (key, t)
            if not np.isfinite(padded):
                assert got.chain is None
                continue
            assert want - 1e-9 * abs(want) <= got.found <= padded + 1e-9 * abs(padded), (key, t)
            ks, cuts = got.chain
            assert (costs.type_of[ks[-1]] == t) if phase == Phase.PREFILL else (costs.type_of[ks[0]] == t)
            case = pricer.case
            R = max([case.P[g, b] - case.P[g, a] + case.over[g] for g, a, b in zip(ks, cuts, cuts[1:])])
            R = max([R] + [case.cheapest[costs.type_of[x], costs.type_of[y]] for x, y in zip(ks, ks[1:])])
            price = sum(prices[g] for g in ks) + max(0, key.lo - len(ks)) * prices[pricer.kinds].min()
            assert float(worth.of(pricer.rate / R)) - price >= got.found - 1e-9 * abs(got.found)
            checked += 1
    assert checked >= 4
