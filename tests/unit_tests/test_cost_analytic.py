"""The per-op analytic model: every efficiency and overhead from the profile, per-op records
that add up to the units' totals, and the shape effects the issue names (skinny GEMMs,
decode attention over the real context, MoE experts touched, tensor parallel)."""

import ast
import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from hetc.cluster import Cluster, Profile
from hetc.partitioner.capture.capture import capture
from hetc.partitioner.cost_models import analytic
from hetc.partitioner.cost_models.analytic import Step, cost_params, op_time, unit_time, units_time
from hetc.partitioner.capture.graph import Terms
from hetc.partitioner.capture.op_records import OpRecord
from hetc.partitioner.capture.units import Unit
from tests.conftest import tiny_llama_with_layers

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = ROOT / "tests" / "fixtures" / "configs"

BASE = {
    "name": "test-chip",
    "vendor": "nvidia",
    "backend": "cuda",
    "memory": "80 GB",
    "reserved_memory": "6 GB",
    "memory_bandwidth": "2 TB/s",
    "peak_flops": {"bf16": "1000 TFLOP/s", "fp32": "100 TFLOP/s"},
    "efficiency": {"matmul": 0.5, "memory": 0.8},
    "launch_overhead": "5 us",
    "host_link": "pcie5",
    "power": "700 W",
    "price": "2 USD/h",
    "sources": ["test"],
    "execution": {"fusion": "none", "graphs": "none", "launch": "sync", "kernel_overhead": "0 us"},  # torch eager
}


def prof(**over) -> Profile:
    doc = json.loads(json.dumps(BASE))
    for k, v in over.items():
        doc[k] = v
    return Profile.model_validate(doc)


def matmul_unit(n=4096, k=4096, kernels=1) -> Unit:
    """One linear layer of an N×K bf16 weight (2 bytes per element)."""
    rec = OpRecord("matmul", 1, Terms(0, 2.0 * n * k, 0), Terms(), Terms(0, 2.0 * (n + k), 0), weight_bytes=2.0 * n * k, nk=float(n * k))
    return Unit(
        index=0,
        kind="mlp",
        layer=0,
        matmul_flops=rec.flops,
        other_flops=Terms(),
        act_bytes=rec.act_bytes,
        params={"w": 2.0 * n * k},
        streamed_param_bytes=2.0 * n * k,
        kv_bytes_per_token=0.0,
        attention_flops_per_ctx=0.0,
        out_bytes_per_token=2.0 * n,
        out_bytes_const=0.0,
        kernels=kernels,
        ops=(rec,),
    )


def t_of(u, p, step, tp=1):
    return units_time([u], p, step, dtype="bf16", kv_dtype="bf16", tp=tp)


@pytest.fixture(scope="module")
def tiny():
    return capture(str(CONFIGS / "tiny-llama"), dtype="bf16")


def test_a_scalar_profile_is_a_roofline_per_op_with_launches():
    p, u = prof(), matmul_unit(kernels=3)
    n = k = 4096
    for tokens in (1, 8, 4096):
        compute = 2.0 * n * k * tokens / (1000e12 * 0.5)
        memory = (2.0 * n * k + 2.0 * (n + k) * tokens) / (2e12 * 0.8)
        assert t_of(u, p, Step(tokens, tokens, 100)) == pytest.approx(max(compute, memory) + 3 * 5e-6)


def test_every_efficiency_and_overhead_comes_from_the_profile():
    u = matmul_unit()
    decode, prefill = Step(1, 1, 100), Step(4096, 1, 2048)
    base = prof()
    # compute-bound prefill follows efficiency.matmul and the peak
    work = t_of(u, base, prefill) - 5e-6
    assert t_of(u, prof(efficiency={"matmul": 0.25, "memory": 0.8}), prefill) - 5e-6 == pytest.approx(2 * work)
    assert t_of(u, prof(peak_flops={"bf16": "500 TFLOP/s", "fp32": "100 TFLOP/s"}), prefill) - 5e-6 == pytest.approx(2 * work)
    # memory-bound decode follows efficiency.memory and the bandwidth
    work = t_of(u, base, decode) - 5e-6
    assert t_of(u, prof(efficiency={"matmul": 0.5, "memory": 0.4}), decode) - 5e-6 == pytest.approx(2 * work)
    assert t_of(u, prof(memory_bandwidth="1 TB/s"), decode) - 5e-6 == pytest.approx(2 * work)
    # overheads: launch per kernel; overlap 0 adds compute and memory instead of taking the larger
    assert t_of(u, prof(launch_overhead="25 us"), decode) - t_of(u, base, decode) == pytest.approx(20e-6)
    no_overlap = prof(efficiency={"matmul": 0.5, "memory": 0.8, "overlap": 0.0})
    rec = u.ops[0]
    c = rec.flops.at(1, 100) / (1000e12 * 0.5)
    m = (rec.weight_bytes + rec.act_bytes.at(1, 100)) / (2e12 * 0.8)
    assert t_of(u, no_overlap, decode) == pytest.approx(c + m + 5e-6)


def test_efficiency_curves_override_the_scalars_by_shape():
    u = matmul_unit()
    curves = {
        "matmul": {"bf16": {"m": [1, 64, 4096], "nk": [1e6, 1e8], "eff": [[0.001, 0.001], [0.2, 0.2], [0.9, 0.9]]}},
        "memory": {"x": [1e3, 1e9], "eff": [0.5, 0.5]},
    }
    p = prof(efficiency_curves=curves)
    flops = 2.0 * 4096 * 4096
    # a skinny GEMM (M=1) at 0.1% of peak is slower than its weights take to stream
    assert t_of(u, p, Step(1, 1, 1)) == pytest.approx(flops / (1000e12 * 0.001) + 5e-6)
    assert t_of(u, p, Step(4096, 1, 1)) == pytest.approx(4096 * flops / (1000e12 * 0.9) + 5e-6)
    # between grid points: linear in log M (512 is halfway from 64 to 4096)
    assert t_of(u, p, Step(512, 512, 1)) == pytest.approx(512 * flops / (1000e12 * 0.55) + 5e-6)
    # element-wise ops read the memory curve; an op with its own curve reads that
    ew = OpRecord("elementwise", 1, Terms(), Terms(0, 1.0, 0), Terms(0, 1e6, 0), op="silu")
    cp = cost_params(p, "bf16")
    assert op_time(ew, cp, Step(10, 1, 1)) == pytest.approx(1e7 / (2e12 * 0.5))
    p2 = prof(efficiency_curves={**curves, "memory_ops": {"silu": {"x": [1e3], "eff": [0.1]}}})
    assert op_time(ew, cost_params(p2, "bf16"), Step(10, 1, 1)) == pytest.approx(1e7 / (2e12 * 0.1))


def test_analytic_model_has_no_efficiency_or_overhead_constants():
    """Only 0, 1, 2 (counting, halves, doubling FLOPs) and cache sizes may appear as numbers."""
    src = (ROOT / "partitioner" / "cost_models" / "analytic.py").read_text()
    nums = {n.value for n in ast.walk(ast.parse(src)) if isinstance(n, ast.Constant) and isinstance(n.value, (int, float)) and not isinstance(n.value, bool)}
    assert nums <= {0, 1, 2, 0.0, 1.0, 2.0, 64, 256, 200_000}, nums


def test_op_records_add_up_to_the_unit_totals(tiny):
    for u in tiny.units:
        ops = u.ops
        assert ops, u.kind
        assert sum(o.count for o in ops) == u.kernels
        assert sum(o.count * o.weight_bytes for o in ops) == pytest.approx(u.streamed_param_bytes)
        mm = sum((o.flops.scale(o.count) for o in ops), Terms())
        assert mm.per_token == pytest.approx(u.matmul_flops.per_token)
        assert mm.per_token_ctx == pytest.approx(u.matmul_flops.per_token_ctx)
        assert all(o.nk > 0 for o in ops if o.kind == "matmul")
    attn = next(u for u in tiny.units if u.kind == "attention")
    # GQA: the cache keeps 2 KV heads of 16 dims (of 4 query heads), K and V, bf16
    assert attn.kv_bytes_per_token == 2 * 2 * 16 * 2
    assert sum(o.count for o in attn.ops if o.kind == "attention") == 1


def test_decode_attention_reads_the_real_context():
    p = prof()
    rec = OpRecord("attention", 1, Terms(0, 0, 2.0 * 32 * 2 * 128), Terms(), Terms(), kv_bytes_per_token=2 * 8 * 128 * 2)
    cp = cost_params(p, "bf16")
    kv = 2 * 8 * 128 * 2  # GQA: 8 KV heads of 32 query heads
    one = op_time(rec, cp, Step(1, 1, 1000), kv)
    assert one == pytest.approx(kv * 1000 / (2e12 * 0.8))  # memory-bound: the cache read
    assert op_time(rec, cp, Step(4, 4, 1000), kv) == pytest.approx(4 * one)
    assert op_time(rec, cp, Step(1, 1, 3000), kv) == pytest.approx(3 * one)


def test_moe_streams_the_experts_a_batch_touches():
    rec = OpRecord("moe", 1, Terms(0, 2 * 2.0 * 1024 * 1024, 0), Terms(), Terms(), weight_bytes=8 * 2.0 * 1024 * 1024, nk=1024.0 * 1024, experts=8, top_k=2)
    cp = cost_params(prof(), "bf16")
    expert = 2.0 * 1024 * 1024
    # one token touches its 2 experts of 8; many tokens touch them all
    assert op_time(rec, cp, Step(1, 1, 1)) == pytest.approx(2 * expert / (2e12 * 0.8))
    assert op_time(rec, cp, Step(64, 64, 1)) == pytest.approx(8 * expert / (2e12 * 0.8), rel=1e-6)


def test_per_expert_gemms_run_at_one_experts_shape_grouped_ones_at_all_of_them():
    # a GEMM's efficiency grows ten-fold between one expert's weight (N·K) and eight's; low enough to be compute-bound
    curves = {"matmul": {"bf16": {"m": [1, 64], "nk": [1024.0 * 1024, 8 * 1024.0 * 1024], "eff": [[1e-4, 1e-3], [1e-4, 1e-3]]}}}
    rec = OpRecord("moe", 1, Terms(0, 2 * 2.0 * 1024 * 1024, 0), Terms(), Terms(), weight_bytes=8 * 2.0 * 1024 * 1024, nk=1024.0 * 1024, experts=8, top_k=2)
    step = Step(64, 64, 1)  # every expert touched, 16 rows each

    def t(experts: str, tp: int = 1, ep: int = 1) -> float:
        p = prof(efficiency_curves=curves, execution={**BASE["execution"], "experts": experts})
        return op_time(rec, cost_params(p, "bf16", tp, ep), step)

    def expect(eff: float, devices: int = 1) -> float:  # the FLOPs at `eff`, the touched experts' bytes beside
        compute, memory = 64 * 2 * 2.0 * 1024 * 1024 / devices / (1000e12 * eff), 8 * 2.0 * 1024 * 1024 / devices / (2e12 * 0.8)
        return analytic._combine(compute, memory, cost_params(prof(), "bf16").overlap)

    assert t("grouped") == pytest.approx(expect(1e-3))
    assert t("per-expert") == pytest.approx(expect(1e-4))
    # a tensor-parallel group splits each expert's weight: per expert N·K/2 (the curve's floor), grouped 8·N·K/2
    assert t("per-expert", tp=2) == pytest.approx(expect(1e-4, 2))
    assert t("grouped", tp=2) < t("per-expert", tp=2)
    # whole experts over two devices (ep): each expert's GEMM keeps its whole weight, a device half the experts
    assert t("per-expert", tp=2, ep=2) == pytest.approx(expect(1e-4, 2))
    # a cpu profile's backend runs torch's CPU grouped_mm: one mm per expert
    assert Profile.model_validate({**BASE, "backend": "cpu", "execution": {}}).execution.experts == "per-expert"
    assert prof().execution.experts == "grouped"


def test_per_expert_gemms_each_run_at_their_own_rows_as_a_random_routing_gives_them():
    # a curve that bends between 1 and 8 rows, as a CPU's does; weights too small to bind memory
    curves = {"matmul": {"bf16": {"m": [1, 2, 4, 8, 64], "nk": [1e6], "eff": [[0.01], [0.02], [0.02], [0.08], [0.5]]}}}
    E, k, nk = 16, 2, 1e6
    rec = OpRecord("moe", 1, Terms(0, 2 * k * nk, 0), Terms(), Terms(), weight_bytes=E * 2.0, nk=nk, experts=E, top_k=k)
    cp = cost_params(prof(efficiency_curves=curves, execution={**BASE["execution"], "experts": "per-expert"}), "bf16")
    curve = analytic.LogTable(Profile.model_validate({**BASE, "efficiency_curves": curves}).efficiency_curves.matmul["bf16"])
    rng = np.random.default_rng(0)
    for tokens in (8, 32):
        # independent reference: route each token to k distinct experts at random; every expert's GEMM at its own rows
        rows = np.zeros((4000, E))
        for trial in rows:
            for _ in range(tokens):
                trial[rng.choice(E, k, replace=False)] += 1
        per_trial = [sum(2 * m * nk / (1000e12 * curve(m, nk)) for m in trial if m) for trial in rows]
        assert op_time(rec, cp, Step(tokens, 1, tokens / 2)) == pytest.approx(float(np.mean(per_trial)), rel=0.01)
    # priced at the touched experts' mean rows (4.06, on the curve's steep side) it would read 40% high: the spread is what is tested
    assert op_time(rec, cp, Step(32, 1, 16)) < 0.75 * 2 * 32 * k * nk / (1000e12 * curve(32 * k / (E * (1 - (1 - k / E) ** 32)), nk))


def test_tensor_parallel_splits_the_work_not_the_launches():
    u, p = matmul_unit(), prof()
    step = Step(4096, 1, 2048)
    one, two = t_of(u, p, step), t_of(u, p, step, tp=2)
    assert two - 5e-6 == pytest.approx((one - 5e-6) / 2)


def test_units_time_caches_per_content_and_profile(tiny):
    p = prof()
    step = Step(3, 3, 50)
    direct = sum(unit_time(u, cost_params(p, "bf16"), step) for u in tiny.units)
    assert units_time(tiny.units, p, step, dtype="bf16", kv_dtype="bf16") == pytest.approx(direct)
    assert units_time(tiny.units, p, step, dtype="bf16", kv_dtype="bf16") == pytest.approx(direct)
    slower = prof(launch_overhead="50 us")
    assert units_time(tiny.units, slower, step, dtype="bf16", kv_dtype="bf16") > direct
    # a unit whose KV bytes change (a different KV dtype) is a different cost
    u = next(u for u in tiny.units if u.kind == "attention")
    assert replace(u, kv_bytes_per_token=u.kv_bytes_per_token / 2).cost_key != u.cost_key
    assert replace(u, index=99, layer=7, params={}).cost_key == u.cost_key


def test_a_unit_without_op_records_is_costed_from_its_totals():
    u = replace(matmul_unit(), ops=())
    p = prof()
    assert [o.kind for o in u.op_records] == ["matmul", "elementwise"]
    # the GEMM (one of N·K = FLOPs per token / 2) computes; its activations move as an op of their own
    flops, act = 2.0 * 4096 * 4096 * 4096, 2.0 * 8192 * 4096
    assert t_of(u, p, Step(4096, 1, 1)) == pytest.approx(flops / (1000e12 * 0.5) + act / (2e12 * 0.8) + 5e-6)


def test_replicated_layers_carry_their_op_records(tmp_path):
    m = capture(str(tiny_llama_with_layers(tmp_path, 7)), dtype="bf16")
    assert m.exported_layers == 3 and m.num_layers == 7
    attn = [u for u in m.units if u.kind == "attention"]
    assert len(attn) == 7 and all(u.ops for u in m.units)
    assert len({u.cost_key for u in attn[1:-1]}) == 1


def test_a_profile_with_curves_travels_inside_plan_json():
    curves = {
        "matmul": {"bf16": {"m": [1, 64], "nk": [1e6], "eff": [[0.1], [0.7]]}},
        "dispatch_overhead": "2 us",
        "gather": {"rows": [1, 64], "row_bytes": [6e3], "eff": [[0.3], [0.8]]},
        "threads": 2,
        "memory": {"x": [1e3, 1e6], "eff": [0.5, 2.0]},
    }
    p = prof(efficiency_curves=curves)
    from hetc.cluster import _profile_text  # the embedding plan.json carries

    doc = {
        "nodes": [{"name": "a", "device": "test-chip", "count": 1, "link": None}],
        "network": None,
        "profiles": {"test-chip": json.loads(json.dumps(_profile_text(p)))},
    }
    back = Cluster.from_json(doc).nodes[0].profile
    assert back.efficiency_curves == p.efficiency_curves
    step = Step(8, 8, 10)
    assert units_time([matmul_unit()], back, step, dtype="bf16", kv_dtype="bf16") == pytest.approx(
        units_time([matmul_unit()], p, step, dtype="bf16", kv_dtype="bf16")
    )
    assert analytic.compute_dtype(back, "fp8") == "bf16"


def test_a_mixed_step_streams_weights_once_and_attends_per_part(tiny):
    """Chunked prefill: prompt chunks batched into a decode step share its matmuls (weights read
    once, rows added) and its kernels' launches; attention is each part's own."""
    p = prof()
    decode, prefill = Step(16, 16, 900), Step(256, 2, 300)
    mixed = Step.mixed(16, 900, 256, 2, 300)
    assert mixed.parts == (decode, prefill) and mixed.total_tokens == 272
    assert Step.mixed(16, 900, 0, 0, 0) == decode and Step.mixed(0, 0, 256, 2, 300) == prefill
    # a weight-streaming GEMM: the prefill rows ride along almost free; one launch
    mm = matmul_unit(kernels=1)
    assert t_of(mm, p, mixed) == pytest.approx(t_of(mm, p, Step(272, 18, 0)))
    assert t_of(mm, p, mixed) < 0.6 * (t_of(mm, p, decode) + t_of(mm, p, prefill))
    # attention: exactly the two parts' own times
    cp = cost_params(p, "bf16")
    kv = 4096.0
    for u in tiny.units:
        for op in u.op_records:
            if op.kind == "attention":
                assert op_time(op, cp, mixed, kv) == pytest.approx(op_time(op, cp, decode, kv) + op_time(op, cp, prefill, kv))
    # a whole layer: cheaper than two steps (launches and weights once), dearer than either alone
    for u in tiny.units:
        both = t_of(u, p, decode) + t_of(u, p, prefill)
        assert max(t_of(u, p, decode), t_of(u, p, prefill)) <= t_of(u, p, mixed) < both
    with pytest.raises(ValueError):
        Step(1, 1, 1, Step(1, 1, 1, Step(1, 1, 1)))


def test_kernels_run_as_the_backend_runs_them(tiny):
    """Engine fusion counts the fused kernels; a replayed graph pays no host launch; an async host
    overlaps its launches with the device; each kernel pays the device's own overhead."""
    attn = next(u for u in tiny.units if u.kind == "attention")
    cp = cost_params(prof(), "bf16")
    decode, prefill = Step(8, 8, 100), Step(64, 1, 32)
    work = {s: sum(o.count * op_time(o, cp, s, attn.kv_bytes_per_token) for o in attn.fused) for s in (decode, prefill)}
    eng = {"fusion": "engine", "kernel_overhead": "1 us"}
    # decode replayed as a graph: the device's time only, per fused kernel
    p = prof(launch_overhead="5 us", execution={**eng, "graphs": "decode", "launch": "async"})
    assert t_of(attn, p, decode) == pytest.approx(work[decode] + 6 * 1e-6)
    # a prompt step is launched kernel by kernel: async, the longer of device time and launches
    slow = prof(launch_overhead="500 us", execution={**eng, "graphs": "decode", "launch": "async"})
    assert t_of(attn, slow, prefill) == pytest.approx(6 * 500e-6)
    assert t_of(attn, p, prefill) == pytest.approx(max(work[prefill] + 6e-6, 6 * 5e-6))
    # sync (the host runs the ops itself): launches add
    sync = prof(launch_overhead="5 us", execution={**eng, "graphs": "none", "launch": "sync"})
    assert t_of(attn, sync, decode) == pytest.approx(work[decode] + 6 * 1e-6 + 6 * 5e-6)
    # graphs for every step
    every = prof(launch_overhead="500 us", execution={**eng, "graphs": "all", "launch": "async"})
    assert t_of(attn, every, prefill) == pytest.approx(work[prefill] + 6e-6)
    # fused kernels move fewer bytes than the exported ops
    eager = prof(launch_overhead="0 us")
    fused = prof(launch_overhead="0 us", execution={**BASE["execution"], "fusion": "engine"})
    assert t_of(attn, fused, prefill) < t_of(attn, eager, prefill)


def test_execution_defaults_come_from_the_backend_and_travel_in_plan_json():
    from hetc.cluster import _profile_text
    from hetc.execution import BACKEND_EXECUTION, BACKEND_EXECUTION_SOURCES

    doc = json.loads(json.dumps(BASE))
    del doc["execution"]
    gpu = Profile.model_validate(doc)
    assert gpu.execution == BACKEND_EXECUTION["cuda"] and gpu.execution.fusion == "engine"
    assert Profile.model_validate({**doc, "backend": "cpu"}).execution == BACKEND_EXECUTION["cpu"]
    assert BACKEND_EXECUTION["cpu"].fusion == "none" and BACKEND_EXECUTION["cpu"].launch == "sync"
    part = Profile.model_validate({**doc, "execution": {"graphs": "none"}})  # the rest from the backend
    assert part.execution.graphs == "none" and part.execution.fusion == "engine"
    assert set(BACKEND_EXECUTION) == set(BACKEND_EXECUTION_SOURCES) and all(BACKEND_EXECUTION_SOURCES.values())
    back = Cluster.from_json(
        {
            "nodes": [{"name": "a", "device": "test-chip", "count": 1, "link": None}],
            "network": None,
            "profiles": {"test-chip": json.loads(json.dumps(_profile_text(part)))},
        }
    )
    assert back.nodes[0].profile.execution == part.execution


def test_a_dtype_may_reach_its_own_share_of_peak():
    """FP8 GEMMs on H100 reach 70.9% of FP8 peak where BF16 reaches 80.3% (hardware.md)."""
    p = prof(
        peak_flops={"bf16": "1000 TFLOP/s", "fp8": "2000 TFLOP/s", "fp32": "100 TFLOP/s"},
        efficiency={"matmul": 0.8, "memory": 0.8, "matmul_by_dtype": {"fp8": 0.7}},
    )
    assert cost_params(p, "fp8").eff_matmul == 0.7 and cost_params(p, "bf16").eff_matmul == 0.8


def test_an_engines_experts_figure_scales_the_routed_gemms_only():
    # compute-bound grouped experts (efficiency 1e-3 of peak) and a dense GEMM of the same FLOPs
    curves = {"matmul": {"bf16": {"m": [1, 64], "nk": [1024.0 * 1024, 8 * 1024.0 * 1024], "eff": [[1e-3, 1e-3], [1e-3, 1e-3]]}}}
    moe = OpRecord("moe", 1, Terms(0, 2 * 2.0 * 1024 * 1024, 0), Terms(), Terms(), weight_bytes=8 * 2.0 * 1024 * 1024, nk=1024.0 * 1024, experts=8, top_k=2)
    dense = OpRecord("matmul", 1, Terms(0, 2 * 2.0 * 1024 * 1024, 0), Terms(), Terms(), weight_bytes=2.0 * 1024 * 1024, nk=1024.0 * 1024)
    step = Step(64, 64, 1)
    base = prof(efficiency_curves=curves)
    half = base.model_copy(update={"efficiency": base.efficiency.model_copy(update={"experts": 0.5})})
    assert base.efficiency.experts == 1.0  # a profile's own: as the dense GEMMs
    assert op_time(moe, cost_params(half, "bf16"), step) == pytest.approx(2 * op_time(moe, cost_params(base, "bf16"), step), rel=1e-3)
    assert op_time(dense, cost_params(half, "bf16"), step) == op_time(dense, cost_params(base, "bf16"), step)
