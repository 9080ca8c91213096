"""Profile figures taken from this project's own measurements of the cards agree with the raw timings.

The H100 and H200 profiles' `efficiency.memory` and `launch_overhead` come from
benchmarks/gpu_results/*-measure-2026-11-26.json (gpu_measure.py on one lent card each): the
profile must reproduce what was measured, so a later edit of either side is caught.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import pytest

from hetc.cluster import load_profile

RESULTS = Path(__file__).resolve().parents[2] / "benchmarks" / "gpu_results"


def _measured(card: str) -> dict:
    return json.loads((RESULTS / f"{card}-measure-2026-11-26.json").read_text())


@pytest.mark.parametrize(("profile", "card"), [("h100-sxm", "h100"), ("h200-sxm", "h200")])
def test_memory_efficiency_is_the_measured_copy_bandwidth(profile, card):
    p, m = load_profile(profile), _measured(card)
    copy = m["copy"]["bytes"] / m["copy"]["seconds"]  # bytes read + written per second
    assert p.memory_bandwidth * p.efficiency.memory == pytest.approx(copy, rel=0.002)


@pytest.mark.parametrize(("profile", "card"), [("h100-sxm", "h100"), ("h200-sxm", "h200")])
def test_launch_overhead_is_the_middle_of_the_measured_runs(profile, card):
    p, m = load_profile(profile), _measured(card)
    runs = [m[k]["host_per_kernel_s"] for k in ("launch", "launch_run3") if k in m]
    assert p.launch_overhead == pytest.approx(statistics.median(runs), rel=0.01)


def test_mi300x_memory_efficiency_is_azures_babelstream_median():
    babelstream = {"copy": 4.11, "mul": 4.26, "add": 4.14, "triad": 4.09, "dot": 3.87}  # TB/s, ND MI300X v5
    p = load_profile("mi300x")
    assert p.memory_bandwidth * p.efficiency.memory == pytest.approx(statistics.median(babelstream.values()) * 1e12, rel=0.002)
