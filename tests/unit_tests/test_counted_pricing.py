"""Pricing within the fleet's devices per type (counted_dp.py, KeyPricer.counted, fitting.py): against a
brute force of every chain, the counted DP's least price is that of the padded chains within the counts,
a counted pricer's upper estimate lies above every chain that fits (the bound stays valid) and below the
plain pricer's where an over-using chain was the best, and the chain it finds fits."""

import itertools

import numpy as np
import pytest

from hetc.partitioner.bounds import colgen, fitting
from hetc.partitioner.bounds.aggregate import keys
from hetc.partitioner.bounds.colgen import column_bound
from hetc.partitioner.bounds.counted_dp import Counts, counted_chain, counted_dp
from hetc.partitioner.bounds.fitting import Fitting
from hetc.partitioner.bounds.price_dp import free_dp
from hetc.partitioner.bounds.pricing import KeyPricer, Worth
from hetc.partitioner.bounds.stage_costs import StageCosts
from hetc.partitioner.estimate.batches import Regimes
from hetc.partitioner.estimate.tables import Tables, kinds_of
from hetc.scheduling import Phase
from tests.brute_force import best_per_set, best_reduced_cost, best_with_pools, options
from tests.fixtures.fleets import WL, many_type_cluster


def _padded_least(u0: np.ndarray, pk: np.ndarray, row: int, lo: int, hi: int, ok) -> float:
    """The least price of a padded chain (free_dp's: stage i ends at e_i ≥ its start max(u0, 1) ≤ e_{i−1})
    of lo … hi stages whose kinds pass `ok`, by enumeration."""
    K, _, U1 = u0.shape
    best = np.inf
    for n in range(lo, hi + 1):
        for ks in itertools.product(range(K), repeat=n):
            if not ok(ks):
                continue
            for ends in itertools.combinations_with_replacement(range(1, U1), n - 1):
                e = list(ends) + [U1 - 1]
                if u0[ks[0], row, e[0]] == 0 and all(u0[ks[i], row, e[i]] <= e[i - 1] for i in range(1, n)):
                    best = min(best, float(pk[list(ks)].sum()))
    return best


def test_counted_dp_is_the_padded_dp_within_the_counts():
    """Random first starts, prices, types and tp: with no type counted it is free_dp; with both counted, the
    least padded chain within the counts, and the chain it backtracks fits at no more than that price."""
    rng = np.random.default_rng(0)
    limit, bound_some = np.array([2, 3]), 0
    for _ in range(60):
        K, L, U = int(rng.integers(1, 5)), int(rng.integers(1, 3)), int(rng.integers(2, 6))
        u0 = np.stack([np.stack([np.maximum(0, np.arange(U + 1) - int(rng.integers(1, U + 1))) for _ in range(L)]) for _ in range(K)])
        pk, type_of, tp = rng.uniform(0.5, 2.0, K), rng.integers(0, 2, K), rng.choice([1, 2], K)
        lo, hi = int(rng.integers(1, 3)), int(rng.integers(2, 5))
        assert np.allclose(counted_dp(u0, pk, Counts((), limit, type_of, tp), lo, hi)[1], free_dp(u0, pk, lo, hi)[1])
        counts = Counts((0, 1), limit, type_of, tp)
        got = counted_dp(u0, pk, counts, lo, hi)[1]

        def fits(ks, type_of=type_of, tp=tp):
            return not (np.bincount(type_of[list(ks)], weights=tp[list(ks)], minlength=2) > limit).any()

        for row in range(L):
            want = _padded_least(u0, pk, row, lo, hi, fits)
            assert got[row] == pytest.approx(want) if np.isfinite(want) else not np.isfinite(got[row])
            bound_some += np.isfinite(want) and want > _padded_least(u0, pk, row, lo, hi, lambda ks: True) + 1e-12
            if np.isfinite(got[row]):
                (ks, _), _ = counted_chain(u0[:, row : row + 1], pk, np.arange(K), counts, lo, hi, got[row])
                assert fits(ks) and pk[list(ks)].sum() <= got[row] * (1 + 1e-9)
    assert bound_some >= 5  # the counts bound the least price on some rows


@pytest.mark.parametrize("phase", [Phase.BOTH, Phase.DECODE])
def test_counted_pricing_bounds_every_fitting_chain(tmp_path, tiny, monkeypatch, phase):
    """Three types of 2, 1 and 1 devices; prices that make the one-device types cheap: the counted pricer's
    (and Fitting's) upper estimate is above the best reduced cost of every chain that fits, its chain fits
    and attains at least that best; on some keys the plain pricer's best chain over-used a type and the
    counted upper estimate is below it."""
    monkeypatch.setattr(fitting, "COUNT_STATES", 64)
    cluster = many_type_cluster(tmp_path, 3)
    costs = StageCosts(Tables(tiny.units, WL), kinds_of(cluster), cluster)
    every = tuple(range(len(costs.types)))
    rng = np.random.default_rng(3)
    checked = tighter = 0
    for key in keys(phase, 4, 40, Regimes(WL, phase, 40)):
        plain = KeyPricer(costs, key, tp_groups=phase == Phase.BOTH)
        if not len(plain.cand):
            continue
        free = plain.rate / plain.cand[0]
        for _ in range(2):
            prices = rng.uniform(0.02, 0.4, len(costs.kinds)) * free * costs.tp
            want = best_reduced_cost(plain, prices, Worth(0.7), fits=True)
            for pricer in (plain.counted(every), Fitting(KeyPricer(costs, key, tp_groups=phase == Phase.BOTH))):
                got = pricer.price(prices, 0.7, -np.inf, 0.0)
                assert got.upper >= want - 1e-9 * abs(want), key
                if not np.isfinite(want):
                    continue
                assert got.chain is not None and got.found >= want - 1e-9 * abs(want), key
                used = np.bincount(costs.type_of[list(got.chain[0])], weights=costs.tp[list(got.chain[0])], minlength=len(every))
                assert (used <= costs.devices).all(), key
                checked += 1
            loose = plain.price(prices, 0.7, -np.inf, 0.0)
            tighter += np.isfinite(want) and got.upper < loose.upper * (1 - 1e-6)
    assert checked >= 8 and tighter >= 2


def test_counting_after_convergence_keeps_the_bound_above_the_best_plan(tmp_path, tiny, monkeypatch):
    """With fitting.COUNT_STATES set, column generation drops the columns that do not fit once it has
    converged and prices on within the counts: the bound still lies above the brute-force best plan, and
    no column of its master takes more devices of a type than exist."""
    cluster = many_type_cluster(tmp_path, 3, 1)
    want = best_with_pools(best_per_set(options(tiny.units, cluster, WL, tp=True, phases=tuple(Phase))))
    tables = Tables(tiny.units, WL)
    devices = sum(n.count for n in cluster.nodes)
    masters: list = []
    real = colgen._master

    def recording(cols, *args):
        masters.append(list(cols))
        return real(cols, *args)

    monkeypatch.setattr(colgen, "_master", recording)
    plain = column_bound(tables, kinds_of(cluster), cluster, min(len(tiny.units), devices), 4096)
    assert any((c.devices > StageCosts(tables, kinds_of(cluster), cluster).devices).any() for c in max(masters, key=len))  # some column over-uses
    masters.clear()
    monkeypatch.setattr(fitting, "COUNT_STATES", 64)
    got = column_bound(tables, kinds_of(cluster), cluster, min(len(tiny.units), devices), 4096)
    assert want * (1 - 1e-9) <= got.value <= plain.value * (1 + 1e-9)
    N = StageCosts(tables, kinds_of(cluster), cluster).devices
    assert not any((c.devices > N).any() for c in masters[-1])
