"""The serving simulator (capacity/): against queueing theory where it has a closed form, the way
its figures move with the load and the fleet, determinism, and the policy it shares with the
runtime's scheduler."""

import subprocess
import sys

import numpy as np
import pytest

from hetc.capacity.evaluate import evaluate_plan, model_of
from hetc.capacity.lanes import StepShape, lanes_of, step_of
from hetc.capacity.load import Arrivals, LengthDist, Load, Request
from hetc.capacity.metrics import SLO, serving_metrics
from hetc.capacity.simulator import simulate
from hetc.cluster import Cluster
from hetc.kv_blocks import PADDING_BLOCKS
from hetc.partitioner.cost_models.analytic import Step
from hetc.partitioner.planner import PlanRequest, make_plan
from hetc.partitioner.estimate.simulate import Workload
from hetc.plan import Plan
from hetc.requests import ServeLimits
from hetc.scheduling import KV_BLOCK_TOKENS, Phase
from tests.conftest import FIXTURES, two_type_cluster

MODEL = str(FIXTURES / "tiny-llama")


@pytest.fixture(scope="module")
def plans(tmp_path_factory):
    """Plans of the tiny Llama: one fast device, two replicas of it, and a disaggregated plan."""
    d = tmp_path_factory.mktemp("sim")
    two_type_cluster(d, "2 MB", "4 MB", a_count=4)
    kw = dict(model=MODEL, profiles=str(d / "c.yaml"), dtype="fp32", input_len=32, output_len=16, time_limit=2, tp="1")
    return {
        "one": make_plan(PlanRequest(**kw, placement="a:0", batch=8)),
        "two": make_plan(PlanRequest(**kw, placement="a:0 x2", batch=8)),
        "pools": make_plan(PlanRequest(**{**kw, "input_len": 48}, disaggregate="on")),
    }


def _lanes(plan, limits=None):
    model = model_of(plan, "plan.json")
    cluster = Cluster.from_json(plan.cluster)
    wl = Workload(plan.workload.input_len, plan.workload.output_len, plan.model.dtype, plan.model.kv_dtype)
    return lanes_of(plan, model.units, cluster, wl, num_kv_blocks=(limits or ServeLimits()).num_kv_blocks), cluster


def _fixed(n):
    return LengthDist.parse(str(n), "test")


def test_one_at_a_time_is_an_md1_queue(plans):
    """One request at a time (max_num_seqs 1), one token each: a single server with a fixed service
    time S (messages, the prompt's step, sampling) under Poisson arrivals — an M/D/1 queue. Each
    request's time to its token is its wait by Lindley's recursion, W' = max(0, W + S − gap), plus S;
    the mean matches Pollaczek–Khinchine's S + ρS / (2(1 − ρ)) within the sample's noise."""
    lanes, cluster = _lanes(plans["one"])
    lane = lanes[0]
    prompt = 32
    s = lane.overheads.message_in + lane.step_time(0, StepShape(Step(prompt, 1, (prompt + 1) / 2), 1, 1, prompt)) + lane.overheads.message_out
    for rho in (0.3, 0.8):
        load = Load.open(rho / s, 3000, _fixed(prompt), _fixed(1), seed=3)
        o = simulate(lanes, cluster, load, ServeLimits(max_num_seqs=1))
        got = np.array([r.token_times[0] - r.arrival for r in o.requests])
        w, want = 0.0, []
        for k, r in enumerate(load.requests):
            if k:
                w = max(0.0, w + s - (r.arrival - load.requests[k - 1].arrival))
            want.append(w + s)
        np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-12)
        assert got.mean() == pytest.approx(s + rho * s / (2 * (1 - rho)), rel=0.15)


def test_tpot_of_a_lone_sequence_is_its_decode_step(plans):
    """One client, one sequence: lookahead sends each decode step before the last one's token is back,
    so a token costs one decode step (and its sampling), not the frontend's round trip."""
    lanes, cluster = _lanes(plans["one"])
    lane = lanes[0]
    out = 16
    o = simulate(lanes, cluster, Load.closed(1, 5, _fixed(32), _fixed(out)))
    gaps = np.diff(o.requests[0].token_times)
    steps = [lane.step_time(0, StepShape(Step(1, 1, 32 + k), 1, 1, 1)) for k in range(1, out)]
    assert np.mean(gaps) == pytest.approx(np.mean(steps), rel=0.02)


def test_higher_rate_queues_more_and_determinism(plans):
    lanes, cluster = _lanes(plans["one"])
    sat = plans["one"].predicted.output_tok_s / 16
    ttft, tput = [], []
    for frac in (0.3, 0.7, 1.2):
        m = serving_metrics(simulate(lanes, cluster, Load.open(sat * frac, 400, _fixed(32), _fixed(16), seed=5)))
        ttft.append(m["mean_ttft_ms"])
        tput.append(m["output_throughput"])
    assert ttft[0] < ttft[1] < ttft[2]
    assert tput[0] < tput[1] < tput[2] * 1.05  # past saturation throughput stops growing, TTFT does not
    a = serving_metrics(simulate(lanes, cluster, Load.open(sat, 300, _fixed(32), LengthDist.parse("uniform:4-30", "x"), seed=9)))
    lanes2, _ = _lanes(plans["one"])
    b = serving_metrics(simulate(lanes2, cluster, Load.open(sat, 300, _fixed(32), LengthDist.parse("uniform:4-30", "x"), seed=9)))
    assert a == b


def test_more_devices_no_less_goodput(plans):
    slo = SLO(ttft_ms=5, tpot_ms=1)
    load = Load.open(2 * plans["one"].predicted.output_tok_s / 16, 300, _fixed(32), _fixed(16), seed=2)
    one = evaluate_plan(plans["one"], "one.json", load, slo=slo)
    two = evaluate_plan(plans["two"], "two.json", load, slo=slo)
    assert two.metrics["devices"] == 2 * one.metrics["devices"]
    assert two.metrics["request_goodput"] >= one.metrics["request_goodput"]
    assert two.metrics["distserve_goodput"] >= one.metrics["distserve_goodput"]
    assert two.metrics["mean_ttft_ms"] <= one.metrics["mean_ttft_ms"]


def test_past_saturation_the_server_refuses(plans):
    """Offered far past capacity with a short --max-queue-wait: the predicted-wait admission (the
    runtime's Rates) refuses requests, and those admitted wait about that long at most."""
    lanes, cluster = _lanes(plans["one"])
    sat = plans["one"].predicted.output_tok_s / 16
    limits = ServeLimits(max_queue_wait=0.01)
    m = serving_metrics(simulate(lanes, cluster, Load.open(5 * sat, 2000, _fixed(32), _fixed(16), seed=1), limits))
    assert m["refused_429"] > 500 and m["completed"] + m["refused_429"] == 2000
    assert m["p99_ttft_ms"] < 3 * 10.0


def test_an_idle_lane_admits_a_long_prompt():
    """Admission's predicted wait (the runtime's, hetc/batching.py): a lane whose last steps were decode
    rows (one token per step) prefills a long prompt in one chunk, not one token per decode step — the
    simulator found it refusing every long prompt on an idle lane of a 70B plan (60 s predicted)."""
    from hetc.batching import Scheduler, SchedulerConfig
    from hetc.kv_blocks import BlockManager

    s = Scheduler(BlockManager(256), SchedulerConfig(max_batched_tokens=2048, max_queue_wait=30.0), clock=lambda: 0.0)
    for i in range(1, 40):  # decode steps of 60 ms carrying one token each
        s.rates.observe(1, 0, sent_at=i * 0.06 - 0.06, now=i * 0.06)
    assert s.predicted_wait(1024) == pytest.approx(0.06)  # one chunk, one step
    assert s.predicted_wait(4096) == pytest.approx(2 * 0.06)  # two chunks
    assert s.rates.predict_wait(1024, 0) == pytest.approx(1024 * 0.06)  # without the chunk: the decode token rate


def test_disaggregated_pools_hand_prompts_over(plans):
    plan = plans["pools"]
    assert {p.phase for p in plan.pipelines} == {Phase.PREFILL, Phase.DECODE}
    lanes, cluster = _lanes(plan)
    load = Load.open(plan.predicted.output_tok_s / 16 * 0.5, 300, _fixed(24), _fixed(16), seed=4)
    o = simulate(lanes, cluster, load)
    assert all(r.served and r.done for r in o.requests)
    dec = [l.id for l in lanes if l.phase == Phase.DECODE]
    assert all(o.stepped[(i, 0)][1] > 0 for i in dec)  # the decode pool ran steps
    m = serving_metrics(o)
    assert m["mean_tpot_ms"] > 0 and m["completed"] == 300


def test_a_prefill_pools_step_is_its_prompts_step_not_its_hand_offs(plans):
    """The stage table's mean step counts micro-batches only, as the runtime's hetc_stage_step_seconds
    does: one prompt at a time, the prefill pool's mean step is that prompt's step (its KV hand-off
    legs are busy time, not steps)."""
    plan = plans["pools"]
    lanes, _ = _lanes(plan)
    pre = next(l for l in lanes if l.phase == Phase.PREFILL)
    prompt = 40
    want = pre.step_time(0, StepShape(Step(prompt, 1, (prompt + 1) / 2), 1, 1, prompt))
    ev = evaluate_plan(plan, "plan.json", Load.closed(1, 20, _fixed(prompt), _fixed(8)))
    got = next(s for s in ev.stages if s.lane == pre.id and s.stage == 0)
    assert got.step_ms == pytest.approx(want * 1e3, rel=1e-6)


def test_too_long_for_the_pools_is_400(plans):
    lanes, cluster = _lanes(plans["one"])
    longest = min(l.num_blocks - PADDING_BLOCKS for l in lanes) * KV_BLOCK_TOKENS
    o = simulate(lanes, cluster, Load(tuple([Request(0.0, longest - 1, 1), Request(0.0, longest - 1, 2)]), Arrivals.POISSON, rate=1))
    assert [r.status for r in o.requests] == [200, 400]


def test_step_of_mixes_decode_rows_and_prompt_chunks():
    from hetc.batching import BatchItem, MicroBatch
    from hetc.sequence import SamplingParams, Sequence

    seq = Sequence(0, [0] * 10, 10, SamplingParams())
    mb = MicroBatch(0, [BatchItem(seq, 40, 1, True), BatchItem(seq, 60, 1, True), BatchItem(seq, 0, 8, False)])
    shape = step_of(mb)
    st = shape.step
    assert (st.tokens, st.seqs, st.ctx) == (2, 2, 51)
    assert (st.prefill.tokens, st.prefill.seqs, st.prefill.ctx) == (8, 1, 4.5)
    assert (shape.sampled, shape.seqs, shape.tokens) == (2, 3, 10)  # the chunk samples nothing: rows cut to 2


def test_the_simulator_runs_the_runtimes_policy_without_importing_the_runtime():
    import hetc.batching
    import hetc.capacity.simulator
    import hetc.runtime.lane

    assert hetc.runtime.lane.Scheduler is hetc.capacity.simulator.Scheduler is hetc.batching.Scheduler
    code = (
        "import sys, hetc.capacity.evaluate, hetc.capacity.compare, hetc.capacity.pareto, hetc.capacity.buy; "
        "bad = [m for m in sys.modules if m.startswith('hetc.runtime')]; assert not bad, bad"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_lengths_and_trace_errors_name_the_flag(tmp_path):
    from hetc.capacity.load import read_trace
    from hetc.errors import BadInput

    for text in ("zipf:1", "uniform:9-3", "normal:5", "x"):
        with pytest.raises(BadInput, match="--input-len-dist"):
            LengthDist.parse(text, "--input-len-dist")
    xs = LengthDist.parse("lognormal:100,0.5", "f").draw(np.random.default_rng(0), 4000, 300)
    assert max(xs) == 300 and min(xs) >= 1 and abs(np.median(xs) - 100) < 5
    (tmp_path / "t.jsonl").write_text('{"arrival": 0, "input_len": 3, "output_len": 2}\n{"arrival": 1}\n')
    with pytest.raises(BadInput, match="line 2"):
        read_trace(tmp_path / "t.jsonl")


def _with_serving(plan, **serving):
    """The plan's cluster with every profile's measured serving host work set to `serving`."""
    doc = plan.cluster.model_dump()
    for p in doc["profiles"].values():
        p["serving"] = {**serving, "source": "a test"}
    return Cluster.from_json(doc)


def test_serving_host_work_from_the_profile_is_charged(plans):
    """Each stage pays the profile's measured host work per step (step + row × sequences + token ×
    tokens), the last stage its sampler per logit, and the frontend's messages one process-to-process
    message each — on top of the cost model's step, nothing else changing."""
    plan = plans["one"]
    model = model_of(plan, "plan.json")
    wl = Workload(32, 16, "fp32", "fp32")
    bare = lanes_of(plan, model.units, Cluster.from_json(plan.cluster), wl)[0]
    sv = dict(step="1 ms", row="10 us", token="1 us", sample_logit="2 ns", message="50 us")
    lane = lanes_of(plan, model.units, _with_serving(plan, **sv), wl)[0]
    vocab = lane.stages[-1].vocab
    assert vocab == 256 and bare.stages[-1].vocab == vocab  # tiny-llama's vocabulary
    for shape in (StepShape(Step(4, 4, 60), 4, 4, 4), StepShape(Step(32, 1, 16.5), 1, 1, 32)):
        host = 1e-3 + 10e-6 * shape.seqs + 1e-6 * shape.tokens
        sampling = shape.sampled * vocab * 2e-9 - shape.sampled * bare.overheads.sample_per_row
        assert lane.step_time(0, shape) - bare.step_time(0, shape) == pytest.approx(host + sampling, rel=1e-9)
    assert lane.overheads.message_in - bare.overheads.message_in == pytest.approx(50e-6)
    assert lane.overheads.sample_per_row == pytest.approx(vocab * 2e-9)
    assert "1000 us + 10.0 us/seq" in lane.overheads.listed()["stage host work, per step"]
    # the lone sequence's TPOT grows by exactly the host work of its decode steps and its sampling
    cluster = _with_serving(plan, **sv)
    o = simulate([lane], cluster, Load.closed(1, 1, _fixed(32), _fixed(16)))
    gaps = np.diff(o.requests[0].token_times)
    assert np.mean(gaps) == pytest.approx(np.mean([lane.step_time(0, StepShape(Step(1, 1, 32 + k), 1, 1, 1)) for k in range(1, 16)]), rel=0.02)


def test_norm_and_head_run_over_the_sampled_rows_only(plans):
    """The runtime cuts a micro-batch's rows to its sampled tokens before the first norm/head
    (hetc/stage.py select_at): a prompt's step pays its LM head once, whatever its length, and a chunk
    that samples nothing pays none."""
    from hetc.partitioner.estimate.simulate import stage_time

    plan = plans["one"]
    lane = _lanes(plan)[0][0]
    st = lane.stages[0]
    assert [u.kind for u in st.units[st.cut :]] == ["norm", "head"] and st.cut == len(st.units) - 2

    def before_cut(tokens):
        return stage_time(st.units[: st.cut], st.node, st.tp, Step(tokens, 1, (tokens + 1) / 2), lane.wl)

    def prompt(tokens, sampled=1):
        return lane.step_time(0, StepShape(Step(tokens, 1, (tokens + 1) / 2), sampled, 1, tokens))

    host = st.node.profile.serving.token * 32
    assert prompt(64) - prompt(32) == pytest.approx(before_cut(64) - before_cut(32) + host, rel=1e-9)
    head_of_all_rows = stage_time(st.units[st.cut :], st.node, st.tp, Step(64, 1, 32.5), lane.wl)
    head_of_one = stage_time(st.units[st.cut :], st.node, st.tp, Step(1, 1, 0.0), lane.wl)
    assert head_of_one < head_of_all_rows
    assert prompt(64, sampled=0) == pytest.approx(prompt(64) - head_of_one - lane.overheads.sample_per_row, rel=1e-9)


def test_kv_transfer_legs_follow_the_workers(plans):
    """A prompt's KV moves as runtime/worker.py move_kv moves it: the prefill stage copies each layer's
    rows out and sends them without waiting (its leg: the copies), the decode stage receives one message
    per layer over the links and writes the rows in (its leg: each message's latency and bytes, and the
    copies)."""
    from hetc.capacity.lanes import kv_legs
    from hetc.partitioner.cost_models.links import hops, transfer_time

    plan = plans["pools"]
    lanes, cluster = _lanes(plan)
    src = next(l for l in lanes if l.phase == Phase.PREFILL)
    dst = next(l for l in lanes if l.phase == Phase.DECODE)
    out, into = kv_legs(src, dst, cluster, 48)
    assert len(src.stages) == len(dst.stages) == 1
    layers = [u for u in src.stages[0].units if u.kv_bytes_per_token]
    n = len(layers)  # tiny-llama's layers, all of equal size
    nbytes = 48 * layers[0].kv_bytes_per_token
    a, b = src.stages[0].node, dst.stages[0].node
    copy = lambda node: nbytes * 2 / (node.profile.memory_bandwidth * node.profile.efficiency.memory)  # noqa: E731
    assert out == [pytest.approx(n * copy(a))]
    link = hops(cluster, a, b)
    assert into == [pytest.approx(n * (transfer_time(nbytes, link) + copy(b)))]
    assert into[0] > n * sum(h.latency for h in link)  # one message per layer, each paying the latency


def test_kv_hand_offs_do_not_take_a_prefill_pools_step_seats(tmp_path):
    """A prompt's KV leaving a prefill pool is a message through its stages, but not a micro-batch:
    it must not take one of the pool's seats (one micro-batch per stage). When it did, a 4-stage
    pool under overload kept its busiest stage 50% busy and served 8.6k req/s of 15k offered; the
    pool's stages now stay busy (0.93 here) and the server gives 12.8k."""
    two_type_cluster(tmp_path, "8 MB", "4 MB", a_count=8)
    kw = dict(model=MODEL, profiles=str(tmp_path / "c.yaml"), dtype="fp32", input_len=96, output_len=4, time_limit=2, tp="1", disaggregate="on")
    plan = make_plan(PlanRequest(**kw))
    model = model_of(plan, "plan.json")
    n = len(model.units)

    def pipeline(pid: int, phase: str, devices: list[int], batch: int) -> dict:  # even unit ranges on node a
        cuts = [round(i * n / len(devices)) for i in range(len(devices) + 1)]
        return {
            "id": pid,
            "phase": phase,
            "replicas": 1,
            "batch": batch,
            "micro_batches": len(devices),
            "stages": [
                {
                    "devices": [f"a:{d}"],
                    "profile": "fast",
                    "backend": "cuda",
                    "node": "a",
                    "tp": 1,
                    "units": [lo, hi - 1],
                    "layers": [model.units[lo].layer, model.units[hi - 1].layer],
                    "memory_bytes": {"weights": 0, "kv": 0, "activations": 0, "total": 0},  # rederived by evaluate_plan
                    "predicted_ms": {"prefill": 0, "decode": 0},
                }
                for d, lo, hi in zip(devices, cuts, cuts[1:])
            ],
        }

    doc = plan.model_dump(by_alias=True)
    doc["pipelines"] = [pipeline(0, "prefill", [0, 1, 2, 3], 4), pipeline(1, "decode", [4, 5, 6, 7], 64)]
    doc["kv_transfer"] = [dict(doc["kv_transfer"][0], from_pipeline=0, to_pipeline=1)]
    ev = evaluate_plan(Plan.model_validate(doc), "plan.json", Load.open(15000, 300, _fixed(96), _fixed(4), seed=1))
    assert max(s.busy_share for s in ev.stages if s.pipeline == 0) > 0.85
    assert ev.metrics["request_throughput"] > 11000
