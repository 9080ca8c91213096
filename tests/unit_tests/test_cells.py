"""The knapsack over device-count vectors against brute force."""

import itertools

import numpy as np
import pytest

from hetc.partitioner.bounds.cells import CountSpace, closure, combine, decompose


def _brute_closure(space: CountSpace, ub: np.ndarray) -> np.ndarray:
    """Every multiset of cells with positive ub (each at most `total` times) whose sum fits."""
    items = [c for c in range(1, len(space)) if ub[c] > 0]
    K = np.zeros(len(space))
    for c in range(len(space)):
        cap = space.cells[c]

        def best(i: int, left: np.ndarray) -> float:
            if i == len(items):
                return 0.0
            v = space.cells[items[i]]
            out = best(i + 1, left)  # no more of item i
            if (v <= left).all():
                out = max(out, ub[items[i]] + best(i, left - v))  # one more of item i
            return out

        K[c] = best(0, cap)
    return K


@pytest.mark.parametrize("seed", range(4))
def test_closure_and_decomposition_match_brute_force(seed):
    rng = np.random.default_rng(seed)
    space = CountSpace(np.array([2, 3, 1]))
    ub = np.where(rng.random(len(space)) < 0.5, rng.random(len(space)) * 10, 0.0)
    ub[0] = 0.0
    K = closure(space, ub)
    assert np.allclose(K, _brute_closure(space, ub))
    for c in range(len(space)):
        picks = decompose(space, ub, K, c)
        assert (space.cells[picks].sum(axis=0) <= space.cells[c]).all() if picks else True
        assert sum(ub[p] for p in picks) == pytest.approx(K[c])


@pytest.mark.parametrize("seed", range(3))
def test_combine_matches_brute_force(seed):
    """Prefill pools under two sets of KV routes (decode pools holding type 0, or not): each split
    takes the set its decode cell opens."""
    rng = np.random.default_rng(seed)
    space = CountSpace(np.array([2, 2, 1]))
    K = {}
    for p in ("both", "decode", "prefill", "prefill, routes inside type 0"):
        ub = np.where(rng.random(len(space)) < 0.6, rng.random(len(space)) * 10, 0.0)
        ub[0] = 0.0
        K[p] = closure(space, ub)
    Kp = np.stack([K["prefill"], K["prefill, routes inside type 0"]])
    route = (space.cells[:, 0] > 0).astype(np.int64)
    value, (c1, c2, c3) = combine(space, K["both"], K["decode"], Kp, route)
    want = 0.0
    for a, b, c in itertools.product(range(len(space)), repeat=3):
        if (space.cells[a] + space.cells[b] + space.cells[c] <= space.devices).all():
            want = max(want, K["both"][a] + min(K["decode"][b], Kp[route[b], c]))
    assert value == pytest.approx(want)
    assert (space.cells[c1] + space.cells[c2] + space.cells[c3] <= space.devices).all()
    assert K["both"][c1] + min(K["decode"][c2], Kp[route[c2], c3]) == pytest.approx(want)
