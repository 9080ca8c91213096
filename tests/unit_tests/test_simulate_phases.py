"""The saturation model's disaggregated pools against the stage times it is built from."""

import pytest

from hetc.cluster import load_cluster
from hetc.partitioner.capture.capture import capture
from hetc.partitioner.cost_models.analytic import Step
from hetc.partitioner.estimate.simulate import StagePlan, Workload, estimate_pipeline, prompts_per_step, stage_time
from tests.conftest import EXAMPLES


@pytest.fixture(scope="module")
def setup():
    cluster = load_cluster(EXAMPLES / "small-mixed.yaml")
    units = capture("llama-3.1-8b").units
    a, b = cluster.nodes[0], cluster.nodes[1]
    cut = len(units) // 2
    stages = [StagePlan(a, 0, cut - 1), StagePlan(b, cut, len(units) - 1)]
    return units, cluster, stages, Workload(512, 128, "bf16", "bf16")


def test_decode_pool_is_the_pipeline_without_prefills(setup):
    units, cluster, stages, wl = setup
    both = estimate_pipeline(units, stages, cluster, wl, 64)
    decode = estimate_pipeline(units, stages, cluster, wl, 64, "decode")
    m = both.micro_batches
    busy = max(m * e.decode_s for e in both.stages)
    links = max(m * e.link_decode_s for e in both.stages)
    loop = sum(e.decode_s + e.link_decode_s for e in both.stages)
    assert decode.round_s == pytest.approx(max(busy, links, loop))
    assert decode.output_tok_s == pytest.approx(64 / decode.round_s)
    assert decode.output_tok_s > both.output_tok_s  # no prompt work in its rounds


def test_prefill_pool_packs_whole_prompts_and_finishes_them_per_busiest_stage(setup):
    units, cluster, stages, wl = setup
    pre = estimate_pipeline(units, stages, cluster, wl, 999, "prefill")
    per_step = prompts_per_step(wl)
    assert per_step == wl.prefill_chunk // wl.input_len == 4
    assert pre.batch == len(stages) * per_step  # one packed step in flight per stage
    # a stage's work per prompt: a quarter of one step over four prompts (and of its overhead)
    for sp, e in zip(stages, pre.stages):
        us = units[sp.first : sp.last + 1]
        packed = stage_time(us, sp.node, sp.tp, Step(per_step * wl.input_len, per_step, wl.input_len / 2), wl)
        assert e.busy_s == pytest.approx((packed + sp.node.profile.step_overhead) / per_step)
        assert e.prefill_s == pytest.approx(packed + sp.node.profile.step_overhead)  # its prompts finish together
    per_prompt = max(max(e.busy_s for e in pre.stages), max(e.link_s for e in pre.stages))
    assert pre.output_tok_s == pytest.approx(wl.output_len / per_prompt)
    assert pre.ttft_s == pytest.approx(sum(e.prefill_s + e.link_prefill_s for e in pre.stages))
    # packing is cheaper per prompt than a step of its own
    one = estimate_pipeline(units, stages, cluster, Workload(512, 128, "bf16", "bf16", 512), 1, "prefill")
    assert pre.output_tok_s > one.output_tok_s
    # its KV holds prompts only: less than a decode pool of the same batch keeps
    dec = estimate_pipeline(units, stages, cluster, wl, pre.batch, "decode")
    assert all(p.memory.kv < d.memory.kv for p, d in zip(pre.stages, dec.stages))
