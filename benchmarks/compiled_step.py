"""One stage's step: torch eager (the runtime's StageModel) against each CPU-runnable toolchain
(OpenVINO with its paged attention, IREE llvm-cpu, AOTInductor, ONNX Runtime) on the same packed
micro-batches, 1 thread, each stage fed as the worker feeds it (its own step_meta, its own KV blocks).

    .venv/bin/python benchmarks/compiled_step.py [--layers 6] [--hidden 768] [--reps 20]

A Llama-shaped stage (random fp32 weights) holding `--layers` decoder layers; decode steps at
batch 1, 8, 16 and 64 with 256 cached tokens each, and one 128-token prefill. Executors are timed
in turn, round after round (median of the rounds), so a drift in the machine's speed hits each
alike; the ratio is eager / executor. Also prints each toolchain's build time for the stage.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time

import torch
from transformers import LlamaConfig

from hetc.kv_blocks import PADDING_BLOCKS
from hetc.runtime.compiled_stage import build_compiled_stage
from hetc.plan import PlanUnit
from hetc.runtime.model_runner import StageModel
from hetc.scheduling import KV_BLOCK_TOKENS
from hetc.weights import RandomWeights

TOOLCHAINS = ("openvino", "iree", "inductor", "onnx")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layers", type=int, default=6)
    ap.add_argument("--hidden", type=int, default=768)
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--toolchains", default=",".join(TOOLCHAINS))
    a = ap.parse_args()
    torch.set_num_threads(1)
    heads = a.hidden // 64
    cfg = LlamaConfig(
        vocab_size=32000,
        hidden_size=a.hidden,
        intermediate_size=a.hidden * 8 // 3 // 64 * 64,
        num_hidden_layers=a.layers,
        num_attention_heads=heads,
        num_key_value_heads=max(1, heads // 3),
        max_position_embeddings=4096,
    )
    kinds = [("embed", 0)] + [(k, layer) for layer in range(a.layers) for k in ("attention", "mlp")]
    units = [PlanUnit(index=i, kind=k, layer=layer) for i, (k, layer) in enumerate(kinds + [("norm", a.layers - 1), ("head", a.layers - 1)])]
    first, last = 1, 2 * a.layers  # a middle stage: hidden states in and out, every layer's attention
    per_seq = -(-(256 + 1) // KV_BLOCK_TOKENS)  # blocks of a sequence at 256 cached tokens + 1
    blocks = PADDING_BLOCKS + 64 * per_seq
    w = RandomWeights(std=0.02)
    runners = {"torch": StageModel(cfg, units, first, last, dtype=torch.float32, kv_dtype=torch.float32, num_blocks=blocks, weights=w)}
    build_s = {}
    with tempfile.TemporaryDirectory() as cache:
        os.environ["HETC_STAGE_CACHE"] = cache
        for name in a.toolchains.split(","):
            t0 = time.perf_counter()
            runners[name] = build_compiled_stage(
                hf_cfg=cfg,
                units=units,
                first=first,
                last=last,
                dtype=torch.float32,
                kv_dtype=torch.float32,
                num_blocks=blocks,
                weights=w,
                name=name,
                graph_hash="bench",
                model_dir=None,
                width=1,
                artifacts=None,
                stem="s",
                threads=1,
            )
            build_s[name] = time.perf_counter() - t0
        print(
            f"stage: {a.layers} layers × {a.hidden} wide fp32, 1 thread; build s: "
            + ", ".join(f"{k} {v:.1f}" for k, v in build_s.items())
            + f"; host load average {os.getloadavg()[0]:.2f} (1 min)",
            flush=True,
        )
        cases = {f"decode b{b}": ([256] * b, [1] * b) for b in (1, 8, 16, 64)} | {"prefill 128": ([0], [128])}
        for label, (starts, n_new) in cases.items():
            tables = [list(range(PADDING_BLOCKS + i * per_seq, PADDING_BLOCKS + (i + 1) * per_seq)) for i in range(len(starts))]
            metas = {k: r.step_meta(starts, n_new, tables, [True] * len(starts)) for k, r in runners.items()}
            x = torch.randn(sum(n_new), a.hidden)
            times = {k: [] for k in runners}
            with torch.no_grad():
                for k, r in runners.items():
                    r(x, metas[k])  # warm-up
                for _ in range(a.reps):
                    for k, r in runners.items():
                        t0 = time.perf_counter()
                        r(x, metas[k])
                        times[k].append(time.perf_counter() - t0)
            eager = statistics.median(times["torch"])
            row = [f"{label:12s} torch {eager * 1e3:7.2f} ms"]
            for k in runners:
                if k != "torch":
                    med = statistics.median(times[k])
                    row.append(f"{k} {med * 1e3:7.2f} ms ({eager / med:.2f}×)")
            print(" | ".join(row), flush=True)
        print(f"host load average at the end: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
