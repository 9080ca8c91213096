"""Counting over-used types as groups first (counted_dp.Counts over groups, fitting.Fitting.refined) and counts
kept across key splits: a group's digit holds the least padded chain within the group's summed devices (a
relaxation between no counts and counting each type apart), Fitting counts new over-used types together and
splits out a type the chain still over-uses, and column generation counting this way stays above the
brute-force best plan and below its bound without counts."""

import itertools

import numpy as np
import pytest

from hetc.partitioner.bounds import fitting
from hetc.partitioner.bounds.aggregate import keys
from hetc.partitioner.bounds.colgen import column_bound
from hetc.partitioner.bounds.counted_dp import Counts, counted_chain, counted_dp
from hetc.partitioner.bounds.fitting import Fitting
from hetc.partitioner.bounds.price_dp import free_dp
from hetc.partitioner.bounds.pricing import KeyPricer
from hetc.partitioner.bounds.stage_costs import StageCosts
from hetc.partitioner.estimate.batches import Regimes
from hetc.partitioner.estimate.tables import Tables, kinds_of
from hetc.scheduling import Phase
from tests.brute_force import best_per_set, best_with_pools, options
from tests.fixtures.fleets import WL, many_type_cluster


def _least(u0: np.ndarray, pk: np.ndarray, row: int, lo: int, hi: int, ok) -> float:
    """The least price of a padded chain (free_dp's) of lo … hi stages whose kinds pass `ok`, by enumeration."""
    K, _, U1 = u0.shape
    best = np.inf
    for n in range(lo, hi + 1):
        for ks in itertools.product(range(K), repeat=n):
            if ok(ks):
                for ends in itertools.combinations_with_replacement(range(1, U1), n - 1):
                    e = list(ends) + [U1 - 1]
                    if u0[ks[0], row, e[0]] == 0 and all(u0[ks[i], row, e[i]] <= e[i - 1] for i in range(1, n)):
                        best = min(best, float(pk[list(ks)].sum()))
    return best


def test_a_group_digit_is_the_padded_dp_within_the_groups_devices():
    """Random first starts, prices, types and tp: two types counted as one group give the least padded chain
    whose devices of both together are within their sum; between free_dp and counting them apart, strictly on
    some rows; and the chain backtracked keeps the group's sum at no more than that price."""
    rng = np.random.default_rng(1)
    limit, between = np.array([1, 2]), 0
    for _ in range(80):
        K, L, U = int(rng.integers(2, 5)), int(rng.integers(1, 3)), int(rng.integers(3, 6))
        u0 = np.stack([np.stack([np.maximum(0, np.arange(U + 1) - int(rng.integers(1, U))) for _ in range(L)]) for _ in range(K)])
        pk, type_of, tp = rng.uniform(0.5, 2.0, K), rng.integers(0, 2, K), rng.choice([1, 2], K)
        lo, hi = int(rng.integers(1, 3)), int(rng.integers(3, 5))
        group = Counts(((0, 1),), limit, type_of, tp)
        got = counted_dp(u0, pk, group, lo, hi)[1]
        apart = counted_dp(u0, pk, Counts((0, 1), limit, type_of, tp), lo, hi)[1]
        free = free_dp(u0, pk, lo, hi)[1]

        def within(ks, type_of=type_of, tp=tp):
            return float(tp[list(ks)].sum()) <= limit.sum()

        for row in range(L):
            want = _least(u0, pk, row, lo, hi, within)
            assert got[row] == pytest.approx(want) if np.isfinite(want) else not np.isfinite(got[row])
            assert free[row] <= got[row] * (1 + 1e-12) and got[row] <= apart[row] * (1 + 1e-12)
            between += bool(np.isfinite(got[row]) and free[row] < got[row] < apart[row])
            if np.isfinite(got[row]):
                (ks, _), _ = counted_chain(u0[:, row : row + 1], pk, np.arange(K), group, lo, hi, got[row])
                assert within(ks) and pk[list(ks)].sum() <= got[row] * (1 + 1e-9)
    assert between >= 3


def test_fitting_counts_new_types_together_and_splits_out_one_still_over_used(tmp_path, tiny):
    """Types a chain over-uses that are not counted yet become one group; a type of a group a chain still
    over-uses gets a digit of its own; a pricer made from a split key's starts from that key's counts."""
    cluster = many_type_cluster(tmp_path, 3)
    costs = StageCosts(Tables(tiny.units, WL), kinds_of(cluster), cluster)
    key = next(k for k in keys(Phase.BOTH, 4, 40, Regimes(WL, Phase.BOTH, 40)) if len(KeyPricer(costs, k, tp_groups=True).cand))
    fit = Fitting(KeyPricer(costs, key, tp_groups=True))
    assert fit.refined((0, 2)) == ((0, 2),)
    fit.counted = ((0, 2),)
    assert fit.refined((0,)) == ((0,), (2,))
    assert fit.refined((1,)) == ((0, 2), (1,))
    assert fit.states(((0, 2),)) == 2 + 1 + 1 and fit.states(((0,), (2,))) == 3 * 2
    child = Fitting(KeyPricer(costs, key, tp_groups=True), like=fit)
    assert child.counted == ((0, 2),) and child.now.counts is not None


def test_grouped_counting_bounds_the_best_plan_below_the_plain_bound(tmp_path, tiny, monkeypatch):
    """A tiny fleet whose pipelines over-use its types without counts: column generation counting (groups
    first) ends above the brute-force best plan and strictly below its bound without counts."""
    cluster = many_type_cluster(tmp_path, 3, 1)
    want = best_with_pools(best_per_set(options(tiny.units, cluster, WL, tp=True, phases=tuple(Phase))))
    tables = Tables(tiny.units, WL)
    devices = sum(n.count for n in cluster.nodes)
    plain = column_bound(tables, kinds_of(cluster), cluster, min(len(tiny.units), devices), 4096)
    monkeypatch.setattr(fitting, "COUNT_STATES", 64)
    got = column_bound(tables, kinds_of(cluster), cluster, min(len(tiny.units), devices), 4096)
    assert want * (1 - 1e-9) <= got.value < plain.value * (1 - 1e-6)


def test_counted_rows_the_uncounted_dp_prices_past_their_cap_are_not_counted(tmp_path, tiny):
    """KeyPricer._dp with counts: on rows whose uncounted least price already reaches the cap, no count states
    are priced (less work than counting every row), and every row's value is still a lower bound on the counted
    least price, equal to it (and its chain's price) where that is below the cap."""
    cluster = many_type_cluster(tmp_path, 3)
    costs = StageCosts(Tables(tiny.units, WL), kinds_of(cluster), cluster)
    every = tuple(range(len(costs.types)))
    rng = np.random.default_rng(5)
    skipped = 0
    for key in keys(Phase.BOTH, 4, 40, Regimes(WL, Phase.BOTH, 40)):
        plain = KeyPricer(costs, key, tp_groups=True)
        if len(plain.cand) < 4:
            continue
        counted = plain.counted(every)
        prices = rng.uniform(0.02, 0.4, len(costs.kinds)) * plain.rate / plain.cand[0] * costs.tp
        Rs = plain.cand[np.linspace(0, len(plain.cand) - 1, 4).astype(int)]
        free_low = plain._dp(Rs, prices, np.full(len(Rs), np.inf))[0]
        exact, exact_found, every_row = counted._dp(Rs, prices, np.full(len(Rs), np.inf))
        cap = np.where(np.arange(len(Rs)) % 2 == 0, free_low * (1 - 1e-6), np.inf)
        low, found, work = counted._dp(Rs, prices, cap)
        assert (low <= exact * (1 + 1e-12) + 1e-12).all()
        below = exact < cap
        assert np.allclose(low[below], exact[below]) and np.allclose(found[below], exact_found[below])
        if np.isfinite(free_low[::2]).any():
            assert work < every_row
            skipped += 1
    assert skipped >= 2
