"""Prefix caching served and simulated: a shared-system-prompt workload (BENCHMARKS.md "Capacity
planning and simulator fidelity").

    python benchmarks/prefix_cache.py [--runs 3] [--requests 24] [--concurrency 4] [--model small|held-out] [--profile out/profile-cpu.yaml]

Model (random fp32 weights, vocab 32000, context 2048): `small` — a Llama of hidden 256, 4 layers,
4 heads / 2 KV heads, MLP 688, so that a 1,088-token prefill takes a few hundred ms on one thread;
`held-out` — the shape of the profile's own held-out steps (hidden 768, 6 layers, 12 / 4 heads, MLP
2048: `hetc profile --validate`), whose steps are long enough that the profile's per-kernel overheads
do not dominate them.
Plan: one worker process (`hetc plan --placement h:0 --batch C --input-len 1088 --output-len 32`
on a cluster of one device of the host's measured 1-thread profile, as benchmarks/capacity_cpu.py;
no prefix in the plan, so both settings serve the same KV pool).

Workload: a closed loop of C clients, N requests; every prompt is one shared 1,024-token system
prompt followed by 64 tokens of its own; 32 output tokens, EOS ignored (as vLLM's prefix-repetition
benchmark shapes it). Each run uses a system prompt of its own, so every run starts with a cold
cache, as the simulator does.

Served: `hetc serve --emulate --threads 1` with prefix caching (the default) and with
`--no-prefix-caching`, runs interleaved on and off (one server per setting, both up for the whole
benchmark). Measured client side: TTFT p50 (request sent → first token) and output throughput
(generated tokens / first send → last token). Simulated: `hetc evaluate PLAN --concurrency C
--requests N --input-len-dist 1088 --output-len-dist 32 --prefix-len 1024 --prefix-groups 1`: its
figures with the cache, and (the same command's `no_prefix_caching_*`) without it. Target: each
prediction within 15% of the measured median.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx2 as httpx
import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))
import runtime_cpu as rc  # noqa: E402  the profile, the cluster file, the quiet-host gating
from serve_wait import wait_healthy  # noqa: E402

from hetc.host import free_port  # noqa: E402

MODELS = {
    "small": dict(hidden_size=256, intermediate_size=688, num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2),
    "held-out": dict(hidden_size=768, intermediate_size=2048, num_hidden_layers=6, num_attention_heads=12, num_key_value_heads=4),
}
VOCAB, CONTEXT = 32000, 2048
SHARED, OWN, OUTPUT = 1024, 64, 32
TARGET = 0.15


def build_model(d: Path, shape: dict) -> None:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    if (d / "model.safetensors").is_file():
        return
    torch.manual_seed(0)
    LlamaForCausalLM(LlamaConfig(vocab_size=VOCAB, max_position_embeddings=CONTEXT, **shape)).eval().save_pretrained(d)


def hetc(*args: str) -> str:
    r = subprocess.run([sys.executable, "-m", "hetc.cli", *args], cwd=REPO, capture_output=True, text=True)
    if r.returncode:
        sys.exit(f"hetc {' '.join(args)} failed:\n{r.stderr}")
    return r.stdout


class Server:
    def __init__(self, plan: Path, model: Path, limits: list[str], caching: bool):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        extra = [] if caching else ["--no-prefix-caching"]
        cmd = [sys.executable, "-m", "hetc.cli", "serve", str(plan), "--model-dir", str(model), "--emulate", "--port", str(self.port)]
        self.proc = subprocess.Popen([*cmd, "--threads", "1", *limits, *extra, "--served-model-name", "m"], cwd=REPO, stderr=subprocess.DEVNULL)

    def __enter__(self) -> "Server":
        if not wait_healthy(self.url, self.proc, 600):
            raise RuntimeError("hetc serve did not start")
        return self

    def __exit__(self, *exc) -> None:
        self.proc.terminate()
        self.proc.wait(60)


async def _one(ac: httpx.AsyncClient, url: str, prompt: list[int], max_tokens: int = OUTPUT) -> dict:
    t0 = time.perf_counter()
    times: list[float] = []
    body = {"model": "m", "prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "stream": True, "ignore_eos": True, "return_token_ids": True}
    async with ac.stream("POST", f"{url}/v1/completions", json=body) as r:
        if r.status_code != 200:
            await r.aread()
            return {"status": r.status_code, "sent": t0, "times": []}
        async for line in r.aiter_lines():
            if line.startswith("data: {"):
                times += [time.perf_counter()] * len(json.loads(line[6:])["choices"][0].get("token_ids") or [])
    return {"status": 200, "sent": t0, "times": times}


def closed_loop(url: str, prompts: list[list[int]], clients: int, max_tokens: int = OUTPUT) -> dict[str, float]:
    """C clients (one process, one event loop), each sending its next prompt when its last answer
    ended; output tok/s, TTFT p50 and TPOT p50 (first token excluded)."""

    async def go():
        todo = list(prompts)
        out: list[dict] = []
        async with httpx.AsyncClient(timeout=600) as ac:
            await _one(ac, url, [5, 6, 7])  # warm-up (not timed)

            async def client():
                while todo:
                    out.append(await _one(ac, url, todo.pop(0), max_tokens))

            await asyncio.gather(*(client() for _ in range(clients)))
        return out

    res = asyncio.run(go())
    ok = [r for r in res if r["status"] == 200 and r["times"]]
    assert len(ok) == len(prompts), f"{len(prompts) - len(ok)} requests failed"
    ttft = [(r["times"][0] - r["sent"]) * 1e3 for r in ok]
    span = max(r["times"][-1] for r in ok) - min(r["sent"] for r in ok)
    tpot = [(r["times"][-1] - r["times"][0]) / (len(r["times"]) - 1) * 1e3 for r in ok if len(r["times"]) > 1]
    return {
        "output_throughput": sum(len(r["times"]) for r in ok) / span,
        "median_ttft_ms": float(np.median(ttft)),
        "median_tpot_ms": float(np.median(tpot)) if tpot else math.nan,
    }


def workload(n: int, run: int) -> list[list[int]]:
    """`n` prompts of one system prompt of this run's own (a cold cache per run) + 64 tokens each."""
    rng = np.random.default_rng(1000 + run)
    system = rng.integers(2, VOCAB, SHARED).tolist()
    return [system + rng.integers(2, VOCAB, OWN).tolist() for _ in range(n)]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=3, help="runs per setting, interleaved on / off")
    ap.add_argument("--requests", type=int, default=24)
    ap.add_argument("--concurrency", type=int, default=4)
    ap.add_argument("--model", choices=sorted(MODELS), default="small", help="the served model's shape (module docstring)")
    ap.add_argument("--profile", default=str(REPO / "out" / "profile-cpu.yaml"))
    a = ap.parse_args()
    work = Path(os.environ.get("HETC_BENCH_DIR", Path(tempfile.gettempdir()) / "hetc-bench-prefix"))
    work.mkdir(parents=True, exist_ok=True)
    shape = MODELS[a.model]
    name = f"Llama {shape['hidden_size']}×{shape['num_hidden_layers']}"
    model = work / f"llama-{shape['hidden_size']}x{shape['num_hidden_layers']}-ctx{CONTEXT}"
    build_model(model, shape)
    profile = rc.ensure_profile(Path(a.profile))
    cluster = rc.cluster_yaml(work, profile, 1)
    plan = work / "plan.json"
    c = str(a.concurrency)
    prompt = str(SHARED + OWN)
    hetc(
        "plan",
        str(model),
        "--profiles",
        str(cluster),
        "-o",
        str(plan),
        "--dtype",
        "fp32",
        "--tp",
        "1",
        "--placement",
        "h:0",
        "--batch",
        c,
        "--input-len",
        prompt,
        "--output-len",
        str(OUTPUT),
    )
    limits = ["--max-num-seqs", c]
    load = ["--concurrency", c, "--requests", str(a.requests), "--input-len-dist", prompt, "--output-len-dist", str(OUTPUT)]
    t0 = time.monotonic()
    sim = json.loads(hetc("evaluate", str(plan), *load, "--prefix-len", str(SHARED), "--prefix-groups", "1", *limits, "--json"))
    sim_s = time.monotonic() - t0
    off_sim = json.loads(hetc("evaluate", str(plan), *load, "--prefix-len", str(SHARED), "--prefix-groups", "1", "--no-prefix-caching", *limits, "--json"))
    step_ms = {True: sim["stages"][0]["step_ms"], False: off_sim["stages"][0]["step_ms"]}
    predicted = {
        True: {k: sim[k] for k in ("median_ttft_ms", "output_throughput")},
        False: {k: sim[f"no_prefix_caching_{k}"] for k in ("median_ttft_ms", "output_throughput")},
    }
    print(
        f"model: {name} (vocab {VOCAB}), fp32; profile {profile}; {rc.describe(plan)}; {a.concurrency} clients, "
        f"{a.requests} requests of {SHARED} shared + {OWN} own tokens, {OUTPUT} out; simulated hit rate "
        f"{sim['prefix_cache_hit_rate']:.1%} ({sim_s:.1f} s for both simulations)",
        flush=True,
    )
    measured: dict[bool, list[dict[str, float]]] = {True: [], False: []}
    loads: list[float] = []
    with Server(plan, model, limits, True) as on, Server(plan, model, limits, False) as off:
        for run in range(a.runs):
            for caching, srv in ((True, on), (False, off)):
                since = (rc._cpu_ticks(), time.monotonic())
                m = closed_loop(srv.url, workload(a.requests, run * 2 + caching), a.concurrency)
                other, la = rc.others_share(since), os.getloadavg()[0]
                loads.append(la)
                measured[caching].append(m)
                print(
                    f"  run {run + 1} caching {'on ' if caching else 'off'}: TTFT p50 {m['median_ttft_ms']:.1f} ms, "
                    f"output {m['output_throughput']:.1f} tok/s (other processes {other:.0%} of the host, load average {la:.1f})",
                    flush=True,
                )
        hits = prefix_counts(on.url)
        steps = {caching: stage_steps(srv.url) for caching, srv in ((True, on), (False, off))}
    print(f"served hit rate (caching on, all runs): {hits['hits'] / max(hits['queries'], 1):.1%}")
    for caching in (True, False):
        served = ", ".join(f"{k} {v:.1f} ms" for k, v in sorted(steps[caching].items()))
        print(f"mean stage step, caching {'on' if caching else 'off'}: served {served}; simulated (all steps) {step_ms[caching]:.1f} ms")
    print("\n| prefix caching | figure | measured (median of runs; each run) | hetc evaluate | evaluate / measured | target |\n|---|---|---:|---:|---:|---|")
    for caching in (True, False):
        for k in ("median_ttft_ms", "output_throughput"):
            runs = [m[k] for m in measured[caching]]
            med, pred = float(np.median(runs)), predicted[caching][k]
            ok = "✓" if abs(pred / med - 1) <= TARGET else "✗"
            each = ", ".join(f"{x:,.1f}" for x in runs)
            setting = "on" if caching else "off"
            print(f"| {setting} | {k} | {med:,.1f} ({each}) | {pred:,.1f} | {pred / med:.2f} | {ok} ±{TARGET:.0%} |")
    on_m, off_m = (float(np.median([m["median_ttft_ms"] for m in measured[s]])) for s in (True, False))
    print(f"\nTTFT p50 off / on: measured {off_m / on_m:.2f}×, predicted {predicted[False]['median_ttft_ms'] / predicted[True]['median_ttft_ms']:.2f}×")
    print(f"load average during the runs: {min(loads):.1f}–{max(loads):.1f}")


def stage_steps(url: str) -> dict[str, float]:
    """Mean step (ms) of the served stage so far, per phase (micro-batches with a prompt chunk, and
    decode-only ones), from the worker's own timing in /metrics."""
    acc: dict[str, list[float]] = {}
    for line in httpx.get(f"{url}/metrics").text.splitlines():
        for i, suffix in enumerate(("_sum{", "_count{")):
            if line.startswith("hetc_stage_step_seconds" + suffix):
                phase = line.split('phase="')[1].split('"')[0]
                acc.setdefault(phase, [0.0, 0.0])[i] += float(line.rsplit(" ", 1)[1])
    return {k: v[0] / max(v[1], 1.0) * 1e3 for k, v in acc.items()}


def prefix_counts(url: str) -> dict[str, float]:
    """The server's prefix-cache counters so far (prompt tokens looked up, found)."""
    text = httpx.get(f"{url}/metrics").text
    out = {"queries": 0.0, "hits": 0.0}
    for line in text.splitlines():
        if line.startswith("hetc_prefix_cache_queries_total{"):
            out["queries"] = float(line.rsplit(" ", 1)[1])
        elif line.startswith("hetc_prefix_cache_hits_total{"):
            out["hits"] = float(line.rsplit(" ", 1)[1])
    return out


if __name__ == "__main__":
    main()
