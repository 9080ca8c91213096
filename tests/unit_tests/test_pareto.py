"""`hetc pareto`: every swept plan keeps its TPOT ceiling, and the frontier is exactly the
undominated points (checked by pairwise comparison)."""

import csv
import random
import subprocess
import sys

import pytest

from hetc.capacity.pareto import SPECULATIVE, Metric, Point, frontier, sweep
from tests.conftest import FIXTURES, two_type_cluster

MODEL = str(FIXTURES / "tiny-llama")


def _point(user: float, per_device: float, usd: float) -> Point:
    return Point(
        series="aggregated",
        tpot_ceiling_ms=1.0,
        output_tok_s=per_device,
        devices=1,
        tok_s_per_device=per_device,
        tok_s_per_user=user,
        ttft_ms=1.0,
        tpot_ms=1e3 / user,
        usd_per_mtok=usd,
        joule_per_tok=1.0,
        placement="",
    )


def _dominated(p: Point, others: list[Point], metric: Metric) -> bool:
    return any(
        q.tok_s_per_user >= p.tok_s_per_user
        and q.value(metric) >= p.value(metric)
        and (q.tok_s_per_user, q.value(metric)) != (p.tok_s_per_user, p.value(metric))
        for q in others
    )


def test_frontier_is_the_undominated_set():
    rng = random.Random(7)
    for metric in (Metric.PER_DEVICE, Metric.USD):
        points = [_point(rng.choice(range(1, 20)), rng.choice(range(1, 50)), rng.choice(range(1, 9))) for _ in range(60)]
        front = frontier(points, metric)
        assert front, "a non-empty set has a frontier"
        assert not any(_dominated(p, points, metric) for p in front)
        for p in points:
            on = any((q.tok_s_per_user, q.value(metric)) == (p.tok_s_per_user, p.value(metric)) for q in front)
            assert on != _dominated(p, points, metric)
        speeds = [p.tok_s_per_user for p in front]
        assert speeds == sorted(speeds)


def test_sweep_keeps_ceilings_and_the_unconstrained_plan_is_fastest_in_tokens(tmp_path):
    two_type_cluster(tmp_path, "40 MB", "400 MB")
    points = sweep(MODEL, str(tmp_path / "c.yaml"), input_len=64, output_len=32, dtype="fp32", points=4, time_limit=2)
    assert {p.series for p in points} == {"aggregated", "disaggregated", "batch caps"}
    for p in points:
        if p.tpot_ceiling_ms is not None:
            assert p.tpot_ms <= p.tpot_ceiling_ms * (1 + 1e-6)
        assert p.tok_s_per_device * p.devices == pytest.approx(p.output_tok_s)
    agg = [p for p in points if p.series == "aggregated"]
    top = next(p for p in agg if p.tpot_ceiling_ms is None)
    assert all(p.output_tok_s <= top.output_tok_s * (1 + 1e-6) for p in agg)
    assert max(p.tok_s_per_user for p in agg) > top.tok_s_per_user  # the sweep reaches faster users
    caps = sorted((p for p in points if p.series == "batch caps"), key=lambda p: p.batch_cap)
    assert caps and all(p.placement.split(" b")[0] == top.placement.split(" b")[0] for p in caps)  # same placement
    assert all(p.output_tok_s <= top.output_tok_s * (1 + 1e-6) for p in caps)
    assert [p.tpot_ms for p in caps] == sorted(p.tpot_ms for p in caps)  # fewer sequences, faster tokens


def test_cli_writes_csv_and_png(tmp_path):
    two_type_cluster(tmp_path, "40 MB", "400 MB")
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "hetc.cli",
            "pareto",
            "--profiles",
            str(tmp_path / "c.yaml"),
            MODEL,
            "--input-len",
            "64",
            "--output-len",
            "32",
            "--dtype",
            "fp32",
            "--points",
            "3",
            "--time-limit",
            "2",
            "--csv",
            str(tmp_path / "p.csv"),
            "--png",
            str(tmp_path / "p.png"),
        ],
        capture_output=True,
        text=True,
    )
    assert r.returncode == 0, r.stderr
    rows = list(csv.DictReader(open(tmp_path / "p.csv")))
    assert rows and any(row["on_frontier"] == "True" for row in rows)
    assert (tmp_path / "p.png").stat().st_size > 10_000


def test_sweep_with_a_drafter_adds_its_series_and_the_frontier_is_over_both(tmp_path):
    """The tiny model drafted by a one-layer copy of itself at α 0.9: a speculative series whose
    devices include the drafter's, and a frontier that is at least the one without it."""
    from hetc.requests import SpecRequest
    from tests.conftest import tiny_llama_with_layers

    two_type_cluster(tmp_path, "40 MB", "400 MB")
    (tmp_path / "draft").mkdir()
    draft = tiny_llama_with_layers(tmp_path / "draft", 1)
    spec = SpecRequest(draft=str(draft), num_speculative_tokens=3, acceptance=0.9)
    points = sweep(MODEL, str(tmp_path / "c.yaml"), input_len=64, output_len=32, dtype="fp32", points=3, time_limit=2, spec=spec)
    ours = [p for p in points if p.series == SPECULATIVE]
    assert ours and all(p.tok_s_per_device * p.devices == pytest.approx(p.output_tok_s) for p in ours)
    plain = [p for p in points if p.series != SPECULATIVE]
    for p in frontier(plain):  # every plain frontier point is matched or beaten by the joint frontier
        assert any(q.tok_s_per_user >= p.tok_s_per_user * (1 - 1e-9) and q.tok_s_per_device >= p.tok_s_per_device * (1 - 1e-9) for q in frontier(points))
    assert max(p.tok_s_per_user for p in ours) > max(p.tok_s_per_user for p in plain)  # 3.4 tokens a round at α 0.9
