"""Multi-head latent attention's two kernel forms (LatentAttention): the FLOPs and bytes each moves,
checked against the computations themselves under torch's FLOP counter; the cost model pricing decode
in the absorbed form and prompt chunks in the up-projected one, as engines run them; and its one
latent, which every device of a tensor-parallel group keeps whole (Unit.kv_ways)."""

from __future__ import annotations

import warnings

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from hetc.cluster import load_profile
from hetc.kv_blocks import stage_blocks
from hetc.partitioner.cost_models.memory import stage_memory
from hetc.scheduling import KV_BLOCK_TOKENS
from hetc.partitioner.capture.capture import capture, load_hf_config
from hetc.partitioner.capture.terms import LatentAttention
from hetc.partitioner.cost_models.analytic import Step, cost_params, op_time
from tests.conftest import FIXTURES

DEEPSEEK = str(FIXTURES / "tiny-deepseek-v3")  # 4 heads, kv_lora_rank 32, rope 8, nope 16, v 16


@pytest.fixture(scope="module")
def deepseek():
    return capture(DEEPSEEK, dtype="bf16", kv_dtype="bf16", cache=False)


def _attention(model):
    return [o for u in model.units for o in u.op_records if o.kind == "attention"]


def test_capture_keeps_the_latent_sizes_of_mla_attention_only(deepseek):
    assert {o.latent for o in _attention(deepseek)} == {LatentAttention(heads=4, rank=32, rope=8, nope=16, v=16, itemsize=2.0)}
    dense = capture(str(FIXTURES / "tiny-llama"), dtype="bf16", cache=False)
    assert {o.latent for o in _attention(dense)} == {None}


def test_absorbed_flops_are_those_of_the_absorbed_computation():
    """Decode in the absorbed form: the query's no-rope part folded through W_UK into the latent space,
    scores over the latents and the rotary keys, the output a mix of latents. It equals multi-head
    attention over the up-projected keys and values (checked), and the FLOP counter reads over its
    attention what `absorbed_flops` says."""
    torch.manual_seed(0)
    h, rank, rope, nope, v, b, ctx = 4, 32, 8, 16, 16, 3, 37
    mla = LatentAttention(heads=h, rank=rank, rope=rope, nope=nope, v=v, itemsize=4.0)
    q_nope, q_pe = torch.randn(b, h, nope), torch.randn(b, h, rope)
    latent, k_pe = torch.randn(b, ctx, rank), torch.randn(b, ctx, rope)
    w_uk, w_uv = torch.randn(h, nope, rank), torch.randn(h, rank, v)
    q_latent = torch.einsum("bhn,hnr->bhr", q_nope, w_uk)  # the absorption's GEMM: the export's kv_b_proj FLOPs
    with FlopCounterMode(display=False) as counter:
        scores = q_latent @ latent.transpose(1, 2) + q_pe @ k_pe.transpose(1, 2)  # [B, H, L]
        mixed = scores.softmax(-1) @ latent  # [B, H, R]
    out = torch.einsum("bhr,hrv->bhv", mixed, w_uv)
    assert counter.get_total_flops() == mla.absorbed_flops(b, ctx)
    keys = torch.cat([torch.einsum("blr,hnr->bhln", latent, w_uk), k_pe[:, None].expand(b, h, ctx, rope)], -1)
    values = torch.einsum("blr,hrv->bhlv", latent, w_uv)
    query = torch.cat([q_nope, q_pe], -1)[:, :, None]  # [B, H, 1, nope + rope]
    reference = torch.nn.functional.scaled_dot_product_attention(query, keys, values, scale=1.0)[:, :, 0]
    torch.testing.assert_close(out, reference, rtol=1e-4, atol=1e-4)


def test_expansion_is_transformers_kv_b_proj():
    """The up-projection of n cached latents (a prompt chunk's context): transformers' own kv_b_proj, FLOPs and bytes out."""
    from transformers import AutoModelForCausalLM

    cfg, _ = load_hf_config(DEEPSEEK)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        attn = AutoModelForCausalLM.from_config(cfg).model.layers[0].self_attn
    mla = LatentAttention(cfg.num_attention_heads, cfg.kv_lora_rank, cfg.qk_rope_head_dim, cfg.qk_nope_head_dim, cfg.v_head_dim, itemsize=4.0)
    n = 29
    with FlopCounterMode(display=False) as counter:
        kv = attn.kv_b_proj(torch.randn(n, cfg.kv_lora_rank))
    assert counter.get_total_flops() == mla.expand_flops(n)
    keys_and_values = kv.numel() + n * cfg.num_attention_heads * cfg.qk_rope_head_dim  # + the rotary key given to each head
    assert keys_and_values * 4 == mla.expanded_bytes(n)


@pytest.mark.parametrize("tp", [1, 2])
def test_decode_attends_the_latents_and_prompt_chunks_up_project_their_context(deepseek, tp):
    (op,) = set(_attention(deepseek))
    mla = op.latent
    cp = cost_params(load_profile("h200-sxm"), "bf16", tp)
    kv = 2.0 * (mla.rank + mla.rope)  # bf16 latent bytes per token
    compute, stream = cp.peak * cp.eff_matmul, cp.bandwidth * cp.eff_memory
    seqs = 8
    for ctx in (64, 4096):  # decode: the absorbed attention over the latents, every rank reading all of them
        a = op_time(op, cp, Step(seqs, seqs, ctx), kv)
        flops = mla.absorbed_flops(seqs, ctx) / tp / compute
        latents = (kv * seqs * ctx + op.act_bytes.at(seqs, ctx) / tp) / stream
        assert max(flops, latents) <= a <= flops + latents
    # a prompt chunk of 256 tokens after 896 cached ones (mean context 1,024): those 896 up-projected first
    chunk = op_time(op, cp, Step(256, 1, 1024), kv)
    assert chunk >= (mla.expand_flops(896) / tp / cp.peak + mla.expanded_bytes(1024) / tp / cp.bandwidth) * (1 - 1e-9)
    assert op_time(op, cp, Step(256, 1, 128), kv) < chunk  # a fresh prompt: nothing cached to up-project
    # decode is not priced as the export's own form, attention over every head's up-projected K and V
    heads = op.flops.at(seqs, 4096) / tp / compute
    assert op_time(op, cp, Step(seqs, seqs, 4096), kv) >= mla.absorbed_flops(seqs, 4096) / tp / compute > heads  # (2R + rope) > nope + rope + v


@pytest.mark.parametrize("tp", [1, 2, 4])
def test_a_tp_group_keeps_the_whole_latent_on_every_device(deepseek, tp):
    """A TP group splits the heads; MLA's latent is every head's, so each device keeps all of it (as the
    runtime's pool does, runtime/model_runner.py), where a dense model's K/V splits with its heads."""
    dense = capture(str(FIXTURES / "tiny-llama"), dtype="bf16", kv_dtype="bf16", cache=False)
    for model, ways in ((deepseek, 1), (dense, tp)):
        assert min(u.kv_ways(tp) for u in model.units) == ways
        mem = stage_memory(model.units, batch=3, context=192, prefill_chunk=32, tp=tp)
        per_token = sum(u.kv_bytes_per_token for u in model.units)
        assert mem.kv == pytest.approx(3 * 192 * per_token / ways)
        assert mem.weights == pytest.approx(model.param_bytes / tp)
        # the blocks a stage's per-device KV budget holds: the runtime's and the simulator's pools
        budget = mem.kv
        assert stage_blocks(budget, ways, per_token) == 3 * 192 // KV_BLOCK_TOKENS
