"""OpenVINO kernels as `hetc profile` timed them before against the same kernels chained in one
inference, as a stage runs them (BENCHMARKS.md "Cost-model fidelity (CPU)": why the profile's kernel
timings differed from a served step).

    python benchmarks/openvino_kernels.py [--chain 12] [--threads 1]

FullyConnected: the 768-wide Llama's MLP projections (2048×768 up, 768×2048 down), M rows; as profiled
(`linear_step`: several weights on one input, per weight) against a dependent chain up → down → up …
Paged attention: 12/4 heads of 64, decode of B sequences at context L; as profiled before (one node
per inference, its blocks rotating through a cache larger than the last-level cache) against a chain
of nodes with a cache each (a stage's layers), the caches together larger than the last-level cache.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from hetc.backends.openvino.kernels import linear_step, paged_attention_step
from hetc.backends.openvino.toolchain import cpu_config
from hetc.backends.paged_attention import PagedMeta
from hetc.partitioner.profiling.bench import cpu_info, evict_bytes
from hetc.scheduling import KV_BLOCK_TOKENS as BS


def _median_s(fn, *args, reps: int = 9) -> float:
    fn(*args)
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        fn(*args)
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def _projection_chain(ups: list[torch.Tensor], downs: list[torch.Tensor], threads: int):
    """x → up₀ → down₀ → up₁ → … in one model: each FullyConnected feeds the next, as in a stage."""
    import openvino as ov
    import openvino.opset13 as ops

    x = ops.parameter([-1, ups[0].shape[1]], ov.Type.f32)
    h = x
    for up, down in zip(ups, downs):
        h = ops.matmul(ops.matmul(h, ops.constant(up.numpy()), False, True), ops.constant(down.numpy()), False, True)
    compiled = ov.Core().compile_model(ov.Model([h], [x]), "CPU", cpu_config(threads=threads, kv_dtype=torch.float32))
    request = compiled.create_infer_request()
    return lambda a: request.infer([a.numpy()], share_inputs=True, share_outputs=True)


def linear_rows(chain: int, threads: int) -> list[tuple[str, float, float]]:
    """FullyConnected as the profile times it (`linear_step`: many weights on one input) against a
    dependent chain of the 768-wide model's MLP projections (2048×768 up, 768×2048 down)."""
    pairs = max(1, chain // 2)
    ups = [torch.empty(2048, 768).uniform_(-0.05, 0.05) for _ in range(pairs)]
    downs = [torch.empty(768, 2048).uniform_(-0.05, 0.05) for _ in range(pairs)]
    up_step, down_step = linear_step(ups, threads=threads), linear_step(downs, threads=threads)
    in_chain = _projection_chain(ups, downs, threads)
    rows = []
    for m in (1, 8, 32, 256):
        x, h = torch.randn(m, 768), torch.randn(m, 2048)
        profiled = (_median_s(up_step, x) + _median_s(down_step, h)) / (2 * pairs)
        rows.append((f"FullyConnected {m} rows, 2048×768 / 768×2048", profiled, _median_s(in_chain, x) / (2 * pairs)))
    return rows


def attention_rows(chain: int, threads: int, evict: float) -> list[tuple[str, float, float]]:
    """Paged attention as the profile timed it before (one node per inference, its blocks rotating
    through a cache larger than `evict`) against a chain of nodes with a cache each."""
    heads, kv_heads, d = 12, 4, 64
    kw = dict(heads=heads, kv_heads=kv_heads, head_dim=d, scale=d**-0.5, threads=threads)
    rows = []
    for b, ctx in ((1, 64), (8, 64), (16, 64), (32, 64), (8, 1024)):
        per = -(-(ctx + 1) // BS)
        rounds = int(evict // (2 * b * per * kv_heads * BS * d * 4)) + 1
        caches = [(torch.rand(b * per, kv_heads, BS, d), torch.rand(b * per, kv_heads, BS, d)) for _ in range(max(chain, rounds))]
        big = (torch.rand(rounds * b * per, kv_heads, BS, d), torch.rand(rounds * b * per, kv_heads, BS, d))
        metas = [
            PagedMeta.build([ctx] * b, [1] * b, [list(range((r * b + i) * per, (r * b + i + 1) * per)) for i in range(b)], [True] * b).inputs()[1:]
            for r in range(rounds)
        ]
        q, k, v = torch.rand(b, heads * d), torch.rand(b, kv_heads * d), torch.rand(b, kv_heads * d)
        alone, many = paged_attention_step(caches=[big], **kw), paged_attention_step(caches=caches, **kw)
        turn = iter(range(1 << 62))
        one = _median_s(lambda: alone(q, k, v, *metas[next(turn) % rounds]))  # noqa: B023  (called here)
        rows.append((f"paged attention decode b{b} L={ctx}", one, _median_s(many, q, k, v, *metas[0]) / len(caches)))
    return rows


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--chain", type=int, default=12, help="kernels in one inference (a stage's layers)")
    ap.add_argument("--threads", type=int, default=1)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    rows = linear_rows(a.chain, a.threads) + attention_rows(a.chain, a.threads, evict_bytes(cpu_info()))
    print(f"| kernel | as profiled before, µs per kernel | in a chain of {a.chain}+, per kernel µs | ratio |\n|---|---:|---:|---:|")
    for name, alone, chained in rows:
        print(f"| {name} | {alone * 1e6:,.1f} | {chained * 1e6:,.1f} | {alone / chained:.2f} |")


if __name__ == "__main__":
    main()
