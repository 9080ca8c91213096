"""The serving runtime's host work a profile records (hetc/serving.py, runtime/serving_probe.py): the
fit recovers a known model, the cases run the runtime's own functions, and the block survives a
plan's embedded copy of the profile."""

import pytest

from hetc.cluster import Cluster, Profile, load_cluster
from hetc.partitioner.profiling.bench import Case, run_cases
from hetc.runtime.serving_probe import _DECODE, _PREFILL, _SAMPLE, fit_serving, measure_serving, serving_cases
from hetc.serving import ServingOverheads
from tests.conftest import two_type_cluster


def test_fit_recovers_a_known_host_work_model():
    step, row, token, logit = 180e-6, 4e-6, 0.3e-6, 2.5e-9
    cases = [Case("s", lambda: None, meta={"seqs": b, "tokens": b * t}, seconds=step + row * b + token * b * t) for b, t in _DECODE + _PREFILL]
    cases += [Case("x", lambda: None, meta={"logits": r * v}, seconds=logit * r * v) for r, v in _SAMPLE]
    fit = fit_serving(cases)
    assert fit == pytest.approx({"step": step, "row": row, "token": token, "sample_logit": logit}, rel=1e-6)
    # a negative coefficient in the data (host work shrinking with tokens) is dropped, not recorded
    cases = [Case("s", lambda: None, meta={"seqs": b, "tokens": b * t}, seconds=step + row * b - 1e-9 * b * t) for b, t in _DECODE + _PREFILL] + cases[
        -len(_SAMPLE) :
    ]
    fit = fit_serving(cases)
    assert fit["token"] == 0.0 and fit["step"] > 0 and fit["row"] > 0


@pytest.mark.parametrize("executor", ["torch", "openvino"])
def test_the_cases_run_the_runtimes_functions(executor):
    """Every case calls what a worker calls (the message decode, step metadata, lookahead fill, the
    executor's attention metadata, the result's encoding; the sampler), so a change of their
    signatures breaks the profile here; the fitted block parses as the profile's."""
    done = run_cases([Case(c.name, c.fn, reps=2, meta=c.meta) for c in serving_cases(executor)], rounds=1)
    doc = measure_serving(lambda cases: done, executor, 60e-6)
    sv = ServingOverheads.model_validate(doc)
    assert sv.stage_step(1, 1) > 0 and sv.sample_logit > 0 and sv.message == pytest.approx(60e-6)
    assert "runtime's own per-step functions" in sv.source and executor in sv.source
    assert "not measured" in measure_serving(lambda cases: done, executor, None)["source"]


def test_the_block_round_trips_through_a_plans_cluster(tmp_path):
    two_type_cluster(tmp_path, "2 MB", "4 MB")
    text = (tmp_path / "fast.yaml").read_text()
    (tmp_path / "fast.yaml").write_text(text + "serving: {step: 250 us, row: 3 us, token: 0.2 us, sample_logit: 0.002 us, message: 60 us, source: measured}\n")
    c = load_cluster(tmp_path / "c.yaml")
    fast = c.node("a").profile.serving
    assert (fast.step, fast.row, fast.message) == pytest.approx((250e-6, 3e-6, 60e-6))
    assert fast.stage_step(4, 8) == pytest.approx(250e-6 + 4 * 3e-6 + 8 * 0.2e-6)
    again = Cluster.from_json(c.to_json())
    assert again.node("a").profile.serving == fast
    assert c.node("b").profile.serving == ServingOverheads() and "not measured" in ServingOverheads().source
    with pytest.raises(ValueError):
        Profile.model_validate({**c.node("a").profile.model_dump(), "serving": {"step": "-1 us"}})
