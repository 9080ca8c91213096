"""Measures the fidelity report's held-out cases, in a process of its own.

Run as `python -m hetc.partitioner.profiling.fidelity_worker SPEC.json OUT.json`; SPEC
holds {threads, quick, model (config.json dict), rounds, executor}. Writes {name: seconds} per op
case and per whole step, in the order `held_out_shapes` lists them, and per fitted shape of
`reference_shapes` (timed in the same rounds). Nothing here reads a
profile: the prediction side never sees these timings until they are compared.
"""

from __future__ import annotations

import json
import sys
from typing import Any

__all__ = ["measure", "main"]


def measure(spec: dict) -> dict:
    """Time every held-out case of `spec`; {"ops": [[name, s], ...], "references": [...], "steps": [...], "machine": {...}}."""
    import torch

    from hetc.partitioner.profiling import bench, hf_steps, microbench
    from hetc.partitioner.profiling.shapes import ShapeSet, held_out_shapes, reference_shapes

    threads = bench.set_threads(spec.get("threads"))
    bench.warm_allocator()
    info = bench.cpu_info()
    shapes = held_out_shapes(spec.get("quick", False))
    rounds = int(spec.get("rounds", 3))
    evict = bench.evict_bytes(info)
    on: dict[str, Any] = {"executor": spec.get("executor") or "torch", "threads": threads}  # what the profile measured

    def cases(shapes: ShapeSet) -> list:
        return (
            microbench.matmul_cases(shapes.matmul, dtype="fp32", device="cpu", evict=evict, **on)
            + microbench.attention_cases(shapes.attention, dtype="fp32", device="cpu", evict=evict, **on)
            + microbench.memory_cases(shapes.memory, dtype="fp32", device="cpu")
        )

    ops, refs = cases(shapes), cases(reference_shapes(spec.get("quick", False)))
    bench.run_cases(ops + refs, rounds=rounds)  # the same rounds: the references see the held-out cases' host
    op_times, ref_times = ([[c.name.removesuffix(" openvino"), c.seconds] for c in group] for group in (ops, refs))
    del ops, refs  # the weight pools are large; free them before the model is built
    if on["executor"] == "openvino":
        from hetc.partitioner.profiling.compiled_steps import OpenVinoLlama
        from hetc.partitioner.profiling.probe import capture_config

        model = OpenVinoLlama(spec["model"], units=capture_config(spec["model"]), threads=threads)
    else:
        model = hf_steps.build_llama(spec["model"])
    steps = [model.prefill_case(b, t, c) if on["executor"] == "openvino" else hf_steps.prefill_case(model, b, t, c) for b, t, c in shapes.prefill_steps] + [
        model.decode_case(b, c) if on["executor"] == "openvino" else hf_steps.decode_case(model, b, c) for b, c in shapes.decode_steps
    ]
    bench.run_cases(steps, rounds=rounds)
    return {
        "ops": op_times,
        "references": ref_times,
        "steps": [[c.name.removesuffix(" openvino"), c.seconds] for c in steps],
        "machine": {"cpu": info.model, "cores": info.cores, "threads": threads, "torch": torch.__version__},
    }


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    spec = json.loads(open(args[0]).read())
    out = measure(spec)
    with open(args[1], "w") as f:
        json.dump(out, f)
    return 0


if __name__ == "__main__":
    sys.exit(main())
