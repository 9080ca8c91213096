"""Shared prompt prefixes in planning and capacity: loads and traces that say what prompts share, the
simulator's prefix cache (the runtime's BlockManager) hitting exactly what arithmetic says, cache-aware
routing over replicas, the prefill pool caching, `hetc evaluate` reporting the hit rate beside the same
load without the cache, and the planner pricing prefill and KV with the hits."""

import json

import pytest

from hetc.capacity.evaluate import NO_CACHING, NO_CACHING_FIGURES, evaluate_plan, model_of
from hetc.capacity.lanes import lanes_of
from hetc.capacity.load import LengthDist, Load, Prefixes, read_trace
from hetc.capacity.simulator import simulate
from hetc.cluster import Cluster
from hetc.errors import BadInput
from hetc.kv_blocks import cached_tokens
from hetc.partitioner.estimate.simulate import Round, Workload
from hetc.partitioner.planner import PlanRequest, make_plan
from hetc.requests import ServeLimits
from tests.conftest import FIXTURES, two_type_cluster

MODEL = str(FIXTURES / "tiny-llama")
PROMPT, SHARED = 80, 64  # 2 shared blocks and 16 tokens of a prompt's own


@pytest.fixture(scope="module")
def plans(tmp_path_factory):
    d = tmp_path_factory.mktemp("prefix")
    two_type_cluster(d, "4 MB", "8 MB", a_count=4)
    kw = dict(model=MODEL, profiles=str(d / "c.yaml"), dtype="fp32", input_len=PROMPT, output_len=16, time_limit=2, tp="1")
    return {
        "one": make_plan(PlanRequest(**kw, placement="a:0", batch=8)),
        "two": make_plan(PlanRequest(**kw, placement="a:0 x2", batch=8)),
        "pools": make_plan(PlanRequest(**kw, disaggregate="on")),
        "kw": kw,
    }


def _sim(plan, load, caching=True):
    model, cluster = model_of(plan, "plan.json"), Cluster.from_json(plan.cluster)
    wl = Workload(plan.workload.input_len, plan.workload.output_len, plan.model.dtype, plan.model.kv_dtype)
    return simulate(lanes_of(plan, model.units, cluster, wl), cluster, load, ServeLimits(prefix_caching=caching))


def _closed(n, clients, groups, shared=SHARED):
    return Load.closed(clients, n, LengthDist.parse(str(PROMPT), "t"), LengthDist.parse("8", "t"), prefixes=Prefixes(shared, groups))


def test_a_load_shares_exactly_what_it_says():
    load = _closed(40, 4, 3)
    plain = Load.closed(4, 40, LengthDist.parse(str(PROMPT), "t"), LengthDist.parse("8", "t"))
    assert [r.input_len for r in load.requests] == [r.input_len for r in plain.requests]  # the other draws unchanged
    assert {r.prefix_group for r in load.requests} == {0, 1, 2} and load.shares_prefixes and not plain.shares_prefixes
    a, b = load.requests[0], next(r for r in load.requests[1:] if r.prefix_group == load.requests[0].prefix_group)
    other = next(r for r in load.requests if r.prefix_group != a.prefix_group)
    ta, tb, to = a.token_ids(0), b.token_ids(1), other.token_ids(2)
    assert ta[:SHARED] == tb[:SHARED] and ta[SHARED] != tb[SHARED] and ta[0] != to[0]
    assert _closed(40, 4, 3).requests == load.requests  # seeded


def test_trace_lines_carry_prefix_ids_and_lengths(tmp_path):
    path = tmp_path / "t.jsonl"
    rows = [
        {"arrival": 0, "input_len": 80, "output_len": 4, "prefix_len": 64, "prefix_id": "sys-a"},
        {"arrival": 1, "input_len": 80, "output_len": 4, "prefix_len": 64, "prefix_id": "sys-b"},
        {"arrival": 2, "input_len": 70, "output_len": 4, "prefix_len": 32, "prefix_id": "sys-a"},
        {"arrival": 3, "input_len": 50, "output_len": 4},
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    got = read_trace(path)
    assert [(r.prefix_len, r.prefix_group) for r in got] == [(64, 0), (64, 1), (32, 0), (0, 2)]
    assert got[0].token_ids(0)[:32] == got[2].token_ids(1)[:32]
    path.write_text(json.dumps({"arrival": 0, "input_len": 8, "output_len": 4, "prefix_len": -1}) + "\n")
    with pytest.raises(BadInput, match="prefix_len"):
        read_trace(path)


def test_simulated_hits_are_the_shared_blocks_of_every_request_after_the_first(plans):
    n = 30
    on = _sim(plans["one"], _closed(n, 1, 1))
    assert on.prefix_queried == n * PROMPT and on.prefix_hits == (n - 1) * SHARED
    off = _sim(plans["one"], _closed(n, 1, 1), caching=False)
    assert off.prefix_queried == 0 and off.prefix_hits == 0
    ttft = lambda o: sorted(r.token_times[0] - r.arrival for r in o.requests)[n // 2]  # noqa: E731
    assert ttft(on) < ttft(off)  # a quarter of the prompt left to compute


def test_replicas_route_each_prefix_to_the_lane_holding_it(plans):
    n, groups = 60, 2
    o = _sim(plans["two"], _closed(n, 2, groups))
    assert o.prefix_hits == (n - groups) * SHARED  # only each prefix's first request misses: no lane computes it twice


def test_the_prefill_pool_caches(plans):
    o = _sim(plans["pools"], _closed(40, 4, 1))
    assert all(r.done for r in o.requests)
    assert o.prefix_hits >= (40 - 4) * SHARED  # at most the first few, sent at once, miss


def test_evaluate_reports_the_hit_rate_beside_the_same_load_without_the_cache(plans):
    ev = evaluate_plan(plans["one"], "plan.json", _closed(40, 4, 1))
    m = ev.metrics
    assert m["prefix_cache_hit_rate"] == pytest.approx(_sim(plans["one"], _closed(40, 4, 1)).prefix_hits / (40 * PROMPT))
    assert all(m[NO_CACHING + k] is not None for k in NO_CACHING_FIGURES)
    assert m["median_ttft_ms"] < m[NO_CACHING + "median_ttft_ms"]
    plain = evaluate_plan(plans["one"], "plan.json", Load.closed(4, 40, LengthDist.parse(str(PROMPT), "t"), LengthDist.parse("8", "t")))
    assert NO_CACHING + "median_ttft_ms" not in plain.metrics  # nothing shared: no second run


def test_the_planner_prices_prefill_and_kv_with_the_hits(plans):
    kw = plans["kw"]
    base = make_plan(PlanRequest(**kw, placement="a:0", batch=8))
    shared = make_plan(PlanRequest(**kw, placement="a:0", batch=8, prefix_len=SHARED, prefix_groups=2))
    assert (shared.workload.prefix_len, shared.workload.prefix_groups) == (SHARED, 2)
    assert shared.predicted.ttft_ms < base.predicted.ttft_ms
    assert shared.predicted.output_tok_s > base.predicted.output_tok_s
    # KV: 8 sequences of (80 + 16 → 96) tokens = 768, against 8 × 32 of their own + 2 prefixes × 64
    kv_base, kv_shared = base.pipelines[0].stages[0].memory_bytes.kv, shared.pipelines[0].stages[0].memory_bytes.kv
    assert kv_shared / kv_base == pytest.approx((8 * 32 + 2 * 64) / (8 * 96))


def test_workload_hits_are_whole_blocks_short_of_the_last_token():
    assert cached_tokens(80, 64) == 64 and cached_tokens(64, 64) == 32 and cached_tokens(80, 31) == 0 and cached_tokens(1000, 100) == 96
    wl = Workload.of(1088, 64, "bf16", "bf16", prefix_len=1024, prefix_groups=3)
    assert (wl.cached_len, wl.prefill_len, wl.shared_kv) == (1024, 64, 3 * 1024)
    assert wl.kv_tokens() == 1152 - 1024 and wl.prefill_ctx == 1024 + 32
    plain = Workload(1088, 64, "bf16", "bf16")
    assert Round.of(wl, 16, 1).tokens < Round.of(plain, 16, 1).tokens  # a round computes fewer prompt tokens
