"""Stages built from a model's own modules, chained, give the unpartitioned model's
logits (fp32, within 1e-4) through paged KV — chunked prefill and decode of sequences of
different lengths in one micro-batch — and hold only their own units' tensors."""

import torch
import pytest
from transformers import LlamaConfig, LlamaForCausalLM

from hetc.runtime.feedback import SampledTokens
from hetc.runtime.kv_cache import AttnMeta
from hetc.runtime.model_runner import StageModel
from hetc.runtime.sampler import sample
from hetc.runtime.transport import Message, StepMeta
from hetc.weights import RandomWeights, SafetensorsWeights
from tests.fixtures.stages import llama_units

CFG = dict(
    vocab_size=300,
    hidden_size=64,
    intermediate_size=176,
    num_hidden_layers=3,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=256,
    initializer_range=0.3,
)


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    torch.manual_seed(0)
    cfg = LlamaConfig(**CFG)
    m = LlamaForCausalLM(cfg).eval()
    d = tmp_path_factory.mktemp("tiny")
    m.save_pretrained(d)
    return d, cfg, m


# a stage may start at the MLP half of a layer: cuts after units 3 (attention 1) and 5 (attention 2)
CUTS = [(0, 3), (4, 5), (6, 8)]


def _stages(cfg, weights, blocks=16):
    units = llama_units(cfg.num_hidden_layers)
    return [StageModel(cfg, units, a, b, dtype=torch.float32, kv_dtype=torch.float32, num_blocks=blocks, weights=weights) for a, b in CUTS]


def _step(stages, seqs: dict, tables: dict, items: list[tuple]):
    """One step through `stages` of the sequences' tokens; items are (seq, start, n, sample)."""
    meta = AttnMeta.build([i[1] for i in items], [i[2] for i in items], [tables[i[0]] for i in items], [i[3] for i in items])
    x = torch.tensor([t for s, st, n, _ in items for t in seqs[s][st : st + n]])
    for stage in stages:
        x = stage(x, meta)
    return x


def _two_prompts(model_dir, seed: int, lengths: tuple[int, int]):
    """The partitioned stages, and two random prompts with the unpartitioned model's logits."""
    d, cfg, ref = model_dir
    g = torch.Generator().manual_seed(seed)
    prompts = [torch.randint(0, 300, (n,), generator=g).tolist() for n in lengths]
    with torch.no_grad():
        return _stages(cfg, SafetensorsWeights(d)), *((p, ref(torch.tensor([p])).logits[0]) for p in prompts)


def test_stages_match_unpartitioned_logits(model_dir):
    stages, (a, ra), (b, rb) = _two_prompts(model_dir, seed=1, lengths=(41, 9))
    tables = {0: [3, 0, 7], 1: [5]}  # non-contiguous blocks

    def step(items):
        return _step(stages, {0: a, 1: b}, tables, items)

    worst = 0.0
    out = step([(0, 0, 16, False), (1, 0, 5, True)])  # a's first chunk, b's whole prompt
    worst = max(worst, (out[0] - rb[4]).abs().max().item())
    out = step([(1, 5, 1, True), (0, 16, 16, False)])  # b decodes beside a's second chunk
    worst = max(worst, (out[0] - rb[5]).abs().max().item())
    out = step([(0, 32, 8, True), (1, 6, 2, True)])
    worst = max(worst, (out[0] - ra[39]).abs().max().item(), (out[1] - rb[7]).abs().max().item())
    out = step([(1, 8, 1, True), (0, 40, 1, True)])
    worst = max(worst, (out[0] - rb[8]).abs().max().item(), (out[1] - ra[40]).abs().max().item())
    assert out.shape == (2, 300)
    assert worst < 1e-4


def test_dense_micro_batches_match_unpartitioned_logits(model_dir):
    """Equal chunks (no query gather) with one sequence not sampling, then a decode step where
    every row samples (no row selection); contexts end mid-block and span several blocks."""
    stages, (a, ra), (b, rb) = _two_prompts(model_dir, seed=2, lengths=(23, 19))
    tables = {0: [6, 2], 1: [1, 4]}
    meta = AttnMeta.build([0, 0], [18, 18], [tables[0], tables[1]], [True, False])
    assert meta.q_index is None and meta.sample_rows.tolist() == [17]
    out = _step(stages, {0: a, 1: b}, tables, [(0, 0, 18, True), (1, 0, 18, False)])
    worst = (out[0] - ra[17]).abs().max().item()
    assert out.shape == (1, 300)
    out = _step(stages, {0: a, 1: b}, tables, [(0, 18, 1, True), (1, 18, 1, True)])
    worst = max(worst, (out[0] - ra[18]).abs().max().item(), (out[1] - rb[18]).abs().max().item())
    assert worst < 1e-4


def test_each_stage_holds_only_its_units(model_dir):
    d, cfg, _ = model_dir
    stages = _stages(cfg, SafetensorsWeights(d))
    names = [set(s.param_names) for s in stages]
    assert names[0] == {
        "model.embed_tokens.weight",
        "model.layers.0.input_layernorm.weight",
        *(
            f"model.layers.{l}.{m}"
            for l in (0, 1)
            for m in ("input_layernorm.weight", "self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight", "self_attn.o_proj.weight")
        ),
        *(f"model.layers.0.{m}" for m in ("post_attention_layernorm.weight", "mlp.gate_proj.weight", "mlp.up_proj.weight", "mlp.down_proj.weight")),
    }
    assert "model.layers.1.mlp.up_proj.weight" in names[1] and "model.layers.2.self_attn.q_proj.weight" in names[1]
    assert names[2] >= {"model.norm.weight", "lm_head.weight"} and "model.embed_tokens.weight" not in names[2]
    assert not (names[0] & names[1]) and not (names[1] & names[2])
    total = sum(p.numel() * 4 for p in LlamaForCausalLM(cfg).parameters())
    assert sum(s.param_bytes for s in stages) == total
    assert list(stages[0].kv.k) == [0, 1] and list(stages[1].kv.k) == [2] and stages[2].kv.k == {}


def test_safetensors_are_memory_mapped(model_dir):
    d, cfg, ref = model_dir
    w = SafetensorsWeights(d)
    t = w.get("model.layers.0.mlp.up_proj.weight", torch.Size([176, 64]), torch.float32)
    assert torch.equal(t, ref.model.layers[0].mlp.up_proj.weight)
    t2 = w.get("model.layers.0.mlp.up_proj.weight", torch.Size([176, 64]), torch.float32)
    assert t.data_ptr() == t2.data_ptr()  # both views of the same mapped pages, no copy


def test_random_weights_are_deterministic():
    r = RandomWeights(std=0.02)
    a = r.get("model.layers.3.mlp.up_proj.weight", torch.Size([8, 4]), torch.float32)
    assert torch.equal(a, RandomWeights(std=0.02).get("model.layers.3.mlp.up_proj.weight", torch.Size([8, 4]), torch.float32))
    assert not torch.equal(a, r.get("model.layers.2.mlp.up_proj.weight", torch.Size([8, 4]), torch.float32))
    assert torch.equal(r.get("model.norm.weight", torch.Size([4]), torch.float32), torch.ones(4))


def test_step_meta_and_message_round_trip():
    m = StepMeta(
        seq_ids=[3, 8],
        starts=[0, 7],
        n_new=[3, 1],
        sample=[False, True],
        block_tables=[[4, 2], [9]],
        token_ids=[5, 6, 7, -1],
        sampling=[(0.0, 1.0, 0, 11), (0.7, 0.9, 40, 12)],
    )
    meta, samp = m.encode()
    assert StepMeta.decode(meta, samp) == StepMeta(
        [3, 8], [0, 7], [3, 1], [False, True], [[4, 2], [9, 0]], [5, 6, 7, -1], [(0.0, 1.0, 0, 11), (0.7, 0.9, 40, 12)]
    )
    assert meta[-4:].tolist() == [5, 6, 7, -1]  # the tokens last: a looked-ahead one is filled in place
    store = SampledTokens()
    with pytest.raises(RuntimeError, match="sequence 8 at position 7"):
        store.fill(StepMeta.decode(meta, samp), meta, timeout=0.01)
    store.put([8, 3], [7, 3], [42, 9])  # what the last stage sampled for sequence 8 at position 7
    store.fill(m, meta, timeout=0.01)
    assert m.token_ids == [5, 6, 7, 42] and StepMeta.decode(meta, samp).token_ids == [5, 6, 7, 42]
    header, body = Message(1, 3, meta=meta, samp=samp, payload=torch.ones(3, 5, dtype=torch.bfloat16), times=torch.zeros(2, dtype=torch.float64)).encode()
    assert header.tolist()[:7] == [1, 3, meta.numel(), samp.numel(), 3, 5, 1]
    assert body.numel() == meta.numel() * 8 + samp.numel() * 8 + 2 * 8 + 3 * 5 * 2


def test_sampler_greedy_seeded_and_filtered():
    logits = torch.tensor([[0.0, 3.0, 1.0, 2.9], [5.0, 0.0, 0.0, 0.0]])
    assert sample(logits, [(0.0, 1.0, 0, 0), (0.0, 1.0, 0, 0)], [1, 1]) == [1, 0]
    p = [(1.0, 1.0, 0, 42)]
    draws = [sample(logits[:1], p, [pos])[0] for pos in range(40)]
    assert draws == [sample(logits[:1], p, [pos])[0] for pos in range(40)]  # seeded: reproducible
    assert len(set(draws)) > 1
    assert {sample(logits[:1], [(1.0, 1.0, 2, s)], [0])[0] for s in range(40)} <= {1, 3}  # top-k 2
    assert {sample(logits[:1], [(1.0, 0.4, 0, s)], [0])[0] for s in range(40)} == {1}  # top-p: token 1 alone has 0.48


def _tp_rank(rank: int, init: str, model_dir: str, out: str) -> None:
    import torch.distributed as dist
    from transformers import AutoConfig

    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=2)
    torch.set_num_threads(1)
    cfg = AutoConfig.from_pretrained(model_dir)
    units = llama_units(cfg.num_hidden_layers)
    # two pipeline stages, each split 2 ways
    stages = [
        StageModel(cfg, units, a, b, dtype=torch.float32, kv_dtype=torch.float32, num_blocks=8, weights=SafetensorsWeights(model_dir), tp_rank=rank, tp_size=2)
        for a, b in ((0, 3), (4, 8))
    ]
    for s in stages:
        s.tp_group = dist.group.WORLD
    g = torch.Generator().manual_seed(2)
    a, b = torch.randint(0, 300, (21,), generator=g).tolist(), torch.randint(0, 300, (4,), generator=g).tolist()
    tables = {0: [1, 2], 1: [0]}

    def step(items):
        return _step(stages, {0: a, 1: b}, tables, items)

    outs = [step([(0, 0, 20, True), (1, 0, 3, True)]), step([(1, 3, 1, True), (0, 20, 1, True)])]
    torch.save({"outs": outs, "a": a, "b": b, "param_bytes": [s.param_bytes for s in stages]}, f"{out}.{rank}")
    dist.destroy_process_group()


def test_tensor_parallel_stages_match_unpartitioned_logits(model_dir, tmp_path):
    """tp = 2: each device holds half of every matrix; all-reduce/all-gather restore the exact logits."""
    import torch.multiprocessing as mp

    d, cfg, ref = model_dir
    out = str(tmp_path / "tp")
    mp.start_processes(_tp_rank, args=(f"file://{tmp_path / 'store'}", str(d), out), nprocs=2, start_method="spawn")
    r0, r1 = torch.load(f"{out}.0", weights_only=True), torch.load(f"{out}.1", weights_only=True)
    with torch.no_grad():
        ra, rb = ref(torch.tensor([r0["a"]])).logits[0], ref(torch.tensor([r0["b"]])).logits[0]
    (x1, x2) = r0["outs"]
    assert (x1[0] - ra[19]).abs().max() < 1e-4 and (x1[1] - rb[2]).abs().max() < 1e-4
    assert (x2[0] - rb[3]).abs().max() < 1e-4 and (x2[1] - ra[20]).abs().max() < 1e-4
    assert torch.equal(r0["outs"][1], r1["outs"][1])  # every member ends with the same logits
    norms = 3 * cfg.hidden_size * 4  # replicated norm gains (bytes): stage 0 holds 3, the rest is halved
    total0 = sum(
        p.numel() * 4
        for n, p in ref.named_parameters()
        if n.startswith(("model.embed_tokens", "model.layers.0.", "model.layers.1.input", "model.layers.1.self"))
    )
    assert r0["param_bytes"][0] == r1["param_bytes"][0] == (total0 - norms) // 2 + norms


def test_width_shrunk_copy_keeps_layers_and_cuts():
    from hetc.runtime.model_runner import param_count, shrink_config

    cfg = LlamaConfig(**{**CFG, "hidden_size": 256, "intermediate_size": 512, "num_attention_heads": 8, "num_key_value_heads": 4})
    small = shrink_config(cfg, 4)
    assert (small.num_hidden_layers, small.vocab_size, small.head_dim) == (3, 300, 32)
    assert (small.num_attention_heads, small.num_key_value_heads, small.hidden_size, small.intermediate_size) == (2, 1, 64, 128)
    assert param_count(small) < param_count(cfg) / 3
    units = llama_units(3)  # the same unit table runs, cut at the same places
    stages = [StageModel(small, units, a, b, dtype=torch.float32, kv_dtype=torch.float32, num_blocks=4, weights=RandomWeights()) for a, b in CUTS]
    meta = AttnMeta.build([0], [5], [[0]], [True])
    x = torch.arange(5)
    for s in stages:
        x = s(x, meta)
    assert x.shape == (1, 300) and torch.isfinite(x).all()


def test_config_sliding_window_matches_hf(tmp_path):
    """Mistral keeps its window in the config, not on each attention module: a 31-token prompt past a
    window of 8 gives HF's logits (full attention would not)."""
    from transformers import MistralConfig, MistralForCausalLM

    cfg = MistralConfig(**{**CFG, "num_hidden_layers": 2}, sliding_window=8)
    torch.manual_seed(0)
    ref = MistralForCausalLM(cfg).eval()
    ref.save_pretrained(tmp_path)
    stage = StageModel(cfg, llama_units(2), 0, 6, dtype=torch.float32, kv_dtype=torch.float32, num_blocks=4, weights=SafetensorsWeights(tmp_path))
    ids = torch.randint(0, 300, (31,), generator=torch.Generator().manual_seed(3)).tolist()
    out = stage(torch.tensor(ids), AttnMeta.build([0], [31], [[0, 1]], [True]))
    with torch.no_grad():
        want = ref(torch.tensor([ids])).logits[0, -1]
    assert (out[0] - want).abs().max() < 1e-4
