"""A hand-written profile needs only the physical figures; the rest take documented defaults."""

from __future__ import annotations

import json

import pytest

from hetc.cluster import DEFAULTS, RESERVED_FRACTION, Cluster, defaults_notes, load_cluster, load_profile
from hetc.errors import BadInput

MINIMAL = """vendor: nvidia
backend: cuda
memory: 16 GB
memory_bandwidth: 300 GB/s
peak_flops: {fp32: 10 TFLOP/s, bf16: 60 TFLOP/s}
efficiency: {matmul: 0.6, memory: 0.8}
"""


def test_minimal_profile_takes_defaults_and_says_so(tmp_path):
    f = tmp_path / "mychip.yaml"
    f.write_text(MINIMAL)
    p = load_profile(str(f))
    assert p.name == "mychip"
    assert p.reserved_memory == pytest.approx(16e9 * RESERVED_FRACTION)
    assert p.launch_overhead == pytest.approx(10e-6) and p.power == 0 and p.price == 0
    assert set(p.defaulted) == {*DEFAULTS, "reserved_memory"}
    (note,) = defaults_notes([p])
    assert "price" in note and "USD/M tokens" in note and "kW" in note


def test_given_figures_are_not_defaulted_and_survive_plan_json(tmp_path):
    (tmp_path / "mychip.yaml").write_text(MINIMAL + "price: 2 USD/h\npower: 300 W\n")
    (tmp_path / "c.yaml").write_text("nodes:\n  - {name: a, device: ./mychip.yaml, count: 1}\n")
    c = load_cluster(tmp_path / "c.yaml")
    p = c.nodes[0].profile
    assert p.price == 2 and "price" not in p.defaulted and "power" not in p.defaulted and "launch_overhead" in p.defaulted
    again = Cluster.from_json(json.loads(json.dumps(c.to_json())))  # plan.json keeps which were defaulted
    assert again.nodes[0].profile.defaulted == p.defaulted
    assert "price" not in defaults_notes([again.nodes[0].profile])[0].split("default ")[1].split(" (")[0]


def test_catalog_profiles_take_no_defaults():
    assert load_profile("h100-sxm").defaulted == []


@pytest.mark.parametrize("typo,fix", [("memory_bandwith", "memory_bandwidth"), ("pwer", "power"), ("efficency", "efficiency")])
def test_unknown_key_did_you_mean(tmp_path, typo, fix):
    f = tmp_path / "p.yaml"
    f.write_text(
        MINIMAL.replace("memory_bandwidth", typo)
        if typo == "memory_bandwith"
        else MINIMAL.replace("efficiency", typo)
        if typo == "efficency"
        else MINIMAL + f"{typo}: 10 W\n"
    )
    with pytest.raises(BadInput) as e:
        load_profile(str(f))
    assert e.value.field == typo and f"did you mean `{fix}`" in e.value.fix


def test_unknown_nested_key_did_you_mean(tmp_path):
    (tmp_path / "c.yaml").write_text("nodes:\n  - {name: a, device: cpu, cont: 1}\n")
    with pytest.raises(BadInput) as e:
        load_cluster(tmp_path / "c.yaml")
    assert e.value.field == "nodes[0].cont" and "did you mean `count`" in e.value.fix


def _bf16_only(tmp_path):
    (tmp_path / "mychip.yaml").write_text(MINIMAL.replace("{fp32: 10 TFLOP/s, bf16: 60 TFLOP/s}", "{bf16: 60 TFLOP/s}"))
    (tmp_path / "c.yaml").write_text("nodes:\n  - {name: a, device: ./mychip.yaml, count: 2, link: pcie4}\n")
    return tmp_path / "c.yaml"


def _plan(cluster, *args):
    import subprocess
    import sys

    from tests.conftest import FIXTURES

    return subprocess.run(
        [sys.executable, "-m", "hetc.cli", "plan", "--profiles", str(cluster), str(FIXTURES / "tiny-llama"), "--time-limit", "2", "--json", *args],
        capture_output=True,
        text=True,
        cwd=cluster.parent,
    )


def test_a_bf16_only_profile_plans_bf16(tmp_path):
    """A profile names the peaks its device has; a bf16 plan asks for bf16's only (and fp8 dequantizes to it)."""
    from hetc.partitioner.planner import PlanRequest, make_plan
    from tests.conftest import FIXTURES

    c = _bf16_only(tmp_path)
    cluster = load_cluster(c)
    assert cluster.nodes[0].profile.peak_flops == {"bf16": pytest.approx(60e12)}
    assert [cluster.nodes[0].profile.compute_dtype(d) for d in ("bf16", "fp16", "fp8", "fp32")] == ["bf16", "bf16", "bf16", None]
    plan = make_plan(PlanRequest(model=str(FIXTURES / "tiny-llama"), profiles=str(c), dtype="bf16", time_limit=2))
    assert plan.predicted.output_tok_s > 0 and plan.model.dtype == "bf16"


def test_an_fp32_plan_on_it_names_the_missing_figure(tmp_path):
    c = _bf16_only(tmp_path)
    r = _plan(c, "--dtype", "fp32")
    assert r.returncode == 2 and "Traceback" not in r.stderr
    text = " ".join(r.stderr.split())
    assert "mychip.yaml" in text and "peak_flops.fp32" in text and "names no peak for fp32" in text
    assert "add `fp32: <FLOP/s>`" in text and "--dtype bf16" in text
    with pytest.raises(BadInput) as e:
        load_cluster(c).require_flops("fp32")
    assert e.value.field == "peak_flops.fp32" and e.value.file == str(tmp_path / "mychip.yaml")


def test_a_profile_naming_no_peak_is_refused(tmp_path):
    f = tmp_path / "p.yaml"
    f.write_text(MINIMAL.replace("{fp32: 10 TFLOP/s, bf16: 60 TFLOP/s}", "{}"))
    with pytest.raises(BadInput) as e:
        load_profile(str(f))
    assert e.value.field == "peak_flops"
