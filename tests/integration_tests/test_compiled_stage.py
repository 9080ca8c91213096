"""A stage served through a toolchain gives the eager stage's outputs on the runtime's own packed,
mixed micro-batches (chunked prefill beside decode, sampled rows only), with its KV in the
worker's blocks: three stages on three toolchains chained give the unpartitioned model's logits, and
no artifact's code holds the model's weights."""

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from hetc.runtime.compiled_stage import build_compiled_stage
from hetc.weights import SafetensorsWeights
from tests.fixtures.stages import WEIGHT_FILES, assert_no_matrix_bytes, llama_units

CFG = dict(
    vocab_size=300,
    hidden_size=64,
    intermediate_size=176,
    num_hidden_layers=3,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=256,
    initializer_range=0.1,
)
CUTS = [(0, 3), (4, 5), (6, 8)]


@pytest.mark.parametrize("names", [("openvino", "iree", "inductor")])
def test_three_toolchains_chained_give_the_models_logits(tmp_path, monkeypatch, names):
    monkeypatch.setenv("HETC_STAGE_CACHE", str(tmp_path / "cache"))
    torch.manual_seed(0)
    cfg = LlamaConfig(**CFG)
    ref = LlamaForCausalLM(cfg).eval()
    ref.save_pretrained(tmp_path / "m")
    w = SafetensorsWeights(tmp_path / "m")
    stages = [
        build_compiled_stage(
            hf_cfg=cfg,
            units=llama_units(3),
            first=a,
            last=b,
            dtype=torch.float32,
            kv_dtype=torch.float32,
            num_blocks=16,
            weights=w,
            name=n,
            graph_hash="h",
            model_dir=str(tmp_path / "m"),
            width=1,
            artifacts=None,
            stem=f"s{i}",
            threads=1,
        )
        for i, ((a, b), n) in enumerate(zip(CUTS, names))
    ]
    assert [s.executor for s in stages] == list(names)
    # no weight matrix of the model in an artifact's code files: they load the model's weights at start
    # (test_compile.py checks each toolchain's own build; Inductor's there is in the slow suite)
    built = [f for f in (tmp_path / "cache").rglob("*") if f.is_file() and not f.name.endswith(WEIGHT_FILES)]
    assert len({f.parent for f in built}) == len(names)  # a cache folder per stage
    assert_no_matrix_bytes(built, list(ref.parameters()))
    g = torch.Generator().manual_seed(1)
    a, b = torch.randint(0, 300, (41,), generator=g).tolist(), torch.randint(0, 300, (9,), generator=g).tolist()
    with torch.no_grad():
        ra, rb = ref(torch.tensor([a])).logits[0], ref(torch.tensor([b])).logits[0]
    tables = {0: [3, 0], 1: [5]}  # non-contiguous blocks of KV_BLOCK_TOKENS (32)
    seqs = {0: a, 1: b}

    def step(items):
        args = ([i[1] for i in items], [i[2] for i in items], [tables[i[0]] for i in items], [i[3] for i in items])
        x = torch.tensor([t for s, st, n, _ in items for t in seqs[s][st : st + n]])
        with torch.no_grad():
            for s in stages:  # each stage's own metadata form (paged or gather)
                x = s(x, s.step_meta(*args))
        return x

    worst = 0.0
    out = step([(0, 0, 16, False), (1, 0, 5, True)])  # a's first chunk (not sampled) beside b's prompt
    worst = max(worst, (out[0] - rb[4]).abs().max().item())
    out = step([(1, 5, 1, True), (0, 16, 16, False)])  # b decodes beside a's second chunk
    worst = max(worst, (out[0] - rb[5]).abs().max().item())
    out = step([(0, 32, 8, True), (1, 6, 2, True)])  # mixed lengths, both sampled
    worst = max(worst, (out[0] - ra[39]).abs().max().item(), (out[1] - rb[7]).abs().max().item())
    out = step([(1, 8, 1, True), (0, 40, 1, True)])  # a dense decode step
    worst = max(worst, (out[0] - rb[8]).abs().max().item(), (out[1] - ra[40]).abs().max().item())
    assert worst < 1e-4
