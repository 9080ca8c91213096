"""plan.json is written atomically and versioned by schema, not by hetc version."""

from __future__ import annotations

import json

import pytest
import yaml

from hetc.errors import BadInput
from hetc.plan import load_plan, save_plan
from tests.conftest import FIXTURES

TINY = str(FIXTURES / "tiny-llama")


@pytest.fixture(scope="module")
def plan(tmp_path_factory):
    from hetc.partitioner.planner import PlanRequest, make_plan

    d = tmp_path_factory.mktemp("plan")
    (d / "c.yaml").write_text(yaml.safe_dump({"nodes": [{"name": "a", "device": "cpu", "count": 1}]}))
    return make_plan(PlanRequest(model=TINY, profiles=str(d / "c.yaml"), input_len=16, output_len=8, time_limit=1.0))


def test_save_is_atomic(tmp_path, plan, monkeypatch):
    out = tmp_path / "plan.json"
    save_plan(plan, out)
    before = out.read_text()
    assert load_plan(out).model.graph_hash == plan.model.graph_hash

    def crash(self):  # the process dies while the new plan is being serialised
        raise KeyboardInterrupt

    monkeypatch.setattr(type(plan), "to_json", crash)
    with pytest.raises(KeyboardInterrupt):
        save_plan(plan, out)
    assert out.read_text() == before  # the old plan is intact
    assert [p.name for p in tmp_path.iterdir()] == ["plan.json"]  # and no temp file is left


def test_other_hetc_version_loads_other_schema_refused(tmp_path, plan):
    doc = json.loads(plan.to_json())
    f = tmp_path / "plan.json"
    f.write_text(json.dumps({**doc, "hetc_version": "0.0.1-other"}))
    assert load_plan(f).hetc_version == "0.0.1-other"
    f.write_text(json.dumps({**doc, "schema": "hetc.plan/2"}))
    with pytest.raises(BadInput) as e:
        load_plan(f)
    assert e.value.field == "schema" and "hetc.plan/2" in e.value.problem and e.value.fix


def test_infeasible_message_prints_quantities_at_their_scale(tmp_path):
    """A 0.4 MB shortfall must not read "0.00 GB" (it was seen)."""
    from hetc.cluster import load_cluster
    from hetc.errors import Infeasible
    from hetc.partitioner.planner import PlanRequest, make_plan
    from tests.conftest import PROFILE

    (tmp_path / "small.yaml").write_text(PROFILE.format(name="small", vendor="cpu", backend="cpu", memory="110 kB", bw="10 GB/s", flops="1 TFLOP/s"))
    (tmp_path / "c.yaml").write_text("nodes:\n  - {name: a, device: ./small.yaml, count: 1}\n")
    load_cluster(tmp_path / "c.yaml")
    with pytest.raises(Infeasible) as e:
        make_plan(PlanRequest(model=TINY, profiles=str(tmp_path / "c.yaml"), input_len=16, output_len=8, time_limit=1.0))
    msg = str(e.value)
    assert "0.0 GB" not in msg and "0.00 GB" not in msg and " kB" in msg, msg


def test_printed_plan_keeps_square_brackets_of_notes_and_names(plan):
    # rich reads "[bf16]" as a style tag and drops it: notes and names are printed as text
    from rich.console import Console

    from hetc.report import print_plan

    p = plan.model_copy(deep=True)
    p.solver.notes = ["profile x: efficiency falls with size in matmul[bf16], matmul[fp8]"]
    p.cluster = p.cluster.model_copy(update={"name": "rack[2]"})
    console = Console(record=True, width=200)
    print_plan(p, console)
    text = console.export_text()
    assert "matmul[bf16], matmul[fp8]" in text
    assert "on rack[2]" in text
