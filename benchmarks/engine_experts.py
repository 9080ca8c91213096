"""TensorRT-LLM's `experts` figure (hardware_profiles/engines/trtllm.yaml): its MoE layer beside its dense GEMMs.

TensorRT-LLM v0.17's perf overview (docs/source/performance/perf-overview.md @ NVIDIA/TensorRT-LLM 258c7540,
trtllm-bench, FP8 engines, source `trt17` of benchmarks/gpu_public.py) measured Mixtral-8x7B and Mistral-7B on one
H200 and one H100 at the same release and lengths. Mistral-7B is Mixtral's dense twin: the same 32 layers, the
same attention, and each of Mixtral's 8 experts (top-2) has Mistral's MLP shape (4096 x 14336). So
(Mixtral pred/public) / (Mistral pred/public) under `trtllm@fit` cancels whatever the engine's dense figures get
wrong, and what is left is the MoE layer. The figure is the grid value (0.50-1.00, step 0.02) that minimises the
median over the TP1 pairs (PAIRS) of |that ratio - 1|, ties to the larger; no round's MLPerf row is used.

It rewrites trtllm.yaml's `experts:` line for each value it tries (each prediction is a `hetc plan` process) and
puts the file back as it was; it prints, per value, the median |ratio - 1|, its signed median and each pair's errors.

Usage: python benchmarks/engine_experts.py [VALUE ...]   (default: the whole grid)
"""

from __future__ import annotations

import re
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import gpu_public  # noqa: E402
from public_figures.case import Case  # noqa: E402

ENGINE_FILE = gpu_public.ROOT / "hardware_profiles/engines/trtllm.yaml"
# (GPU, input, output, Mistral-7B, Mixtral-8x7B output tok/s), TP1 FP8, v0.17's table
PAIRS = [
    ("h200", 128, 128, 31938.12, 17157.72),
    ("h200", 128, 2048, 27409.3, 15095.21),
    ("h200", 500, 2000, 22354.67, 12105.27),
    ("h200", 1000, 1000, 18426.16, 10371.36),
    ("h200", 2048, 128, 3834.43, 2009.67),
    ("h200", 2048, 2048, 12347.37, 6940.32),
    ("h200", 5000, 500, 4041.59, 2309.1),
    ("h100", 128, 128, 31674.49, 15962.49),
    ("h100", 2048, 128, 3642.48, 1892.81),
    ("h100", 5000, 500, 3591.33, 1764.7),
    ("h100", 1000, 1000, 16035.66, 6868.52),
]
GRID = [round(0.5 + 0.02 * i, 2) for i in range(26)]


def ratio(model: str, gpu: str, isl: int, osl: int, public: float) -> float:
    """pred / public of one row at its own configuration (the largest batch that fits), under trtllm@fit."""
    c = Case(f"trt17-{gpu}-{model}-{isl}/{osl}", f"1x{gpu}", model, "fp8", isl, osl, public, "trt17", "nvidia", "a:0", None, 1)
    return gpu_public.at_public_config(c, "fit")["predicted"]["output_tok_s"] / public


def main() -> None:
    values = [float(v) for v in sys.argv[1:]] or GRID
    dense = {p[:3]: ratio("mistral-7b", *p[:3], p[3]) for p in PAIRS}  # no MoE layer: the figure does not move them
    original = ENGINE_FILE.read_text()
    best: tuple[float, float] | None = None
    try:
        for f in values:
            ENGINE_FILE.write_text(re.sub(r"(?m)^    experts: .*$", f"    experts: {f}", original, count=1))
            rows = [(p[:3], ratio("mixtral-8x7b", *p[:3], p[4])) for p in PAIRS]
            twin = [r / dense[k] - 1 for k, r in rows]
            score = statistics.median(abs(x) for x in twin)
            print(
                f"experts {f:.2f}: median |ratio - 1| {score:.4f}, signed {statistics.median(twin):+.3f}; "
                + ", ".join(f"{g} {i}/{o} {r - 1:+.0%} (twin {t:+.0%})" for ((g, i, o), r), t in zip(rows, twin)),
                flush=True,
            )
            if best is None or score < best[1] or (score == best[1] and f > best[0]):
                best = (f, score)
    finally:
        ENGINE_FILE.write_text(original)
    print(f"Mistral-7B (pred/public - 1): {', '.join(f'{g} {i}/{o} {r - 1:+.0%}' for (g, i, o), r in dense.items())}")
    if best is not None:
        print(f"best: experts {best[0]:.2f} (median |ratio - 1| {best[1]:.4f})")


if __name__ == "__main__":
    main()
