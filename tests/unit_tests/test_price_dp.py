"""price_dp.free_dp (chains padded with empty stages, one lookup per stage) against the exact typed DP:
where every link is within R it gives, for a class of lo … hi stages, the least over real chains of
n ≤ hi stages of their price plus max(0, lo − n) of the cheapest kind's price; and the chain it
backtracks is a real one of at most hi stages, within R, at no more than that price."""

import numpy as np
import pytest

from hetc.partitioner.bounds.aggregate import keys
from hetc.partitioner.estimate.batches import Regimes
from hetc.partitioner.bounds.price_dp import free_chain, free_dp, typed_dp
from hetc.partitioner.bounds.pricing import KeyPricer
from hetc.partitioner.bounds.stage_costs import SLACK, StageCosts
from hetc.partitioner.estimate.tables import Tables, kinds_of
from hetc.scheduling import Phase
from tests.fixtures.fleets import WL, many_type_cluster


def _priced_keys(costs: StageCosts, phase: Phase):
    """(key, its pricer, its most stages, six candidate bottlenecks) for each key of short pipelines with any."""
    for key in keys(phase, 4, 40, Regimes(WL, phase, 40)):
        pricer = KeyPricer(costs, key, tp_groups=phase == Phase.BOTH)
        if len(pricer.cand):
            yield key, pricer, min(key.hi, costs.u), pricer.cand[np.linspace(0, len(pricer.cand) - 1, 6).astype(int)]


@pytest.mark.parametrize("types", [2, 3])
@pytest.mark.parametrize("phase", [Phase.BOTH, Phase.DECODE])
def test_free_dp_is_the_padded_exact_dp(tmp_path, tiny, types, phase):
    cluster = many_type_cluster(tmp_path, types)
    costs = StageCosts(Tables(tiny.units, WL), kinds_of(cluster), cluster)
    rng = np.random.default_rng(types)
    checked = 0
    for key, pricer, hi, Rs in _priced_keys(costs, phase):
        u0 = pricer._reach_u0(Rs)
        pk = rng.uniform(0.5, 2.0, len(pricer.kinds))
        every = np.ones((len(Rs), pricer.T, pricer.T), dtype=bool)
        _, got, _ = free_dp(u0, pk, key.lo, hi)
        exact = np.stack([typed_dp(u0, pk, pricer.type_of, pricer.T, every, n, n)[1] for n in range(1, hi + 1)])  # [n, L]
        want = (exact + np.maximum(0, key.lo - np.arange(1, hi + 1))[:, None] * pk.min()).min(axis=0)
        assert got == pytest.approx(want, rel=1e-12), key
        for row, R in enumerate(Rs):
            if not np.isfinite(got[row]) or not (pricer.case.cheapest <= R * (1 + SLACK)).all():
                continue
            (ks, cuts), _ = free_chain(u0[:, row : row + 1], pk, pricer.kinds, key.lo, hi, got[row])
            assert 1 <= len(ks) <= hi and cuts[0] == 0 and cuts[-1] == costs.u and all(a < b for a, b in zip(cuts, cuts[1:]))
            price = sum(pk[list(pricer.kinds).index(g)] for g in ks)
            assert price <= got[row] * (1 + 1e-12)
            case = pricer.case
            busy = max(case.P[g, b] - case.P[g, a] + case.over[g] for g, a, b in zip(ks, cuts, cuts[1:]))
            assert busy <= R * (1 + 1e-9) and all(b <= case.jfit[g, a] for g, a, b in zip(ks, cuts, cuts[1:]))
            checked += 1
    assert checked >= 6


def _dominated_pair_cluster(tmp_path):
    """Three types, one of which ("fast+") has more memory and bandwidth than "fast": a kind that
    dominates another wherever it costs no more."""
    from hetc.cluster import load_cluster
    from tests.conftest import PROFILE

    for name, memory, bw, flops in (
        ("fast", "0.8 MB", "40 GB/s", "4 TFLOP/s"),
        ("fastplus", "1.2 MB", "50 GB/s", "4 TFLOP/s"),
        ("big", "2 MB", "10 GB/s", "0.5 TFLOP/s"),
    ):
        (tmp_path / f"{name}.yaml").write_text(PROFILE.format(name=name, vendor="nvidia", backend="cuda", memory=memory, bw=bw, flops=flops))
    (tmp_path / "c.yaml").write_text(
        "nodes:\n  - {name: a, device: ./fast.yaml, count: 2, link: pcie4}\n"
        "  - {name: p, device: ./fastplus.yaml, count: 1}\n  - {name: b, device: ./big.yaml, count: 1}\n"
        "network: {default: ethernet-10g}\n"
    )
    return load_cluster(tmp_path / "c.yaml")


@pytest.mark.parametrize("phase", [Phase.BOTH, Phase.DECODE])
def test_dominated_kinds_leave_the_free_dp_unchanged(tmp_path, tiny, phase):
    """KeyPricer._dp leaves out kinds that another kind dominates at the prices given (no dearer, holds
    every range in memory, no busier on any unit): its least prices equal free_dp's over every kind, on
    rows where every link is within R, and some kinds were left out."""
    cluster = _dominated_pair_cluster(tmp_path)
    costs = StageCosts(Tables(tiny.units, WL), kinds_of(cluster), cluster)
    rng = np.random.default_rng(7)
    left_out = checked = 0
    for key, pricer, hi, Rs in _priced_keys(costs, phase):
        Rs = Rs[(pricer.case.cheapest[None] <= Rs[:, None, None] * (1 + SLACK)).all(axis=(1, 2))]
        for _ in range(3):
            prices = rng.uniform(0.5, 2.0, len(costs.kinds))
            low, best, _ = pricer._dp(Rs, prices, np.full(len(Rs), np.inf))
            _, want, _ = free_dp(pricer._reach_u0(Rs), prices[pricer.kinds], key.lo, hi)
            assert best == pytest.approx(want, rel=1e-12) and low == pytest.approx(want, rel=1e-12), key
            left_out += len(pricer.kinds) - len(pricer._undominated(prices[pricer.kinds]))
            checked += len(Rs)
    assert checked >= 6 and left_out > 0


@pytest.mark.parametrize("phase", list(Phase))
def test_memory_and_links_of_a_case_count_every_range(tmp_path, tiny, phase):
    """StageCosts.memory's furthest ends (one sorted search over every kind) are those of counting, per
    start, the ranges that hold the batch; .links' busy seconds per cut those of Round.link_time over
    each path between two types, the fastest."""
    from hetc.partitioner.estimate.simulate import Round

    cluster = many_type_cluster(tmp_path, 3)
    tables = Tables(tiny.units, WL)
    costs = StageCosts(tables, kinds_of(cluster), cluster)
    u = costs.u
    for batch in (1, 2, 5, 17, 100, 10_000):
        got = costs.memory(phase, batch)
        for g, kind in enumerate(costs.kinds):
            ks = (tables.most(kind, phase)[:u, 1:] >= batch).sum(axis=1)
            assert (got.jfit[g] == np.arange(u) + ks).all(), (batch, kind.name)
            assert np.isinf(got.P[g]).all() == (not ks.any() or (phase != Phase.BOTH and kind.tp > 1))
    for batch, m in ((1, 1), (8, 2), (40, 3)):
        link, cheapest = costs.links(phase, batch, m)
        r = Round.of(WL, batch, m, phase)
        for (a, b), paths in costs.paths.items():
            for cut in range(1, u):
                want = min(r.link_time(costs.out_bytes[cut - 1], p) for p in paths)
                assert link[a, b, cut] == pytest.approx(want, rel=1e-12, abs=1e-18)
            assert cheapest[a, b] == link[a, b, 1:u].min()
