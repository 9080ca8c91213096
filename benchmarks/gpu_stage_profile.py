"""Where one decode step of a hetc cuda stage goes: the runtime's `StageModel` on a GPU, no server.

    python benchmarks/gpu_stage_profile.py PLAN.json [--seqs 8] [--ctx 576] [-o trace.txt]

Builds the plan's first stage on `cuda:0` with random weights drawn on the GPU, runs decode steps
of `--seqs` sequences at context `--ctx` (the same `StageModel.forward` and `AttnMeta` a worker
runs), and prints: the wall time per step, the device's busy time per step (sum of its kernels),
the kernels per step, and the top kernels and host ops by time (torch.profiler). Wall ≫ busy means
the step is host-bound (launches, Python, synchronisations), not the device's work.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import torch


class DeviceRandom:
    """Weights drawn where they will live (a CPU draw of 8B parameters takes minutes); norm gains one."""

    def __init__(self, device: str):
        self.device = device

    def get(self, name: str, shape: torch.Size, dtype: torch.dtype) -> torch.Tensor:
        if len(shape) == 1:
            return torch.ones(shape, dtype=dtype, device=self.device)
        return (torch.randn(shape, device=self.device, dtype=torch.float32) * 0.02).to(dtype)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("plan")
    ap.add_argument("--seqs", type=int, default=8)
    ap.add_argument("--ctx", type=int, default=576)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("-o", "--output", default=None, help="write the profiler's tables here")
    ap.add_argument("--device", default="cuda", help="cpu: a dry run of this script")
    a = ap.parse_args()
    from hetc.kv_blocks import blocks_for
    from hetc.partitioner.capture.capture import load_hf_config
    from hetc.partitioner.capture.graph import TORCH_DTYPES
    from hetc.plan import load_plan
    from hetc.runtime.model_runner import StageModel

    doc = load_plan(a.plan)
    first, last = doc.pipelines[0].stages[0].units
    cfg, _ = load_hf_config(doc.model.ref)
    dtype, kv_dtype = TORCH_DTYPES[doc.model.dtype], TORCH_DTYPES[doc.model.kv_dtype]
    per_seq = blocks_for(a.ctx + 1)
    t0 = time.perf_counter()
    sm = StageModel(cfg, doc.units, first, last, dtype=dtype, kv_dtype=kv_dtype, num_blocks=a.seqs * per_seq, weights=DeviceRandom(a.device), device=a.device)
    sync = torch.cuda.synchronize if a.device.startswith("cuda") else (lambda: None)
    sync()
    print(f"built {doc.model.ref} units {first}-{last} on {a.device} in {time.perf_counter() - t0:.1f} s", flush=True)
    tables = [list(range(i * per_seq, (i + 1) * per_seq)) for i in range(a.seqs)]
    x = torch.randint(3, cfg.vocab_size, (a.seqs,), device=a.device)

    def step():
        meta = sm.step_meta([a.ctx] * a.seqs, [1] * a.seqs, tables, [True] * a.seqs)
        return sm(x, meta)

    for _ in range(3):
        step()
    sync()
    walls = []
    for _ in range(a.steps):
        t = time.perf_counter()
        step()
        sync()
        walls.append(time.perf_counter() - t)
    wall = statistics.median(walls)
    from torch.profiler import ProfilerActivity, profile

    n = 5
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(n):
            step()
        sync()
    events = prof.key_averages()
    dev = [e for e in events if getattr(e, "device_type", None) == torch.autograd.DeviceType.CUDA]
    busy = sum(e.self_device_time_total for e in dev) / 1e6 / n
    kernels = sum(e.count for e in dev) / n
    print(
        f"{doc.model.ref}, {a.seqs} sequences at context {a.ctx}, {doc.model.dtype}: wall {wall * 1e3:.2f} ms per "
        f"step (median of {a.steps}), device busy {busy * 1e3:.2f} ms ({busy / wall:.0%}), {kernels:.0f} kernels "
        f"per step",
        flush=True,
    )
    by_dev = events.table(sort_by="self_cuda_time_total", row_limit=15)
    by_cpu = events.table(sort_by="self_cpu_time_total", row_limit=15)
    print(by_dev[:6000])
    print(by_cpu[:6000])
    if a.output:
        with open(a.output, "w") as f:
            f.write(by_dev + "\n" + by_cpu)
    return 0


if __name__ == "__main__":
    sys.exit(main())
