"""The shapes `hetc profile` fits on, and the held-out shapes its fidelity report checks.

The two sets share no shape (a test checks it): the report measures the model where it
was not fitted. The whole-step model is a Llama of another width and depth than the
overhead probe, and its steps are never timed while fitting.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from hetc.partitioner.profiling.microbench import AttnShape

__all__ = ["ShapeSet", "fit_shapes", "held_out_shapes", "reference_shapes", "PROBE_MODEL", "STEP_MODEL", "STEP_MODEL_QUICK"]

# overhead probe: a Llama so narrow its arithmetic is negligible next to its op dispatch
PROBE_MODEL = dict(hidden=64, intermediate=176, heads=4, kv_heads=2, vocab=256)
# whole steps of the fidelity report: a small Llama-shaped model (GQA 12/4, Llama's 32k vocab)
STEP_MODEL = dict(hidden=768, intermediate=2048, heads=12, kv_heads=4, vocab=32000, layers=6)
STEP_MODEL_QUICK = dict(hidden=512, intermediate=1376, heads=8, kv_heads=4, vocab=8192, layers=4)  # --quick


@dataclass
class ShapeSet:
    matmul: list[tuple[int, int, int]] = field(default_factory=list)  # (M, N, K)
    matmul_bf16: list[tuple[int, int, int]] = field(default_factory=list)
    attention: list[AttnShape] = field(default_factory=list)
    memory: list[tuple[str, int, int]] = field(default_factory=list)  # (op, rows, width)
    probe_depths: list[int] = field(default_factory=list)
    prefill_steps: list[tuple[int, int, int]] = field(default_factory=list)  # (batch, tokens, cached tokens before them)
    decode_steps: list[tuple[int, int]] = field(default_factory=list)  # (batch, context)


_MM_M = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024]
_MM_NK = [(512, 512), (1024, 1024), (2048, 1024), (2048, 2048), (4096, 2048), (8192, 2048), (32768, 1024)]
_MEM_OPS = ["add", "mul", "sub", "silu", "exp", "neg", "pow", "mean", "sum", "softmax", "cat", "clone", "transpose_copy"]


def fit_shapes(quick: bool = False, max_flops: float = 36e9) -> ShapeSet:
    """What calibration times. `quick`: a reduced set (seconds, for tests and smoke runs).

    Args:
        quick: the reduced set.
        max_flops: matmuls larger than this are skipped (their cells take the nearest size).
    """
    if quick:
        mm = [(m, n, k) for m in (1, 8, 64, 512) for n, k in ((512, 512), (1024, 1024), (2048, 2048))]
        attn = [AttnShape(1, 8, 2, 64, t, t, True) for t in (32, 128, 512)]
        attn += [AttnShape(b, 8, 2, 64, 1, L, False) for b, L in ((1, 128), (4, 1024))]
        attn += [AttnShape(1, 8, 2, 64, 64, 1056, True)]
        mem = [(op, r, 1024) for op in ("add", "silu", "mean", "clone", "gather") for r in (1, 64, 1024)]
        return ShapeSet(mm, [], attn, mem, [1, 2])
    mm = [(m, n, k) for m in _MM_M for n, k in _MM_NK if 2 * m * n * k <= max_flops]
    mm_bf16 = [(m, n, k) for m in (1, 16, 256) for n, k in ((1024, 1024), (2048, 2048))]
    attn = [AttnShape(1, h, kvh, 64, t, t, True) for h, kvh in ((8, 2), (16, 8)) for t in (16, 32, 64, 128, 256, 512, 1024)]
    # decode at the step sizes engines run: the kernel's efficiency moves with the sequences in a step
    attn += [AttnShape(b, h, kvh, 64, 1, L, False) for h, kvh in ((8, 2), (16, 8)) for b in (1, 4, 16, 64) for L in (32, 128, 512, 2048) if b * L <= 64 * 512]
    # prompt chunks after a cached prefix (a prefix-cache hit, or chunked prefill): q new tokens over a
    # long past sit far off the fresh prompts' diagonal (q ≈ 2 × mean context); each row of query
    # tokens measured at mean contexts of 512.5 and 2048.5 (past C − q/2), so the rows' columns align
    attn += [AttnShape(1, h, kvh, 64, q, c + q // 2, True) for h, kvh in ((8, 2), (16, 8)) for q in (16, 32, 64, 128, 256, 512) for c in (512, 2048)]
    mem = [(op, r, w) for op in _MEM_OPS for w in (1024, 4096) for r in (1, 4, 16, 64, 256, 1024, 4096) if r * w <= 1 << 24]
    # gathers at the hidden sizes models use: a row's size sets its cost, not monotonically
    # (rows that straddle more pages cost more); every power of two of rows, as the cost bends
    # where the output leaves the caches and jumps at single sizes (on the 2-core VM 4096 rows of
    # 8 KiB, 32 MiB out, took 18 ms; 2048 rows 1.5 ms)
    mem += [("gather", 2**i, w) for w in (512, 768, 1024, 1536, 2048, 3072, 4096) for i in range(13) if 2**i * w <= 1 << 24]
    return ShapeSet(mm, mm_bf16, attn, mem, [1, 2, 4])


def held_out_shapes(quick: bool = False) -> ShapeSet:
    """What the fidelity report measures: sizes between and beside the fitted ones."""
    if quick:
        return ShapeSet(
            matmul=[(3, 768, 768), (48, 1536, 768), (200, 768, 2048)],
            attention=[AttnShape(1, 12, 4, 64, 96, 96, True), AttnShape(3, 12, 4, 64, 1, 700, False)],
            memory=[("mul", 24, 768), ("silu", 200, 2048), ("mean", 700, 768), ("gather", 60, 768)],
            prefill_steps=[(1, 48, 0)],
            decode_steps=[(2, 300)],
        )
    mm = [
        (1, 768, 768),
        (3, 3072, 768),
        (6, 768, 3072),
        (12, 1536, 1536),
        (24, 2304, 768),
        (48, 768, 2048),
        (96, 3072, 768),
        (200, 768, 768),
        (384, 2048, 768),
        (768, 1536, 1024),
        (2, 16000, 768),
        (160, 12000, 768),
        (640, 768, 3072),
    ]
    attn = [AttnShape(b, 12, 4, 64, t, t, True) for b, t in ((1, 24), (1, 48), (1, 96), (1, 200), (1, 400), (1, 800), (2, 150))]
    attn += [AttnShape(b, 12, 4, 64, 1, L, False) for b, L in ((1, 100), (1, 1500), (3, 700), (8, 300), (8, 1500), (24, 700), (2, 3000))]
    attn += [AttnShape(b, 12, 4, 64, q, kv, True) for b, q, kv in ((1, 48, 1100), (2, 96, 800), (1, 300, 1500), (4, 24, 600))]
    mem = [
        ("add", 3, 768),
        ("mul", 24, 768),
        ("silu", 200, 2048),
        ("neg", 700, 768),
        ("pow", 3000, 768),
        ("sub", 150, 3072),
        ("exp", 600, 2048),
        ("mean", 96, 768),
        ("softmax", 400, 3072),
        ("mean", 2000, 2048),
        ("sum", 12, 3072),
        ("sum", 700, 768),
        ("cat", 48, 2048),
        ("cat", 500, 768),
        ("cat", 3000, 2048),
        ("clone", 300, 3072),
        ("clone", 6, 768),
        ("transpose_copy", 1500, 768),
        ("transpose_copy", 100, 2048),
        ("gather", 5, 768),
        ("gather", 60, 768),
        ("gather", 700, 768),
        ("gather", 3000, 2048),
        ("gather", 30, 3072),
        ("gather", 300, 1536),
    ]
    return ShapeSet(
        matmul=mm,
        attention=attn,
        memory=mem,
        # fresh prompts, one past the fitted attention's 1,024 tokens, and chunks after a cached prefix
        prefill_steps=[(1, 24, 0), (1, 96, 0), (1, 200, 0), (2, 128, 0), (1, 400, 0), (4, 48, 0), (1, 1100, 0), (1, 48, 1000), (3, 64, 1024), (1, 200, 600)],
        decode_steps=[(1, 100), (1, 1000), (4, 300), (8, 600), (16, 150), (24, 1200), (32, 500)],
    )


def reference_shapes(quick: bool = False) -> ShapeSet:
    """Fitted shapes the fidelity report measures again beside the held-out ones: what the profile
    predicts for shapes it was fitted on, read against how fast they run now, says how far the host
    moved since the fit (a machine shared with others runs at another speed from minute to minute),
    apart from how well the model carries to shapes it never saw. A subset of `fit_shapes` (a test checks it)."""
    if quick:
        return ShapeSet(
            matmul=[(8, 1024, 1024), (64, 2048, 2048)],
            attention=[AttnShape(1, 8, 2, 64, 128, 128, True), AttnShape(4, 8, 2, 64, 1, 1024, False)],
            memory=[("add", 64, 1024), ("clone", 1024, 1024)],
        )
    return ShapeSet(
        matmul=[(1, 1024, 1024), (16, 2048, 1024), (256, 2048, 2048)],
        attention=[AttnShape(1, 8, 2, 64, 256, 256, True), AttnShape(16, 8, 2, 64, 1, 512, False)],
        memory=[("add", 1024, 4096), ("silu", 256, 4096), ("gather", 256, 2048)],
    )
