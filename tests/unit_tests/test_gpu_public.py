"""The public-figure table of benchmarks/gpu_public.py stays consistent with its cluster files
and the model catalog (BENCHMARKS.md "GPU predictions vs public measurements")."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

import pytest

from hetc.placement import parse_placement

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "benchmarks"))  # the benchmark scripts and their data, public_figures, import each other by name
import gpu_public  # noqa: E402  (the cluster files)
from public_figures import CASES, SOURCES  # noqa: E402
from public_figures.case import HETC_ENGINE, STAND_INS  # noqa: E402
from public_figures.freeze import FROZEN  # noqa: E402


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_case_matches_its_cluster_and_catalog(case):
    cl = gpu_public.cluster_of(case)
    assert len({n.profile.name for n in cl.nodes}) == 1, "one device type: the public run's devices"
    spec = parse_placement(case.placement, cl, 80)
    assert all(len(p.stages) == 1 for p in spec), "the public runs are tensor-parallel groups, no pipelines"
    assert len({p.stages[0].tp for p in spec}) == 1, "every node runs the same group (a multi-node run's replicas)"
    assert {p.stages[0].node for p in spec} == {n.name for n in cl.nodes}, "the run uses every node of its cluster"
    assert (REPO / "hardware_profiles" / "models" / f"{case.model}.json").is_file()
    assert case.dtype in ("bf16", "fp16", "fp8") and case.isl > 0 and case.osl > 0 and case.public > 0
    assert case.batch is None or case.batch > 0
    assert case.source in SOURCES and case.vendor in ("nvidia", "amd", "intel")
    assert case.named_engine in HETC_ENGINE  # every figure is predicted with the engine it names (or its stated stand-in)
    assert gpu_public.cluster_of(case, case.engine).engines == case.engine


def test_frozen_commit_is_a_full_hash():
    assert re.fullmatch(r"[0-9a-f]{40}", FROZEN)


@pytest.mark.parametrize("name", ["g3vllm-1x-8b-1868/2048", "g120-gaudi2-2x-70b-2048/128", "mlperf51-8xh200-qct"])
def test_breakdown_adds_up_to_the_planners_estimate(name):
    """The component split of gpu_public_breakdown.py sums to what estimate_pipeline predicts for the
    same replica (its round), so the shares it reports are the planner's own time, not a re-derivation."""
    from hetc.partitioner.capture.capture import capture
    from hetc.partitioner.estimate.simulate import StagePlan, Workload, estimate_pipeline

    bspec = importlib.util.spec_from_file_location("gpu_public_breakdown", REPO / "benchmarks" / "gpu_public_breakdown.py")
    breakdown = importlib.util.module_from_spec(bspec)
    bspec.loader.exec_module(breakdown)
    case = next(c for c in CASES if c.name == name)
    parts, batch, tok_s = breakdown.breakdown(case)
    m = capture(case.model, dtype=case.dtype, kv_dtype=case.kv_dtype)
    cl = gpu_public.cluster_of(case, case.engine)
    st = parse_placement(case.placement, cl, m.num_layers)[0].stages[0]
    node = next(n for n in cl.nodes if n.name == st.node)
    est = estimate_pipeline(m.units, [StagePlan(node, 0, len(m.units) - 1, st.tp)], cl, Workload(case.isl, case.osl, case.dtype, m.kv_dtype), batch)
    assert est is not None and sum(parts.values()) == pytest.approx(est.round_s, rel=1e-9)
    assert tok_s == pytest.approx(est.output_tok_s, rel=1e-9)
    assert all(v >= 0 for v in parts.values()) and any(k.endswith("GEMMs") for k in parts)


def test_fitted_engine_figures_come_from_training_rows_only():
    """The engines' `fit` release (hardware_profiles/engines/fit.yaml) names the rows each figure was
    fitted on: every one a figure of the declared training rounds, none a held one, all of its group."""
    import yaml

    from hetc.engine import FIT_FILE

    spec = importlib.util.spec_from_file_location("engine_calibration", REPO / "benchmarks" / "engine_calibration.py")
    calibration = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(calibration)
    cases = {c.name: c for c in CASES}
    fitted = yaml.safe_load(FIT_FILE.read_text())
    assert fitted
    for engine, backends in fitted.items():
        for backend, fig in backends.items():
            if ":" in backend:  # an architecture's figures, fitted on MoE rows (test_moe_public.py)
                continue
            rows = [cases[n] for n in fig["calibrated_on"]]
            assert rows and all(c.round in calibration.TRAIN_ROUNDS and not c.held for c in rows)
            assert {c.engine for c in rows} == {engine} and {gpu_public.backend_of(c) for c in rows} == {backend}
            want = [c.name for c in CASES if c.round in calibration.TRAIN_ROUNDS and c.engine == engine and gpu_public.backend_of(c) == backend]
            assert fig["calibrated_on"] == want  # every training row of the group, none left out


def _releases():
    spec = importlib.util.spec_from_file_location("engine_releases", REPO / "benchmarks" / "engine_releases.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_a_rows_release_picks_its_figures():
    """--per-release: a row naming a release fitted on its backend is predicted at that release's figures;
    an unknown release, one without figures, or one too thin on the row's backend falls back to `@fit`."""
    import dataclasses

    from hetc.engine import Engine, engine_figures

    rel = _releases()
    row = next(c for c in CASES if c.name == "krai51-8xh200-vllm-dyn")
    assert rel.release_of(row)[0] == "0.9.2" and rel.release_for(row) == ("0.9", "0.9.2")
    assert row.name in engine_figures(Engine.parse("vllm@0.9"), "cuda").calibrated_on
    assert rel.release_for(dataclasses.replace(row, note="vLLM 0.8.5"))[0] == "fit"  # no vllm@0.8
    early, why = rel.release_for(dataclasses.replace(row, note="vLLM 0.7.3"))  # vllm@0.7 has one cuda row: too few
    assert early == "fit" and "fewer than" in why
    mlperf = next(c for c in CASES if c.name == "mlperf41-8xh100-nvidia")  # the TensorRT-LLM its round's Makefile.build pins
    assert rel.release_of(mlperf)[0] == "main-2024-07-16" and rel.release_for(mlperf) == ("main-2024-07-16", "main-2024-07-16")
    unknown = next(c for c in CASES if c.name == "krai51-8xb200-trtllm")
    assert rel.release_of(unknown)[0] is None and rel.release_for(unknown)[0] == "fit"
    stand_in = next(c for c in CASES if c.named_engine in STAND_INS)
    assert rel.release_of(stand_in)[0] is None


def test_release_figures_come_from_training_rows_of_that_release():
    """hardware_profiles/engines/fit_releases.yaml: each fitted (engine, release, backend) names every training
    row of that release and no other, at least MIN_ROWS of them; a fallback to `fit` had fewer."""
    rel = _releases()
    from engine_calibration import TRAIN_ROUNDS

    train = [c for c in CASES if c.round in TRAIN_ROUNDS and not c.held]
    groups, _ = rel.fit_groups(train)
    doc = rel.fitted_releases()
    assert doc
    for engine, keys in doc.items():
        for key, backends in keys.items():
            for backend, fig in backends.items():
                rows = [c.name for c in groups.get((engine, key, backend), [])]
                if rel.SAME_AS in fig:
                    assert fig[rel.SAME_AS] == "fit" and len(rows) < rel.MIN_ROWS
                else:
                    assert fig["calibrated_on"] == rows and len(rows) >= rel.MIN_ROWS
    assert all(k in doc.get(e, {}) for (e, k, b), rows in groups.items() if len(rows) >= rel.MIN_ROWS)
