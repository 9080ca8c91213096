"""Past the token budget the bound prices a stage at one floor per sequence (budget_floor.py): it must
never cost more than the stage's own round at any batch and micro-batch count there, on every catalog
profile and under every data-parallel budget, and Regimes must stop cutting batches there."""

from dataclasses import replace

import numpy as np
import pytest

from hetc.cluster import Node, load_profile, profile_names, resolve_link
from hetc.partitioner.capture.capture import capture
from hetc.partitioner.cost_models.envelope import bound_node
from hetc.partitioner.estimate.batches import Regimes
from hetc.partitioner.estimate.budget_floor import floor_points, past_budget
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
def test_the_floor_never_costs_more_than_a_round_past_the_budget(tiny, name, phase):
    node = Node("a", load_profile(name), 8, resolve_link("nvlink4", "test", "link"))
    for ranks in (1, 2):  # a budget twice as large (as a data-parallel group's whose ranks each fill theirs)
        wl = replace(WL, prefill_chunk=WL.prefill_chunk * ranks)
        tables = Tables(tiny.units, wl)
        kind = Kind(node.profile, 1, node.link, (node,), 8)
        for m in (1, 2, 3):
            for batch in (b * ranks for b in PAST):
                if not past_budget(wl, m, batch, phase):
                    continue
                cost, over = tables.unit_costs(kind, m, batch, phase, floor=True)
                r = Round.of(wl, batch, m, phase)
                want, want_over = unit_round_costs(tiny.units, bound_node(node), 1, wl, r)
                assert (cost <= np.array(want) * (1 + 1e-12)).all() and over <= want_over * (1 + 1e-12), (ranks, m, batch)
                messages, tokens = tables.traffic(m, batch, phase, 1, floor=True)
                assert messages <= r.messages * (1 + 1e-12) and tokens <= r.tokens * (1 + 1e-12), (ranks, m, batch)


def test_floor_points_sit_at_the_top_of_every_chunk_regime():
    """One point per number of chunks a prompt is prefilled in, each the largest seats of its count."""
    seats = [s for s, _ in floor_points(WL, Phase.BOTH)]
    chunks = [_seat_life(WL, s)[1] for s in seats]
    assert chunks == sorted(set(chunks)) and seats[-1] == WL.step_budget
    for s, r in zip(seats[:-1], chunks):
        assert _seat_life(WL, s * (1 + 1e-9))[1] > r
    assert [s for s, _ in floor_points(WL, Phase.DECODE)] == [WL.step_budget]


def test_regimes_keep_one_run_past_the_budget():
    """Past the budget nothing but the floor prices a batch: one run from there to the ceiling, and a
    class of lengths is not split into single lengths by the chunks there."""
    for phase in (Phase.BOTH, Phase.DECODE):
        regimes = Regimes(WL, phase, 5000)
        for n in (1, 2, 5):
            runs = regimes.runs(n, 1, 5000)
            assert runs[-1] == (n * WL.step_budget + 1, 5000)
            assert all(not past_budget(WL, n, hi, phase) for _, hi in runs[:-1])
        assert regimes.shared(1, 2, 2 * WL.step_budget + 1, 5000)
