"""Batches as engines run them: the properties the bound's batch intervals rely on, on every
catalog profile, and the ceiling and interval helpers."""

import pytest

from hetc.cluster import Node, load_profile, profile_names, resolve_link
from hetc.partitioner.batches import batch_ceiling, octaves, search
from hetc.partitioner.capture import capture
from hetc.partitioner.simulate import Round, Workload, unit_round_costs
from hetc.partitioner.tables import Kind, Tables
from hetc.scheduling import Phase
from tests.conftest import FIXTURES, two_type_cluster

WL = Workload(96, 40, "bf16", "bf16", prefill_chunk=64)


@pytest.fixture(scope="module")
def tiny():
    return capture(str(FIXTURES / "tiny-llama"), dtype="bf16")


def _busy(units, node, tp, batch, m, phase):
    cost, over = unit_round_costs(units, node, tp, WL, Round.of(WL, batch, m, phase))
    return sum(cost) + over


@pytest.mark.parametrize("name", [p for p in profile_names() if p != "cpu"])
@pytest.mark.parametrize("phase", [Phase.BOTH, Phase.DECODE])
def test_round_cost_grows_with_batch_and_micro_batches(tiny, name, phase):
    """busy(b, m) ≤ busy(b', m') for b ≤ b', m ≤ m': what lets the cost at an interval's first
    batch stand for every batch of it (batches.py)."""
    link = resolve_link("nvlink4", "test", "link")
    for tp in (1, 4):
        node = Node("a", load_profile(name), 8, link)
        batches = list(range(1, 40)) + [63, 64, 65, 200, 511, 512, 513, 3000]
        for b in batches:
            for m in sorted({1, 2, 3, min(b, 8), b} & set(range(1, b + 1))):
                here = _busy(tiny.units, node, tp, b, m, phase)
                assert _busy(tiny.units, node, tp, b + 1, m, phase) >= here * (1 - 1e-12), (name, tp, b, m)
                if m < b:
                    assert _busy(tiny.units, node, tp, b, m + 1, phase) >= here * (1 - 1e-12), (name, tp, b, m)


def test_memory_fit_shrinks_with_batch(tmp_path, tiny):
    cluster = two_type_cluster(tmp_path, "0.8 MB", "2 MB")
    tables = Tables(tiny.units, WL)
    node = cluster.nodes[0]
    kind = Kind(node.profile, 1, node.link, (node,), 2)
    for phase in (Phase.BOTH, Phase.PREFILL):
        prev = tables.fits(kind, 1, phase)
        for b in range(2, 80):
            cur = tables.fits(kind, b, phase)
            assert not (cur & ~prev).any(), b  # nothing fits at b that did not at b − 1
            prev = cur


def test_octaves_cover_every_batch_once():
    for ceiling in (1, 2, 7, 8, 100, 4096, 5000):
        got = [b for lo, hi in octaves(ceiling) for b in range(lo, hi + 1)]
        assert got == list(range(1, ceiling + 1))


def test_ceiling_is_the_cap_or_what_memory_admits(tmp_path, tiny):
    cluster = two_type_cluster(tmp_path, "0.8 MB", "2 MB")
    admits = batch_ceiling(tiny.units, cluster, WL)
    assert batch_ceiling(tiny.units, cluster, WL, max_num_seqs=3) == 3
    assert batch_ceiling(tiny.units, cluster, WL, max_num_seqs=admits + 100) == admits
    bigger = two_type_cluster(tmp_path, "1.6 MB", "4 MB")
    assert batch_ceiling(tiny.units, bigger, WL) > admits


def test_search_finds_the_largest_batch_that_fits_and_the_best():
    """A made-up chain that fits up to 700 sequences and is best at 523."""
    def evaluate(b):
        return None if b > 700 else -abs(b - 523)

    got = dict(search(evaluate, lambda v: v, ceiling=5000))
    assert 700 in got and 701 not in got
    assert max(got, key=got.get) == 523
    assert len(got) < 60
    small = dict(search(lambda b: None if b > 40 else b, lambda v: v, ceiling=5000))
    assert sorted(small) == list(range(1, 41))  # few enough to try every one
    assert dict(search(evaluate, lambda v: v, ceiling=300)).keys() <= set(range(1, 301))
