"""Where the steps are full (past the first chunk regime's top) the bound prices a stage at one floor per
sequence (budget_floor.py): it must never cost more than the stage's own round at any batch and micro-batch
count, on every catalog profile and under every data-parallel budget, and Regimes must stop cutting batches
there; the first-pass keys then run to the ceiling in one."""

from dataclasses import replace

import numpy as np
import pytest

from hetc.cluster import Node, load_profile, profile_names, resolve_link
from hetc.partitioner.capture.capture import capture
from hetc.partitioner.cost_models.envelope import bound_node
from hetc.partitioner.estimate.batches import Regimes
from hetc.partitioner.bounds.aggregate import keys
from hetc.partitioner.estimate.budget_floor import SHORT, floor_points, floor_seats, floored
from hetc.partitioner.estimate.simulate import Round, Workload, _seat_life, unit_round_costs
from hetc.partitioner.estimate.tables import Kind, Tables
from hetc.scheduling import Phase
from tests.conftest import FIXTURES

WL = Workload(96, 40, "bf16", "bf16", prefill_chunk=64)
PAST = [65, 66, 90, 127, 128, 129, 200, 255, 256, 300, 511, 700, 1000, 2049]


@pytest.fixture(scope="module")
def tiny():
    return capture(str(FIXTURES / "tiny-llama"), dtype="bf16")


@pytest.mark.parametrize("name", profile_names())
@pytest.mark.parametrize("phase", [Phase.BOTH, Phase.DECODE])
def test_the_floor_never_costs_more_than_a_round(tiny, name, phase):
    """At any batch and micro-batch count, for every stage (range of units; one unit's cost per sequence
    alone may rise a little within a regime where its stage's does not): the floor holds everywhere, the
    bound uses it where the steps are full."""
    node = Node("a", load_profile(name), 8, resolve_link("nvlink4", "test", "link"))
    U = len(tiny.units)
    i, j = np.triu_indices(U + 1, 1)  # every stage [i, j)
    for ranks in (1, 2):  # a budget twice as large (as a data-parallel group's whose ranks each fill theirs)
        wl = replace(WL, prefill_chunk=WL.prefill_chunk * ranks)
        tables = Tables(tiny.units, wl)
        kind = Kind(node.profile, 1, node.link, (node,), 8)
        per_seq, per_seq_over = tables._floor(kind, phase)
        floor = np.r_[0.0, np.cumsum(per_seq)]
        points = floor_points(wl, phase)
        messages_floor, tokens_floor = min(r.messages / s for s, r in points), min(r.tokens / s for s, r in points)
        for m in (1, 2, 3):
            for batch in sorted({b * ranks for b in PAST} | set(range(1, 70))):
                r = Round.of(wl, batch, m, phase)
                want, want_over = unit_round_costs(tiny.units, bound_node(node), 1, wl, r)
                busy = np.r_[0.0, np.cumsum(want)]
                assert ((floor[j] - floor[i] + per_seq_over) * batch <= (busy[j] - busy[i] + want_over) * (1 + 1e-12)).all(), (ranks, m, batch)
                assert messages_floor * batch <= r.messages * (1 + 1e-12) and tokens_floor * batch <= r.tokens * (1 + 1e-12), (ranks, m, batch)
                if floored(wl, m, batch, phase):
                    cost, over = tables.unit_costs(kind, m, batch, phase, floor=True)
                    assert (cost == per_seq * batch).all() and over == per_seq_over * batch, (ranks, m, batch)
                    want_traffic = (messages_floor * batch * SHORT, tokens_floor * batch * SHORT)
                    assert np.allclose(tables.traffic(m, batch, phase, 1, floor=True), want_traffic, rtol=1e-12)


def test_floor_points_sit_at_the_top_of_every_chunk_regime():
    """One point per number of chunks a prompt is prefilled in, each the largest seats of its count."""
    seats = [s for s, _ in floor_points(WL, Phase.BOTH)]
    chunks = [_seat_life(WL, s)[1] for s in seats]
    assert chunks == sorted(set(chunks)) and seats[-1] == WL.step_budget
    for s, r in zip(seats[:-1], chunks):
        assert _seat_life(WL, s * (1 + 1e-9))[1] > r
    assert [s for s, _ in floor_points(WL, Phase.DECODE)] == [WL.step_budget]


def test_regimes_keep_one_run_where_the_steps_are_full():
    """Past n·s₁ (the first chunk regime's top; decode pools: the budget) nothing but the floor prices a
    batch: one run from there to the ceiling, and a class of lengths is not split into single lengths by
    the chunks there."""
    assert floor_seats(WL, Phase.DECODE) == WL.step_budget and floor_seats(WL, Phase.BOTH) < WL.step_budget
    for phase in (Phase.BOTH, Phase.DECODE):
        regimes = Regimes(WL, phase, 5000)
        for n in (1, 2, 5):
            runs = regimes.runs(n, 1, 5000)
            assert runs[-1] == (int(n * floor_seats(WL, phase)) + 1, 5000) == (regimes.floor_from(n), 5000)
            assert all(not floored(WL, n, hi, phase) for _, hi in runs[:-1])
        assert regimes.shared(1, 2, 2 * WL.step_budget + 1, 5000)


def test_keys_run_to_the_ceiling_in_one_where_the_steps_are_full():
    """One first-pass key per class from n·s₁ up (octaves there would repeat its tok/s at the floor), and
    every batch of every class still in exactly one key."""
    for phase in (Phase.BOTH, Phase.DECODE):
        regimes = Regimes(WL, phase, 5000)
        got = keys(phase, 5, 5000, regimes)
        for n in range(1, 6):
            mine = sorted((k.batch, k.top) for k in got if k.lo <= n <= k.hi)
            covered = [b for lo, hi in mine for b in range(lo, hi + 1)]
            assert covered == list(range(1, 5001)), (phase, n)
            assert sum(1 for b, _ in mine if b >= regimes.floor_from(n)) <= 1 and mine[-1][1] == 5000
