"""Capture of the mixture-of-experts architectures fleets run (partitioner/capture): DeepSeek-V3's latent
attention and dense prefix, Qwen3-MoE, gpt-oss — KV bytes per token by each architecture's own formula,
parameters and layer structure as transformers builds them (tiny configs of the same model types)."""

from __future__ import annotations

import warnings

import pytest
import torch

from hetc.partitioner.capture.capture import capture, load_hf_config
from hetc.plan import UnitKind
from tests.conftest import FIXTURES

CONFIGS = FIXTURES


def _kv_elements(cfg) -> int:
    """Elements an engine caches per token and layer, from the architecture's definition."""
    if getattr(cfg, "kv_lora_rank", None):  # MLA: the compressed latent and the shared rotary key
        return cfg.kv_lora_rank + cfg.qk_rope_head_dim
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    return 2 * cfg.num_key_value_heads * head_dim  # K and V of each KV head


def _hf_layers(path: str) -> tuple[int, list[tuple[bool, int]]]:
    """transformers' own model on the meta device: its parameter count, and per decoder layer
    (whether its MLP is a mixture of experts, the layer's parameter count)."""
    from transformers import AutoModelForCausalLM

    cfg, _ = load_hf_config(path)
    with torch.device("meta"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = AutoModelForCausalLM.from_config(cfg)
    layers = [(any("expert" in n for n, _ in layer.named_parameters()), sum(p.numel() for p in layer.parameters())) for layer in model.model.layers]
    return sum(p.numel() for p in model.parameters()), layers


@pytest.mark.parametrize("name", ["tiny-deepseek-v3", "tiny-qwen3-moe", "tiny-gpt-oss"])
def test_kv_bytes_and_parameters_follow_the_architecture(name):
    path = str(CONFIGS / name)
    m = capture(path, dtype="fp32", kv_dtype="bf16", cache=False)
    cfg, _ = load_hf_config(path)
    attn = [u for u in m.units if u.kv_bytes_per_token > 0]
    assert [u.layer for u in attn] == list(range(cfg.num_hidden_layers))
    assert {u.kv_bytes_per_token for u in attn} == {_kv_elements(cfg) * 2}  # bf16 KV
    params, layers = _hf_layers(path)
    assert m.num_params == params
    for layer, (moe, n) in enumerate(layers):  # each layer's units hold what transformers' layer holds
        units = [u for u in m.units if u.layer == layer and u.kind in (UnitKind.ATTENTION, UnitKind.MLP, UnitKind.MOE)]
        assert [u.kind for u in units] == [UnitKind.ATTENTION, UnitKind.MOE if moe else UnitKind.MLP]
        assert sum(u.param_bytes for u in units) == n * 4  # fp32


def test_deepseek_dense_prefix_is_captured_once_and_the_moe_layers_replicated():
    """first_k_dense_replace layers are exported as they are, then three MoE layers, repeated to the depth."""
    m = capture(str(CONFIGS / "tiny-deepseek-v3"), dtype="fp32", cache=False)
    assert m.exported_layers == 1 + 3
    assert m.num_layers == 6
    kinds = [u.kind for u in m.units if u.kind in (UnitKind.MLP, UnitKind.MOE)]
    assert kinds == [UnitKind.MLP] + [UnitKind.MOE] * 5


@pytest.mark.slow
@pytest.mark.parametrize("name", ["deepseek-v3", "qwen3-30b-a3b", "gpt-oss-20b"])
def test_catalog_moe_models_report_their_architectures_kv(name):
    """The published configs: DeepSeek-V3 at fp8 keeps 576 bytes per token and layer (35,136 over 61
    layers), not the 2.5 MB of up-projected heads; GQA models 2 × kv_heads × head_dim elements."""
    m = capture(name, dtype="fp8", cache=False)
    cfg, _ = load_hf_config(name)
    assert m.kv_bytes_per_token == _kv_elements(cfg) * cfg.num_hidden_layers
    if name == "deepseek-v3":
        assert m.kv_bytes_per_token == 35_136 and m.exported_layers == 6
        assert m.num_params == pytest.approx(671e9, rel=0.001)  # the paper's 671B
    if name == "gpt-oss-20b":  # OpenAI's model card: 20.91B parameters, a 12.8 GiB checkpoint (MXFP4 experts, bf16 rest)
        assert m.num_params == pytest.approx(20.91e9, rel=0.001)
        assert capture(name, dtype="bf16", cache=False).param_bytes / 2**30 == pytest.approx(12.8, abs=0.05)


def test_mxfp4_experts_are_stored_at_4_25_bits_and_counted_as_parameters(tmp_path):
    """A checkpoint whose quantization_config says MXFP4 (gpt-oss's): the stacked expert matrices take
    4.25 bits per weight (4-bit values, an 8-bit scale per 32), everything else — their biases too — the
    dtype's bytes; the parameter count is unchanged."""
    import json
    import shutil

    from hetc.partitioner.capture.terms import MXFP4_BYTES
    from transformers import AutoModelForCausalLM

    src = CONFIGS / "tiny-gpt-oss"
    shutil.copytree(src, tmp_path / "m")
    doc = json.loads((tmp_path / "m" / "config.json").read_text())
    doc["quantization_config"] = {"quant_method": "mxfp4", "modules_to_not_convert": ["model.layers.*.self_attn", "model.layers.*.mlp.router"]}
    (tmp_path / "m" / "config.json").write_text(json.dumps(doc))
    plain = capture(str(src), dtype="fp32", cache=False)
    packed = capture(str(tmp_path / "m"), dtype="fp32", cache=False)
    cfg, _ = load_hf_config(str(src))
    with torch.device("meta"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = AutoModelForCausalLM.from_config(cfg)
    experts = sum(p.numel() for n, p in model.named_parameters() if p.dim() == 3 and p.shape[0] == cfg.num_local_experts)
    total = sum(p.numel() for p in model.parameters())
    assert experts > 0
    assert packed.num_params == plain.num_params == total
    assert packed.param_bytes == pytest.approx((total - experts) * 4 + experts * MXFP4_BYTES)
    assert MXFP4_BYTES * 8 == 4.25
    assert any("MXFP4" in n for n in packed.notes) and not any("MXFP4" in n for n in plain.notes)
