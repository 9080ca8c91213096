"""Batches as engines run them: the properties the bound's batch intervals rely on (batches.py),
on every catalog profile and on a fitted profile whose curves fall (through its envelope), and
the ceiling, interval and search helpers."""

import math
from dataclasses import replace

import numpy as np
import pytest

from hetc.cluster import Node, load_profile, profile_names, resolve_link
from hetc.efficiency import DecodeAttentionCurve
from hetc.partitioner.estimate.batches import PAST, Regimes, batch_ceiling, octaves, search
from hetc.partitioner.estimate.budget_floor import floor_seats, floored
from hetc.partitioner.capture.capture import capture
from hetc.partitioner.cost_models.analytic import Step, units_time
from hetc.partitioner.cost_models.envelope import bound_node, falling_curves
from hetc.partitioner.estimate.simulate import Round, StagePlan, Workload, _seat_life, estimate_pipeline, unit_round_costs
from hetc.partitioner.estimate.tables import Kind, Tables
from hetc.scheduling import Phase
from tests.conftest import FIXTURES, falling_cluster, two_type_cluster

WL = Workload(96, 40, "bf16", "bf16", prefill_chunk=64)
BATCHES = list(range(1, 40)) + [63, 64, 65, 200, 511, 512, 513, 3000]


@pytest.fixture(scope="module")
def tiny():
    return capture(str(FIXTURES / "tiny-llama"), dtype="bf16")


def _busy(units, node, tp, batch, m, phase, wl=WL):
    cost, over = unit_round_costs(units, node, tp, wl, Round.of(wl, batch, m, phase))
    return sum(cost) + over


def _check_per_sequence(units, node, tp, phase, wl=WL):
    """Within a step regime (batches.Regimes), busy(b, min(n, b)) / b never grows with b for
    pipelines of n stages; busy(b, m) never shrinks as m grows where both prefill in the same chunks."""
    regimes = Regimes(wl, phase, 4000)
    for n in (1, 2, 3, 8):
        for lo, hi in regimes.runs(n, 1, 4000):
            if floored(wl, n, lo, phase):  # one run where the steps are full, priced at the floor (test_budget_floor.py)
                continue
            batches = sorted({lo, lo + 1, (lo + hi) // 2, hi - 1, hi} & set(range(lo, min(hi, 700) + 1)))
            per_seq = [_busy(units, node, tp, b, min(n, b), phase, wl) / b for b in batches]
            assert all(y <= x * (1 + 1e-12) for x, y in zip(per_seq, per_seq[1:])), (node.profile.name, tp, n, batches)
    for b in (5, 64, 65, 513):
        for m in (1, 2, 3, 4):
            if regimes.shared(m, m + 1, b, b) and not floored(wl, m, b, phase):  # floored: priced at the floor, whatever m
                assert _busy(units, node, tp, b, m, phase, wl) <= _busy(units, node, tp, b, m + 1, phase, wl) * (1 + 1e-12)


def test_regimes_break_where_the_step_changes(tiny):
    """Past the token budget a decode batch takes two steps (its weights streamed twice): tok/s
    falls, so no batch interval may hold both sides; the chunks agree with the model's."""
    node = Node("a", load_profile("h100-sxm"), 8, resolve_link("nvlink4", "test", "link"))
    assert _busy(tiny.units, node, 1, 65, 1, Phase.DECODE) / 65 > 1.5 * _busy(tiny.units, node, 1, 64, 1, Phase.DECODE) / 64
    decode = Regimes(WL, Phase.DECODE, 300)
    assert decode.runs(1, 1, 300) == [(1, 1), (2, 64), (65, 300)]  # past the budget: one run, at the floor (budget_floor.py)
    assert decode.runs(2, 1, 300) == [(1, 2), (3, 128), (129, 300)]
    assert decode.runs(8, 1, 300)[0] == (1, 8) and decode.shared(1, 8, 1, 300)
    both = Regimes(WL, Phase.BOTH, 3000)
    for n in (1, 3, 30):
        for b in range(1, 3001, 7):
            k = max(min(n, b), math.ceil(b / WL.prefill_chunk))
            assert both._of(n)[1][0, b] == (PAST if b > n * floor_seats(WL, Phase.BOTH) else _seat_life(WL, b / k)[1]), (n, b)


@pytest.mark.parametrize("name", profile_names())
@pytest.mark.parametrize("phase", [Phase.BOTH, Phase.DECODE])
def test_round_cost_per_sequence_never_grows_on_catalog_profiles(tiny, name, phase):
    """What lets the cost at an interval's top stand for every batch of it (batches.py), as the
    bound costs the profile: itself, or its envelope where a fitted curve falls."""
    link = resolve_link("nvlink4", "test", "link")
    node = Node("a", load_profile(name), 8, link)
    assert (bound_node(node) is node) == (not falling_curves(node.profile))
    for tp in (1, 4):
        _check_per_sequence(tiny.units, bound_node(node), tp, phase)


def test_a_fitted_profile_whose_curves_fall_is_bounded_through_its_envelope(tmp_path):
    tiny32 = capture(str(FIXTURES / "tiny-llama"), dtype="fp32")
    wl = Workload(32, 16, "fp32", "fp32", prefill_chunk=32)
    node = falling_cluster(tmp_path).nodes[0]
    assert falling_curves(node.profile) == ["matmul[fp32]", "memory"]
    env = bound_node(node)
    with pytest.raises(AssertionError):  # the profile itself: a step of 5 rows runs slower per row than one of 4
        _check_per_sequence(tiny32.units, node, 1, Phase.DECODE, wl)
    _check_per_sequence(tiny32.units, env, 1, Phase.DECODE, wl)
    _check_per_sequence(tiny32.units, env, 1, Phase.BOTH, wl)
    for tokens in (1, 3, 4, 5, 6, 17, 64, 500):  # and it never costs more than the profile
        step = Step(tokens, tokens, 20)
        assert units_time(tiny32.units, env.profile, step, dtype="fp32", kv_dtype="fp32") <= units_time(
            tiny32.units, node.profile, step, dtype="fp32", kv_dtype="fp32"
        ) * (1 + 1e-12)


def test_decode_attention_that_falls_with_sequences_is_bounded_through_its_envelope(tmp_path):
    """A fitted decode-attention curve can fall as a step holds more sequences (a CPU's at context
    2048: 0.066 at 16, 0.063 at 64); where attention leads the step, per-sequence cost then grows
    with the batch unless the bound reads the curve's running maximum."""
    tiny32 = capture(str(FIXTURES / "tiny-llama"), dtype="fp32")
    wl = Workload(32, 3000, "fp32", "fp32", prefill_chunk=32)
    base = falling_cluster(tmp_path).nodes[0]
    curves = {
        "matmul": {},
        "memory": None,
        "attention_decode": {"fp32": DecodeAttentionCurve(seqs=[1, 8, 64], ctx=[32, 4096], eff=[[0.01, 0.01], [0.5, 0.5], [0.05, 0.05]])},
    }
    node = replace(base, profile=base.profile.model_copy(update={"efficiency_curves": base.profile.efficiency_curves.model_copy(update=curves)}))
    assert falling_curves(node.profile) == ["attention_decode[fp32]"]
    with pytest.raises(AssertionError):
        _check_per_sequence(tiny32.units, node, 1, Phase.DECODE, wl)
    _check_per_sequence(tiny32.units, bound_node(node), 1, Phase.DECODE, wl)


def test_a_fixed_pipelines_throughput_never_falls_with_its_batch(tmp_path, tiny):
    """T(b) = b / round(b) is nondecreasing for a fixed chain and split (memory aside) within a
    step regime, with the loop term and links included."""
    cluster = two_type_cluster(tmp_path, "1 GB", "1 GB", a_count=2)
    a, b = cluster.nodes
    units = tiny.units
    for stages in (
        [StagePlan(a, 0, len(units) - 1)],
        [StagePlan(a, 0, 3), StagePlan(b, 4, len(units) - 1)],
        [StagePlan(a, 0, 1), StagePlan(b, 2, 5), StagePlan(a, 6, len(units) - 1)],
    ):
        for phase in (Phase.BOTH, Phase.DECODE):
            for lo, hi in Regimes(WL, phase, 300).runs(len(stages), 1, 300):
                if floored(WL, len(stages), lo, phase):  # priced at the floor instead (test_budget_floor.py)
                    continue
                prev = 0.0
                for batch in range(lo, hi + 1):
                    tok = estimate_pipeline(units, stages, cluster, WL, batch, phase).output_tok_s
                    assert tok >= prev * (1 - 1e-12), (len(stages), phase, batch)
                    prev = tok


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


@pytest.mark.parametrize("per_octave", [1, 2, 3, 4])
def test_octaves_cover_every_batch_once(per_octave):
    for ceiling in (1, 2, 7, 8, 100, 4096, 5000):
        parts = octaves(ceiling, per_octave)
        assert [b for lo, hi in parts for b in range(lo, hi + 1)] == list(range(1, ceiling + 1))
        assert all(hi <= 2 * lo for lo, hi in parts)  # never wider than an octave


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


def test_search_tries_the_hints():
    """Best at 611 on a plateau the bisection can't see into: found only through the hint."""

    def evaluate(b):
        return None if b > 700 else (10 if b == 611 else 0)

    assert max(dict(search(evaluate, lambda v: v, ceiling=5000)).values()) == 0
    got = dict(search(evaluate, lambda v: v, ceiling=5000, hints=(611, 9000)))
    assert got[611] == 10 and 9000 not in got


def test_unit_costs_are_kept_per_round_and_past_the_budget_at_its_floor(tmp_path, tiny):
    """Tables runs the cost model once per round: every (m, batch) short of full steps gets what
    unit_round_costs gives for its own round; past them (200 and 513 sequences: more than m × the first
    chunk regime's top, and past the budget) every (m, batch) gets the batch times one floor per sequence,
    run once per phase, and never more than its own round costs (budget_floor.py)."""
    cluster = two_type_cluster(tmp_path, "1 GB", "1 GB")
    tables = Tables(tiny.units, WL)
    kind = Kind(cluster.nodes[0].profile, 1, None, (cluster.nodes[0],), 1)
    node = bound_node(cluster.nodes[0])
    for phase in (Phase.BOTH, Phase.DECODE):
        for batch in (3, 200, 513):
            for m in (1, 2, 3):
                cost, over = tables.unit_costs(kind, m, batch, phase, floor=True)
                want, want_over = unit_round_costs(tiny.units, node, 1, WL, Round.of(WL, batch, m, phase))
                if floored(WL, m, batch, phase):
                    assert (cost <= np.array(want) * (1 + 1e-12)).all() and over <= want_over * (1 + 1e-12)
                    floor, _ = tables.unit_costs(kind, 1, 10 * batch, phase, floor=True)  # one floor per sequence
                    assert cost.tolist() == pytest.approx((floor / 10).tolist(), rel=1e-12)
                else:
                    assert cost.tolist() == pytest.approx(want, rel=1e-12) and over == pytest.approx(want_over, rel=1e-12)
    before = tables.evaluations
    tables.unit_costs(kind, 1, 1000, Phase.BOTH, floor=True)
    assert tables.evaluations == before  # the floor is kept
