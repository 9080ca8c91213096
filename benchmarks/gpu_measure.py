"""One GPU against its catalog profile: what the cost model predicts there vs what the device does.

Two halves, so that the measuring half needs nothing but the GPU host's own torch and
transformers (no hetc, no pydantic) and the predicting half never sees a GPU:

    # on the GPU host (writes every timing, nothing predicted):
    python benchmarks/gpu_measure.py measure -o gpu.json [--quick]
    # anywhere (hetc's cost model with the catalog profile, e.g. h100-sxm):
    python benchmarks/gpu_measure.py compare gpu.json --profile h100-sxm [--json]

Measured (CUDA events on the device's own timeline, median of reps):
- copy bandwidth (1 GiB device-to-device copy; bytes read + written);
- host launch cost (back-to-back tiny kernels, wall clock) and device time per kernel (the same
  kernels replayed from one CUDA graph);
- bf16 GEMMs `y = x·Wᵀ` at the widths of Llama-3.1-8B and -70B, weights rotated through a pool of
  4× the L2 so every call reads its weight from HBM;
- SDPA (GQA, bf16): causal prefill and one-token decode over a context, K/V rotated likewise;
- decode steps of the same shapes written as engines write them (`measure_lean_decode`);
- whole steps of a Llama-3.1-8B-shaped transformers model (random bf16 weights): prefill with
  the LM head on each prompt's last token, and one-token decode over a static cache, run eagerly
  and replayed from a CUDA graph.

The comparison prices each case with `analytic.op_time` / `units_time` under an `execution`
that says how the measured code ran (transformers eager: every exported op a kernel, launched
asynchronously; `graph`: the same kernels replayed), not the engine fusion the catalog profile
assumes for serving — the per-op model is what is checked, with the profile's own figures.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

# Llama-3.1-8B (hidden 4096) and -70B (hidden 8192) linear layers as transformers runs them: [N, K]
GEMM_NK = [(4096, 4096), (1024, 4096), (14336, 4096), (4096, 14336), (128256, 4096), (8192, 8192), (28672, 8192), (8192, 28672)]
GEMM_M = [1, 8, 32, 128, 512, 2048, 8192]
PREFILL = [(1, 128), (1, 512), (1, 2048), (1, 8192), (4, 1024), (16, 512)]  # (prompts, tokens)
DECODE = [(1, 1024), (8, 1024), (32, 1024), (128, 1024), (8, 4096), (64, 4096)]  # (sequences, context)
ATTN_PREFILL = [(1, 512), (1, 2048), (1, 8192), (8, 1024)]
ATTN_DECODE = [(1, 1024), (8, 1024), (32, 1024), (128, 1024), (8, 4096), (64, 4096)]
HEADS, KV_HEADS, HEAD_DIM = 32, 8, 128  # Llama-3.1-8B attention
_INNER = 20  # ops timed 20 at a time: one op's host launch (~7 µs) would dominate a small kernel
DEV = ["cuda"]  # `measure --device cpu` only checks this script on a host without a GPU
LLAMA_8B = {
    "hidden_size": 4096,
    "intermediate_size": 14336,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "num_hidden_layers": 32,
    "vocab_size": 128256,
    "max_position_embeddings": 16384,
    "rms_norm_eps": 1e-5,
    "rope_theta": 500000.0,
    "tie_word_embeddings": False,
}


# ---------------------------------------------------------------- measuring (GPU host)


def _events_median(fn, reps: int, warmup: int = 3, inner: int = 1) -> float:
    """Median seconds of `fn` between CUDA events (the device's timeline: host gaps included).

    inner: calls enqueued back to back between one pair of events (the figure is per call): for
    kernels shorter than the host's own launch of them, which a single call would time instead.
    """
    import torch

    for _ in range(warmup):
        fn()
    out = []
    if DEV[0] == "cpu":
        for _ in range(reps):
            t0 = time.perf_counter()
            fn()
            out.append(time.perf_counter() - t0)
        return statistics.median(out)
    torch.cuda.synchronize()
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        for _ in range(inner):
            fn()
        b.record()
        b.synchronize()
        out.append(a.elapsed_time(b) / 1e3 / inner)
    return statistics.median(out)


def _pool(make, nbytes_each: float, l2: int) -> list:
    """Enough copies of a tensor for their total to be 4× the L2: each call reads from HBM."""
    return [make() for _ in range(max(2, int(4 * l2 // max(nbytes_each, 1)) + 1))]


def _rotating(pool: list, fn):
    i = [0]

    def call():
        i[0] = (i[0] + 1) % len(pool)
        return fn(pool[i[0]])

    return call


def measure_launch(torch) -> dict:
    a = torch.zeros(1, device=DEV[0])
    n = 2000

    def kernels():
        for _ in range(n):
            a.add_(1)

    kernels()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    kernels()
    torch.cuda.synchronize()
    host = (time.perf_counter() - t0) / n
    replay = _events_median(_graphed(torch, kernels), reps=5) / n
    return {"host_per_kernel_s": host, "graph_per_kernel_s": replay, "kernels": n}


def measure_copy(torch) -> dict:
    n = 1 << 28  # 1 GiB of fp32
    src, dst = torch.ones(n, device=DEV[0]), torch.empty(n, device=DEV[0])
    s = _events_median(lambda: dst.copy_(src), reps=10)
    return {"bytes": 2 * 4 * n, "seconds": s, "bytes_per_s": 2 * 4 * n / s}


def measure_gemms(torch, l2: int, ms: list[int]) -> list[dict]:
    import torch.nn.functional as F

    out = []
    for n, k in GEMM_NK:
        pool = _pool(lambda n=n, k=k: torch.randn(n, k, device=DEV[0], dtype=torch.bfloat16), 2 * n * k, l2)
        for m in ms:
            x = torch.randn(m, k, device=DEV[0], dtype=torch.bfloat16)
            s = _events_median(_rotating(pool, lambda w, x=x: F.linear(x, w)), reps=10, inner=_INNER)
            out.append({"m": m, "n": n, "k": k, "seconds": s, "tflops": 2 * m * n * k / s / 1e12})
        del pool
        torch.cuda.empty_cache()
    return out


def measure_attention(torch, l2: int) -> list[dict]:
    import torch.nn.functional as F

    out = []
    bf = torch.bfloat16
    for b, t in ATTN_PREFILL:
        q = torch.randn(b, HEADS, t, HEAD_DIM, device=DEV[0], dtype=bf)
        kv = _pool(lambda b=b, t=t: (torch.randn(b, KV_HEADS, t, HEAD_DIM, device=DEV[0], dtype=bf),) * 2, 4 * b * KV_HEADS * t * HEAD_DIM, l2)
        s = _events_median(_rotating(kv, lambda p, q=q: F.scaled_dot_product_attention(q, p[0], p[1], is_causal=True, enable_gqa=True)), reps=10, inner=_INNER)
        out.append({"phase": "prefill", "batch": b, "q": t, "kv": t, "seconds": s})
    for b, c in ATTN_DECODE:
        q = torch.randn(b, HEADS, 1, HEAD_DIM, device=DEV[0], dtype=bf)
        kv = _pool(
            lambda b=b, c=c: (torch.randn(b, KV_HEADS, c, HEAD_DIM, device=DEV[0], dtype=bf), torch.randn(b, KV_HEADS, c, HEAD_DIM, device=DEV[0], dtype=bf)),
            4 * b * KV_HEADS * c * HEAD_DIM,
            l2,
        )
        s = _events_median(_rotating(kv, lambda p, q=q: F.scaled_dot_product_attention(q, p[0], p[1], enable_gqa=True)), reps=10, inner=_INNER)
        out.append({"phase": "decode", "batch": b, "q": 1, "kv": c, "seconds": s})
        del kv
    torch.cuda.empty_cache()
    return out


def _graphed(torch, fn):
    """`fn` captured into a CUDA graph after warm-up on a side stream; returns its replay."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        fn()
    return g.replay


def measure_steps(torch, quick: bool) -> tuple[list[dict], list[str]]:
    import logging
    import warnings

    from transformers import LlamaConfig, LlamaForCausalLM, StaticCache

    logging.getLogger("transformers").setLevel(logging.ERROR)
    torch.manual_seed(0)
    torch.set_default_dtype(torch.bfloat16)
    with torch.device(DEV[0]), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = LlamaForCausalLM(LlamaConfig(**LLAMA_8B, attn_implementation="sdpa")).eval()
    torch.set_default_dtype(torch.float32)
    vocab = LLAMA_8B["vocab_size"]
    rows, errors = [], []
    for b, t in PREFILL[:3] if quick else PREFILL:
        ids = torch.randint(0, vocab, (b, t), device=DEV[0])
        with torch.inference_mode():
            s = _events_median(lambda ids=ids: model(input_ids=ids, use_cache=False, logits_to_keep=1), reps=5)
        rows.append({"phase": "prefill", "batch": b, "tokens": t, "eager_s": s})
    for b, c in DECODE[:3] if quick else DECODE:
        ids = torch.randint(0, vocab, (b, 1), device=DEV[0])
        pos = torch.tensor([c], device=DEV[0])
        cache = StaticCache(config=model.config, max_cache_len=c + 1)

        def step(ids=ids, pos=pos, cache=cache):
            return model(input_ids=ids, past_key_values=cache, cache_position=pos, use_cache=True)

        row = {"phase": "decode", "batch": b, "ctx": c}
        with torch.inference_mode():
            row["eager_s"] = _events_median(step, reps=10)
            try:
                row["graph_s"] = _events_median(_graphed(torch, step), reps=20)
            except Exception as e:  # say why, keep the eager figure
                errors.append(f"decode b{b} ctx{c} CUDA graph: {type(e).__name__}: {str(e).splitlines()[0][:200]}")
        rows.append(row)
        del cache
        torch.cuda.empty_cache()
    return rows, errors


def measure_lean_decode(torch, cases: list[tuple[int, int]]) -> list[dict]:
    """Decode steps of a Llama-3.1-8B-shaped stack written as engines write it (gpt-fast style): one
    QKV GEMM, one gate-up GEMM, K/V written into a static [B, KV, ctx+1, D] cache and read where it
    lies by SDPA's GQA (no repeated heads, no mask), replayed from a CUDA graph. Its element-wise
    ops stay separate kernels (nothing compiled): between `fusion: none` and `engine`."""
    import torch.nn.functional as F

    c, bf = LLAMA_8B, torch.bfloat16
    hid, inter, layers = c["hidden_size"], c["intermediate_size"], c["num_hidden_layers"]
    qkv_n = (HEADS + 2 * KV_HEADS) * HEAD_DIM
    w = lambda *shape: torch.randn(*shape, device=DEV[0], dtype=bf) * 0.02  # noqa: E731
    weights = [(w(qkv_n, hid), w(hid, HEADS * HEAD_DIM), w(2 * inter, hid), w(hid, inter)) for _ in range(layers)]
    emb, head = w(c["vocab_size"], hid), w(c["vocab_size"], hid)
    gain = torch.ones(hid, device=DEV[0], dtype=bf)

    def rms(x):
        return (x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + 1e-5)).to(bf) * gain

    def rope(x, cos, sin):  # x: [B, h, 1, D]
        x1, x2 = x.chunk(2, -1)
        return x * cos + torch.cat((-x2, x1), -1) * sin

    out = []
    for b, ctx in cases:
        caches = [
            (torch.zeros(b, KV_HEADS, ctx + 1, HEAD_DIM, device=DEV[0], dtype=bf), torch.zeros(b, KV_HEADS, ctx + 1, HEAD_DIM, device=DEV[0], dtype=bf))
            for _ in range(layers)
        ]
        ids = torch.randint(0, c["vocab_size"], (b, 1), device=DEV[0])
        pos = torch.tensor([ctx], device=DEV[0])
        ang = ctx / (c["rope_theta"] ** (torch.arange(0, HEAD_DIM, 2, device=DEV[0]).float() / HEAD_DIM))
        cos, sin = (torch.cat((f(ang), f(ang))).to(bf) for f in (torch.cos, torch.sin))

        def step(b=b, caches=caches, ids=ids, pos=pos, cos=cos, sin=sin):
            h = emb[ids]  # [B, 1, hidden]
            for (wqkv, wo, w13, w2), (kc, vc) in zip(weights, caches):
                q, k, v = F.linear(rms(h), wqkv).split([HEADS * HEAD_DIM, KV_HEADS * HEAD_DIM, KV_HEADS * HEAD_DIM], -1)
                q = rope(q.view(b, 1, HEADS, HEAD_DIM).transpose(1, 2), cos, sin)
                k = rope(k.view(b, 1, KV_HEADS, HEAD_DIM).transpose(1, 2), cos, sin)
                kc.index_copy_(2, pos, k)
                vc.index_copy_(2, pos, v.view(b, 1, KV_HEADS, HEAD_DIM).transpose(1, 2))
                o = F.scaled_dot_product_attention(q, kc, vc, enable_gqa=True)  # [B, H, 1, D]
                h = h + F.linear(o.transpose(1, 2).reshape(b, 1, HEADS * HEAD_DIM), wo)
                g, u = F.linear(rms(h), w13).chunk(2, -1)
                h = h + F.linear(F.silu(g) * u, w2)
            return F.linear(rms(h), head)  # [B, 1, vocab]

        with torch.inference_mode():
            out.append({"phase": "decode", "batch": b, "ctx": ctx, "lean_graph_s": _events_median(_graphed(torch, step), reps=20)})
        del caches
        torch.cuda.empty_cache()
    return out


def measure(quick: bool, device: str = "cuda", out: Path | None = None, sections: set[str] | None = None) -> dict:
    """Every section in turn, `out` rewritten after each (a run cut short keeps what it measured)."""
    import torch
    import transformers

    DEV[0] = device
    if device == "cpu":  # a dry run of this script: sizes shrink, figures mean nothing
        return {
            "device": {"name": "cpu (dry run)", "torch": torch.__version__},
            "errors": [],
            "gemm": measure_gemms(torch, 1 << 20, [1, 8]),
            "attention": measure_attention(torch, 1 << 20),
        }
    if not torch.cuda.is_available():
        sys.exit("gpu_measure.py measure: torch sees no CUDA device here; run it on the GPU host.")
    props = torch.cuda.get_device_properties(0)
    l2 = int(getattr(props, "L2_cache_size", 50 << 20))
    doc: dict = {
        "device": {
            "name": torch.cuda.get_device_name(0),
            "sms": props.multi_processor_count,
            "memory": props.total_memory,
            "l2": l2,
            "torch": torch.__version__,
            "cuda": torch.version.cuda,
            "transformers": transformers.__version__,
        },
        "errors": [],
    }
    say = lambda s: print(f"[{time.strftime('%H:%M:%S')}] {s}", file=sys.stderr, flush=True)  # noqa: E731
    for name, fn in [
        ("launch", lambda: measure_launch(torch)),
        ("copy", lambda: measure_copy(torch)),
        ("gemm", lambda: measure_gemms(torch, l2, GEMM_M[:4] if quick else GEMM_M)),
        ("attention", lambda: measure_attention(torch, l2)),
        ("lean", lambda: measure_lean_decode(torch, DECODE[:3] if quick else DECODE)),
    ]:
        if sections and name not in sections:
            continue
        say(name)
        try:
            doc[name] = fn()
        except Exception as e:
            doc["errors"].append(f"{name}: {type(e).__name__}: {str(e).splitlines()[0][:300]}")
        if out:
            out.write_text(json.dumps(doc, indent=1))
    if sections and "steps" not in sections:
        return doc
    say("whole steps")
    try:
        doc["steps"], errs = measure_steps(torch, quick)
        doc["errors"] += errs
    except Exception as e:
        doc["errors"].append(f"steps: {type(e).__name__}: {str(e).splitlines()[0][:300]}")
    return doc


# ---------------------------------------------------------------- predicting (anywhere)


def _ratio_row(what: str, case: str, pred: float, meas: float) -> dict:
    return {"what": what, "case": case, "predicted_ms": pred * 1e3, "measured_ms": meas * 1e3, "ratio": pred / meas}


def compare(doc: dict, profile_name: str) -> list[dict]:
    from hetc.cluster import load_profile
    from hetc.partitioner.profiling import hf_steps, microbench
    from hetc.partitioner.cost_models.analytic import Step, cost_params, op_time, units_time
    from hetc.partitioner.profiling.probe import capture_config
    from hetc.stage import select_at

    prof = load_profile(profile_name)
    ex = prof.execution
    rows = []
    if "copy" in doc:
        rows.append(_ratio_row("copy", "1 GiB", doc["copy"]["bytes"] / (prof.memory_bandwidth * prof.efficiency.memory), doc["copy"]["seconds"]))
    if "launch" in doc:
        rows.append(_ratio_row("launch (host)", "per kernel", prof.launch_overhead, doc["launch"]["host_per_kernel_s"]))
        rows.append(_ratio_row("kernel (graph)", "per kernel", ex.kernel_overhead, doc["launch"]["graph_per_kernel_s"]))
    cp = cost_params(prof, "bf16")
    for g in doc.get("gemm", []):
        rec, step = microbench.matmul_record(g["m"], g["n"], g["k"], "bf16")
        rows.append(_ratio_row("gemm", f"{g['m']}×{g['n']}×{g['k']}", op_time(rec, cp, step) + ex.kernel_overhead, g["seconds"]))
    for a in doc.get("attention", []):
        s = microbench.AttnShape(a["batch"], HEADS, KV_HEADS, HEAD_DIM, a["q"], a["kv"], a["phase"] == "prefill")
        rec, step, kv = microbench.attention_record(s, "bf16")
        rows.append(
            _ratio_row(f"attention ({a['phase']})", f"b{a['batch']} q{a['q']} kv{a['kv']}", op_time(rec, cp, step, kv) + ex.kernel_overhead, a["seconds"])
        )
    if doc.get("steps") or doc.get("lean"):
        cfg = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "torch_dtype": "bfloat16", **LLAMA_8B}
        units = capture_config(cfg, dtype="bf16")
        cut = select_at([u.kind for u in units])
        # transformers runs every exported op as its own kernel; `graph`: the same kernels replayed
        runs = {
            how: prof.model_copy(update={"execution": ex.model_copy(update={"fusion": "none", "graphs": graphs})})
            for how, graphs in (("eager", "none"), ("graph", "all"))
        }

        def predict(p, step: Step) -> float:  # no step_overhead: a bare forward has no scheduler
            kw = {"dtype": "bf16", "kv_dtype": "bf16"}
            return units_time(units[:cut], p, step, **kw) + units_time(units[cut:], p, Step(step.seqs, step.seqs, 0.0), **kw)

        for r in doc.get("steps", []):
            if r["phase"] == "prefill":
                step, case = hf_steps.prefill_step(r["batch"], r["tokens"]), f"b{r['batch']} T={r['tokens']}"
            else:
                step, case = hf_steps.decode_step(r["batch"], r["ctx"]), f"b{r['batch']} L={r['ctx']}"
            for how in ("eager", "graph"):
                if f"{how}_s" in r:
                    rows.append(_ratio_row(f"{r['phase']} step ({how})", case, predict(runs[how], step), r[f"{how}_s"]))
        for r in doc.get("lean", []):  # the catalog's own execution (engine fusion, decode graphs), and unfused
            step, case = hf_steps.decode_step(r["batch"], r["ctx"]), f"b{r['batch']} L={r['ctx']}"
            rows.append(_ratio_row("lean decode vs engine", case, predict(prof, step), r["lean_graph_s"]))
            rows.append(_ratio_row("lean decode vs unfused", case, predict(runs["graph"], step), r["lean_graph_s"]))
    return rows


def summary(rows: list[dict]) -> dict[str, dict]:
    out: dict[str, dict] = {}
    for what in dict.fromkeys(r["what"] for r in rows):
        errs = [abs(r["ratio"] - 1) for r in rows if r["what"] == what]
        ratios = [r["ratio"] for r in rows if r["what"] == what]
        out[what] = {
            "cases": len(errs),
            "median_error": statistics.median(errs),
            "median_ratio": statistics.median(ratios),
            "min_ratio": min(ratios),
            "max_ratio": max(ratios),
        }
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("measure")
    m.add_argument("-o", "--output", default="gpu.json")
    m.add_argument("--quick", action="store_true")
    m.add_argument("--device", default="cuda", help="cpu: a dry run of the script itself")
    m.add_argument("--sections", default=None, help="comma-separated: launch,copy,gemm,attention,lean,steps (default all)")
    c = sub.add_parser("compare")
    c.add_argument("measured")
    c.add_argument("--profile", default="h100-sxm")
    c.add_argument("--json", action="store_true")
    a = ap.parse_args()
    if a.cmd == "measure":
        doc = measure(a.quick, a.device, Path(a.output), set(a.sections.split(",")) if a.sections else None)
        Path(a.output).write_text(json.dumps(doc, indent=1))
        print(json.dumps({k: v for k, v in doc.items() if k in ("device", "errors", "copy", "launch")}, indent=1))
        return 0
    doc = json.loads(Path(a.measured).read_text())
    rows = compare(doc, a.profile)
    if a.json:
        print(json.dumps({"device": doc["device"], "profile": a.profile, "summary": summary(rows), "rows": rows}, indent=1))
        return 0
    print(f"{doc['device']['name']} (torch {doc['device']['torch']}) vs profile {a.profile}")
    for r in rows:
        print(f"  {r['what']:<26} {r['case']:<22} predicted {r['predicted_ms']:10.4f} ms  measured {r['measured_ms']:10.4f} ms  ratio {r['ratio']:.3f}")
    for what, s in summary(rows).items():
        print(
            f"{what:<26} {s['cases']:3d} cases  median |p/m−1| {s['median_error']:.1%}  ratio median "
            f"{s['median_ratio']:.3f} [{s['min_ratio']:.3f}, {s['max_ratio']:.3f}]"
        )
    for e in doc.get("errors", []):
        print(f"measurement error: {e}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
