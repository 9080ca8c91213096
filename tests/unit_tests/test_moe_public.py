"""The MoE public-figure comparison (benchmarks/moe_public.py, issue 28): its rows keep the declared
split, the figures fitted on them come from train rows only, and a fitted architecture's figures reach
its devices alone."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest
import yaml

from hetc.cluster import load_cluster
from hetc.engine import FIT_FILE, Engine, EngineName

REPO = Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("moe_public", REPO / "benchmarks" / "moe_public.py")
moe_public = importlib.util.module_from_spec(spec)
sys.modules["moe_public"] = moe_public
spec.loader.exec_module(moe_public)

ROWS = json.loads(moe_public.ROWS_FILE.read_text())["rows"] + moe_public.trtllm_rows()


def test_every_row_keeps_the_split_its_configuration_hashes_to():
    """The split is the hash rule's, row by row (no row moved by hand), a third or so held, and no
    configuration twice."""
    keys = [moe_public.key_of(r) for r in ROWS]
    assert len(set(keys)) == len(keys)
    assert all(r["split"] == moe_public.split_of(k) for r, k in zip(ROWS, keys, strict=True))
    held = sum(r["split"] == "held" for r in ROWS) / len(ROWS)
    assert 0.2 < held < 0.45


def test_architecture_figures_are_fitted_on_every_train_row_of_their_group_and_nothing_else():
    fitted = yaml.safe_load(FIT_FILE.read_text())
    by_key = {moe_public.key_of(r): r for r in ROWS}
    groups = 0
    for engine, backends in fitted.items():
        for arch, fig in backends.items():
            if ":" not in arch:
                continue
            groups += 1
            rows = [by_key[k] for k in fig["calibrated_on"]]
            assert all(r["split"] == "train" for r in rows)
            assert {moe_public.ENGINES[r["framework"]] for r in rows} == {engine}
            assert {moe_public.arch_of(r["hardware"]) for r in rows} == {arch}
            want = sorted(
                moe_public.key_of(r)
                for r in ROWS
                if r["split"] == "train"
                and "framework" in r
                and moe_public.ENGINES[r["framework"]] == engine
                and (r["framework"], r["hardware"]) in moe_public.FIT_GROUPS
                and moe_public.arch_of(r["hardware"]) == arch
            )
            assert sorted(fig["calibrated_on"]) == want
    assert groups >= 2


@pytest.mark.parametrize(("cluster", "fitted"), [("8xmi300x", True), ("8xmi325x", True), ("8xmi355x", True), ("8xh200", False)])
def test_a_fitted_architecture_s_figures_reach_its_devices_alone(cluster, fitted):
    """sglang@fit on gfx942 and gfx950 devices carries their own step overhead; on cuda, none of them;
    the base figures are untouched."""
    base = load_cluster(str(REPO / f"benchmarks/public_gpu/{cluster}.yaml"), engine="sglang").nodes[0].profile
    fit = load_cluster(str(REPO / f"benchmarks/public_gpu/{cluster}.yaml"), engine="sglang@fit").nodes[0].profile
    arch = yaml.safe_load(FIT_FILE.read_text())["sglang"].get(f"{fit.backend}:{fit.target}")
    assert (arch is not None) == fitted
    if fitted:
        assert fit.step_overhead == pytest.approx(float(arch["step_overhead"].split()[0]) * 1e-3)
        assert base.step_overhead == 0.0  # sglang's own figure on rocm: the overlap scheduler hides the host's step
    else:
        assert fit.step_overhead == base.step_overhead


def test_release_figures_compose_backend_then_architecture(tmp_path, monkeypatch):
    """A release's BACKEND:TARGET figures go over its BACKEND figures, which go over the engine's own:
    keys the architecture does not set keep the backend's."""
    import hetc.engine as engine

    fit = tmp_path / "fit.yaml"
    fit.write_text(
        yaml.safe_dump(
            {
                "vllm": {
                    "rocm": {"matmul": 0.7, "collective": 2.0, "sources": ["backend"]},
                    "rocm:gfx950": {"step_overhead": "3 ms", "collective": 1.5, "sources": ["architecture"]},
                }
            }
        )
    )
    monkeypatch.setattr(engine, "FIT_FILE", fit)
    monkeypatch.setattr(engine, "FIT_RELEASES_FILE", tmp_path / "none.yaml")  # the per-release figures fall back to the real fit's keys
    engine.load_engine.cache_clear()
    try:
        gfx950 = engine.engine_figures(Engine(EngineName.VLLM, "fit"), "rocm", target="gfx950")
        gfx942 = engine.engine_figures(Engine(EngineName.VLLM, "fit"), "rocm", target="gfx942")
    finally:
        engine.load_engine.cache_clear()
    assert (gfx950.matmul, gfx950.collective, gfx950.step_overhead) == (0.7, 1.5, pytest.approx(3e-3))
    assert (gfx942.matmul, gfx942.collective, gfx942.step_overhead) == (0.7, 2.0, None)


def test_quick_prediction_agrees_with_hetc_plan_at_the_row_s_batch():
    """The fit's in-process stand-in prices a row as `hetc plan --placement --batch CONC` does: adding the
    fitted step overhead lengthens TPOT by about that much per decode step."""
    row = next(r for r in ROWS if r.get("hardware") == "mi300x" and r.get("conc") == 16 and r["isl"] == 1024 and r["osl"] == 1024)
    _, tpot0 = moe_public.quick(row, 0.0)
    _, tpot1 = moe_public.quick(row, 0.01)
    assert tpot1 - tpot0 == pytest.approx(10.0, rel=0.1)
