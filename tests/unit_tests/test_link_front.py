"""StageCosts prices a link between two types at its least time over their paths, messages·latency +
bytes·(1/bandwidth) with both factors ≥ 0: only each pair's Pareto front of (latency, 1/bandwidth) can be
the least, so the front alone gives the same link times (gen25 of the generated clusters: 36 paths a pair,
1 on the front; the links were the bound's costliest step)."""

from __future__ import annotations

import numpy as np

from hetc.partitioner.bounds.stage_costs import _front


def test_the_front_gives_every_least_link_time_and_keeps_no_dominated_path():
    rng = np.random.default_rng(7)
    for _ in range(200):
        n = int(rng.integers(1, 40))
        paths = [(float(rng.choice([1e-6, 2e-6, 5e-6, 1e-5])), float(rng.choice([1e-11, 4e-11, 1e-10]))) for _ in range(n)]
        front = _front(paths)
        assert set(front) <= set(paths)
        for a in front:  # no kept pair is at most another in both
            assert not any(b != a and b[0] <= a[0] and b[1] <= a[1] for b in front)
        for messages, nbytes in [(0.0, 1e6), (3.0, 0.0), (2.0, 5e5), (float(rng.uniform(0, 10)), float(rng.uniform(0, 1e8)))]:
            assert min(messages * la + nbytes * iv for la, iv in front) == min(messages * la + nbytes * iv for la, iv in paths)
    assert len(_front([(1e-6, 1e-10)] * 36)) == 1
