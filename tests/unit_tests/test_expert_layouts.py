"""Expert layouts of a tensor-parallel group (hetc/experts.py): the routed experts whole over the group
(ep) cost what the split ones do but for the busiest device's imbalance and the GEMM shape; data-parallel
attention (dp-ep) runs each device's own sequences with the non-expert weights whole, holds its own
sequences' K/V (an MLA latent no longer copied), and pays two all-to-alls per MoE layer; the memory
closed form the search uses (Tables.most) agrees with stage_memory; the planner compares the layouts
the engines serve and keeps the best, and hetc serve refuses the layouts it does not run."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from hetc.cluster import Link, Node, load_profile
from hetc.errors import BadInput
from hetc.experts import ExpertLayout
from hetc.partitioner.capture.capture import capture
from hetc.partitioner.cost_models.analytic import Step, _per_device, cost_params, op_time, units_time
from hetc.partitioner.cost_models.links import alltoall_time
from hetc.partitioner.cost_models.memory import stage_memory
from hetc.partitioner.estimate.simulate import Workload, stage_time
from hetc.partitioner.estimate.tables import Kind, Tables
from hetc.runtime.model_runner import check_layout
from tests.conftest import FIXTURES

H100 = load_profile("h100-sxm")
NVLINK = Link(name="nvlink4", bandwidth="450 GB/s", latency="3 us")


@pytest.fixture(scope="module")
def deepseek():
    return capture(str(FIXTURES / "tiny-deepseek-v3"), dtype="bf16", kv_dtype="bf16", cache=False)


def _moe(model):
    return next(u for u in model.units if u.moe)


def _flat(profile):
    """`profile` with scalar efficiencies only: an op's time is its roofline, no curve reading the GEMM shape."""
    return profile.model_copy(update={"efficiency_curves": None})


def test_ep_costs_the_split_experts_times_the_imbalance(deepseek):
    """On a flat profile (no GEMM-shape curve) whole experts over g devices cost what experts split g
    ways do at imbalance 1; above it the busiest device's rows and FLOPs grow with it, its weights not."""
    op = next(o for o in _moe(deepseek).op_records if o.kind == "moe" and o.experts)
    prof, step = _flat(H100), Step(4096, 4096, 600.0)

    def t(**kw) -> float:
        return op_time(op, cost_params(prof, "bf16", 4, **kw), step)

    assert t(ep=4, imbalance=1.0) == pytest.approx(t(), rel=1e-12)
    assert t(ep=4, imbalance=1.0) < t(ep=4, imbalance=2.0) <= 2 * t(ep=4, imbalance=1.0)


def test_a_data_parallel_device_runs_its_own_sequences():
    assert _per_device(Step(8, 8, 100.0), 4) == Step(2, 2, 100.0)
    assert _per_device(Step(2, 2, 100.0), 4) == Step(1, 1, 100.0)  # fewer sequences than devices: one each
    mixed = _per_device(Step(8, 8, 100.0, Step(512, 1, 256.0)), 4)
    assert (mixed.tokens, mixed.seqs, mixed.prefill) == (2, 2, Step(512, 1, 256.0))  # a prompt chunk stays whole


def test_dp_ep_pays_dispatch_and_combine_in_place_of_the_all_reduce(deepseek):
    """A MoE unit under dp-ep: its units' time per device (dense ops on the busiest device's sequences,
    experts over every token) plus two all-to-alls of the busiest device's routed tokens, and no all-reduce."""
    u, node, step = _moe(deepseek), Node(name="n", profile=H100, count=4, link=NVLINK), Step(64, 64, 300.0)
    wl = Workload(256, 64, "bf16", "bf16", experts=ExpertLayout.DP_EP, imbalance=1.2)
    device = units_time([u], H100, step, dtype="bf16", kv_dtype="bf16", tp=1, ep=4, dp=4, imbalance=1.2)
    a2a = alltoall_time(64 / 4 * 1.2 * u.moe["top_k"] * u.out_bytes_per_token, 4, NVLINK)
    assert stage_time([u], node, 4, step, wl) == pytest.approx(device + 2 * a2a, rel=1e-12)
    attn = next(x for x in deepseek.units if x.kv_bytes_per_token)  # no experts: data-parallel, no collective
    own = units_time([attn], H100, _per_device(step, 4), dtype="bf16", kv_dtype="bf16")
    assert stage_time([attn], node, 4, step, wl) == pytest.approx(own, rel=1e-12)


def test_alltoall_alpha_beta():
    mesh = Link(name="if", bandwidth="64 GB/s", latency="2 us", scope="per_peer")
    assert alltoall_time(8e6, 8, NVLINK) == pytest.approx(8e6 * 7 / 8 / 450e9 + 3e-6)
    assert alltoall_time(8e6, 8, mesh) == pytest.approx(8e6 / 8 / 64e9 + 2e-6)  # each peer's share on its own link
    assert alltoall_time(8e6, 1, None) == 0.0


def test_dp_ep_memory_keeps_dense_weights_whole_and_own_sequences_kv(deepseek):
    units = deepseek.units
    kw = dict(batch=64, context=512, prefill_chunk=256, tp=4)
    tp = stage_memory(units, **kw)
    dp = stage_memory(units, **kw, layout=ExpertLayout.DP_EP)
    total, experts = sum({k: v for u in units for k, v in u.params.items()}.values()), sum(u.expert_bytes for u in units)
    assert experts > 0
    assert tp.weights == pytest.approx(total / 4)
    assert dp.weights == pytest.approx(total - experts * 3 / 4)
    assert dp.kv == pytest.approx(tp.kv / 4)  # MLA: tensor-parallel copies the latent on every device; data-parallel splits the sequences
    assert dp.activations == pytest.approx(tp.activations * 256 / 256)  # max(chunk, 64/4) = chunk, as max(chunk, 64)


@pytest.mark.parametrize("layout", list(ExpertLayout))
def test_the_search_memory_closed_form_agrees_with_stage_memory(deepseek, layout):
    """Tables.most (a closed form over every unit range) is the largest batch stage_memory fits."""
    units = deepseek.units
    wl = Workload(200, 56, "bf16", "bf16", prefill_chunk=64, experts=layout)
    total = stage_memory(units, batch=1, context=wl.kv_tokens(), prefill_chunk=64, tp=4, layout=layout).total
    prof = H100.model_copy(update={"memory": total * 3, "reserved_memory": 0.0})
    kind = Kind(prof, 4, NVLINK, (Node(name="n", profile=prof, count=4, link=NVLINK),), 1)
    most = Tables(units, wl).most(kind)
    n = len(units)

    def fits(b: int) -> bool:
        last = 4.0 * units[-1].out_bytes_per_token / 2
        m = stage_memory(units, batch=b, context=wl.kv_tokens(), prefill_chunk=64, tp=4, layout=layout, logits_bytes_per_token=last)
        return m.total <= prof.usable_memory

    b = int(most[0, n])
    assert b >= 1 and fits(b) and not fits(b + 1)


def _plan(tmp_path, engine: str, experts: str = "auto"):
    from hetc.partitioner.planner import PlanRequest, make_plan

    cl = tmp_path / "c.yaml"
    cl.write_text(f"name: two\nengine: {engine}\nnodes:\n  - {{name: a, device: h100-sxm, count: 2, link: nvlink4}}\n")
    req = PlanRequest(model=str(FIXTURES / "tiny-deepseek-v3"), profiles=str(cl), input_len=128, output_len=32, time_limit=6, experts=experts)
    return make_plan(req)


def test_the_planner_compares_the_layouts_and_keeps_the_best(tmp_path):
    plan = _plan(tmp_path, "vllm")
    ex = plan.experts
    assert ex is not None and [o.layout for o in ex.options] == list(ExpertLayout)
    solved = [o for o in ex.options if o.objective is not None]
    assert [o.layout for o in solved] == [ExpertLayout.TP, ExpertLayout.DP_EP]  # ep: dominated by tp, said so
    best = max(solved, key=lambda o: o.objective)
    assert best.chosen and ex.layout == best.layout
    assert plan.solver.objective == pytest.approx(best.objective)
    assert plan.solver.bound == pytest.approx(max(o.bound for o in solved))  # every layout's plans under it
    assert all(o.bound >= o.objective * (1 - 1e-9) for o in solved)


def test_whole_experts_never_beat_split_ones_under_tensor_parallel_attention(deepseek):
    """Why auto does not solve ep beside tp: at any step and imbalance ≥ 1 its stage time is at least tp's."""
    node = Node(name="n", profile=H100, count=4, link=NVLINK)
    for step in (Step(1, 1, 100.0), Step(64, 64, 300.0), Step(512, 8, 300.0, None), Step(2048, 2048, 900.0)):
        for u in deepseek.units:
            tp = stage_time([u], node, 4, step, Workload(256, 64, "bf16", "bf16"))
            assert stage_time([u], node, 4, step, Workload(256, 64, "bf16", "bf16", experts=ExpertLayout.EP)) >= tp * (1 - 1e-12)


def test_hetc_plans_its_own_layout_and_refuses_another(tmp_path):
    plan = _plan(tmp_path, "hetc")
    assert plan.experts is not None and plan.experts.layout == ExpertLayout.EP and plan.experts.options == []
    assert _plan(tmp_path, "vllm", "default").experts.layout == ExpertLayout.TP  # vLLM's own without flags
    with pytest.raises(BadInput, match="--experts dp-ep"):
        _plan(tmp_path, "hetc", "dp-ep")


def test_serve_refuses_a_layout_it_does_not_run():
    from types import SimpleNamespace as NS

    from hetc.plan import Experts, PlanUnit

    units = [PlanUnit(index=0, kind="embed", layer=0), PlanUnit(index=1, kind="attention", layer=0), PlanUnit(index=2, kind="moe", layer=0)]

    def plan(layout: ExpertLayout, tp: int):
        ex = Experts(layout=layout, imbalance=1.2, imbalance_source="test")
        return NS(experts=ex, units=units, pipelines=[NS(stages=[NS(tp=tp, units=(0, 2))])])

    check_layout(plan(ExpertLayout.EP, 2))  # hetc serve's own
    check_layout(plan(ExpertLayout.DP_EP, 1))  # one device: every layout is the same
    for other in (ExpertLayout.TP, ExpertLayout.DP_EP):
        with pytest.raises(BadInput, match="experts.layout"):
            check_layout(plan(other, 2))


def test_dense_models_have_no_layout(tmp_path):
    from hetc.partitioner.planner import PlanRequest, make_plan

    cl = tmp_path / "c.yaml"
    cl.write_text("name: two\nengine: vllm\nnodes:\n  - {name: a, device: h100-sxm, count: 2, link: nvlink4}\n")
    plan = make_plan(PlanRequest(model=str(FIXTURES / "tiny-llama"), profiles=str(cl), input_len=128, output_len=32, time_limit=4))
    assert plan.experts is None and math.isfinite(plan.solver.bound)


def test_attention_expert_disaggregation_round(deepseek, tmp_path):
    """Attention on one node, experts on another (split_experts.py): each side busy for its units' steps,
    the network for two transfers per MoE layer; with a free network the round is the busier side's (the
    ping-pong hides the other), and an expert node too small to hold the experts gets no estimate."""
    from hetc.cluster import load_cluster
    from hetc.partitioner.estimate.simulate import Round
    from hetc.partitioner.search.split_experts import PING_PONG, split_estimate

    cl = tmp_path / "c.yaml"
    cl.write_text(
        "name: two\nengine: vllm\nnodes:\n  - {name: a, device: h100-sxm, count: 2, link: nvlink4}\n"
        "  - {name: b, device: h200-sxm, count: 4, link: nvlink4}\nnetwork: {default: {bandwidth: 400 PB/s, latency: 1 ns}}\n"
    )
    cluster = load_cluster(str(cl))
    a, b = cluster.nodes
    wl = Workload(128, 32, "bf16", "bf16", experts=ExpertLayout.DP_EP, imbalance=1.2)
    got = split_estimate(deepseek.units, cluster, wl, a, b, 64)
    assert got is not None
    dense, moe = [u for u in deepseek.units if not u.moe], [u for u in deepseek.units if u.moe]
    steps = Round.of(wl, 64, PING_PONG).steps
    kw = dict(dtype="bf16", kv_dtype="bf16")
    want_a = sum(n * (units_time(dense, a.profile, s, **kw, dp=2) + a.profile.step_overhead) for n, s in steps)
    want_e = sum(n * (units_time(moe, b.profile, s, **kw, ep=4, dp=4, imbalance=1.2) + b.profile.step_overhead) for n, s in steps)
    assert (got.attention_s, got.experts_s) == (pytest.approx(want_a), pytest.approx(want_e))
    assert got.network_s < 1e-3 * max(want_a, want_e)
    assert got.round_s == pytest.approx(max(want_a, want_e, (want_a + want_e + got.network_s) / PING_PONG))
    small = b.profile.model_copy(update={"memory": 1e6, "reserved_memory": 0.0})
    assert split_estimate(deepseek.units, cluster, wl, a, replace(b, profile=small), 64) is None


def test_the_plan_reports_disaggregation_beside_its_own_pipelines(tmp_path):
    from hetc.partitioner.planner import PlanRequest, make_plan

    cl = tmp_path / "c.yaml"
    cl.write_text(
        "name: two\nengine: vllm\nnodes:\n  - {name: a, device: h100-sxm, count: 2, link: nvlink4}\n"
        "  - {name: b, device: a100-80g-sxm, count: 2, link: nvlink3}\nnetwork: {default: roce-400g}\n"
    )
    plan = make_plan(PlanRequest(model=str(FIXTURES / "tiny-deepseek-v3"), profiles=str(cl), input_len=128, output_len=32, time_limit=6))
    dis = plan.experts.disaggregated
    assert {(d.attention_node, d.experts_node) for d in dis} == {("a", "b"), ("b", "a")}
    assert dis == sorted(dis, key=lambda d: -d.output_tok_s)
    assert any(n.startswith(f"attention on {dis[0].attention_node}, experts on {dis[0].experts_node}") for n in plan.solver.notes)
    on_both = [p for p in plan.pipelines if p.phase == "both"]
    if len(on_both) == len(plan.pipelines):  # every pipeline lies on the two nodes: the plan's figure is theirs
        assert dis[0].plan_tok_s == pytest.approx(plan.predicted.output_tok_s, rel=1e-6)


def test_alike_node_pairs_share_one_search_and_the_deadline_stops_the_rest(deepseek, tmp_path, monkeypatch):
    """best_split over three nodes, two alike (same device, count and links): each ordered pair gets the
    estimate split_estimate's batch search gives it alone, but alike pairs cost one search; past the CPU
    deadline no pair is searched and the budget says the disaggregation was stopped."""
    from hetc.cluster import load_cluster
    from hetc.partitioner.budget import CpuBudget
    from hetc.partitioner.estimate.batches import search
    from hetc.partitioner.search import split_experts as se

    cl = tmp_path / "c.yaml"
    cl.write_text(
        "name: three\nengine: vllm\nnodes:\n  - {name: a, device: h100-sxm, count: 2, link: nvlink4}\n"
        "  - {name: b, device: h100-sxm, count: 2, link: nvlink4}\n  - {name: c, device: h200-sxm, count: 4, link: nvlink4}\n"
        "network: {default: roce-400g}\n"
    )
    cluster = load_cluster(str(cl))
    wl = Workload(128, 32, "bf16", "bf16", experts=ExpertLayout.DP_EP)
    searched, best = [], se._best
    monkeypatch.setattr(se, "_best", lambda *a: searched.append(a[3:5]) or best(*a))
    got = se.best_split(deepseek.units, cluster, wl, 256)
    assert len(got) == 6 and len(searched) == 3  # alike: a→b with b→a, a→c with b→c, c→a with c→b
    for s in got:
        alone = search(lambda b, s=s: se.split_estimate(deepseek.units, cluster, wl, s.attention, s.experts, b), lambda x: x.output_tok_s, 256)
        assert s.output_tok_s == pytest.approx(max(x.output_tok_s for _, x in alone))
    late = CpuBudget(0.0)
    assert se.best_split(deepseek.units, cluster, wl, 256, late) == [] and late.stopped == [se.DISAGGREGATION]
