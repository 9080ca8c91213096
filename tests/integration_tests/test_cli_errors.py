"""The real `hetc` command on bad input (docs/cluster.md "Errors"): exit 2 with one paragraph naming
the file and the field, never a traceback; exit 3 when infeasible; exit 0 and a valid plan.json.

Each `hetc plan` subprocess costs a few seconds of imports, so the calls are few; the many
bad-cluster variants are tested in-process in tests/unit_tests/test_cluster.py.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from hetc.errors import BadInput
from hetc.plan import SCHEMA, load_plan

REPO = Path(__file__).resolve().parents[2]
TINY = "tests/fixtures/configs/tiny-llama"
H100_YAML = REPO / "hardware_profiles" / "h100-sxm.yaml"
CATALOG = sorted(p.stem for p in (REPO / "hardware_profiles" / "models").glob("*.json"))


def hetc(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "HETC_DEBUG"}
    return subprocess.run([sys.executable, "-m", "hetc.cli", *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout)


def assert_clean_failure(r: subprocess.CompletedProcess, code: int) -> str:
    out = r.stdout + r.stderr
    assert r.returncode == code, f"exit {r.returncode}, expected {code}\n{out}"
    assert "Traceback" not in out, out
    assert "internal error" not in out, out
    assert r.stderr.strip(), "no message on stderr"
    return r.stderr


def _norm(text: str) -> str:
    return re.sub(r"\[(\d+)\]", r".\1", text)


# -------------------------------------------------------------------- bad cluster files (exit 2)


def _profile_without(field: str) -> str:
    return "\n".join(l for l in H100_YAML.read_text().splitlines() if not l.startswith(f"{field}:")).replace("name: h100-sxm", "name: half-chip") + "\n"


BAD_CLUSTERS = {
    # id: (cluster text, extra files {relpath: text}, file named in the message, field, other text expected)
    "unknown-device": ("nodes:\n  - {name: a, device: h100-sxn, count: 1}\n", {}, "cluster.yaml", "nodes[0].device", "h100-sxm"),
    "bare-number-inline-link": (
        "nodes:\n  - {name: a, device: h100-sxm, count: 2, link: {bandwidth: 100, latency: 3 us}}\n",
        {},
        "cluster.yaml",
        "nodes[0].link.bandwidth",
        "TB/s",
    ),
    "profile-path-missing-field": (
        "nodes:\n  - {name: a, device: profiles/half-chip.yaml, count: 1}\n",
        {"profiles/half-chip.yaml": _profile_without("memory_bandwidth")},
        "profiles/half-chip.yaml",
        "memory_bandwidth",
        "missing",
    ),
}


@pytest.mark.parametrize("case", list(BAD_CLUSTERS))
def test_bad_cluster_file_exits_2_naming_file_and_field(tmp_path, case):
    text, extra, named, field, expected = BAD_CLUSTERS[case]
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text(text)
    for rel, body in extra.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(body)
    out = tmp_path / "out" / "plan.json"
    r = hetc("plan", "--profiles", str(cluster), TINY, "-o", str(out))
    err = assert_clean_failure(r, 2)
    assert str(tmp_path / named) in err, err  # the whole path, not wrapped or cut
    assert _norm(field) in _norm(err), err  # brackets survive the terminal renderer
    assert expected in err, err
    assert not out.exists()  # no plan written on failure
    assert r.stdout == ""


# -------------------------------------------------------------------- bad models and arguments (exit 2)


def test_unknown_model_lists_the_catalog():
    r = hetc("plan", "--profiles", "examples/small-mixed.yaml", "no-such-model", "-o", "/nonexistent-dir/plan.json")
    err = assert_clean_failure(r, 2)
    assert "no-such-model" in err
    assert CATALOG, "catalog is empty"
    for name in CATALOG:
        assert name in err, f"catalog name {name} not listed: {err}"


def test_model_dir_without_config_json(tmp_path):
    model_dir = tmp_path / "empty-model"
    model_dir.mkdir()
    r = hetc("plan", "--profiles", "examples/small-mixed.yaml", str(model_dir), "-o", str(tmp_path / "plan.json"))
    err = assert_clean_failure(r, 2)
    assert "config.json" in err
    assert str(model_dir) in err
    assert not (tmp_path / "plan.json").exists()


def test_inspect_unknown_model():
    r = hetc("inspect", "not-a-model")
    err = assert_clean_failure(r, 2)
    assert "not-a-model" in err
    assert "llama-3.1-70b" in err  # says what would work


def test_input_len_zero():
    r = hetc("plan", "--profiles", "examples/small-mixed.yaml", TINY, "--input-len", "0", "-o", "/nonexistent-dir/p.json")
    err = assert_clean_failure(r, 2)
    assert "--input-len" in err


def test_serve_bad_argument_is_clear():
    r = hetc("serve", "x")
    err = assert_clean_failure(r, 2)
    assert "serve" in err or "'x'" in err or "x:" in err, err


# -------------------------------------------------------------------- infeasible (exit 3)


def test_infeasible_model_exits_3_with_the_shortfall(tmp_path):
    cluster = tmp_path / "one-t4.yaml"
    cluster.write_text("nodes:\n  - {name: t, device: t4, count: 1}\n")
    out = tmp_path / "plan.json"
    r = hetc("plan", "--profiles", str(cluster), "llama-3.1-70b", "-o", str(out))
    err = assert_clean_failure(r, 3)
    gbs = [float(x) for x in re.findall(r"(\d+(?:\.\d+)?)\s*GB\b", err)]
    assert any(g >= 130 for g in gbs), f"the ~141 GB the model needs is not stated: {err}"
    assert any(g <= 16 for g in gbs), f"the ≤16 GB a T4 has is not stated: {err}"
    assert "need" in err
    assert not out.exists()


# -------------------------------------------------------------------- success (exit 0) and load_plan


@pytest.fixture(scope="module")
def planned(tmp_path_factory):
    d = tmp_path_factory.mktemp("plan")
    out = d / "sub" / "plan.json"  # the folder does not exist yet
    r = hetc("plan", "--profiles", "examples/small-mixed.yaml", TINY, "--json", "-o", str(out))
    return r, out


def test_plan_succeeds_and_prints_json(planned):
    r, out = planned
    assert r.returncode == 0, r.stderr
    assert "Traceback" not in r.stderr
    doc = json.loads(r.stdout)  # stdout is only the plan: human output goes to stderr
    for key in ("schema", "model", "cluster", "workload", "objective", "pipelines", "kv_transfer", "predicted", "solver", "baselines"):
        assert key in doc, key
    assert doc["schema"] == SCHEMA
    assert doc["workload"] == {"input_len": 1024, "output_len": 256, "max_num_seqs": None, "prefix_len": 0, "prefix_groups": 1}  # the documented defaults
    assert doc["objective"]["name"] == "throughput"
    assert doc["model"]["dtype"] == "bf16"
    # the written file is the same plan
    assert json.loads(out.read_text()) == doc


def test_written_plan_loads(planned):
    r, out = planned
    assert r.returncode == 0, r.stderr
    plan = load_plan(out)
    assert plan.schema_ == SCHEMA
    ids = {f"{n}:{i}" for n in "abc" for i in range(2)}  # small-mixed: 2×H100 + 2×MI300X + 2×Gaudi2
    for p in plan.pipelines:
        for s in p.stages:
            assert set(s.devices) <= ids
            assert s.devices and all(d.startswith(f"{s.node}:") for d in s.devices)
        assert p.stages[0].units[0] == 0
        assert p.stages[-1].units[1] == plan.model.num_units - 1


def test_load_plan_refuses_another_schema(planned, tmp_path):
    r, out = planned
    assert r.returncode == 0, r.stderr
    doc = json.loads(out.read_text())
    doc["schema"] = "hetc.plan/0"
    old = tmp_path / "old.json"
    old.write_text(json.dumps(doc))
    with pytest.raises(BadInput) as ei:
        load_plan(old)
    msg = str(ei.value)
    assert str(old) in msg
    assert "hetc.plan/0" in msg and SCHEMA in msg
    assert ei.value.field == "schema"


def test_load_plan_refuses_truncated_json(planned, tmp_path):
    r, out = planned
    assert r.returncode == 0, r.stderr
    text = out.read_text()
    cut = tmp_path / "cut.json"
    cut.write_text(text[: len(text) // 2])
    with pytest.raises(BadInput) as ei:
        load_plan(cut)
    assert str(cut) in str(ei.value)
    assert "JSON" in str(ei.value)
    assert re.search(r"line \d+", str(ei.value))


def test_load_plan_refuses_stages_that_do_not_cover_the_model(planned, tmp_path):
    r, out = planned
    assert r.returncode == 0, r.stderr
    doc = json.loads(out.read_text())
    last = doc["pipelines"][0]["stages"][-1]
    assert last["units"][1] > last["units"][0], "test needs a stage of ≥ 2 units"
    last["units"][1] -= 1  # the last unit (the LM head) is now on no stage
    gap = tmp_path / "gap.json"
    gap.write_text(json.dumps(doc))
    with pytest.raises(BadInput) as ei:
        load_plan(gap)
    assert str(gap) in str(ei.value)
    assert "unit" in str(ei.value)


def test_load_plan_missing_file(tmp_path):
    with pytest.raises(BadInput) as ei:
        load_plan(tmp_path / "nope.json")
    assert "not found" in str(ei.value)
