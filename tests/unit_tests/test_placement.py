"""`--placement`: specs parse or are refused naming the token; the solver's own plan, written as a
spec, predicts what the solver predicted; a worse placement predicts less; plan.json records it."""

import pytest

from hetc.errors import BadInput
from hetc.partitioner.planner import PlanRequest, make_plan
from hetc.placement import GivenStage, parse_placement
from hetc.plan import load_plan, save_plan
from tests.conftest import FIXTURES, two_type_cluster

MODEL = str(FIXTURES / "tiny-llama")


def _req(tmp_path, **kw):
    return PlanRequest(model=MODEL, profiles=str(tmp_path / "c.yaml"), dtype="fp32", input_len=32, output_len=16, disaggregate="off", time_limit=2, **kw)


def test_parse_good_specs(tmp_path):
    cluster = two_type_cluster(tmp_path, "2 MB", "4 MB", a_count=4)
    (p,) = parse_placement("a:0-1@2|b:0@1", cluster, 3)
    assert p.replicas == 1 and p.stages == (GivenStage("a", 0, 2, 2), GivenStage("b", 0, 1, 1))
    (p,) = parse_placement("a:0-1 x2", cluster, 3)
    assert p.replicas == 2 and p.stages == (GivenStage("a", 0, 2, None),)
    ps = parse_placement("a:0 ; a:1|b:0", cluster, 3)
    assert [len(p.stages) for p in ps] == [1, 2]


@pytest.mark.parametrize(
    "spec,words",
    [
        ("", "empty"),
        ("q:0", "no node 'q'"),
        ("a:0-2", "3 devices"),
        ("a:3-4", "has 4"),
        ("a:0|a:0", "already used"),
        ("a:0-1 x3", "has 4"),
        ("a:0@2|b:0", "some stages"),
        ("a:0@2|b:0@2", "add up to 4"),
        ("a0", "NODE:FIRST"),
        ("b:0 x0", "at least one replica"),
    ],
)
def test_bad_specs_name_the_token(tmp_path, spec, words):
    cluster = two_type_cluster(tmp_path, "2 MB", "4 MB", a_count=4)
    with pytest.raises(BadInput) as e:
        parse_placement(spec, cluster, 3)
    assert e.value.field == "--placement" and words in str(e.value) and e.value.fix


def test_the_solvers_own_plan_round_trips(tmp_path):
    two_type_cluster(tmp_path, "2 MB", "2 MB", a_count=2)
    solved = make_plan(_req(tmp_path, tp="1"))
    assert len({p.batch for p in solved.pipelines}) == 1  # --batch gives every pipeline one batch
    spec = "; ".join(
        "|".join(s.devices[0] + (f"-{s.devices[-1].split(':')[1]}" if s.tp > 1 else "") for s in p.stages) + (f" x{p.replicas}" if p.replicas > 1 else "")
        for p in solved.pipelines
    )
    given = make_plan(_req(tmp_path, tp="1", placement=spec, batch=solved.pipelines[0].batch))
    assert given.predicted.output_tok_s == pytest.approx(solved.predicted.output_tok_s, rel=1e-6)
    assert given.solver.status == "GIVEN" and given.solver.bound == pytest.approx(solved.solver.bound)
    save_plan(given, tmp_path / "p.json")
    assert load_plan(tmp_path / "p.json").placement.given == spec
    worse = make_plan(_req(tmp_path, tp="1", placement="b:0"))  # everything on the slow device
    assert worse.predicted.output_tok_s < solved.predicted.output_tok_s
    assert worse.predicted.output_tok_s <= worse.solver.upper_bound


def test_batch_needs_a_placement(tmp_path):
    two_type_cluster(tmp_path, "0.6 MB", "2 MB")
    with pytest.raises(BadInput, match="--placement"):
        _req(tmp_path, batch=4)
