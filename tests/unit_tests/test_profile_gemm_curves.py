"""GPU profiles' matmul efficiency by shape (from public per-shape GEMM tables, benchmarks/public_gemm.py):
checked against the independent public figures the profiles already hold, and read by the cost model."""

import pytest

from hetc.cluster import load_profile
from hetc.partitioner.cost_models.analytic import Step, cost_params, op_time
from hetc.partitioner.cost_models.curves import LogTable
from hetc.partitioner.capture.graph import Terms
from hetc.partitioner.capture.op_records import OpRecord

CURVED = ["h100-sxm", "h200-sxm", "b200", "a100-80g-sxm", "l40s"]


def gemm(n: int, k: int, wbytes: float) -> OpRecord:
    return OpRecord("matmul", 1, Terms(0, 2.0 * n * k, 0), Terms(), Terms(0, 2.0 * (n + k), 0), weight_bytes=wbytes * n * k, nk=float(n * k))


@pytest.mark.parametrize("name", [n for n in CURVED if n != "l40s"])  # L40S's scalar is an estimate (⚠), not MAMF
def test_best_cell_agrees_with_the_best_shape_matmul_figure(name):
    """The curves' best cell and the scalar (MAMF: the best shape's share of peak, ml-engineering) are two
    independent public measurements of the same thing: they agree within 25%."""
    p = load_profile(name)
    assert p.efficiency_curves is not None and p.efficiency_curves.source
    for dt, c in p.efficiency_curves.matmul.items():
        best = max(max(r) for r in c.eff)
        assert 0.75 <= best / p.efficiency.matmul_for(dt) <= 1.05, (dt, best)


@pytest.mark.parametrize("name", CURVED)
def test_skinny_bf16_gemms_run_at_the_memory_bandwidth(name):
    """At M=1 a GEMM streams its weights: the curve's time for a 8192×8192 bf16 weight is that of
    weights ÷ (memory_bandwidth × efficiency.memory) — a separate figure of the profile — or up to a third
    longer (the measured GEMV kernels reach 65–85% of HBM bandwidth, the profiles' streaming share 85–90%)."""
    p = load_profile(name)
    cp = cost_params(p, "bf16")
    n = k = 8192
    curve = LogTable(p.efficiency_curves.matmul["bf16"])
    compute = 2.0 * n * k / (cp.peak * curve(1, n * k))
    stream = 2.0 * n * k / (p.memory_bandwidth * p.efficiency.memory)
    assert 0.8 <= compute / stream <= 1.35, compute / stream


def test_the_cost_model_reads_the_curve_by_rows_and_weight_size():
    """FP8 on H100: a prefill-sized GEMM of a 70B layer runs below the best-shape share, a smaller weight
    (TP-split) lower still, and a decode GEMM is bound by its weights, not by the best-shape FLOP rate."""
    p = load_profile("h100-sxm")
    cp = cost_params(p, "fp8")
    big, split = gemm(8192, 8192, 1.0), gemm(1024, 8192, 1.0)
    prefill = Step(tokens=2048.0, ctx=0.0, seqs=8.0)
    flops_rate = lambda op, step: 2.0 * op.nk * step.tokens / op_time(op, cp, step)  # noqa: E731
    best = cp.peak * p.efficiency.matmul_for("fp8")
    assert flops_rate(big, prefill) < best
    assert flops_rate(split, prefill) < 0.8 * flops_rate(big, prefill)
    decode = Step(tokens=1.0, ctx=100.0, seqs=1.0)
    assert op_time(big, cp, decode) >= big.weight_bytes / (p.memory_bandwidth * p.efficiency.memory)


# AMD's published Max-Achievable FLOPs (ROCm blog "Measuring Max-Achievable FLOPs – Part 2", Table 1), TFLOP/s
AMD_MAF = {"mi300x": {"bf16": 708, "fp16": 654, "fp8": 1273}, "mi325x": {"bf16": 843, "fp16": 794, "fp8": 1519}}


@pytest.mark.parametrize("name", sorted(AMD_MAF))
def test_amd_gemms_reach_amds_max_achievable_flops_per_dtype(name):
    """The best-shape GEMM rate the cost model uses for MI300X/MI325X weights of each dtype is AMD's own
    measured MAF for that dtype (FP8 reaches a smaller share of its peak than BF16: 48.7% vs 54.2% on MI300X),
    not the BF16 share applied to FP8."""
    p = load_profile(name)
    for dt, tflops in AMD_MAF[name].items():
        cp = cost_params(p, dt)
        assert cp.peak * cp.eff_matmul == pytest.approx(tflops * 1e12, rel=0.005), dt
    assert p.efficiency.matmul_for("fp8") < p.efficiency.matmul_for("bf16")
