"""Property-based fuzzing of the input parsers: cluster.yaml, profile YAML, links entries, plan.json.

Each example mutates a valid document (drops, retypes, rescales or duplicates one field,
possibly several times) so it gets past the first check. Whatever the mutation, loading
either succeeds or raises `BadInput` naming the file, the field and the fix — never another
exception. What loads must then plan, or be refused the same way.

`make test` runs a bounded number of examples; the slow suite runs the "long" profile.
"""

from __future__ import annotations

import copy
import json
import math
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hetc.cluster import Cluster, Link, load_cluster, load_profile
from hetc.errors import BadInput, Infeasible
from hetc.plan import load_plan

ROOT = Path(__file__).resolve().parents[2]
TINY = str(ROOT / "tests" / "fixtures" / "configs" / "tiny-llama")
COMMON = dict(deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
FAST = settings(max_examples=60, **COMMON)
PLAN_FAST = settings(max_examples=6, **COMMON)  # each example plans (~1 s)
LONG = settings(max_examples=600, **COMMON)
PLAN_LONG = settings(max_examples=60, **COMMON)

PROFILE = yaml.safe_load((ROOT / "hardware_profiles" / "l4.yaml").read_text())
CLUSTER = {
    "name": "fuzz",
    "nodes": [{"name": "a", "device": "l4", "count": 2, "link": "pcie4"}, {"name": "b", "device": "cpu", "count": 1}],
    "network": {"default": "ethernet-10g", "pairs": [{"nodes": ["a", "b"], "link": "ethernet-10g"}]},
    "prices": {"l4": "0.8 USD/h"},
}
LINK = {"bandwidth": "32 GB/s", "latency": "5 us", "scope": "aggregate"}

# ---------------------------------------------------------------- mutations

_weird = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=12),
    st.sampled_from(["nan GB", "inf GB/s", "-80 GB", "1e400 GB", "0 B", "80", "80 GB/s", "5 parsecs", "1e-30 us", "-5 us"]),
    st.lists(st.integers(), max_size=3),
    st.dictionaries(st.text(max_size=5), st.integers(), max_size=2),
)


def _paths(doc: Any, prefix: tuple = ()) -> list[tuple]:
    """Every path to a value inside `doc` (dict keys and list indices)."""
    out = [prefix] if prefix else []
    if isinstance(doc, dict):
        for k, v in doc.items():
            out += _paths(v, prefix + (k,))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            out += _paths(v, prefix + (i,))
    return out


def _rescale(v: Any, factor: float) -> Any:
    """A quantity string or number scaled by `factor` (negative, tiny, huge, NaN)."""
    if isinstance(v, bool):
        return v
    if isinstance(v, int | float):
        return v * factor if not math.isnan(factor) else float("nan")
    if isinstance(v, str) and v.split() and v.split()[0].replace(".", "", 1).replace("e", "", 1).replace("-", "").isdigit():
        num, *unit = v.split()
        return " ".join([repr(float(num) * factor), *unit])
    return v


@st.composite
def mutated(draw, base: dict) -> dict:
    doc = copy.deepcopy(base)
    for _ in range(draw(st.integers(1, 3))):
        paths = _paths(doc)
        if not paths:
            break
        path = draw(st.sampled_from(paths))
        parent = doc
        for p in path[:-1]:
            parent = parent[p]
        key = path[-1]
        op = draw(st.sampled_from(["drop", "retype", "rescale", "duplicate", "typo"]))
        if op == "drop":
            del parent[key]
        elif op == "retype":
            parent[key] = draw(_weird)
        elif op == "rescale":
            factor = draw(st.sampled_from([-1.0, 0.0, 1e-9, 1e12, 1e300, float("nan"), float("inf")]))
            parent[key] = _rescale(parent[key], factor)
        elif op == "duplicate" and isinstance(parent, list):
            parent.append(copy.deepcopy(parent[key]))
        elif isinstance(parent, dict):  # typo / duplicate under another name: an unknown key
            parent[f"{key}_"] = copy.deepcopy(parent[key])
    return doc


def _assert_bad_input(e: BadInput, file: str) -> None:
    assert e.file and Path(e.file.split(" (")[0]).name == Path(file).name, f"error names no/another file: {e}"
    assert e.fix, f"error has no fix: {e}"
    assert e.field or e.problem.startswith(("a cluster file must", "a profile must", "schema is")), f"no field: {e}"


def _write_yaml(path: Path, doc: Any) -> None:
    path.write_text(yaml.safe_dump(doc, allow_unicode=True))


# ---------------------------------------------------------------- properties


def check_profile(tmp_path: Path, doc: dict) -> None:
    f = tmp_path / "p.yaml"
    _write_yaml(f, doc)
    try:
        prof = load_profile(str(f))
    except BadInput as e:
        _assert_bad_input(e, str(f))
        return
    assert math.isfinite(prof.memory) and prof.usable_memory > 0
    assert all(math.isfinite(v) and v > 0 for v in prof.peak_flops.values())


def check_link(tmp_path: Path, doc: dict) -> None:
    from hetc.cluster import resolve_link

    try:
        link = resolve_link(doc, "links.yaml", "fuzz")
    except BadInput as e:
        _assert_bad_input(e, "links.yaml")
        return
    assert isinstance(link, Link) and math.isfinite(link.bandwidth) and link.bandwidth > 0 and link.latency >= 0


def check_cluster(tmp_path: Path, doc: dict, plan: bool) -> None:
    f = tmp_path / "c.yaml"
    _write_yaml(f, doc)
    try:
        cluster = load_cluster(f)
    except BadInput as e:
        _assert_bad_input(e, str(f))
        return
    assert cluster.devices
    again = Cluster.from_json(json.loads(json.dumps(cluster.to_json())))  # plan.json's embedded copy reloads
    assert [d.id for d in again.devices] == [d.id for d in cluster.devices]
    if plan:
        from hetc.partitioner.planner import PlanRequest, make_plan

        try:
            p = make_plan(PlanRequest(model=TINY, profiles=str(f), input_len=16, output_len=8, time_limit=1.0))
        except Infeasible:
            return
        except BadInput as e:
            _assert_bad_input(e, str(f))
            return
        assert p.predicted.output_tok_s >= 0


@pytest.fixture(scope="module")
def plan_doc(tmp_path_factory) -> dict:
    from hetc.partitioner.planner import PlanRequest, make_plan

    d = tmp_path_factory.mktemp("plan")
    _write_yaml(d / "c.yaml", {"nodes": [{"name": "a", "device": "cpu", "count": 1}]})
    return json.loads(make_plan(PlanRequest(model=TINY, profiles=str(d / "c.yaml"), input_len=16, output_len=8, time_limit=1.0)).to_json())


def check_plan(tmp_path: Path, doc: dict) -> None:
    f = tmp_path / "plan.json"
    f.write_text(json.dumps(doc))
    try:
        plan = load_plan(f)
        Cluster.from_json(plan.cluster, str(f))
    except BadInput as e:
        _assert_bad_input(e, str(f))
        return
    assert plan.pipelines and all(s.units[0] <= s.units[1] for p in plan.pipelines for s in p.stages)


@FAST
@given(doc=mutated(PROFILE))
def test_profile_fuzz(tmp_path, doc):
    check_profile(tmp_path, doc)


@FAST
@given(doc=mutated(LINK))
def test_link_fuzz(tmp_path, doc):
    check_link(tmp_path, doc)


@FAST
@given(doc=mutated(CLUSTER))
def test_cluster_fuzz(tmp_path, doc):
    check_cluster(tmp_path, doc, plan=False)


@PLAN_FAST
@given(doc=mutated(CLUSTER))
def test_cluster_fuzz_plans(tmp_path, doc):
    check_cluster(tmp_path, doc, plan=True)


@FAST
@given(data=st.data())
def test_plan_fuzz(tmp_path, plan_doc, data):
    check_plan(tmp_path, data.draw(mutated(plan_doc)))


@pytest.mark.slow
@LONG
@given(a=mutated(PROFILE), b=mutated(CLUSTER), c=mutated(LINK))
def test_inputs_fuzz_long(tmp_path, a, b, c):
    check_profile(tmp_path, a)
    check_cluster(tmp_path, b, plan=False)
    check_link(tmp_path, c)


@pytest.mark.slow
@PLAN_LONG
@given(doc=mutated(CLUSTER))
def test_cluster_fuzz_plans_long(tmp_path, doc):
    check_cluster(tmp_path, doc, plan=True)


@pytest.mark.slow
@LONG
@given(data=st.data())
def test_plan_fuzz_long(tmp_path, plan_doc, data):
    check_plan(tmp_path, data.draw(mutated(plan_doc)))
