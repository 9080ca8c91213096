"""The decode-graph path on CPU: batch sizes and padding, the static buffers a replay reads, the
decode attention and fused projections, all against the eager packed step (which the model tests
check against transformers). A captured graph is faked by a replay that runs the stage eagerly on
the same static buffers: what a CUDA graph replays (tests on the GPU: benchmarks/gpu_serve.py)."""

import os
import subprocess
import sys

import pytest
import torch
from transformers import LlamaConfig

from hetc.plan import PlanUnit
from hetc.runtime.cuda_graphs import GRAPH_BATCHES, DecodeGraphs, GraphedStage, GraphStep, graph_batches
from hetc.runtime.kv_cache import AttnMeta, DecodeMeta, KVPool, decode_attention, paged_attention
from hetc.runtime.model_runner import StageModel
from hetc.scheduling import KV_BLOCK_TOKENS as BS
from hetc.weights import RandomWeights

CFG = LlamaConfig(
    vocab_size=300, hidden_size=64, intermediate_size=176, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256
)
UNITS = [
    PlanUnit(index=i, kind=k, layer=l)
    for i, (k, l) in enumerate([("embed", 0), ("attention", 0), ("mlp", 0), ("attention", 1), ("mlp", 1), ("norm", 1), ("head", 1)])
]


def test_graph_batches_cover_every_batch_up_to_the_lane_most():
    assert graph_batches(1) == [1]
    assert graph_batches(32) == [1, 2, 4, 8, 12, 16, 24, 32]
    assert graph_batches(40) == [1, 2, 4, 8, 12, 16, 24, 32, 40]  # the most itself, not 48
    for m in (3, 17, 100, 1500):
        sizes = graph_batches(m)
        assert sizes[-1] == m and sizes == sorted(set(sizes)) and set(sizes) - {m} <= set(GRAPH_BATCHES)
    with pytest.raises(ValueError):
        graph_batches(0)


class _FakeGraph:
    """What a captured graph replays: the stage over the static buffers, into its output tensor."""

    def __init__(self, graphs: DecodeGraphs, n: int):
        self.graphs, self.n = graphs, n

    def replay(self) -> None:
        g = self.graphs
        g.out[self.n].copy_(g.model(g.x[: self.n], g.view(self.n)))


def _graphed(model: StageModel, max_batch: int, max_context: int = 256) -> GraphedStage:
    graphs = DecodeGraphs(model, max_batch=max_batch, max_context=max_context, hidden=64, dtype=torch.float32)
    for n in graphs.sizes:
        graphs.out[n] = model(graphs.x[:n], graphs.view(n)).clone()
        graphs.graphs[n] = _FakeGraph(graphs, n)
    return GraphedStage(model, graphs)


def _pair(fuse: bool = False):
    """Two stages over the same weights and KV layout: one eager, one through graphs."""
    return [
        StageModel(CFG, UNITS, 0, len(UNITS) - 1, dtype=torch.float32, kv_dtype=torch.float32, num_blocks=12, weights=RandomWeights(std=0.2), fuse=fuse)
        for _ in range(2)
    ]


def test_decode_steps_replay_padded_and_match_the_eager_step():
    eager, inner = _pair()
    staged = _graphed(inner, max_batch=6)
    g = torch.Generator().manual_seed(0)
    tables = {0: [3, 7], 1: [5], 2: [1, 9, 4]}
    prompts = {0: 40, 1: 5, 2: 70}
    for stage in (eager, staged):  # the same prompts in both pools (eager packed steps)
        starts = [0] * 3
        ids = torch.randint(0, 300, (sum(prompts.values()),), generator=torch.Generator().manual_seed(1))
        stage(ids, stage.step_meta(starts, list(prompts.values()), [tables[s] for s in prompts], [True] * 3))
    lens = dict(prompts)
    for step in range(4):
        seqs = [0, 2] if step == 1 else [0, 1, 2]  # 2 sequences pad to a graph of 2, 3 to one of 4
        ids = torch.randint(0, 300, (len(seqs),), generator=g)
        args = ([lens[s] for s in seqs], [1] * len(seqs), [tables[s] for s in seqs], [True] * len(seqs))
        want = eager(ids, eager.step_meta(*args))
        meta = staged.step_meta(*args)
        assert isinstance(meta, GraphStep) and meta.size == (2 if len(seqs) == 2 else 4)
        got = staged(ids, meta)
        assert staged.replayed and got.shape == want.shape == (len(seqs), 300)
        torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4)
        assert torch.all(staged.graphs.x[len(seqs) : meta.size] == 0)  # padding rows zeroed
        for s in seqs:
            lens[s] += 1
    # the padding rows wrote only the lane's padding block: every sequence's blocks hold the eager pool's K/V
    used = torch.tensor([b for t in tables.values() for b in t])
    by_block = lambda t: t.view(-1, BS, *t.shape[1:])[used]  # noqa: E731
    for layer in (0, 1):
        torch.testing.assert_close(by_block(inner.kv.k[layer]), by_block(eager.kv.k[layer]), atol=1e-5, rtol=1e-5)


def test_steps_a_graph_cannot_take_run_eagerly():
    _, inner = _pair()
    staged = _graphed(inner, max_batch=2, max_context=2 * BS)
    assert staged.step_meta([0], [5], [[1]], [True]).__class__ is AttnMeta  # prompt tokens
    assert isinstance(staged.step_meta([4, 9], [1, 1], [[1], [2]], [True, False]), AttnMeta)  # a row not sampled
    assert isinstance(staged.step_meta([4, 9, 3], [1, 1, 1], [[1], [2], [3]], [True] * 3), AttnMeta)  # > largest
    assert isinstance(staged.step_meta([2 * BS], [1], [[1, 2, 3]], [True]), AttnMeta)  # past the buffers' width
    staged(torch.tensor([1, 2, 3, 4, 5]), staged.step_meta([0], [5], [[1]], [True]))
    assert not staged.replayed


def test_decode_attention_matches_the_packed_attention():
    torch.manual_seed(0)
    pools = [KVPool([0], 12, 2, 16, torch.float32) for _ in range(2)]
    past_k, past_v = torch.randn_like(pools[0].k[0]), torch.randn_like(pools[0].v[0])
    for p in pools:
        p.k[0].copy_(past_k)
        p.v[0].copy_(past_v)
    starts, tables = [5, 40, 70], [[3], [1, 7], [9, 2, 4]]
    q, k, v = torch.randn(3, 4, 16), torch.randn(3, 2, 16), torch.randn(3, 2, 16)
    want = paged_attention(q, k, v, pools[0], 0, AttnMeta.build(starts, [1] * 3, tables, [True] * 3), 0.25)
    meta = DecodeMeta.build(starts, tables, rows=4, width=5)  # one padding row, tables wider than needed
    got = decode_attention(torch.cat([q, q[:1]]), torch.cat([k, k[:1]]), torch.cat([v, v[:1]]), pools[1], 0, meta, 0.25)
    torch.testing.assert_close(got[:3], want)
    assert meta.block_table[3].tolist() == [0] * 5 and meta.slots[3] == 0 and meta.context_lens[3] == 1


def test_fused_projections_compute_the_same_step():
    fused, plain = _pair(fuse=True)[0], _pair()[0]
    assert hasattr(fused.mods["attn0"], "qkv_proj") and not hasattr(fused.mods["attn0"], "q_proj")
    assert hasattr(fused.mods["mlp1"], "gate_up_proj")
    assert plain.param_bytes == fused.param_bytes and plain.param_names == fused.param_names
    ids = torch.randint(0, 300, (9,), generator=torch.Generator().manual_seed(3))
    args = ([0, 0], [6, 3], [[1], [2]], [True, True])
    torch.testing.assert_close(plain(ids, plain.step_meta(*args)), fused(ids, fused.step_meta(*args)), atol=1e-4, rtol=1e-4)


_KERNEL_CHECK = """
import torch
from hetc.backends.cuda.paged_decode import paged_decode
from hetc.runtime.kv_cache import DecodeMeta, KVPool, decode_attention
torch.manual_seed(0)
pool = KVPool([0], 10, 2, 32, torch.float32)
pool.k[0].normal_()
pool.v[0].normal_()
meta = DecodeMeta.build([5, 40, 70], [[3], [1, 7], [9, 2, 4]], rows=4, width=4)
q, k, v = torch.randn(4, 8, 32), torch.randn(4, 2, 32), torch.randn(4, 2, 32)
want = decode_attention(q, k, v, pool, 0, meta, 32 ** -0.5)  # the gather (CPU) form; writes the new rows
got = paged_decode(q, pool.k[0], pool.v[0], meta.block_table, meta.context_lens, 32 ** -0.5, 32)
torch.testing.assert_close(got.flatten(1), want, atol=1e-5, rtol=1e-5)
print("ok")
"""


def test_triton_paged_decode_kernel_matches_the_gather():
    """The CUDA kernel's math, through Triton's CPU interpreter where triton is installed (in a
    process of its own: triton picks the interpreter when it is first imported)."""
    pytest.importorskip("triton")
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    done = subprocess.run([sys.executable, "-c", _KERNEL_CHECK], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-2000:]


def test_metrics_count_the_steps_a_stage_replayed():
    """A step message's times hold each stage's seconds, then 1.0 per stage that replayed a graph."""
    from types import SimpleNamespace

    from hetc.runtime.metrics import Metrics

    m = Metrics("m")
    for i in (0, 1):
        m.register_stage(0, i, f"a:{i}", (1.0, 1.0))
    eng = SimpleNamespace(num_running=lambda: 2, num_waiting=lambda: 0)
    runner = SimpleNamespace(lane=SimpleNamespace(id=0, stages=[0, 1]), engine=eng, sched=SimpleNamespace(blocks=SimpleNamespace(num_used=3)))
    decode = SimpleNamespace(has_prefill=False)
    m.on_step(runner, decode, [0.008, 0.009, 1.0, 0.0], 0.02)  # stage 0 replayed, stage 1 ran eagerly
    m.on_step(runner, decode, [0.008, 0.009, 1.0, 1.0], 0.02)
    get = lambda stage: m.registry.get_sample_value(
        "hetc_stage_cuda_graph_steps_total",  # noqa: E731
        {"model": "m", "stage": f"0.{stage}", "device": f"a:{stage}"},
    )
    assert get(0) == 2 and get(1) == 1
    steps = m.registry.get_sample_value("hetc_stage_step_seconds_count", {"model": "m", "stage": "0.1", "device": "a:1", "phase": "decode"})
    assert steps == 2  # the flags are not taken for steps


def test_tensor_parallel_gpu_stages_take_nccl_for_their_collectives(monkeypatch):
    """cuda and rocm tp stages: an NCCL compute group beside the gloo control group; every other stage
    one gloo group for both. (Forming NCCL needs several GPUs: the groups are faked here.)"""
    from hetc.runtime import groups
    from hetc.runtime.topology import StageSpec

    made = []
    monkeypatch.setattr(groups, "_gloo", lambda store, rank, size, wait, bind: made.append("gloo") or "gloo-pg")
    monkeypatch.setattr(groups, "_nccl", lambda store, rank, size, wait: made.append("nccl") or "nccl-pg")

    class Store:
        def clone(self):
            return self

    import torch.distributed as dist

    monkeypatch.setattr(dist, "PrefixStore", lambda prefix, store: store)

    def spec(backend: str, tp: int) -> StageSpec:
        return StageSpec(
            lane=0,
            index=0,
            n_stages=1,
            devices=tuple(f"a:{i}" for i in range(tp)),
            ranks=tuple(range(1, tp + 1)),
            prev_rank=0,
            next_rank=0,
            backend=backend,
            profile="p",
            node="a",
            units=(0, 1),
            layers=(0, 0),
            kv_budget=0.0,
            weight_bytes=0.0,
            predicted_ms=(1.0, 1.0),
        )

    assert groups.stage_groups(Store(), 0, 1, spec("cuda", 2), 0, 1.0) == ("gloo-pg", "nccl-pg")
    assert groups.stage_groups(Store(), 0, 1, spec("rocm", 4), 1, 1.0) == ("gloo-pg", "nccl-pg")
    assert groups.stage_groups(Store(), 0, 1, spec("cuda", 2), 0, 1.0, emulate=True) == ("gloo-pg", "gloo-pg")
    assert groups.stage_groups(Store(), 0, 1, spec("gaudi", 2), 0, 1.0) == ("gloo-pg", "gloo-pg")
    assert groups.compute_collectives(spec("cpu", 2), False) is groups.Collectives.GLOO
    assert groups.compute_collectives(spec("cuda", 1), False) is groups.Collectives.GLOO  # no group at all
    assert made == ["gloo", "nccl", "gloo", "nccl", "gloo", "gloo"]


def test_a_pipeline_of_graphed_stages_passes_hidden_states():
    """Two stages cut mid-model: the second's graphs take the residual stream, not ids."""
    cut = 2  # embed, attention 0 | mlp 0, attention 1, mlp 1, norm, head
    w = RandomWeights(std=0.2)
    make = lambda a, b: StageModel(
        CFG,
        UNITS,
        a,
        b,
        dtype=torch.float32,
        kv_dtype=torch.float32,  # noqa: E731
        num_blocks=8,
        weights=w,
    )
    eager = [make(0, cut - 1), make(cut, len(UNITS) - 1)]
    staged = [_graphed(make(0, cut - 1), max_batch=4), _graphed(make(cut, len(UNITS) - 1), max_batch=4)]
    assert staged[1].graphs.x.dtype == torch.float32 and staged[1].graphs.x.shape == (4, 64)
    tables, g = [[1], [2], [3]], torch.Generator().manual_seed(5)
    prompt = torch.randint(0, 300, (12,), generator=g)
    for chain in (eager, staged):
        x = prompt
        for st in chain:
            x = st(x, st.step_meta([0, 0, 0], [4, 4, 4], tables, [True] * 3))
    for pos in range(4, 7):
        ids = torch.randint(0, 300, (3,), generator=g)
        outs = []
        for chain in (eager, staged):
            x = ids
            for st in chain:
                x = st(x, st.step_meta([pos] * 3, [1] * 3, tables, [True] * 3))
            outs.append(x)
        assert staged[0].replayed and staged[1].replayed
        torch.testing.assert_close(outs[1], outs[0], atol=1e-4, rtol=1e-4)
