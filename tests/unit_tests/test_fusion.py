"""Kernels after the fusion engines perform (partitioner/capture/fusion.py), from a real export's data flow."""

import pytest

from hetc.partitioner.capture.capture import capture
from hetc.partitioner.capture.terms import Terms
from tests.conftest import FIXTURES as CONFIGS


@pytest.fixture(scope="module")
def llama():
    return capture(str(CONFIGS / "tiny-llama"), dtype="bf16")


def _sum(recs, attr: str) -> Terms:
    return sum((getattr(o, attr).scale(o.count) for o in recs), Terms())


def test_a_llama_layer_runs_as_the_engines_kernels(llama):
    """vLLM's Llama layer: norm, QKV GEMM, rotary, attention, o_proj, residual add | norm, gate+up GEMM,
    SiLU-and-mul, down GEMM, residual add (the add is fused with the next norm only across units)."""
    attn, mlp = (next(u for u in llama.units if u.kind == k and u.layer == 1) for k in ("attention", "mlp"))
    assert (attn.kernels, attn.fused_kernels) == (25, 6)
    assert (mlp.kernels, mlp.fused_kernels) == (14, 5)
    h, i, kv = 64, 176, 2 * 16  # tiny-llama: hidden 64, intermediate 176, 2 KV heads of 16
    assert sorted(o.nk for o in mlp.fused if o.kind == "matmul") == [h * i, 2 * h * i]  # down; gate + up as one
    assert sorted(o.nk for o in attn.fused if o.kind == "matmul") == [h * h, h * (h + 2 * kv)]  # o_proj; q, k, v as one
    rotary = [o for o in attn.fused if o.kind == "elementwise" and o.op == "fused"]
    assert len(rotary) == 1  # q's and k's rotary (they share cos and sin, neither needs the other): one kernel


def test_fusion_keeps_the_work_and_reads_each_tensor_once(llama):
    for u in llama.units:
        assert _sum(u.fused, "flops") == _sum(u.ops, "flops")  # every FLOP is still done
        # element-wise arithmetic stays; only layout copies folded into a GEMM's or attention's store go
        other, kept = _sum(u.fused, "other_flops").per_token, _sum(u.ops, "other_flops").per_token
        assert kept - _sum([o for o in u.ops if o.kind == "copy"], "other_flops").per_token <= other <= kept
        assert sum(o.weight_bytes * o.count for o in u.fused) == pytest.approx(sum(o.weight_bytes * o.count for o in u.ops))
        assert _sum(u.fused, "act_bytes").per_token <= _sum(u.ops, "act_bytes").per_token
        assert u.fused_kernels <= u.kernels
        if u.kind in ("attention", "mlp"):
            assert _sum(u.fused, "act_bytes").per_token < 0.6 * _sum(u.ops, "act_bytes").per_token
    # the RMSNorm chain (casts, pow, mean, add, rsqrt, mul, cast, weight) reads the residual and writes its output once
    attn = next(u for u in llama.units if u.kind == "attention")
    norm = next(o for o in attn.fused if o.kind == "norm")
    assert norm.act_bytes.per_token == 2 * attn.out_bytes_per_token


def test_every_family_keeps_its_kernels_apart_where_data_flow_orders_them():
    """Chains that depend on each other (a norm and the residual add after attention both read the
    residual stream) stay separate kernels; a unit's kernels never drop below its GEMMs + attention."""
    for name in ("tiny-gpt2", "tiny-opt", "tiny-phi3", "tiny-mixtral", "tiny-qwen2"):
        m = capture(str(CONFIGS / name), dtype="bf16")
        for u in m.units:
            heavy = sum(o.count for o in u.ops if o.kind in ("attention", "moe", "gather"))
            assert heavy <= u.fused_kernels <= u.kernels, (name, u.kind)
            if u.kind == "attention":
                assert sum(o.count for o in u.fused if o.kind in ("norm", "elementwise", "copy")) >= 2


def test_inspect_shows_kernels_per_layer_before_and_after_fusion(llama):
    from hetc.report import inspect_rows, kernels_per_layer

    rows, totals = inspect_rows(llama, 128, 16)
    assert kernels_per_layer(rows) == (39, 11)
    assert totals["kernels"] == sum(u.kernels for u in llama.units) > totals["fused_kernels"]
