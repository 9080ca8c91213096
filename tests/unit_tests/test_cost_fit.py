"""The fitting code of `hetc profile` on synthetic timings with known answers."""

import math

import pytest

from hetc.cluster import AttentionCurve, Curve1D, Curve2D, GatherCurve
from hetc.partitioner.profiling import fit
from hetc.partitioner.cost_models.curves import LogCurve, LogTable


def test_efficiency_subtracts_dispatch_and_caps():
    # 1 GFLOP in 11 ms at a 100 GFLOP/s peak, 1 ms of it dispatch: 10 ms of work = 100%
    assert fit.efficiency(1e9, 11e-3, 100e9, dispatch=1e-3) == pytest.approx(1.0)
    # an op no slower than its dispatch keeps a tenth of its time as work, and the cap holds
    assert fit.efficiency(1e3, 1e-6, 1e9, dispatch=2e-6) == pytest.approx(1e3 / (1e9 * 1e-7))
    assert fit.efficiency(1e12, 1e-6, 1.0, cap=5.0) == 5.0


def test_table_1d_medians_per_bin_at_the_samples_geometric_mean():
    xs = [1000, 1000, 1000, 4000, 64000]
    effs = [0.2, 0.9, 0.3, 0.5, 0.7]
    t = fit.table_1d(xs, effs)
    assert t["x"] == pytest.approx([1000.0, 4000.0, 64000.0]) and t["eff"] == [0.3, 0.5, 0.7]
    # with a grid, samples bin to the nearest point in log space; the point sits where they were taken
    t = fit.table_1d([1000, 4000, 2000], [0.1, 0.3, 0.2], grid=[1024, 65536])
    assert t["x"][0] == pytest.approx((1000 * 4000 * 2000) ** (1 / 3))
    assert t["eff"] == [0.2]
    Curve1D.model_validate(t)
    with pytest.raises(ValueError):
        fit.table_1d([], [])


def test_table_2d_fills_cells_not_measured_from_the_nearest_size():
    ms = [1, 1, 64, 64, 1024]
    nks = [1e6, 1.6e7, 1e6, 1.6e7, 1e6]  # the large GEMM at M=1024 was skipped
    effs = [0.1, 0.12, 0.6, 0.55, 0.9]
    t = fit.table_2d(ms, nks, effs)
    assert t["m"] == [1.0, 64.0, 1024.0] and t["nk"] == [1e6, 1.6e7]
    assert t["eff"] == [[0.1, 0.12], [0.6, 0.55], [0.9, 0.9]]
    Curve2D.model_validate(t)


def test_log_curves_interpolate_in_log_space_and_hold_at_the_ends():
    c = LogCurve(Curve1D(x=[10, 1000], eff=[0.2, 0.6]))
    assert c(100) == pytest.approx(0.4)  # halfway in log space
    assert c(1) == 0.2 and c(1e6) == 0.6
    t = LogTable(Curve2D(m=[1, 100], nk=[1e4, 1e8], eff=[[0.1, 0.3], [0.5, 0.7]]))
    assert t(10, 1e6) == pytest.approx(0.4)
    assert t(1000, 1e9) == 0.7 and t(0.5, 1) == 0.1
    a = LogTable(AttentionCurve(q=[1, 64], ctx=[16, 4096], eff=[[0.1, 0.2], [0.4, 0.5]]))
    assert a(8, 256) == pytest.approx(0.3)


def test_fit_overheads_recovers_slope_and_intercept():
    kernels = [49, 49, 88, 88, 166, 166]
    noise = [1.01, 0.99, 1.0, 1.02, 0.98, 1.0]
    times = [(300e-6 + k * 9e-6) * n for k, n in zip(kernels, noise)]
    launch, step = fit.fit_overheads(kernels, times)
    assert launch == pytest.approx(9e-6, rel=0.05)
    assert step == pytest.approx(300e-6, rel=0.15)
    # no slope: everything is per step; negative intercept: a line through the origin
    assert fit.fit_overheads([10, 20], [5e-4, 4.8e-4]) == (0.0, pytest.approx(4.9e-4))
    launch, step = fit.fit_overheads([10, 20], [0.5e-4, 2.5e-4])
    assert step == 0.0 and launch > 0


def test_fit_alpha_beta_takes_the_latency_from_the_small_transfers():
    """Noise of a few % on the large transfers must not swamp a latency that is most of a small one."""
    sizes = [1 << 10, 1 << 16, 1 << 20, 1 << 23, 1 << 25]
    noise = [1.0, 1.0, 1.0, 0.97, 1.02]  # a loaded host: the 32 MiB transfer 2% slow, the 8 MiB one 3% fast
    lat, bw = fit.fit_alpha_beta(sizes, [(100e-6 + s / 2.5e9) * n for s, n in zip(sizes, noise)])
    assert lat == pytest.approx(100e-6, rel=0.1)  # plain least squares: 63 µs
    assert bw == pytest.approx(2.5e9, rel=0.05)


def test_fit_alpha_beta():
    sizes = [1e3, 1e5, 1e6, 1e7]
    lat, bw = fit.fit_alpha_beta(sizes, [50e-6 + s / 2e9 for s in sizes])
    assert lat == pytest.approx(50e-6, rel=1e-6) and bw == pytest.approx(2e9, rel=1e-6)
    with pytest.raises(ValueError):
        fit.fit_alpha_beta(sizes, [1e-3, 0.9e-3, 0.8e-3, 0.7e-3])


def _samples(op, kind, speed, sizes, dispatch=2e-6):
    return [{"op": op, "kind": kind, "bytes": b, "seconds": dispatch + b / speed} for b in sizes]


def test_fit_memory_gives_slow_ops_their_own_curve_and_keeps_them_out_of_the_defaults():
    bw, d = 20e9, 2e-6
    sizes = [4**i for i in range(6, 13)]
    samples = (
        _samples("add", "elementwise", 40e9, sizes)
        + _samples("mul", "elementwise", 40e9, sizes)
        + _samples("silu", "elementwise", 8e9, sizes)
        + _samples("mean", "norm", 30e9, sizes)
        + _samples("clone", "copy", 20e9, sizes)
    )
    default, kinds, ops = fit.fit_memory(samples, bw, d, sizes, cache_bytes=32 * 2**20)
    # each op's own curve is its speed ÷ bandwidth
    assert fit.eval_1d(ops["silu"], 65536) == pytest.approx(0.4, rel=1e-6)
    assert fit.eval_1d(ops["add"], 65536) == pytest.approx(2.0, rel=1e-6)
    # silu is 5× slower than its kind's bytes explain: the elementwise and default curves ignore it
    assert fit.eval_1d(kinds["elementwise"], 65536) == pytest.approx(2.0, rel=1e-6)
    assert fit.eval_1d(kinds["copy"], 65536) == pytest.approx(1.0, rel=1e-6)
    assert fit.eval_1d(default, 65536) == pytest.approx(1.75, rel=1e-6)  # median of add 2, mul 2, mean 1.5, clone 1


def test_fit_gather_tables_rows_and_bytes_per_row():
    d, bw = 2e-6, 20e9
    row_speed = {768: 16e9, 4096: 23e9}  # wider rows stream better
    samples = [{"rows": r, "bytes": 2.0 * r * w * 4, "seconds": d + 2.0 * r * w * 4 / row_speed[w]} for r in (4, 64, 1024) for w in (768, 4096)]
    t = fit.fit_gather(samples, bw, d)
    GatherCurve.model_validate(t)
    assert t["rows"] == [4.0, 64.0, 1024.0] and t["row_bytes"] == pytest.approx([2 * 768 * 4, 2 * 4096 * 4])
    assert t["eff"] == [pytest.approx([16 / 20, 23 / 20])] * 3
    assert fit.fit_gather([], bw, d) is None


def test_fit_gather_never_has_fewer_rows_cost_more():
    """A round's slow mode at few rows is held to the next larger gather's time; other rows untouched."""
    d, bw, w = 1e-6, 20e9, 768
    seconds = {16: 3e-6, 32: 9e-6, 64: 6e-6, 128: 12e-6}  # 32 rows caught in a slow round
    samples = [{"rows": r, "bytes": 2.0 * r * w * 4, "seconds": t} for r, t in seconds.items()]
    t = fit.fit_gather(samples, bw, d)
    held = {16: 3e-6, 32: 6e-6, 64: 6e-6, 128: 12e-6}
    assert [row[0] for row in t["eff"]] == pytest.approx([fit.efficiency(2.0 * r * w * 4, held[r], bw, d) for r in held])


def test_table_2d_and_curves_reject_bad_shapes():
    with pytest.raises(ValueError):
        Curve2D(m=[1, 2], nk=[1e6], eff=[[0.1]])
    with pytest.raises(ValueError):
        Curve1D(x=[2, 1], eff=[0.1, 0.2])
    assert math.isfinite(LogCurve(Curve1D(x=[1], eff=[0.5]))(123.0))


def test_decode_attention_takes_its_efficiency_by_the_steps_sequences():
    """A profile's `attention_decode` table prices decode attention by sequences and context (a kernel's
    fixed work spread over a step's sequences); prompts, and profiles without it, keep `attention`."""
    from hetc.cluster import EfficiencyCurves, load_profile
    from hetc.partitioner.cost_models.analytic import cost_params, op_time
    from hetc.partitioner.profiling.microbench import AttnShape, attention_record

    base = load_profile("cpu")
    attention = {"fp32": {"q": [1, 64], "ctx": [64, 1024], "eff": [[0.05, 0.05], [0.5, 0.5]]}}
    decode = {"fp32": {"seqs": [1, 16], "ctx": [64, 1024], "eff": [[0.001, 0.001], [0.01, 0.01]]}}
    plain = base.model_copy(update={"efficiency_curves": EfficiencyCurves.model_validate({"attention": attention})})
    by_seqs = base.model_copy(update={"efficiency_curves": EfficiencyCurves.model_validate({"attention": attention, "attention_decode": decode})})

    def per_seq(profile, s: AttnShape) -> float:
        rec, step, kv = attention_record(s, "fp32")
        return op_time(rec, cost_params(profile, "fp32"), step, kv) / s.batch

    one, sixteen = AttnShape(1, 8, 2, 64, 1, 512, False), AttnShape(16, 8, 2, 64, 1, 512, False)
    assert per_seq(by_seqs, one) == pytest.approx(10 * per_seq(by_seqs, sixteen))  # compute-bound at these efficiencies
    assert per_seq(plain, one) == pytest.approx(per_seq(plain, sixteen))
    prompt = AttnShape(1, 8, 2, 64, 64, 64, True)
    assert per_seq(by_seqs, prompt) == per_seq(plain, prompt)


def test_decode_attention_on_a_kv_bytes_basis_follows_the_kv_read_across_head_shapes():
    """`basis: kv_bytes` (what `hetc profile` fits now): decode attention costs its K/V read (and its
    activations) at the table's share of memory bandwidth, so two head shapes reading the same K/V cost
    the same whatever their FLOPs; a FLOP-basis table prices the one with more query heads higher."""
    from hetc.cluster import EfficiencyCurves, load_profile
    from hetc.partitioner.cost_models.analytic import cost_params, op_time
    from hetc.partitioner.profiling.microbench import AttnShape, attention_record

    base = load_profile("cpu")
    grid = {"seqs": [1, 16], "ctx": [64, 1024], "eff": [[0.3, 0.3], [0.3, 0.3]]}
    by_bytes = base.model_copy(update={"efficiency_curves": EfficiencyCurves.model_validate({"attention_decode": {"fp32": {**grid, "basis": "kv_bytes"}}})})
    slow = {**grid, "eff": [[0.001, 0.001], [0.001, 0.001]], "basis": "flops"}  # compute-bound at this share of peak
    by_flops = base.model_copy(update={"efficiency_curves": EfficiencyCurves.model_validate({"attention_decode": {"fp32": slow}})})

    def cost(profile, s: AttnShape) -> tuple[float, float]:
        rec, step, kv = attention_record(s, "fp32")
        return op_time(rec, cost_params(profile, "fp32"), step, kv), kv * step.seqs * step.ctx + rec.act_bytes.at(step.tokens, step.ctx)

    few, many = AttnShape(4, 4, 2, 64, 1, 1024, False), AttnShape(4, 16, 2, 64, 1, 1024, False)  # same K/V, 4× the FLOPs
    (t_few, bytes_few), (t_many, bytes_many) = cost(by_bytes, few), cost(by_bytes, many)
    assert t_few == pytest.approx(bytes_few / (base.memory_bandwidth * 0.3))
    assert t_many / t_few == pytest.approx(bytes_many / bytes_few) and bytes_many / bytes_few < 1.05  # the query heads' own bytes only
    assert cost(by_flops, many)[0] / cost(by_flops, few)[0] > 3.0


def test_a_chunk_after_a_cached_prefix_is_timed_as_the_last_rows_of_its_whole_prompt():
    """The chunk shapes `hetc profile` times (q new tokens after kv − q cached ones) see exactly what
    the same tokens see in a causal pass over the whole prompt; the cost model reads them at their
    mean context (cached keys plus (q+1)/2), the fresh prompt's formula when nothing is cached."""
    import torch
    import torch.nn.functional as F

    from hetc.partitioner.profiling.microbench import AttnShape, attention_record, chunk_mask

    torch.manual_seed(0)
    q, kv = 8, 40
    qs, k, v = (torch.randn(1, 4, kv, 16) for _ in range(3))
    whole = F.scaled_dot_product_attention(qs, k, v, is_causal=True)[:, :, -q:]
    chunk = F.scaled_dot_product_attention(qs[:, :, -q:], k, v, attn_mask=chunk_mask(q, kv))
    torch.testing.assert_close(chunk, whole)
    top_left = F.scaled_dot_product_attention(qs[:, :, -q:], k, v, is_causal=True)  # what is_causal would time
    assert not torch.allclose(top_left, whole)
    assert AttnShape(2, 4, 2, 16, q, kv, True).mean_ctx == kv - q + (q + 1) / 2
    assert AttnShape(2, 4, 2, 16, q, q, True).mean_ctx == (q + 1) / 2
    _, step, _ = attention_record(AttnShape(2, 4, 2, 16, q, kv, True), "fp32")
    assert (step.tokens, step.seqs, step.ctx) == (2 * q, 2, kv - q + (q + 1) / 2)
