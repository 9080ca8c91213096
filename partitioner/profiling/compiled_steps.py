"""Whole steps of a Llama on the OpenVINO executor (the one that serves cpu stages), timed as a
served stage runs them: the model exported as one `paged` stage (backends/stage.py), compiled by
OpenVINO, fed a packed micro-batch and its KV blocks. The counterpart of hf_steps for a profile
measured with `--executor openvino`.
"""

from __future__ import annotations

import tempfile
import warnings
from pathlib import Path

import torch

from hetc.partitioner.profiling.bench import Case
from hetc.partitioner.profiling.hf_steps import decode_step, prefill_step, step_name

__all__ = ["OpenVinoLlama"]


class OpenVinoLlama:
    """A Llama (a config.json dict, random weights) compiled whole by OpenVINO; each case gets KV
    blocks for its sequences."""

    def __init__(self, cfg: dict, *, units, threads: int | None):
        """Args:
        units: the planner's units of `cfg` (capture_config).
        threads: OpenVINO's threads.
        """
        from transformers import LlamaConfig

        from hetc.backends.stage import PagedStage, export_stage
        from hetc.backends.toolchains import toolchain
        from hetc.scheduling import KV_BLOCK_TOKENS
        from hetc.weights import RandomWeights

        conf = LlamaConfig(**{k: v for k, v in cfg.items() if k not in ("architectures", "model_type", "torch_dtype")})
        stage = PagedStage(conf, units, 0, len(units) - 1, dtype=torch.float32, weights=RandomWeights()).eval()
        self._dir = tempfile.TemporaryDirectory(prefix="hetc-profile-")
        tc = toolchain("openvino")
        with warnings.catch_warnings(), torch.no_grad():
            warnings.simplefilter("ignore")
            ep = export_stage(stage, hidden=conf.hidden_size, vocab=conf.vocab_size, dtype=torch.float32, kv_dtype=torch.float32)
            art = tc.build(ep, Path(self._dir.name), target="CPU", stem="model")
        self.step = tc.load(art, Path(self._dir.name), threads=threads)
        self.vocab, self.block = conf.vocab_size, KV_BLOCK_TOKENS
        self.kv_shape = (stage.kv_heads, KV_BLOCK_TOKENS, stage.head_dim)
        self.layers = len(stage.attention_layers)

    def _case(self, name: str, starts: list[int], n_new: list[int], meta: dict) -> Case:
        from hetc.backends.paged_attention import PagedMeta

        per = -(-(max(starts) + max(n_new)) // self.block)
        paged = PagedMeta.build(starts, n_new, [list(range(b * per, (b + 1) * per)) for b in range(len(starts))], [True] * len(starts))
        caches = [torch.zeros(len(starts) * per, *self.kv_shape) for _ in range(2 * self.layers)]
        args = [torch.randint(0, self.vocab, (sum(n_new),)), *paged.inputs(), paged.select, *caches]
        return Case(name, lambda: self.step(*args), reps=5, meta=meta)

    def prefill_case(self, batch: int, tokens: int, cached: int = 0) -> Case:
        """`batch` prompt chunks of `tokens` each, after `cached` tokens in their blocks (0: fresh prompts)."""
        return self._case(
            f"{step_name(batch, tokens, cached)} openvino",
            [cached] * batch,
            [tokens] * batch,
            {"phase": "prefill", "batch": batch, "tokens": tokens, "step": prefill_step(batch, tokens, cached)},
        )

    def decode_case(self, batch: int, ctx: int) -> Case:
        """One token for each of `batch` sequences holding `ctx` (each call writes the same slot)."""
        return self._case(
            f"decode b{batch} ctx{ctx} openvino", [ctx] * batch, [1] * batch, {"phase": "decode", "batch": batch, "ctx": ctx, "step": decode_step(batch, ctx)}
        )
