"""price_dp.free_dp (chains padded with empty stages, one lookup per stage) against the exact typed DP:
where every link is within R it gives, for a class of lo … hi stages, the least over real chains of
n ≤ hi stages of their price plus max(0, lo − n) of the cheapest kind's price; and the chain it
backtracks is a real one of at most hi stages, within R, at no more than that price."""

import numpy as np
import pytest

from hetc.partitioner.aggregate import keys
from hetc.partitioner.batches import Regimes
from hetc.partitioner.price_dp import free_chain, free_dp, typed_dp
from hetc.partitioner.pricing import KeyPricer
from hetc.partitioner.stage_costs import SLACK, StageCosts
from hetc.partitioner.tables import Tables, kinds_of
from hetc.scheduling import Phase
from tests.unit_tests.test_colgen import WL, many_type_cluster


@pytest.mark.parametrize("types", [2, 3])
@pytest.mark.parametrize("phase", [Phase.BOTH, Phase.DECODE])
def test_free_dp_is_the_padded_exact_dp(tmp_path, tiny, types, phase):
    cluster = many_type_cluster(tmp_path, types)
    costs = StageCosts(Tables(tiny.units, WL), kinds_of(cluster), cluster)
    rng = np.random.default_rng(types)
    checked = 0
    for key in keys(phase, 4, 40, Regimes(WL, phase, 40)):
        pricer = KeyPricer(costs, key, tp_groups=phase == Phase.BOTH)
        if not len(pricer.cand):
            continue
        hi = min(key.hi, costs.u)
        Rs = pricer.cand[np.linspace(0, len(pricer.cand) - 1, 6).astype(int)]
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
            (ks, cuts), _ = free_chain(u0[:, row: row + 1], pk, pricer.kinds, key.lo, hi, got[row])
            assert 1 <= len(ks) <= hi and cuts[0] == 0 and cuts[-1] == costs.u and all(a < b for a, b in zip(cuts, cuts[1:]))
            price = sum(pk[list(pricer.kinds).index(g)] for g in ks)
            assert price <= got[row] * (1 + 1e-12)
            case = pricer.case
            busy = max(case.P[g, b] - case.P[g, a] + case.over[g] for g, a, b in zip(ks, cuts, cuts[1:]))
            assert busy <= R * (1 + 1e-9) and all(b <= case.jfit[g, a] for g, a, b in zip(ks, cuts, cuts[1:]))
            checked += 1
    assert checked >= 6
