"""OpGraph cost terms and unit cuts against independent references."""

import json

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode
from transformers import AutoConfig, AutoModelForCausalLM

from hetc.partitioner.capture import capture as cap
from hetc.partitioner.capture.capture import capture
from hetc.partitioner.capture.graph import build_graph
from hetc.partitioner.capture.units import assign_layers, cut_units
from tests.conftest import FIXTURES, tiny_llama_with_layers


def _matmul_flops(units, tokens):
    return sum(u.matmul_flops.at(tokens, tokens) for u in units)


def _flop_counter(model, tokens):
    ids = torch.zeros(1, tokens, dtype=torch.long)
    with FlopCounterMode(display=False) as fc, torch.no_grad():
        model(ids) if not hasattr(model, "config") else model(input_ids=ids, use_cache=False)
    return fc.get_total_flops()


@pytest.mark.parametrize("name", ["tiny-llama", "tiny-gpt2", "tiny-opt", "tiny-qwen2", "tiny-phi3", "tiny-mistral"])
def test_matmul_flops_match_flop_counter(name):
    """Our per-node formulas (symbolic in tokens) equal torch's FlopCounterMode at two lengths.

    The reference runs eager attention (explicit bmm's): FlopCounterMode counts nothing for
    the CPU flash-attention kernel that sdpa dispatches to.
    """
    m = capture(str(FIXTURES / name), dtype="fp32")
    hf = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(FIXTURES / name), attn_implementation="eager").eval()
    for tokens in (7, 33):
        assert _matmul_flops(m.units, tokens) == pytest.approx(_flop_counter(hf, tokens), rel=1e-9)


def test_flops_of_a_replicated_deep_model_match_flop_counter(tmp_path):
    """A 7-layer model is exported with 3 layers and replicated: FLOPs still match the real 7-layer model."""
    m = capture(str(tiny_llama_with_layers(tmp_path, 7)), dtype="fp32")
    assert m.exported_layers == 3 and m.num_layers == 7
    hf = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(tmp_path), attn_implementation="eager").eval()
    assert _matmul_flops(m.units, 20) == pytest.approx(_flop_counter(hf, 20), rel=1e-9)
    assert m.num_params == sum(p.numel() for p in hf.parameters())


def test_replicated_units_equal_full_export(tmp_path):
    d = json.loads((FIXTURES / "tiny-gemma2" / "config.json").read_text())
    d["num_hidden_layers"] = 8
    (tmp_path / "config.json").write_text(json.dumps(d))
    short = capture(str(tmp_path), dtype="bf16")
    cfg, _ = cap.load_hf_config(str(tmp_path))
    full = assign_layers(cut_units(build_graph(cap._export_hf(cfg, "bf16", "x"), weight_dtype="bf16")))
    assert short.exported_layers == 6  # period 2 (sliding/global) × 3
    assert [(u.kind, u.layer, u.param_bytes, u.matmul_flops, u.kv_bytes_per_token) for u in short.units] == [
        (u.kind, u.layer, u.param_bytes, u.matmul_flops, u.kv_bytes_per_token) for u in full
    ]


def _closed_form(cfg, tokens, active_params):
    """2·(non-embedding active params)·T + 4·layers·heads·head_dim·T² (full square, as exported)."""
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    attn = 4 * cfg.num_hidden_layers * cfg.num_attention_heads * head_dim * tokens * tokens
    embed = cfg.vocab_size * cfg.hidden_size
    return 2 * (active_params - embed) * tokens + attn


@pytest.mark.parametrize("name", ["llama-3.1-8b", "mistral-7b", "qwen2.5-7b"])
def test_dense_catalog_flops_closed_form(name):
    """Untied models: the head is a matmul over the vocabulary, the embedding a gather.

    Norm weights and biases are parameters without matmul FLOPs, so they leave the count.
    """
    m = capture(name)
    cfg, _ = cap.load_hf_config(name)
    n, d = cfg.num_hidden_layers, cfg.hidden_size
    norms = (2 * n + 1) * d
    kv_width = cfg.num_key_value_heads * d // cfg.num_attention_heads
    biases = n * (d + 2 * kv_width) if name == "qwen2.5-7b" else 0  # Qwen2 has q/k/v biases
    assert _matmul_flops(m.units, 100) == pytest.approx(_closed_form(cfg, 100, m.num_params - norms - biases), rel=1e-6)


def test_mixtral_counts_only_active_experts():
    m = capture("mixtral-8x7b")
    cfg, _ = cap.load_hf_config("mixtral-8x7b")
    d, i, e, k, n = cfg.hidden_size, cfg.intermediate_size, cfg.num_local_experts, cfg.num_experts_per_tok, cfg.num_hidden_layers
    expert = 3 * d * i
    active = m.num_params - n * (e - k) * expert
    norms = (2 * n + 1) * d
    assert m.num_params == pytest.approx(46.70e9, rel=1e-3)
    assert _matmul_flops(m.units, 64) == pytest.approx(_closed_form(cfg, 64, active - norms), rel=1e-6)
    moe = [u for u in m.units if u.kind == "moe"]
    assert len(moe) == n and all(u.moe["num_experts"] == e and u.moe["top_k"] == k for u in moe)
    assert moe[0].moe["expert_bytes"] == pytest.approx(e * expert * 2)  # all experts' weights in memory
    # the grouped GEMMs read the stacked experts through a transpose: weights (scaled by the experts a
    # step touches), never a constant activation that a one-token step would stream in full
    ops = [r for u in moe for r in u.op_records if r.kind == "moe"]
    assert ops and all(r.act_bytes.const < 1e-6 * r.weight_bytes for r in ops)


def test_kv_bytes_per_token_from_graph_match_config():
    for name in ("llama-3.1-70b", "mistral-7b", "qwen2.5-72b"):
        cfg, _ = cap.load_hf_config(name)
        m = capture(name, dtype="bf16", kv_dtype="fp8")
        hd = cfg.hidden_size // cfg.num_attention_heads
        assert m.kv_bytes_per_token == 2 * cfg.num_hidden_layers * cfg.num_key_value_heads * hd * 1


def test_units_cut_between_blocks_and_attention_mlp():
    m = capture("llama-3.1-70b")
    kinds = [u.kind for u in m.units]
    assert kinds[0] == "embed" and kinds[-2:] == ["norm", "head"]
    assert kinds[1:-2] == ["attention", "mlp"] * 80
    assert [u.layer for u in m.units[1:-2]] == [layer for layer in range(80) for _ in (0, 1)]
    assert all(u.out_bytes_per_token == 8192 * 2 for u in m.units[:-1])  # the residual stream, bf16
    assert m.units[-1].out_bytes_per_token == 128256 * 2
    assert m.num_params == pytest.approx(70.55e9, rel=1e-3)


def test_renamed_copy_gives_the_same_units():
    """A from-scratch Llama with other class and attribute names cuts exactly like transformers' Llama."""
    ours = capture("tests.fixtures.mini_llama:factory", dtype="fp32")
    theirs = capture("tests.fixtures.mini_llama:hf_factory", dtype="fp32")
    key = lambda u: (u.kind, u.layer, u.param_bytes, u.matmul_flops, u.kv_bytes_per_token, u.out_bytes_per_token)
    assert [key(u) for u in ours.units] == [key(u) for u in theirs.units]
    assert len(ours.units) == 9


def test_tied_weights_charged_to_both_ends_counted_once():
    m = capture(str(FIXTURES / "tiny-gpt2"), dtype="fp32")
    embed, head = m.units[0], m.units[-1]
    shared = set(embed.params) & set(head.params)
    assert len(shared) == 1  # wte is read by the embedding and by the LM head
    hf = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(FIXTURES / "tiny-gpt2"))
    assert m.num_params == sum(p.numel() for p in hf.parameters())  # parameters() skips the tied duplicate


def test_fp8_weights_are_one_byte():
    bf16, fp8 = capture("llama-3.1-8b", dtype="bf16"), capture("llama-3.1-8b", dtype="fp8")
    assert fp8.param_bytes == pytest.approx(bf16.param_bytes / 2)
    assert fp8.num_params == bf16.num_params


def test_cnn_through_factory_has_conv_units():
    m = capture("tests.fixtures.small_cnn:factory", dtype="fp32")
    assert sum(u.kind == "conv" for u in m.units) >= 3
    net, (x,) = __import__("tests.fixtures.small_cnn", fromlist=["factory"]).factory()
    with FlopCounterMode(display=False) as fc, torch.no_grad():
        net(x)
    batch = x.shape[0]
    assert sum(u.matmul_flops.at(batch, 0) for u in m.units) == pytest.approx(fc.get_total_flops(), rel=1e-9)
