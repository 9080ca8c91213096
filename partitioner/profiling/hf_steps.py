"""Whole engine steps of a transformers Llama, timed as an engine runs them.

Prefill: one forward over `batch` fresh prompts of `tokens` tokens (no cache), logits for each
prompt's last token only (the sampled row; the runtime cuts there too). Decode: one
token for each of `batch` sequences whose K/V cache holds `ctx` tokens, in a static cache
of exactly ctx + 1 slots rewound before every call — attention reads the real context,
not a cache's capacity, and nothing is copied that a paged engine would not copy.
"""

from __future__ import annotations

import logging
import warnings

import torch

from hetc.partitioner.cost_models.analytic import Step
from hetc.partitioner.profiling.bench import Case

__all__ = ["llama_config", "build_llama", "prefill_case", "decode_case", "prefill_step", "decode_step", "step_name"]


def llama_config(*, hidden: int, layers: int, heads: int, kv_heads: int, intermediate: int, vocab: int, max_positions: int = 4096) -> dict:
    """A LlamaConfig as a config.json dict (what `capture` reads)."""
    return {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": hidden,
        "intermediate_size": intermediate,
        "num_attention_heads": heads,
        "num_key_value_heads": kv_heads,
        "num_hidden_layers": layers,
        "vocab_size": vocab,
        "max_position_embeddings": max_positions,
        "rms_norm_eps": 1e-5,
        "tie_word_embeddings": False,
        "torch_dtype": "float32",
    }


def build_llama(cfg: dict, *, device: str = "cpu", dtype: torch.dtype = torch.float32, seed: int = 0):
    """LlamaForCausalLM with random weights (its own init), in eval mode."""
    from transformers import LlamaConfig, LlamaForCausalLM

    logging.getLogger("transformers").setLevel(logging.ERROR)
    torch.manual_seed(seed)
    conf = LlamaConfig(**{k: v for k, v in cfg.items() if k not in ("architectures", "model_type", "torch_dtype")})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = LlamaForCausalLM(conf).to(device=device, dtype=dtype).eval()  # type: ignore[call-arg]
    return model


def prefill_step(batch: int, tokens: int, cached: int = 0) -> Step:
    """The cost model's step for a prefill of `batch` prompt chunks of `tokens` after `cached` tokens
    each: mean context cached + (T+1)/2."""
    return Step(batch * tokens, batch, cached + (tokens + 1) / 2)


def decode_step(batch: int, ctx: int) -> Step:
    """The cost model's step for one decode token of `batch` sequences holding `ctx` tokens."""
    return Step(batch, batch, ctx + 1)


def step_name(batch: int, tokens: int, cached: int = 0) -> str:
    """A prefill case's name: its batch, its new tokens, and the cached ones before them."""
    return f"prefill b{batch} t{tokens}" + (f" after{cached}" if cached else "")


def _after_cache(model, ids: torch.Tensor, cached: int, device: str):
    """A forward of `ids` [B, T] after `cached` tokens in a static cache, and the reset that rewinds
    the cache to them (each call writes the same slots)."""
    from transformers import StaticCache

    cache = StaticCache(config=model.config, max_cache_len=cached + ids.shape[1])
    pos = torch.arange(cached, cached + ids.shape[1], device=device)

    def rewind():
        for layer in cache.layers:
            if getattr(layer, "is_initialized", False):
                layer.cumulative_length.fill_(cached)  # type: ignore[union-attr]  # an initialized full-attention layer

    def fn():  # the final norm and LM head on each sequence's last token only, as every executor runs them
        with torch.inference_mode():
            return model(input_ids=ids, past_key_values=cache, cache_position=pos, use_cache=True, logits_to_keep=1)

    return fn, rewind


def prefill_case(model, batch: int, tokens: int, cached: int = 0, *, device: str = "cpu") -> Case:
    """`batch` prompt chunks of `tokens` each, after `cached` tokens already in a static cache (0: a fresh prompt)."""
    vocab = model.config.vocab_size
    ids = torch.randint(0, vocab, (batch, tokens), device=device)
    meta = {"phase": "prefill", "batch": batch, "tokens": tokens, "step": prefill_step(batch, tokens, cached)}
    if not cached:

        def fn():  # the final norm and LM head on each prompt's last token only, as every executor runs them
            with torch.inference_mode():
                return model(input_ids=ids, use_cache=False, logits_to_keep=1)

        return Case(step_name(batch, tokens), fn, reps=3, meta=meta)
    chunk, rewind = _after_cache(model, ids, cached, device)
    return Case(step_name(batch, tokens, cached), chunk, reset=rewind, reps=3, meta=meta)


def decode_case(model, batch: int, ctx: int, *, device: str = "cpu") -> Case:
    """One token for each of `batch` sequences holding `ctx` tokens in a static cache."""
    ids = torch.randint(0, model.config.vocab_size, (batch, 1), device=device)
    fn, rewind = _after_cache(model, ids, ctx, device)
    return Case(f"decode b{batch} ctx{ctx}", fn, reset=rewind, reps=5, meta={"phase": "decode", "batch": batch, "ctx": ctx, "step": decode_step(batch, ctx)})
