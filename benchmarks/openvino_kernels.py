"""One OpenVINO kernel per inference against several in one inference, as `hetc profile` times them
(BENCHMARKS.md "Cost-model fidelity (CPU)": why standalone kernel timings differed from a served step).

    python benchmarks/openvino_kernels.py [--chain 12] [--threads 1]

FullyConnected: the 768-wide Llama's projections ([N, K] weights, streamed from memory), M rows.
Paged attention: 12/4 heads of 64, decode of B sequences at context L, each node with its own cache
(a stage's layers), the caches together larger than the last-level cache. Per kernel: the time of one
inference holding one kernel (as many such models as the chain has kernels, called in turn, so operands
leave the cache alike), and the time per kernel of an inference holding `--chain` or more of them.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from hetc.backends.openvino.kernels import linear_step, paged_attention_step
from hetc.backends.paged_attention import PagedMeta
from hetc.partitioner.cost_models.bench import cpu_info, evict_bytes
from hetc.scheduling import KV_BLOCK_TOKENS as BS


def _median_s(fn, *args, reps: int = 9) -> float:
    fn(*args)
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        fn(*args)
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def _rotating(steps: list):
    """Call each of `steps` in turn (one kernel per inference, their operands out of cache as in a step)."""
    turn = iter(range(1 << 62))
    return lambda *args: steps[next(turn) % len(steps)](*args)


def linear_rows(chain: int, threads: int) -> list[tuple[str, float, float]]:
    rows = []
    for n, k in ((768, 768), (2048, 768), (768, 2048)):
        weights = [torch.empty(n, k).uniform_(-0.05, 0.05) for _ in range(chain)]
        alone = _rotating([linear_step([w], threads=threads) for w in weights])
        many = linear_step(weights, threads=threads)
        for m in (1, 8, 64):
            x = torch.randn(m, k)
            rows.append((f"FullyConnected {m}×{n}×{k}", _median_s(alone, x), _median_s(many, x) / chain))
    return rows


def attention_rows(chain: int, threads: int, evict: float) -> list[tuple[str, float, float]]:
    heads, kv_heads, d = 12, 4, 64
    rows = []
    for b, ctx in ((1, 64), (8, 64), (16, 64), (8, 1024)):
        per = -(-(ctx + 1) // BS)
        nodes = max(chain, int(evict // (2 * b * per * kv_heads * BS * d * 4)) + 1)
        caches = [(torch.rand(b * per, kv_heads, BS, d), torch.rand(b * per, kv_heads, BS, d)) for _ in range(nodes)]
        meta = PagedMeta.build([ctx] * b, [1] * b, [list(range(i * per, (i + 1) * per)) for i in range(b)], [True] * b).inputs()[1:]
        q, k, v = torch.rand(b, heads * d), torch.rand(b, kv_heads * d), torch.rand(b, kv_heads * d)
        kw = dict(heads=heads, kv_heads=kv_heads, head_dim=d, scale=d**-0.5, threads=threads)
        alone = _rotating([paged_attention_step(caches=[c], **kw) for c in caches])
        many = paged_attention_step(caches=caches, **kw)
        rows.append((f"paged attention decode b{b} L={ctx}", _median_s(alone, q, k, v, *meta), _median_s(many, q, k, v, *meta) / nodes))
    return rows


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--chain", type=int, default=12, help="kernels in one inference (a stage's layers)")
    ap.add_argument("--threads", type=int, default=1)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    rows = linear_rows(a.chain, a.threads) + attention_rows(a.chain, a.threads, evict_bytes(cpu_info()))
    print(f"| kernel | one per inference µs | in a chain of {a.chain}+, per kernel µs | ratio |\n|---|---:|---:|---:|")
    for name, alone, chained in rows:
        print(f"| {name} | {alone * 1e6:,.1f} | {chained * 1e6:,.1f} | {alone / chained:.2f} |")


if __name__ == "__main__":
    main()
