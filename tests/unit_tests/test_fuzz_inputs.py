"""Property-based fuzzing of what users hand hetc: valid cluster, profile and plan documents are
mutated (a field dropped, retyped, rescaled, duplicated); every mutant either loads or is refused
with hetc's own error naming the file — never another exception. Clusters that load must then plan
or be refused as infeasible, and the CLI never prints a traceback."""

import copy
import json
import subprocess
import sys

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hetc.cluster import load_cluster, load_profile
from hetc.errors import BadInput, Infeasible
from hetc.partitioner.capture import capture
from hetc.partitioner.simulate import Workload
from hetc.partitioner.solver import solve
from hetc.plan import load_plan
from tests.conftest import FIXTURES, PROFILE

FAST = settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
PROFILE_DOC = yaml.safe_load(PROFILE.format(name="p", vendor="nvidia", backend="cuda", memory="2 MB", bw="40 GB/s",
                                            flops="4 TFLOP/s"))
CLUSTER_DOC = {"nodes": [{"name": "a", "device": "./p.yaml", "count": 2, "link": "pcie4"},
                         {"name": "b", "device": "h100-sxm", "count": 1}],
               "network": {"default": "ethernet-10g", "pairs": [{"nodes": ["a", "b"], "link": "pcie4"}]}}

odd_values = st.one_of(st.none(), st.booleans(), st.integers(-10**12, 10**12), st.floats(allow_nan=True),
                       st.text(max_size=12), st.lists(st.integers(), max_size=3), st.dictionaries(st.text(max_size=4),
                                                                                                  st.integers(), max_size=2),
                       st.sampled_from(["-1 GB", "0 B", "NaN GB", "1e400 TB/s", "80", "80 parsecs", "5 us", "h100",
                                        "", "inf W", "3 USD/h", "-5 USD/h"]))


def _paths(doc, prefix=()):
    """Every (path, value) inside a JSON-like document."""
    yield prefix, doc
    if isinstance(doc, dict):
        for k, v in doc.items():
            yield from _paths(v, (*prefix, k))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            yield from _paths(v, (*prefix, i))


@st.composite
def mutants(draw, base):
    doc = copy.deepcopy(base)
    for _ in range(draw(st.integers(1, 3))):
        paths = [p for p, _ in _paths(doc) if p]
        if not paths:
            break
        path = draw(st.sampled_from(paths))
        parent = doc
        for k in path[:-1]:
            parent = parent[k]
        key = path[-1]
        op = draw(st.sampled_from(["drop", "retype", "rescale", "duplicate"]))
        if op == "drop":
            del parent[key]
        elif op == "retype":
            parent[key] = draw(odd_values)
        elif op == "rescale" and isinstance(parent[key], str) and " " in parent[key]:
            num, unit = parent[key].split(" ", 1)
            parent[key] = f"{draw(st.sampled_from(['-1', '0', '1e-30', '1e30', 'nan', '2.5']))} {unit}"
        elif op == "duplicate" and isinstance(parent, list):
            parent.append(copy.deepcopy(parent[key]))
        elif op == "duplicate" and isinstance(parent, dict):
            parent[f"{key}_copy"] = copy.deepcopy(parent[key])
    return doc


@FAST
@given(doc=mutants(PROFILE_DOC))
def test_profiles_load_or_say_what_is_wrong(tmp_path_factory, doc):
    f = tmp_path_factory.mktemp("p") / "p.yaml"
    f.write_text(yaml.safe_dump(doc))
    try:
        load_profile(str(f))
    except BadInput as e:
        assert e.file and str(f) in e.file


@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
@given(doc=mutants(CLUSTER_DOC))
def test_clusters_load_then_plan_or_say_why(tmp_path_factory, doc):
    d = tmp_path_factory.mktemp("c")
    (d / "p.yaml").write_text(yaml.safe_dump(PROFILE_DOC))
    (d / "c.yaml").write_text(yaml.safe_dump(doc))
    try:
        cluster = load_cluster(d / "c.yaml")
    except BadInput as e:
        assert e.file
        return
    units = capture(str(FIXTURES / "tiny-llama"), dtype="fp32").units
    try:
        solve(units, cluster, Workload(32, 16, "fp32", "fp32"), time_limit=0.5)
    except (Infeasible, BadInput):
        pass


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_plans_load_or_say_what_is_wrong(plan_doc, tmp_path_factory, data):
    doc = data.draw(mutants(plan_doc))
    f = tmp_path_factory.mktemp("plan") / "plan.json"
    f.write_text(json.dumps(doc))
    try:
        load_plan(f)
    except BadInput as e:
        assert e.file


def test_cli_never_prints_a_traceback(tmp_path):
    bad = {"c.yaml": "nodes: [{name: a, device: h100-sxm, count: -3}]\n", "d.yaml": "nodes: 7\n",
           "e.yaml": "nodes:\n  - {name: a, device: h100-sxm, count: 2, link: warp-drive}\n"}
    for name, text in bad.items():
        (tmp_path / name).write_text(text)
        r = subprocess.run([sys.executable, "-m", "hetc.cli", "plan", "--profiles", str(tmp_path / name),
                            str(FIXTURES / "tiny-llama"), "-o", str(tmp_path / "p.json")], capture_output=True, text=True)
        assert r.returncode == 2 and "Traceback" not in r.stderr and name in r.stderr, r.stderr



@pytest.fixture(scope="module")
def plan_doc(tmp_path_factory):
    from hetc.partitioner.planner import PlanRequest, make_plan
    from hetc.plan import save_plan

    d = tmp_path_factory.mktemp("pl")
    (d / "p.yaml").write_text(yaml.safe_dump(PROFILE_DOC))
    (d / "c.yaml").write_text("nodes: [{name: a, device: ./p.yaml, count: 2, link: pcie4}]\n")
    plan = make_plan(PlanRequest(model=str(FIXTURES / "tiny-llama"), profiles=str(d / "c.yaml"), dtype="fp32",
                                 input_len=32, output_len=16, time_limit=1))
    save_plan(plan, d / "plan.json")
    return json.loads((d / "plan.json").read_text())
