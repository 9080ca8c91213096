"""Runtime figures on the host CPU (BENCHMARKS.md "Runtime (CPU)").

    python benchmarks/runtime_cpu.py [--quick]

A Llama-shaped model (hidden 768, 12 layers, vocab 32000: 124M parameters, fp32,
random weights saved as safetensors) served with `hetc serve --emulate`:

1. pipeline: the same offline load (B requests at once, prompt P, output O tokens, EOS
   ignored) on 1 stage × 2 threads and on 2 stages × 1 thread (the plan cut in two at its
   decode-work midpoint); output tok/s, the ratio, and per stage the busy share of the
   wall time (pipeline efficiency) and the bubble share (1 − busy);
2. engine vs Hugging Face: the 1-stage server's offline tok/s against transformers'
   `generate` with a static cache, same model, batch, lengths and threads (in the
   benchmark's own process);
3. latency at a fixed rate: Poisson arrivals at R req/s on the 2-stage server; TTFT and
   TPOT (per request: (e2e − TTFT) / (tokens − 1)) p50/p99, client side, streaming;
4. with a measured 1-thread profile of this host (`hetc profile --device cpu`, default
   out/profile-cpu.yaml): each stage's mean measured decode step against the cost model's
   prediction for that stage's units at the same operating point.
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import json
import os
import random
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx2 as httpx
import torch

REPO = Path(__file__).resolve().parents[1]
MODEL = dict(vocab_size=32000, hidden_size=768, intermediate_size=2048, num_hidden_layers=12, num_attention_heads=12,
             num_key_value_heads=4, max_position_embeddings=512)


def build_model(d: Path) -> None:
    from transformers import LlamaConfig, LlamaForCausalLM

    if (d / "model.safetensors").is_file():
        return
    torch.manual_seed(0)
    LlamaForCausalLM(LlamaConfig(**MODEL)).eval().save_pretrained(d)


def plans(model: Path, out: Path) -> tuple[Path, Path]:
    """(1-stage plan, 2-stage plan): planned on one host CPU; the 2-stage one cut where half the decode work is done."""
    from hetc.partitioner.planner import PlanRequest, make_plan
    from hetc.plan import Plan, save_plan

    (out / "c.yaml").write_text("nodes:\n  - {name: h, device: cpu, count: 1}\n")
    p1 = make_plan(PlanRequest(model=str(model), profiles=str(out / "c.yaml"), dtype="fp32", input_len=64,
                               output_len=64, tp="1", time_limit=5))
    save_plan(p1, out / "plan1.json")
    doc = json.loads(p1.to_json())
    units = doc["units"]
    (st,) = doc["pipelines"][0]["stages"]
    total = sum(u["param_bytes"] for u in units)
    # decode work ∝ weight bytes streamed per step; an embedding reads only its rows (≈ 0)
    work = [0.0 if u["kind"] == "embed" else u["param_bytes"] for u in units]
    acc, cut = 0.0, 0
    for u, w in zip(units, work):  # first unit of stage 2: where the cumulative work passes half
        acc += w
        if acc >= sum(work) / 2:
            cut = u["index"] + 1
            break
    a, b = copy.deepcopy(st), copy.deepcopy(st)
    a["units"], b["units"] = [0, cut - 1], [cut, len(units) - 1]
    a["layers"], b["layers"] = [0, units[cut - 1]["layer"]], [units[cut]["layer"], units[-1]["layer"]]
    b["devices"] = ["h:1"]
    for s, lo, hi in ((a, 0, cut), (b, cut, len(units))):
        share = sum(u["param_bytes"] for u in units[lo:hi]) / total
        s["memory_bytes"]["weights"] = sum(u["param_bytes"] for u in units[lo:hi])
        s["predicted_ms"] = {k: v * share for k, v in st["predicted_ms"].items()}
    doc["pipelines"][0]["stages"], doc["pipelines"][0]["micro_batches"] = [a, b], 2
    doc["cluster"]["nodes"][0]["count"] = 2
    save_plan(Plan.model_validate(doc), out / "plan2.json")
    return out / "plan1.json", out / "plan2.json"


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    def __init__(self, plan: Path, model: Path, threads: int, max_seqs: int):
        self.port = _port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc = subprocess.Popen([sys.executable, "-m", "hetc.cli", "serve", str(plan), "--model-dir", str(model),
                                      "--emulate", "--port", str(self.port), "--threads", str(threads),
                                      "--max-num-seqs", str(max_seqs), "--max-batched-tokens", "512",
                                      "--served-model-name", "m"], cwd=REPO, stderr=subprocess.DEVNULL)

    def __enter__(self) -> "Server":
        deadline = time.monotonic() + 300
        while True:
            try:
                if httpx.get(f"{self.url}/health", timeout=2).status_code == 200:
                    return self
            except httpx.TransportError:
                pass
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("hetc serve did not start")
            time.sleep(0.5)

    def __exit__(self, *exc) -> None:
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(120)

    def busy(self) -> dict[str, float]:
        out = {}
        for line in httpx.get(f"{self.url}/metrics").text.splitlines():
            if line.startswith("hetc_stage_busy_seconds_total"):
                out[line.split('stage="')[1].split('"')[0]] = float(line.rsplit(" ", 1)[1])
        return out


async def _request(ac: httpx.AsyncClient, url: str, prompt: list[int], out_len: int,
                   stream: bool = True) -> tuple[float, float, int]:
    """(ttft, e2e, tokens) of one streamed completion; unstreamed: (0, e2e, tokens)."""
    t0 = time.perf_counter()
    if not stream:
        r = await ac.post(f"{url}/v1/completions", json={"model": "m", "prompt": prompt, "max_tokens": out_len,
                                                          "temperature": 0, "ignore_eos": True})
        return 0.0, time.perf_counter() - t0, r.json()["usage"]["completion_tokens"]
    ttft, n = None, 0
    body = {"model": "m", "prompt": prompt, "max_tokens": out_len, "temperature": 0, "stream": True,
            "ignore_eos": True, "return_token_ids": True}
    async with ac.stream("POST", f"{url}/v1/completions", json=body) as r:
        async for line in r.aiter_lines():
            if line.startswith("data: {"):
                k = len(json.loads(line[6:])["choices"][0].get("token_ids") or [])
                if k and ttft is None:
                    ttft = time.perf_counter() - t0
                n += k
    return ttft or 0.0, time.perf_counter() - t0, n


def prompts(n: int, length: int, seed: int = 0) -> list[list[int]]:
    g = random.Random(seed)
    return [[g.randrange(3, MODEL["vocab_size"]) for _ in range(length)] for _ in range(n)]


def offline(srv: Server, batch: int, p_len: int, o_len: int) -> tuple[float, dict[str, float]]:
    """(output tok/s, per-stage busy share) for `batch` requests sent at once."""

    async def go():
        async with httpx.AsyncClient(timeout=600) as ac:
            await _request(ac, srv.url, prompts(1, p_len, 99)[0], 4)  # warm-up
            b0 = srv.busy()
            t0 = time.perf_counter()
            # unstreamed: the engine's throughput, not the client's SSE parsing on the same two cores
            res = await asyncio.gather(*(_request(ac, srv.url, p, o_len, stream=False) for p in prompts(batch, p_len)))
            wall = time.perf_counter() - t0
            b1 = srv.busy()
            return sum(r[2] for r in res) / wall, {k: (b1[k] - b0.get(k, 0.0)) / wall for k in b1}

    return asyncio.run(go())


def at_rate(srv: Server, rate: float, n: int, p_len: int, o_len: int) -> dict[str, float]:
    async def go():
        g = random.Random(1)
        async with httpx.AsyncClient(timeout=600) as ac:
            tasks = []
            for p in prompts(n, p_len, 7):
                tasks.append(asyncio.create_task(_request(ac, srv.url, p, o_len)))
                await asyncio.sleep(g.expovariate(rate))
            return await asyncio.gather(*tasks)

    res = asyncio.run(go())
    ttft = sorted(r[0] * 1e3 for r in res)
    tpot = sorted((r[1] - r[0]) / max(1, r[2] - 1) * 1e3 for r in res)
    q = lambda xs, p: xs[min(len(xs) - 1, int(p * len(xs)))]  # noqa: E731
    return {"ttft_p50": q(ttft, 0.5), "ttft_p99": q(ttft, 0.99), "tpot_p50": q(tpot, 0.5), "tpot_p99": q(tpot, 0.99)}


def decode_steps(srv: Server) -> dict[str, float]:
    """Mean measured decode step (s) per stage so far, from /metrics."""
    sums, counts = {}, {}
    for line in httpx.get(f"{srv.url}/metrics").text.splitlines():
        if line.startswith("hetc_stage_step_seconds_") and 'phase="decode"' in line:
            stage = line.split('stage="')[1].split('"')[0]
            (sums if line.startswith("hetc_stage_step_seconds_sum") else counts if
             line.startswith("hetc_stage_step_seconds_count") else {})[stage] = float(line.rsplit(" ", 1)[1])
    return {k: sums[k] / counts[k] for k in sums if counts.get(k)}


def predicted_decode(model: Path, plan: Path, profile: str, seqs: float, ctx: float) -> dict[str, float]:
    """Predicted decode step (s) per stage of `plan` on the measured profile, at this load's operating point."""
    from hetc.cluster import load_profile
    from hetc.partitioner.capture import capture
    from hetc.partitioner.cost_models.analytic import Step, units_time

    prof = load_profile(profile)
    units = capture(str(model), dtype="fp32").units
    stages = json.loads(plan.read_text())["pipelines"][0]["stages"]
    return {f"0.{i}": units_time(units[s["units"][0]: s["units"][1] + 1], prof, Step(seqs, seqs, ctx), dtype="fp32",
                                 kv_dtype="fp32") for i, s in enumerate(stages)}


class HFGenerate:
    """transformers' generate with a static cache, in this process, on `threads` threads."""

    def __init__(self, model: Path, batch: int, p_len: int, o_len: int, threads: int):
        from transformers import AutoModelForCausalLM

        torch.set_num_threads(threads)
        self.m = AutoModelForCausalLM.from_pretrained(model, dtype=torch.float32).eval()
        self.x = torch.tensor(prompts(batch, p_len))
        self.o_len = o_len
        self.kw = dict(attention_mask=torch.ones_like(self.x), do_sample=False, cache_implementation="static",
                       pad_token_id=0, max_new_tokens=o_len, min_new_tokens=o_len)
        self.m.generate(self.x, **self.kw)  # warm-up at full size: the static cache is allocated here

    def tok_s(self) -> float:
        t = time.perf_counter()
        self.m.generate(self.x, **self.kw)
        return self.x.shape[0] * self.o_len / (time.perf_counter() - t)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="smaller load (a smoke run; figures are noisier)")
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--prompt", type=int, default=32)
    ap.add_argument("--output", type=int, default=64)
    ap.add_argument("--rate", type=float, default=1.0, help="requests/s for the latency run")
    ap.add_argument("--requests", type=int, default=40, help="requests in the latency run")
    ap.add_argument("--runs", type=int, default=5, help="interleaved throughput rounds (medians are reported)")
    ap.add_argument("--profile", default=str(REPO / "out" / "profile-cpu.yaml"),
                    help="a 1-thread profile of this host from `hetc profile --device cpu` (predicted stage times)")
    a = ap.parse_args()
    if a.quick:
        a.batch, a.output, a.requests, a.runs = 8, 16, 10, 1
    work = Path(os.environ.get("HETC_BENCH_DIR", Path(tempfile.gettempdir()) / "hetc-bench-runtime"))
    work.mkdir(parents=True, exist_ok=True)
    model = work / "llama-124m-ctx512"
    build_model(model)
    p1, p2 = plans(model, work)
    print(f"model: Llama {MODEL['hidden_size']}×{MODEL['num_hidden_layers']} layers, vocab {MODEL['vocab_size']}, "
          f"fp32; load: {a.batch} requests × prompt {a.prompt} → {a.output} tokens; host: {os.cpu_count()} cores")
    # both servers up at once (an idle one only sends a heartbeat a second), HF in this process;
    # the three are measured in turn, round after round, so a burst of load from another process
    # on this shared host hits all of them alike; medians over the rounds are reported
    s1 = Server(p1, model, threads=2, max_seqs=a.batch)
    s2 = Server(p2, model, threads=1, max_seqs=a.batch)
    with s1, s2:
        hf = HFGenerate(model, a.batch, a.prompt, a.output, threads=2)
        print(f"host load average at the start (1 min): {os.getloadavg()[0]:.2f}")
        rounds = []
        for _ in range(a.runs):
            rounds.append((offline(s1, a.batch, a.prompt, a.output), offline(s2, a.batch, a.prompt, a.output),
                           hf.tok_s(), os.getloadavg()[0]))
            r = rounds[-1]
            print(f"round {len(rounds)}: 1×2 {r[0][0]:.1f}, 2×1 {r[1][0]:.1f}, HF {r[2]:.1f} tok/s; 2×1 / 1×2 "
                  f"{r[1][0] / r[0][0]:.2f}, engine / HF {r[0][0] / r[2]:.2f}; busy 2×1 "
                  + " / ".join(f"{v:.2f}" for _, v in sorted(r[1][1].items())) + f"; load {r[3]:.2f}", flush=True)
        measured = decode_steps(s2)  # offline rounds only: 8-sequence micro-batches
        lat = at_rate(s2, a.rate, a.requests, a.prompt, a.output)
    med = statistics.median
    one, two, hf_med = med(r[0][0] for r in rounds), med(r[1][0] for r in rounds), med(r[2] for r in rounds)
    busy2 = {k: med(r[1][1][k] for r in rounds) for k in rounds[0][1][1]}
    busy1 = med(next(iter(r[0][1].values()), 0.0) for r in rounds)
    load = os.getloadavg()
    print(f"host load average at the end (1/5/15 min): {load[0]:.2f} / {load[1]:.2f} / {load[2]:.2f} "
          "(anything above ~0 is another process sharing the 2 cores)")
    print(f"| figure (median of {a.runs} interleaved rounds) | value |\n|---|---:|")
    print(f"| 1 stage × 2 threads, output tok/s | {one:.1f} |")
    print(f"| 2 stages × 1 thread, output tok/s | {two:.1f} |")
    print(f"| ratio (2×1 / 1×2), target ≥ 0.9 | {two / one:.2f} (per round "
          + ", ".join(f"{r[1][0] / r[0][0]:.2f}" for r in rounds) + ") |")
    for k, v in sorted(busy2.items()):
        print(f"| stage {k}: busy share (pipeline efficiency) / bubble share | {v:.2f} / {1 - v:.2f} |")
    print(f"| 1 stage: busy share | {busy1:.2f} |")
    print(f"| HF generate (static cache, 2 threads), output tok/s | {hf_med:.1f} |")
    print(f"| engine (1 stage × 2 threads) / HF generate, target ≥ 1.0 | {one / hf_med:.2f} (per round "
          + ", ".join(f"{r[0][0] / r[2]:.2f}" for r in rounds) + ") |")
    print(f"| 2 stages at {a.rate:g} req/s ({a.requests} requests): TTFT p50 / p99 ms | "
          f"{lat['ttft_p50']:.0f} / {lat['ttft_p99']:.0f} |")
    print(f"| 2 stages at {a.rate:g} req/s: TPOT p50 / p99 ms | {lat['tpot_p50']:.1f} / {lat['tpot_p99']:.1f} |")
    if Path(a.profile).is_file():
        pred = predicted_decode(model, p2, a.profile, a.batch / 2, a.prompt + a.output / 2)
        for k in sorted(measured):
            print(f"| stage {k} decode step, measured / predicted ({Path(a.profile).name}, {a.batch // 2} seqs, "
                  f"ctx {a.prompt + a.output // 2}) ms | {measured[k] * 1e3:.1f} / {pred[k] * 1e3:.1f} "
                  f"(×{measured[k] / pred[k]:.2f}) |")


if __name__ == "__main__":
    main()
