"""`hetc serve` on a real CUDA device (no --emulate): every GPU check of the runtime in one call.

    # here (plans need ortools, which the GPU host lacks): the tiny model and the plans
    python benchmarks/gpu_serve.py prepare WORK
    # on the GPU host (benchmarks/gpu_run.sh sets up the packages and hetc), results to OUT as it goes:
    python benchmarks/gpu_serve.py check WORK -o OUT [--budget 420]

`prepare` writes WORK/tiny (the serve tests' 4-layer Llama, random fp32 weights, its BPE tokenizer)
with its fp32 plan on one h100-sxm, llama-3.1-8b plans (random bf16 weights, 512-token prompts,
128 output tokens) at batch 8 and 32 on one H100 and on one H200 (catalog profiles), and the units
of both models captured here (seeded there only when the host's torch cannot capture them).

It also writes WORK/moe-ARCH (the MoE serving tests' tiny gpt-oss, DeepSeek-V3 and Qwen3-MoE, fp32)
with their plans on one h200-sxm, and qwen3-30b-a3b plans at batch 8 and 32 (bf16).

`check` runs, in priority order, each check within its own share of the budget and OUT/gpu-serve.json
rewritten after each (a check that runs out of time says so):
  env      the host's torch, triton and card
  kernel   the paged decode kernel against SDPA over the gathered context (8B shapes), and both timed
  capture  `capture()` of every model on the host's own torch (torch.export of the dynamic token dim)
  moe      each tiny MoE model served (experts as one GEMM, decode steps replayed from CUDA graphs)
           against transformers' `generate` (its own per-expert loop) on the same GPU: token-identical
  moe30b   qwen3-30b-a3b (random bf16 weights on the GPU) as a cuda worker runs it, in process: decode
           step at batch 8 and 32 with transformers' expert loop, with the grouped GEMM, and replayed
           from CUDA graphs, against the plan's prediction; the grouped GEMM's logits against the loop's;
           one MoE block alone: its error against an fp32 product, its graphed time
  dense8b  llama-3.1-8b built the same way: its graphed decode step alone, the kernels in it
  moe30b_served  qwen3-30b-a3b under `hetc serve` (graphs on): decode steps at batch 8 and 32
  tiny     greedy completions through the `openai` client, CUDA graphs on, against transformers'
           `generate` on the same GPU (fp32, TF32 off): token-identical expected
  logits   llama-3.1-8b as a cuda worker runs it (fused projections, graphs, the kernel), in process,
           beside transformers on the same weights: logits at the prompt and 16 teacher-forced steps
  8b       decode steps at batch 8 and 32 from /metrics with graphs, then with --no-cuda-graphs
  lean     the engine-style reference step (gpu_measure.measure_lean_decode) at the served shapes
  load     one request's output tokens/s, then TTFT/TPOT at concurrency 1, 8, 32 (streaming client)
  hf       transformers' generate with a static cache and torch.compile (gpt-fast style), b1 and b8
  profile  gpu_measure.py measure --quick (GEMMs, attention, launch, graph replay) → OUT/measure.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

from serve_wait import wait_healthy  # noqa: E402  this directory: run as a script

REPO = Path(__file__).resolve().parents[1]
BATCHES = (8, 32)
PROMPT, OUTPUT = 512, 128
TEXTS = [
    "the quick brown fox jumps over the lazy dog",
    "hello world, this is hetc serving a tiny llama",
    "pipelines stream activations from stage to stage",
    "paged kv cache with blocks of sixteen tokens",
]
DEVICES = {"H200": "h200-sxm", "H100": "h100-sxm"}  # the card's name → its catalog profile
MOE_MODEL = "qwen3-30b-a3b"  # 61 GB in bf16: one H200 holds it with its KV


def _hetc(*args: str) -> None:
    subprocess.run([sys.executable, "-m", "hetc.cli", *args], cwd=REPO, check=True)


def prepare(work: Path) -> None:
    sys.path.insert(0, str(REPO))
    from tests.fixtures.serving import build_model

    work.mkdir(parents=True, exist_ok=True)
    if not (work / "tiny" / "config.json").exists():
        build_model(work / "tiny")
    for prof in DEVICES.values():
        (work / f"one-{prof}.yaml").write_text(f"name: one-{prof}\nnodes:\n  - {{name: a, device: {prof}, count: 1}}\n")
        for b in BATCHES:
            _hetc(
                "plan",
                "--profiles",
                str(work / f"one-{prof}.yaml"),
                "llama-3.1-8b",
                "--placement",
                "a:0",
                "--batch",
                str(b),
                "--input-len",
                str(PROMPT),
                "--output-len",
                str(OUTPUT),
                "-o",
                str(work / f"8b-{prof}-b{b}.json"),
            )
    _hetc(
        "plan", "--profiles", str(work / "one-h100-sxm.yaml"), str(work / "tiny"), "--dtype", "fp32", "--placement", "a:0", "-o", str(work / "tiny-plan.json")
    )
    from tests.fixtures.moe_models import ARCHS, build_moe

    for arch in ARCHS:
        if not (work / f"moe-{arch}" / "config.json").exists():
            build_moe(work / f"moe-{arch}", arch)
        one = str(work / "one-h200-sxm.yaml")
        _hetc("plan", "--profiles", one, str(work / f"moe-{arch}"), "--dtype", "fp32", "--placement", "a:0", "-o", str(work / f"moe-{arch}-plan.json"))
    for b in BATCHES:
        args = ("--placement", "a:0", "--batch", str(b), "--input-len", str(PROMPT), "--output-len", str(OUTPUT))
        _hetc("plan", "--profiles", str(work / "one-h200-sxm.yaml"), MOE_MODEL, *args, "-o", str(work / f"30b-b{b}.json"))
    _capture_entries(work)


def _archs() -> tuple[str, ...]:
    """The tiny MoE architectures of the serving tests (the repository after the installed hetc on the path)."""
    if str(REPO) not in sys.path:
        sys.path.append(str(REPO))
    from tests.fixtures.moe_models import ARCHS

    return ARCHS


def _captured(work: Path) -> list[tuple[str, str, str, Path]]:
    """(name, model, dtype, a plan of it) of every model a check serves or builds."""
    rows = [("tiny", str(work / "tiny"), "fp32", work / "tiny-plan.json"), ("8b", "llama-3.1-8b", "bf16", work / "8b-h200-sxm-b8.json")]
    rows += [(f"moe-{a}", str(work / f"moe-{a}"), "fp32", work / f"moe-{a}-plan.json") for a in _archs()]
    return rows + [("30b", MOE_MODEL, "bf16", work / "30b-b8.json")]


def _capture_entries(work: Path) -> None:
    """The captured units of every model as capture-cache entries, WORK/captures/NAME/KEY.json."""
    from hetc.partitioner.capture.capture import capture

    for name, ref, dtype, _ in _captured(work):
        folder = work / "captures" / name
        folder.mkdir(parents=True, exist_ok=True)
        for old in folder.glob("*.json"):
            old.unlink()
        os.environ["HETC_CACHE_DIR"] = str(folder)
        try:
            capture(ref, dtype=dtype, kv_dtype=dtype)
        finally:
            del os.environ["HETC_CACHE_DIR"]
        (folder / "dtype").write_text(dtype)


def _seed_capture(work: Path) -> None:
    """prepare's captures in this host's capture cache under its keys (only when the host's torch
    could not capture the models itself: `check capture` says so)."""
    from hetc.partitioner.capture import capture_cache

    for name, ref, _, _ in _captured(work):
        folder = work / "captures" / name
        dtype = (folder / "dtype").read_text()
        key = capture_cache.cache_key(ref, dtype, dtype)
        d = capture_cache.cache_dir()
        d.mkdir(parents=True, exist_ok=True)
        (d / f"{key}.json").write_bytes(next(folder.glob("*.json")).read_bytes())


class Served:
    """A `hetc serve` process for the length of a `with`."""

    def __init__(self, plan: Path, *extra: str, log: Path, start_s: float = 300):
        self.port = 18000 + random.randrange(1000)
        self.url = f"http://127.0.0.1:{self.port}"
        self.log, self.start_s = log.open("w"), start_s
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "hetc.cli", "serve", str(plan), "--port", str(self.port), "--served-model-name", "m", *extra],
            stderr=self.log,
            stdout=self.log,
            cwd=log.parent,
        )  # not the repository root: `hetc` is the installed package there

    def __enter__(self) -> Served:
        if not wait_healthy(self.url, self.proc, self.start_s):
            self.__exit__()
            raise RuntimeError(f"hetc serve did not start (log: {self.log.name})")
        return self

    def __exit__(self, *exc) -> None:
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self.log.close()

    def client(self):
        import openai

        return openai.AsyncOpenAI(base_url=f"{self.url}/v1", api_key="none", timeout=600, max_retries=0)

    def metric(self, name: str, *labels: str) -> float:
        """The sum of metric `name` over the series whose labels include every one of `labels`."""
        import urllib.request

        total = 0.0
        with urllib.request.urlopen(f"{self.url}/metrics", timeout=10) as r:
            for line in r.read().decode().splitlines():
                if line.startswith(name) and all(lab in line for lab in labels):
                    total += float(line.rsplit(" ", 1)[1])
        return total

    def decode_steps(self) -> tuple[float, float, float]:
        """(seconds, count, graph replays) of stage 0's decode steps so far."""
        d = ('phase="decode"', 'stage="0.0"')
        return (
            self.metric("hetc_stage_step_seconds_sum", *d),
            self.metric("hetc_stage_step_seconds_count", *d),
            self.metric("hetc_stage_cuda_graph_steps_total", 'stage="0.0"'),
        )


async def _complete(srv: Served, prompts: list, max_tokens: int) -> list[list[int]]:
    """Greedy completions of every prompt at once through the openai client; their token ids."""
    cl = srv.client()
    rs = await asyncio.gather(
        *(
            cl.completions.create(model="m", prompt=p, max_tokens=max_tokens, temperature=0, extra_body={"ignore_eos": True, "return_token_ids": True})
            for p in prompts
        )
    )
    return [r.choices[0].model_extra["token_ids"] for r in rs]


async def _load(srv: Served, concurrency: int, rounds: int, g: random.Random) -> dict:
    """`concurrency` streaming clients, `rounds` requests each: TTFT and TPOT p50/p99 (ms)."""
    cl = srv.client()
    ttft, tpot = [], []

    async def one():
        for _ in range(rounds):
            t0 = time.perf_counter()
            first = last = None
            stream = await cl.completions.create(
                model="m",
                prompt=[g.randrange(3, 128000) for _ in range(PROMPT)],
                max_tokens=OUTPUT,
                temperature=0,
                stream=True,
                # token ids: a chunk per token even where its text is empty
                extra_body={"ignore_eos": True, "return_token_ids": True},
            )
            async for chunk in stream:
                if chunk.choices:
                    last = time.perf_counter()
                    first = first or last
            ttft.append((first - t0) * 1e3)
            tpot.append((last - first) / (OUTPUT - 1) * 1e3)  # ignore_eos: OUTPUT tokens each

    await asyncio.gather(*(one() for _ in range(concurrency)))
    q = lambda xs, p: statistics.quantiles(xs, n=100)[p - 1] if len(xs) > 1 else xs[0]  # noqa: E731
    return {
        "concurrency": concurrency,
        "requests": len(ttft),
        "ttft_p50_ms": q(ttft, 50),
        "ttft_p99_ms": q(ttft, 99),
        "tpot_p50_ms": q(tpot, 50),
        "tpot_p99_ms": q(tpot, 99),
    }


# ---------------------------------------------------------------- checks (GPU host)


def check_env(work: Path, out: Path, res: dict) -> dict:
    import torch
    import transformers

    try:
        import triton

        tv = triton.__version__
    except ImportError:
        tv = None
    return {
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "triton": tv,
        "transformers": transformers.__version__,
        "device": torch.cuda.get_device_name(0),
        "memory_gib": torch.cuda.get_device_properties(0).total_memory / 2**30,
    }


def check_kernel(work: Path, out: Path, res: dict) -> dict:
    """The decode kernel against the gather at Llama-3.1-8B's attention (32 heads, 8 KV heads, 128)."""
    import torch

    from hetc.runtime.kv_cache import DecodeMeta, gather_decode
    from hetc.backends.cuda.paged_decode import paged_decode

    torch.manual_seed(0)
    rows = []
    for b, ctx in ((1, 576), (8, 576), (32, 576), (8, 4096)):
        nb = b * -(-ctx // 32) + 1
        kp = torch.randn(nb * 32, 8, 128, device="cuda", dtype=torch.bfloat16)
        vp = torch.randn_like(kp)
        perm = (torch.randperm(nb - 1) + 1).tolist()  # blocks scattered, block 0 the padding block
        per = -(-ctx // 32)
        tables = [perm[i * per : (i + 1) * per] for i in range(b)]
        meta = DecodeMeta.build([ctx - 1 - 7 * i % 32 for i in range(b)], tables, rows=b, width=per).to(torch.device("cuda"))
        q = torch.randn(b, 32, 128, device="cuda", dtype=torch.bfloat16)
        ref = gather_decode(q, kp, vp, meta, 128**-0.5, 32)
        got = paged_decode(q, kp, vp, meta.block_table, meta.context_lens, 128**-0.5, 32)
        t = {}
        for name in ("kernel", "gather_sdpa"):

            def fn(name=name, q=q, kp=kp, vp=vp, meta=meta):
                if name == "kernel":
                    return paged_decode(q, kp, vp, meta.block_table, meta.context_lens, 128**-0.5, 32)
                return gather_decode(q, kp, vp, meta, 128**-0.5, 32)

            for _ in range(3):
                fn()
            e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            e0.record()
            for _ in range(50):
                fn()
            e1.record()
            torch.cuda.synchronize()
            t[f"{name}_us"] = e0.elapsed_time(e1) / 50 * 1e3
        rows.append({"batch": b, "ctx": ctx, "max_abs_diff": (got.float() - ref.float()).abs().max().item(), **t})
        print(json.dumps(rows[-1]), flush=True)
    return {"cases": rows, "ok": all(r["max_abs_diff"] < 2e-2 for r in rows)}


def check_capture(work: Path, out: Path, res: dict) -> dict:
    """Both models captured by the host's torch; where that fails, prepare's units are seeded so the
    serving checks still run (and the failure is the result)."""
    from hetc.partitioner.capture.capture import capture

    got: dict = {}
    for name, ref, dtype, plan in _captured(work):
        t0 = time.perf_counter()
        try:
            c = capture(ref, dtype=dtype, kv_dtype=dtype)
            want = json.loads(plan.read_text())["model"]["graph_hash"]
            got[name] = {"ok": c.graph_hash == want, "units": len(c.units), "same_hash_as_prepare": c.graph_hash == want, "s": time.perf_counter() - t0}
        except Exception as e:  # noqa: BLE001 — the result is the error
            got[name] = {"ok": False, "error": f"{type(e).__name__}: {str(e)[:600]}"}
    if not all(v["ok"] for v in got.values()):
        _seed_capture(work)
        got["seeded"] = True
    return got


def _served_vs_generate(model_dir: Path, plan: Path, log: Path, **load) -> dict:
    """Greedy completions of TEXTS from `hetc serve` (CUDA graphs on), each alone and all at once,
    against transformers' `generate` on the same GPU (fp32, TF32 off)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.backends.cuda.matmul.allow_tf32 = False
    tok = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32, **load).cuda().eval()
    lengths = [24, 9, 31, 16]
    ref = []
    for text, n in zip(TEXTS, lengths):
        ids = tok(text, return_tensors="pt").input_ids.cuda()
        g = model.generate(ids, max_new_tokens=n, do_sample=False, min_new_tokens=n)
        ref.append(g[0, ids.shape[1] :].tolist())
    del model
    torch.cuda.empty_cache()
    with Served(plan, "--model-dir", str(model_dir), log=log) as srv:
        got = []
        for text, n in zip(TEXTS, lengths):  # each alone, then all at once: graphs of 1 and of 4
            got.append(asyncio.run(_complete(srv, [text], n))[0])
        together = asyncio.run(_complete(srv, TEXTS, max(lengths)))
        _, steps, graphs = srv.decode_steps()
    return {
        "identical_alone": [s == r for s, r in zip(got, ref)],
        "identical_together": [s[: len(r)] == r for s, r in zip(together, ref)],
        "decode_steps": steps,
        "graph_steps": graphs,
        "served": got,
        "hf": ref,
    }


def check_tiny(work: Path, out: Path, res: dict) -> dict:
    return _served_vs_generate(work / "tiny", work / "tiny-plan.json", out / "serve-tiny.log")


def check_moe(work: Path, out: Path, res: dict) -> dict:
    """Each tiny MoE model served: its experts as one batched GEMM (fp32), decode replayed from graphs;
    the reference runs transformers' own per-expert loop."""
    got = {}
    for arch in _archs():
        try:
            got[arch] = _served_vs_generate(work / f"moe-{arch}", work / f"moe-{arch}-plan.json", out / f"serve-moe-{arch}.log", experts_implementation="eager")
        except Exception as e:  # noqa: BLE001 — the next architecture still runs
            got[arch] = {"error": f"{type(e).__name__}: {str(e)[:600]}"}
        print(json.dumps({arch: {k: v for k, v in got[arch].items() if k not in ("served", "hf")}}), flush=True)
    return got


def check_logits(work: Path, out: Path, res: dict) -> dict:
    """Llama-3.1-8B (seeded random bf16) as a cuda worker runs it (fused projections, decode replayed
    from CUDA graphs, the paged decode kernel) beside transformers on the same weights: logits at the
    last prompt position and at 16 greedy steps, both fed transformers' tokens (teacher-forced)."""
    import torch
    from transformers import LlamaForCausalLM

    from hetc.partitioner.capture.capture import load_hf_config
    from hetc.plan import load_plan
    from hetc.runtime.cuda_graphs import DecodeGraphs, GraphedStage
    from hetc.runtime.model_runner import StageModel
    from hetc.weights import RandomWeights

    cfg, _ = load_hf_config("llama-3.1-8b")
    units = load_plan(str(work / "8b-h200-sxm-b8.json")).units
    with torch.device("meta"):
        model = LlamaForCausalLM(cfg).to(torch.bfloat16)
    w = RandomWeights(std=getattr(cfg, "initializer_range", 0.02))
    params = {name: w.get(name, p.shape, torch.bfloat16).cuda() for name, p in model.named_parameters()}

    given = SimpleNamespace(get=lambda name, shape, dtype: params[name])
    stage = StageModel(cfg, units, 0, len(units) - 1, dtype=torch.bfloat16, kv_dtype=torch.bfloat16, num_blocks=64, weights=given, device="cuda", fuse=True)
    graphs = DecodeGraphs(stage, max_batch=4, max_context=2048, hidden=cfg.hidden_size, dtype=torch.bfloat16)
    graphs.capture()
    hetc = GraphedStage(stage, graphs)
    model.load_state_dict(params, assign=True, strict=False)
    model.model.rotary_emb = type(model.model.rotary_emb)(config=cfg).cuda()
    model.eval()
    g = torch.Generator().manual_seed(1)
    prompts = torch.randint(3, 128000, (4, 64), generator=g).cuda()
    with torch.inference_mode():
        ref = model.generate(prompts, max_new_tokens=16, min_new_tokens=16, do_sample=False, output_logits=True, return_dict_in_generate=True)
        tokens = ref.sequences[:, 64:]  # [4, 16]
        tables = [[1 + 8 * i + j for j in range(8)] for i in range(4)]  # 8 blocks each, block 0 the padding block
        got = [hetc(prompts.reshape(-1), hetc.step_meta([0] * 4, [64] * 4, tables, [True] * 4))]
        for i in range(15):
            meta = hetc.step_meta([64 + i] * 4, [1] * 4, tables, [True] * 4)
            got.append(hetc(tokens[:, i], meta).clone())
    rows, replayed = [], hetc.replayed
    for step, (a, b) in enumerate(zip(got, ref.logits)):
        b = b.float()
        top2 = b.topk(2).values
        agree = (a.argmax(-1) == b.argmax(-1)).tolist()
        rows.append({"step": step, "max_abs_diff": (a - b).abs().max().item(), "argmax_agree": agree, "ref_top2_gap": (top2[:, 0] - top2[:, 1]).tolist()})
    return {
        "steps": rows,
        "decode_replayed": replayed,
        "logit_scale": ref.logits[0].float().abs().max().item(),
        "agree": sum(sum(r["argmax_agree"]) for r in rows),
        "of": 4 * len(rows),
    }


def _time_steps(fn, *args, n: int = 20) -> float:
    """Mean ms of `fn(*args)` over n calls after 3 warm-ups (CUDA events)."""
    import torch

    for _ in range(3):
        fn(*args)
    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    e0.record()
    for _ in range(n):
        fn(*args)
    e1.record()
    torch.cuda.synchronize()
    return e0.elapsed_time(e1) / n


def _moe_layer(stage) -> list[dict]:
    """One MoE block of the stage alone, at each batch: the grouped GEMM's and the loop's outputs
    against an fp32 product of the same routed experts (relative error), and the block's time
    replayed from a CUDA graph (router, sort, both grouped GEMMs, the weighted sum)."""
    import torch

    from hetc.backends.experts import ExpertsKernel, set_experts_kernel

    layer = min(stage.moe_layers)
    mlp = stage.mods[f"mlp{layer}"]
    ex = mlp.experts
    rows = []
    for n in BATCHES:
        h = torch.randn(n, ex.gate_up_proj.shape[-1], dtype=torch.bfloat16, device="cuda")
        with torch.inference_mode():
            _, w, idx = mlp.gate(h)  # [n, K] routing weights and expert ids
            got = {}
            for kernel in (ExpertsKernel.GROUPED, ExpertsKernel.LOOP):
                set_experts_kernel(ex, kernel)
                got[kernel] = ex(h, idx, w).float()
            set_experts_kernel(ex, ExpertsKernel.GROUPED)
            gu = torch.einsum("nkod,nd->nko", ex.gate_up_proj[idx].float(), h.float())  # [n, K, 2I]
            act = ex._apply_gate(gu)
            ref = (torch.einsum("nkdi,nki->nkd", ex.down_proj[idx].float(), act) * w.float()[..., None]).sum(1)
            x = h.unsqueeze(0).clone()
            s = torch.cuda.Stream()
            s.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(s):
                for _ in range(3):
                    mlp(x)
            torch.cuda.current_stream().wait_stream(s)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                mlp(x)
        norm = ref.norm().item()
        rows.append(
            {
                "batch": n,
                "layer": layer,
                "grouped_rel_err": (got[ExpertsKernel.GROUPED] - ref).norm().item() / norm,
                "loop_rel_err": (got[ExpertsKernel.LOOP] - ref).norm().item() / norm,
                "block_graphed_us": _time_steps(graph.replay, n=50) * 1e3,
            }
        )
        print(json.dumps(rows[-1]), flush=True)
    return rows


def _stage(model: str, plan: Path, blocks: int):
    """The whole model as one cuda stage, as a worker builds it (fused projections, static experts,
    random weights drawn on the GPU)."""
    import torch

    from hetc.partitioner.capture.capture import load_hf_config
    from hetc.plan import load_plan
    from hetc.runtime.model_runner import StageModel
    from hetc.weights import RandomWeights

    cfg, _ = load_hf_config(model)
    units = load_plan(str(plan)).units
    bf16 = torch.bfloat16
    w = RandomWeights(device="cuda")
    return cfg, StageModel(cfg, units, 0, len(units) - 1, dtype=bf16, kv_dtype=bf16, num_blocks=blocks, weights=w, device="cuda", fuse=True)


def _kernels(fn, *args) -> dict:
    """The GPU kernels one call of fn(*args) runs (a graph replay's too): count, their summed
    time, and the call's wall time, from torch.profiler (CUPTI)."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    fn(*args)
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        t0 = time.perf_counter()
        fn(*args)
        torch.cuda.synchronize()
        wall = time.perf_counter() - t0
    ks = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    return {"kernels": len(ks), "kernel_sum_ms": sum(e.device_time for e in ks) / 1e3, "wall_ms": wall * 1e3}


def _graphed_steps(cfg, stage, rows: list[dict], per: int) -> float:
    """Each row's decode step (batch row["batch"], context row["context"]) replayed from CUDA graphs:
    its time, the kernels in it, and the time over the plan's prediction. Returns the capture's seconds."""
    import torch

    from hetc.runtime.cuda_graphs import DecodeGraphs, GraphedStage

    t0 = time.perf_counter()
    graphs = DecodeGraphs(stage, max_batch=max(BATCHES), max_context=2048, hidden=cfg.hidden_size, dtype=torch.bfloat16)
    graphs.capture()
    graphed = GraphedStage(stage, graphs)
    capture_s = time.perf_counter() - t0
    g = torch.Generator().manual_seed(1)
    for row in rows:
        b, ctx = row["batch"], row["context"]
        tables = [[1 + i * per + j for j in range(per)] for i in range(b)]
        x = torch.randint(3, cfg.vocab_size, (b,), generator=g).cuda()
        step = graphed.step_meta([ctx] * b, [1] * b, tables, [True] * b)
        row["graphed_ms"] = _time_steps(graphed, x, step)
        row["replayed"] = graphed.replayed
        try:
            row["graph_kernels"] = _kernels(graphed.graphs.graphs[step.size].replay)
        except Exception as e:  # noqa: BLE001 — the timing above stands without it
            row["graph_kernels"] = {"error": f"{type(e).__name__}: {str(e)[:300]}"}
        row["graphed_over_predicted"] = row["graphed_ms"] / row["predicted_ms"]  # predicted: the hetc engine's host step overhead included
        print(json.dumps(row), flush=True)
    return capture_s


_CTX, _PER = PROMPT + OUTPUT // 2, -(-(PROMPT + OUTPUT // 2 + 1) // 16)  # a decode step mid-output; its blocks per sequence


def _predicted(plan: Path) -> float:
    return json.loads(plan.read_text())["pipelines"][0]["stages"][0]["predicted_ms"]["decode"]


def check_moe30b(work: Path, out: Path, res: dict) -> dict:
    """Qwen3-30B-A3B as a cuda worker runs it (one stage, fused projections, the paged decode kernel),
    weights random on the GPU: the decode step at each batch with transformers' per-expert loop
    (eager, what a MoE stage ran before), with the grouped GEMM (eager), and replayed from CUDA
    graphs; the grouped GEMM's logits against the loop's on one step; the plans' predictions."""
    import torch

    from hetc.backends.experts import ExpertsKernel

    t0 = time.perf_counter()
    cfg, stage = _stage(MOE_MODEL, work / "30b-b8.json", 1 + max(BATCHES) * _PER)
    doc: dict = {"build_s": time.perf_counter() - t0, "param_gb": stage.param_bytes / 1e9, "kernel": str(stage.experts_kernel), "rows": []}
    g = torch.Generator().manual_seed(0)
    for b in BATCHES:
        tables = [[1 + i * _PER + j for j in range(_PER)] for i in range(b)]
        x = torch.randint(3, cfg.vocab_size, (b,), generator=g).cuda()
        meta = stage.step_meta([_CTX] * b, [1] * b, tables, [True] * b)
        row: dict = {"batch": b, "context": _CTX}
        with torch.inference_mode():
            grouped = stage(x, meta).clone()
            row["grouped_eager_ms"] = _time_steps(stage, x, meta)
            stage.static_experts(ExpertsKernel.LOOP)
            loop = stage(x, meta)
            row["loop_eager_ms"] = _time_steps(stage, x, meta)
            stage.static_experts(ExpertsKernel.GROUPED)
        row["logits_max_abs_diff"] = (grouped - loop).abs().max().item()
        row["logit_scale"] = loop.abs().max().item()
        row["argmax_agree"] = (grouped.argmax(-1) == loop.argmax(-1)).float().mean().item()
        row["predicted_ms"] = _predicted(work / f"30b-b{b}.json")
        doc["rows"].append(row)
        print(json.dumps(row), flush=True)
    doc["layer"] = _moe_layer(stage)
    res["moe30b"] = doc
    doc["capture_s"] = _graphed_steps(cfg, stage, doc["rows"], _PER)
    return doc


def check_dense8b(work: Path, out: Path, res: dict) -> dict:
    """Llama-3.1-8B built the same way: its graphed decode step on the GPU alone (the served step of
    `check 8b` is this plus the worker's host work around each replay)."""
    prof = _card_profile(res)
    cfg, stage = _stage("llama-3.1-8b", work / f"8b-{prof}-b8.json", 1 + max(BATCHES) * _PER)
    rows = [{"batch": b, "context": _CTX, "predicted_ms": _predicted(work / f"8b-{prof}-b{b}.json")} for b in BATCHES]
    return {"rows": rows, "capture_s": _graphed_steps(cfg, stage, rows, _PER)}


def check_load(work: Path, out: Path, res: dict) -> dict:
    """One server with graphs: a single request's output tokens/s, then TTFT and TPOT under load."""
    prof = _card_profile(res)
    g = random.Random(1)
    with Served(work / f"8b-{prof}-b32.json", "--random-weights", "--max-num-seqs", str(max(BATCHES)), log=out / "serve-8b-load.log") as srv:
        asyncio.run(_complete(srv, [[g.randrange(3, 128000) for _ in range(PROMPT)]], 4))  # warm-up
        t0 = time.perf_counter()
        one = asyncio.run(_complete(srv, [[g.randrange(3, 128000) for _ in range(PROMPT)]], OUTPUT))
        single = {"batch": 1, "output_tok_s": len(one[0]) / (time.perf_counter() - t0)}
        return {"single": single, "load": [asyncio.run(_load(srv, c, 2 if c < 32 else 1, g)) for c in (1, 8, 32)]}


def _served_batches(srv: Served, plan_for, g: random.Random) -> list[dict]:
    rows = []
    for b in BATCHES:
        bodies = [[g.randrange(3, 128000) for _ in range(PROMPT)] for _ in range(b)]
        asyncio.run(_complete(srv, bodies[:2], 4))  # warm-up
        s0, n0, r0 = srv.decode_steps()
        t0 = time.perf_counter()
        got = asyncio.run(_complete(srv, bodies, OUTPUT))
        wall = time.perf_counter() - t0
        s1, n1, r1 = srv.decode_steps()
        pred = json.loads(plan_for(b).read_text())["pipelines"][0]["stages"][0]["predicted_ms"]["decode"]
        rows.append(
            {
                "batch": b,
                "measured_decode_ms": (s1 - s0) / max(n1 - n0, 1) * 1e3,
                "decode_steps": n1 - n0,
                "graph_steps": r1 - r0,
                "output_tok_s": sum(len(x) for x in got) / wall,
                "predicted_catalog_ms": pred,
            }
        )
        print(json.dumps(rows[-1]), flush=True)
    return rows


def _card_profile(res: dict) -> str:
    """The catalog profile of the card `check env` found (the H100's when it found none)."""
    return next((p for k, p in DEVICES.items() if k in res.get("env", {}).get("device", "")), "h100-sxm")


def check_8b(work: Path, out: Path, res: dict) -> dict:
    prof = _card_profile(res)
    plan_for = lambda b: work / f"8b-{prof}-b{b}.json"  # noqa: E731
    g = random.Random(0)
    doc: dict = {"profile": prof}
    with Served(plan_for(max(BATCHES)), "--random-weights", "--max-num-seqs", str(max(BATCHES)), log=out / "serve-8b-graphs.log") as srv:
        doc["graphs"] = _served_batches(srv, plan_for, g)
    res["8b"] = doc
    with Served(plan_for(max(BATCHES)), "--random-weights", "--max-num-seqs", str(max(BATCHES)), "--no-cuda-graphs", log=out / "serve-8b-eager.log") as srv:
        doc["eager"] = _served_batches(srv, plan_for, g)
    for a, b in zip(doc["graphs"], doc["eager"]):
        a["speedup_vs_eager"] = b["measured_decode_ms"] / a["measured_decode_ms"]
    return doc


def check_moe30b_served(work: Path, out: Path, res: dict) -> dict:
    """`hetc serve` of qwen3-30b-a3b (seeded random bf16 weights, drawn on the host), CUDA graphs on:
    decode steps at batch 8 and 32 from /metrics, against the plans' predictions."""
    plan_for = lambda b: work / f"30b-b{b}.json"  # noqa: E731
    extra = ("--random-weights", "--max-num-seqs", str(max(BATCHES)))
    with Served(plan_for(max(BATCHES)), *extra, log=out / "serve-30b.log", start_s=res["_left"]() - 30) as srv:
        return {"graphs": _served_batches(srv, plan_for, random.Random(0))}


def check_lean(work: Path, out: Path, res: dict) -> dict:
    import torch

    sys.path.insert(0, str(Path(__file__).parent))
    import gpu_measure

    rows = gpu_measure.measure_lean_decode(torch, [(b, PROMPT + OUTPUT // 2) for b in BATCHES])
    for r in rows:
        served = next((x for x in res.get("8b", {}).get("graphs", []) if x["batch"] == r["batch"]), None)
        if served:
            r["served_over_lean"] = served["measured_decode_ms"] / (r["lean_graph_s"] * 1e3)
    return {"cases": rows}


def check_hf(work: Path, out: Path, res: dict) -> dict:
    """transformers' generate, static cache, compiled (gpt-fast style): output tokens/s at b1 and b8."""
    import torch
    from transformers import LlamaForCausalLM

    from hetc.partitioner.capture.capture import load_hf_config

    cfg, _ = load_hf_config("llama-3.1-8b")
    with torch.device("cuda"):
        model = LlamaForCausalLM(cfg).to(torch.bfloat16).eval()
    rows = []
    for b in (1, 8):
        ids = torch.randint(3, 128000, (b, PROMPT), device="cuda")
        kw = dict(max_new_tokens=OUTPUT, min_new_tokens=OUTPUT, do_sample=False, cache_implementation="static")
        with torch.inference_mode():
            model.generate(ids, **kw)  # compiles
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            model.generate(ids, **kw)
            torch.cuda.synchronize()
        wall = time.perf_counter() - t0
        rows.append({"batch": b, "output_tok_s": b * OUTPUT / wall})
        print(json.dumps(rows[-1]), flush=True)
    return {"cases": rows, "note": "wall of generate: prefill included, as in the served tok/s"}


def check_profile(work: Path, out: Path, res: dict) -> dict:
    done = subprocess.run(
        [sys.executable, str(Path(__file__).parent / "gpu_measure.py"), "measure", "--quick", "-o", str(out / "measure.json")],
        capture_output=True,
        text=True,
        timeout=res["_left"](),
    )
    return {"rc": done.returncode, "tail": done.stderr[-1500:]}


CHECKS = [
    ("env", check_env, 10),
    ("kernel", check_kernel, 60),
    ("capture", check_capture, 60),
    ("tiny", check_tiny, 90),
    ("moe", check_moe, 120),
    ("moe30b", check_moe30b, 120),
    ("dense8b", check_dense8b, 60),
    ("moe30b_served", check_moe30b_served, 120),
    ("logits", check_logits, 60),
    ("8b", check_8b, 240),
    ("lean", check_lean, 40),
    ("load", check_load, 90),
    ("hf", check_hf, 100),
    ("profile", check_profile, 60),
]


def check(work: Path, out: Path, budget: float, only: list[str] | None) -> dict:
    """Each check in turn while the budget lasts (its share is a floor it must have left to start)."""
    os.environ.setdefault("HETC_CACHE_DIR", str(out / "cache"))
    end = time.monotonic() + budget
    res: dict = {"_left": lambda: max(1.0, end - time.monotonic())}
    path = out / "gpu-serve.json"
    for name, fn, need in CHECKS:
        if only and name not in only:
            continue
        left = end - time.monotonic()
        if left < need:
            res[name] = {"skipped": f"{left:.0f} s left of the budget, the check needs ~{need} s"}
        else:
            t0 = time.monotonic()
            print(f"[{time.strftime('%H:%M:%S')}] {name} ({left:.0f} s left)", file=sys.stderr, flush=True)
            try:
                res[name] = fn(work, out, res)
            except Exception as e:  # noqa: BLE001 — the next check still runs; this one says why it stopped
                import traceback

                res[name] = {**(res.get(name) or {}), "error": f"{type(e).__name__}: {str(e)[:800]}", "where": traceback.format_exc()[-1500:]}
            res[name]["seconds"] = time.monotonic() - t0
        path.write_text(json.dumps({k: v for k, v in res.items() if not k.startswith("_")}, indent=1))
        print(json.dumps({name: res[name]})[:2500], flush=True)
    return res


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("prepare")
    p.add_argument("work")
    c = sub.add_parser("check")
    c.add_argument("work")
    c.add_argument("-o", "--output", default="gpu-out", help="folder for the results and server logs")
    c.add_argument("--budget", type=float, default=420.0, help="seconds for every check together")
    c.add_argument("--only", nargs="*", choices=[n for n, _, _ in CHECKS], default=None)
    a = ap.parse_args()
    work = Path(a.work).resolve()
    if a.cmd == "prepare":
        prepare(work)
        return 0
    out = Path(a.output).resolve()
    out.mkdir(parents=True, exist_ok=True)
    check(work, out, a.budget, a.only)
    return 0


if __name__ == "__main__":
    sys.exit(main())
