"""Column generation's pieces against brute force: the device-counting DP and the relaxed pricing."""

import itertools

import numpy as np

from hetc.partitioner.count_pricing import backtrack, cheapest, covers


def _random_instance(seed: int, U: int = 7):
    rng = np.random.default_rng(seed)
    type_of = np.array([0, 0, 1, 2])  # kinds: type 0 at tp 1 and 2, types 1 and 2 at tp 1
    tp = np.array([1, 2, 1, 1])
    devices = np.array([3, 2, 2])
    # reach[g, i]: nondecreasing in i, at least i (a stage may hold nothing)
    reach = np.empty((len(tp), U), dtype=np.int64)
    for g in range(len(tp)):
        steps = rng.integers(0, 3, size=U)
        reach[g] = np.maximum(np.maximum.accumulate(np.minimum(np.arange(U) + steps, U)), np.arange(U))
    allowed = rng.random((3, 3)) < 0.7
    return reach, allowed, type_of, tp, devices


def _brute(reach, allowed, type_of, tp, devices, U):
    """Every chain of kinds within the device counts, each stage holding a unit or more: the
    furthest prefix per (last type, counts)."""
    best = {}
    for n in range(1, int(devices.sum()) + 1):
        for chain in itertools.product(range(len(tp)), repeat=n):
            counts = np.bincount(type_of[list(chain)], weights=tp[list(chain)], minlength=len(devices)).astype(int)
            if (counts > devices).any():
                continue
            j = 0
            for s, g in enumerate(chain):
                if s and (j >= U or not allowed[type_of[chain[s - 1]], type_of[g]]) or reach[g, j] <= j:
                    j = -1  # every stage holds at least one unit
                    break
                j = reach[g, j]
            if j > 0:
                key = (int(type_of[chain[-1]]), tuple(counts))
                best[key] = max(best.get(key, -1), j)
    return best


def test_covers_dominates_brute_force_and_claims_nothing_more():
    """Every chain is matched by a state with the same last type, no more devices of any type
    and at least its prefix; and no state claims a prefix no chain with its counts reaches."""
    U = 7
    for seed in range(6):
        reach, allowed, type_of, tp, devices = _random_instance(seed, U)
        E = covers(reach[None], allowed[None], type_of, tp, devices)[0]
        want = _brute(reach, allowed, type_of, tp, devices, U)
        states = [(t, c) for t in range(3) for c in itertools.product(*(range(d + 1) for d in devices))]
        for (t, c), j in want.items():
            assert any(tt == t and all(a <= b for a, b in zip(cc, c)) and E[(tt, *cc)] >= j for tt, cc in states), seed
        for t, c in states:
            if E[(t, *c)] > 0:
                assert want.get((t, c), -1) >= E[(t, *c)], seed


def test_cheapest_full_cover_and_its_chain():
    U = 7
    price = np.array([3.0, 1.0, 2.0])
    for seed in range(6):
        reach, allowed, type_of, tp, devices = _random_instance(seed, U)
        E = covers(reach[None], allowed[None], type_of, tp, devices)
        want = min((float(np.dot(price, c)) for (t, c), j in _brute(reach, allowed, type_of, tp, devices, U).items()
                    if j >= U), default=np.inf)
        cost, [(t, counts)] = cheapest(E, U, price)
        assert cost[0] == want
        if np.isfinite(want):
            kinds, cuts = backtrack(E[0], reach, allowed, type_of, tp, t, counts, U)
            assert cuts[0] == 0 and cuts[-1] == U and all(a < b for a, b in zip(cuts, cuts[1:]))
            assert all(reach[g, a] >= b for g, a, b in zip(kinds, cuts, cuts[1:]))  # each stage fits
            assert all(allowed[type_of[a], type_of[b]] for a, b in zip(kinds, kinds[1:]))
            use = np.bincount(type_of[list(kinds)], weights=tp[list(kinds)], minlength=3)
            assert (use <= devices).all() and float(np.dot(price, use)) == want
