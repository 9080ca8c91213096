"""The serving engine as an input (hetc/engine.py): the engines' files, how a node's figures follow
its engine, the field and the flag, and plans under the engine the catalog assumed until now."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hetc.cli import main
from hetc.cluster import Cluster, load_cluster, load_profile, profile_names
from hetc.engine import ASSUMED_BEFORE, ENGINE_DIR, Engine, EngineFigures, EngineName, apply_engine, engine_figures, load_engine
from hetc.errors import BadInput

ROOT = Path(__file__).resolve().parents[2]
ONE_H100 = ROOT / "benchmarks/public_gpu/1xh100.yaml"


def write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "cluster.yaml"
    p.write_text(text)
    return p


def test_every_engine_has_its_file_and_every_figure_a_source():
    files = sorted(p.name for p in ENGINE_DIR.iterdir() if p.name.endswith(".yaml") and p.name not in ("fit.yaml", "fit_releases.yaml"))
    assert files == sorted(f"{e.value}.yaml" for e in EngineName)
    for e in EngineName:
        spec = load_engine(e)
        assert spec.name is e
        for backend, fig in spec.backends.items():
            assert fig.sources and all(s.strip() for s in fig.sources), (e, backend)
            assert fig.collectives, (e, backend)


@pytest.mark.parametrize("name", profile_names())
def test_the_engine_assumed_until_now_changes_no_catalog_profile(name):
    """Plans under `vllm` (GPUs) and `hetc` (cpu, openvino) read exactly today's figures: the same object."""
    prof = load_profile(name)
    fig = engine_figures(Engine(ASSUMED_BEFORE[prof.backend]), prof.backend)
    assert apply_engine(prof, fig) is prof


def _predicted(path: Path) -> tuple:
    d = json.loads(path.read_text())
    return d["predicted"]["output_tok_s"], [(s["predicted_ms"]["prefill"], s["predicted_ms"]["decode"]) for p in d["pipelines"] for s in p["stages"]]


# main's plans before engines were an input (bd2ea1f): llama-3.1-8b fp8, 1000/1000 tokens, a:0, batch 64
TODAY = {
    "1xh100": (7838.537395263977, [(17.322259122026722, 7.26286955266667)]),
    "8xmi300x": (11186.307060134686, [(14.891679158904553, 4.894617039486478)]),
    "2xgaudi3": (8118.531377068858, [(16.733799332110515, 7.021689200192338)]),
}


@pytest.mark.parametrize("cluster", sorted(TODAY))
def test_plan_under_vllm_is_todays_plan_bit_for_bit(tmp_path, cluster):
    """`hetc plan --engine vllm` on catalog H100, MI300X and Gaudi 3 profiles gives the figures main gave
    before engines were an input, to the last bit; the default (hetc) predicts slower on cuda."""
    out = tmp_path / "plan.json"
    path = str(ROOT / f"benchmarks/public_gpu/{cluster}.yaml")
    args = ["--dtype", "fp8", "--input-len", "1000", "--output-len", "1000", "--placement", "a:0", "--batch", "64", "-o", str(out)]
    assert main(["plan", "--profiles", path, "llama-3.1-8b", *args, "--engine", "vllm"]) == 0
    assert _predicted(out) == TODAY[cluster]
    assert json.loads(out.read_text())["cluster"]["nodes"][0]["engine"] == "vllm"
    if cluster == "1xh100":
        assert main(["plan", "--profiles", path, "llama-3.1-8b", *args]) == 0  # default: hetc, what hetc serve runs
        tok_s, stages = _predicted(out)
        assert json.loads(out.read_text())["cluster"]["nodes"][0]["engine"] == "hetc"
        assert tok_s < TODAY[cluster][0] and stages[0][1] > TODAY[cluster][1][0][1]  # hetc's runtime is slower than vLLM


def test_hetc_on_cuda_predicts_the_served_h200_step():
    """The hetc entry against its own measurement: hetc serve's decode step on one H200 (llama-3.1-8b bf16,
    512/128 tokens) was 8.23 / 9.61 ms at batch 8 / 32 (benchmarks/logs/gpu-h200-serve-graphs-2026-11-27.md)."""
    from hetc.partitioner.capture.capture import capture
    from hetc.partitioner.estimate.simulate import StagePlan, Workload, estimate_pipeline

    cluster = load_cluster(ROOT / "benchmarks/public_gpu/1xh200.yaml")
    m = capture("llama-3.1-8b", dtype="bf16")
    wl = Workload(512, 128, "bf16", m.kv_dtype)
    for batch, served_ms in ((8, 8.23), (32, 9.61)):
        est = estimate_pipeline(m.units, [StagePlan(cluster.nodes[0], 0, len(m.units) - 1, 1)], cluster, wl, batch)
        assert est is not None
        assert est.stages[0].decode_s * 1e3 == pytest.approx(served_ms, rel=0.06)


def test_cluster_field_per_node_and_flag(tmp_path):
    p = write(
        tmp_path,
        "engine: sglang\nnodes:\n  - {name: a, device: h100-sxm, count: 1}\n"
        "  - {name: b, device: h100-sxm, count: 1, engine: trtllm}\nnetwork: {default: roce-400g}\n",
    )
    c = load_cluster(p)
    assert [str(n.engine) for n in c.nodes] == ["sglang", "trtllm"] and c.engines == "a: sglang, b: trtllm"
    assert c.nodes[0].profile.step_overhead == 0.0 and load_profile("h100-sxm").step_overhead == 1e-3
    assert load_cluster(p, engine="vllm").engines == "vllm"
    again = Cluster.from_json(c.to_json())  # plan.json's copy: hardware profiles, the engine per node
    assert [n.profile for n in again.nodes] == [n.profile for n in c.nodes]
    assert c.to_json()["profiles"]["h100-sxm"]["step_overhead"] == "1000 us"  # the hardware's, not the engine's


def test_a_plan_written_before_engines_keeps_its_figures(tmp_path):
    """plan.json files without `engine` were made under the engine the profiles assumed then."""
    doc = load_cluster(ONE_H100, engine="vllm").to_json()
    for n in doc["nodes"]:
        del n["engine"]
    c = Cluster.from_json(doc)
    assert c.engines == "vllm"
    assert c.nodes[0].profile == load_profile("h100-sxm")


@pytest.mark.parametrize(
    ("text", "engine", "field", "says"),
    [
        ("engine: tgi\nnodes: [{name: a, device: h100-sxm, count: 1}]\n", None, "engine", "unknown engine 'tgi'"),
        ("nodes: [{name: a, device: mi300x, count: 1, engine: trtllm}]\n", None, "nodes[0].engine", "does not serve rocm"),
        ("nodes: [{name: a, device: h100-sxm, count: 1}]\n", "vllm@0.1", "--engine", "no release '0.1'"),
        ("nodes: [{name: a, device: cpu, count: 1}]\n", "sglang", "--engine", "does not serve cpu"),
    ],
)
def test_bad_engine_names_the_field_and_the_fix(tmp_path, text, engine, field, says):
    with pytest.raises(BadInput) as e:
        load_cluster(write(tmp_path, text), engine=engine)
    assert e.value.field == field and says in str(e.value) and e.value.fix


def test_cli_refuses_an_unknown_engine_with_exit_2(tmp_path, capsys):
    assert main(["plan", "--profiles", str(ONE_H100), "llama-3.1-8b", "--engine", "tgi", "-o", str(tmp_path / "p.json")]) == 2
    err = capsys.readouterr().err
    assert "--engine" in err and "hetc, vllm, sglang, trtllm" in err and "Traceback" not in err


def test_kernel_figures_scale_the_profiles_efficiencies():
    prof = load_profile("h100-sxm")
    fig = EngineFigures(matmul=0.5, attention=0.8, execution={"graphs": "none"}, launch_overhead="3 us", sources=["test"])
    got = apply_engine(prof, fig)
    assert got.efficiency.matmul == pytest.approx(prof.efficiency.matmul * 0.5)
    assert got.efficiency.matmul_for("fp8") == pytest.approx(prof.efficiency.matmul_for("fp8") * 0.5)
    assert got.efficiency_curves.matmul["bf16"].eff[3][4] == pytest.approx(prof.efficiency_curves.matmul["bf16"].eff[3][4] * 0.5)
    assert got.execution.graphs == "none" and got.execution.fusion == prof.execution.fusion and got.launch_overhead == 3e-6
    assert prof.execution.graphs == "decode"  # the catalog's profile is untouched


def test_a_release_overrides_its_engine_on_one_backend():
    base = EngineFigures(step_overhead="1 ms", execution={"graphs": "decode"}, sources=["base"])
    rel = EngineFigures(matmul=0.9, sources=["release"])
    got = rel.over(base)
    assert got.step_overhead == 1e-3 and got.matmul == 0.9 and got.execution == {"graphs": "decode"} and got.sources == ["base", "release"]


def test_collective_figure_scales_the_tensor_parallel_all_reduce():
    from hetc.partitioner.capture.capture import capture
    from hetc.partitioner.estimate.simulate import StagePlan, Workload, estimate_pipeline

    m = capture("llama-3.1-8b", dtype="fp8")
    wl = Workload(1000, 1000, "fp8", m.kv_dtype)
    base = load_cluster(ROOT / "benchmarks/public_gpu/2xh100.yaml", engine="vllm")

    def decode_s(collective: float) -> float:
        import dataclasses

        fig = EngineFigures(collective=collective, sources=["test"])
        c = dataclasses.replace(base, nodes=[dataclasses.replace(n, profile=apply_engine(n.profile, fig)) for n in base.nodes])
        est = estimate_pipeline(m.units, [StagePlan(c.nodes[0], 0, len(m.units) - 1, 2)], c, wl, 64)
        assert est is not None
        return est.stages[0].decode_s

    one, two, three = decode_s(1.0), decode_s(2.0), decode_s(3.0)
    assert two > one and three - two == pytest.approx(two - one, rel=1e-9)  # linear in the figure: the all-reduce part alone


def test_fit_release_is_an_engine_release():
    for e in ("vllm", "trtllm"):
        assert str(Engine.parse(f"{e}@fit")) == f"{e}@fit"
    fig = engine_figures(Engine.parse("vllm@fit"), "rocm")
    assert fig.calibrated_on and fig.matmul != 1.0 and fig.sources[-1].startswith("matmul")


def test_a_fitted_engine_release_is_named_by_its_key_and_falls_back_to_fit():
    """`vllm@0.7` (hardware_profiles/engines/fit_releases.yaml): its own figures where that release has
    training rows (rocm), the engine's `fit` figures elsewhere, the reason among the sources."""
    own, fit = engine_figures(Engine.parse("vllm@0.7"), "rocm"), engine_figures(Engine.parse("vllm@fit"), "rocm")
    assert own.calibrated_on and own.calibrated_on != fit.calibrated_on and own.matmul != fit.matmul
    on_cuda, fit_cuda = engine_figures(Engine.parse("vllm@0.7"), "cuda"), engine_figures(Engine.parse("vllm@fit"), "cuda")
    assert (on_cuda.matmul, on_cuda.collective, on_cuda.calibrated_on) == (fit_cuda.matmul, fit_cuda.collective, fit_cuda.calibrated_on)
    assert "fewer than" in on_cuda.sources[-1] and "`fit`" in on_cuda.sources[-1]
    with pytest.raises(BadInput) as e:
        Engine.parse("vllm@0.5")
    assert "vllm@0.7" in e.value.fix


def test_cli_plans_at_a_fitted_release(tmp_path):
    out = tmp_path / "p.json"
    assert main(["plan", "--profiles", str(ONE_H100), "llama-3.1-8b", "--dtype", "fp8", "--engine", "vllm@0.9", "-o", str(out)]) == 0
    assert {n["engine"] for n in json.loads(out.read_text())["cluster"]["nodes"]} == {"vllm@0.9"}


def test_experts_figure_reaches_the_profile_and_trtllm_sets_it():
    prof = load_profile("h100-sxm")
    got = apply_engine(prof, EngineFigures(experts=0.5, sources=["test"]))
    assert got.efficiency.experts == 0.5 and got.efficiency.matmul == prof.efficiency.matmul
    assert got.efficiency_curves == prof.efficiency_curves  # the dense GEMMs' curves untouched
    assert not EngineFigures(experts=0.5, sources=["test"]).changes_nothing
    # TensorRT-LLM's MoE layer (from its v0.17 perf overview's Mixtral / Mistral-7B pairs): every release and the fit carry it
    for release in (None, "fit", "main-2024-07-16"):
        assert engine_figures(Engine(EngineName.TRTLLM, release), "cuda").experts == 0.72
    assert engine_figures(Engine(EngineName.VLLM), "cuda").experts == 1.0
