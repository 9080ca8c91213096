"""Runtime figures on the host CPU (BENCHMARKS.md "Runtime (CPU)").

    python benchmarks/runtime_cpu.py [--quick] [--profile out/profile-cpu.yaml]
    python benchmarks/runtime_cpu.py --engine-vs-hf 8,16,128 [--runs 5] [--threads 2]   (item 2 alone, per batch)
    python benchmarks/runtime_cpu.py --predicted 8,16 [--runs 3]   (item 4 alone: 1 stage, the profile's threads)

A Llama-shaped model (hidden 768, 12 layers, vocab 32000: 124M parameters, fp32,
random weights saved as safetensors) served with `hetc serve --emulate`. Every plan comes
from hetc's planner and a measured 1-thread profile of this host (`hetc profile --device cpu
--threads 1`, run first when the file is missing): a cluster of 1 and one of 2 such devices
(linked as the profile measured gloo between two processes), fp32, tp 1, no pools, the
load's prompt and output lengths, at the load's batch:

1. pipeline: the same offline load (B requests at once, prompt P, output O tokens, EOS
   ignored) on 1 stage × 2 threads and on 2 stages × 1 thread (the planner's best split of a
   2-device chain: `split_chain` and the saturation model); output tok/s, the ratio, and per
   stage the busy share of the wall time (pipeline efficiency) and the bubble share (1 − busy).
   Left to itself, `hetc plan` over the 2 devices may choose otherwise (on the reference
   host: 2 replicas of the whole model); its plan is printed and served as a third
   configuration;
2. engine vs Hugging Face: the 1-stage server's offline tok/s against transformers'
   `generate` with a static cache, same model, batch, lengths and threads (in the
   benchmark's own process);
3. latency at a fixed rate: Poisson arrivals at R req/s on the 2-stage server; TTFT and
   TPOT (per request: (e2e − TTFT) / (tokens − 1)) p50/p99, client side, streaming;
4. measured vs predicted: each stage's mean decode step in the offline rounds against the
   2-stage plan's `predicted_ms`;
5. the bound without a runtime: the same decode steps run in this process back to back (no
   frontend, transport, scheduling or bubble): the 1-stage model at B sequences on 2 threads
   against each 2-stage stage at B/2 on 1 thread. With m micro-batches on m stages a round
   is m times the slowest stage, so the 2 × 1 / 1 × 2 ratio can be at most
   T(1 stage, B) / (2 · max stage(B/2)) however little the runtime costs.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx2 as httpx
import torch
import yaml
from serve_wait import wait_healthy  # this directory: run as a script

from hetc.host import free_port

REPO = Path(__file__).resolve().parents[1]
MODEL = dict(
    vocab_size=32000, hidden_size=768, intermediate_size=2048, num_hidden_layers=12, num_attention_heads=12, num_key_value_heads=4, max_position_embeddings=512
)


def build_model(d: Path) -> None:
    from transformers import LlamaConfig, LlamaForCausalLM

    if (d / "model.safetensors").is_file():
        return
    torch.manual_seed(0)
    LlamaForCausalLM(LlamaConfig(**MODEL)).eval().save_pretrained(d)


def ensure_profile(path: Path, executor: str = "auto") -> Path:
    """The 1-thread profile of this host on `executor` (hetc profile --executor); measured now (a few
    minutes) when the file is missing."""
    if not path.is_file():
        cmd = ["profile", "--device", "cpu", "--threads", "1", "--executor", executor, "-o", str(path)]
        print(f"no profile at {path}: measuring one (hetc {' '.join(cmd[:-2])})", flush=True)
        path.parent.mkdir(parents=True, exist_ok=True)
        subprocess.run([sys.executable, "-m", "hetc.cli", *cmd], cwd=REPO, check=True)
    return path


def cluster_yaml(out: Path, profile: Path, devices: int) -> Path:
    """A cluster of `devices` CPU devices of `profile` on one node; several are linked as the
    profile's own measurement of gloo between two processes of this host says."""
    link = ""
    if devices > 1:
        text = " ".join(yaml.safe_load(profile.read_text()).get("sources", []))
        m = re.search(r"link: \{bandwidth: ([^,]+), latency: ([^}]+)\}", text)
        if m is None:
            sys.exit(f"{profile} has no process-to-process link measurement; re-measure it with `hetc profile --device cpu --threads 1`")
        link = f", link: {{bandwidth: {m.group(1)}, latency: {m.group(2)}}}"
    path = out / f"cluster-{devices}.yaml"
    path.write_text(f"nodes:\n  - {{name: h, device: {profile.resolve()}, count: {devices}{link}}}\n")
    return path


def _plan_request(model: Path, cluster: Path, prompt: int, output: int):
    """What `hetc plan MODEL --profiles CLUSTER --dtype fp32 --tp 1 --disaggregate off` asks for."""
    from hetc.partitioner.planner import PlanRequest

    return PlanRequest(model=str(model), profiles=str(cluster), dtype="fp32", input_len=prompt, output_len=output, tp="1", disaggregate="off", time_limit=5)


def plan_at(model: Path, cluster: Path, stages: int, batch: int, prompt: int, output: int, out: Path) -> Path:
    """The planner's plan of `model` as one pipeline over `stages` devices of `cluster` at `batch`
    sequences: its best contiguous split (`split_chain`: exhaustive against the saturation model
    for so few units) and that model's estimate, written by `build_plan` as `hetc plan` writes
    its plans. `make_plan` itself would choose the batch (as large as memory allows: 1024 here,
    so its predicted_ms would not describe 8-sequence steps) and, for 2 devices, the layout."""
    from hetc.cluster import load_cluster
    from hetc.partitioner.capture.capture import capture
    from hetc.partitioner.planner import build_plan
    from hetc.partitioner.estimate.simulate import Workload, estimate_pipeline
    from hetc.partitioner.search.solver import Candidate, Solution
    from hetc.partitioner.estimate.split import Slot, split_chain
    from hetc.plan import save_plan

    cl, cap = load_cluster(cluster), capture(str(model), dtype="fp32")
    wl = Workload(prompt, output, "fp32", cap.kv_dtype)
    split = split_chain(cap.units, [Slot(cl.nodes[0])] * stages, cl, wl, batch)
    est = estimate_pipeline(cap.units, split, cl, wl, batch) if split else None
    if est is None:
        sys.exit(f"the model does not fit {stages} device(s) of {cluster} at batch {batch}")
    sol = Solution(
        [Candidate(split, 1, est, list(range(stages)), f"{stages}-device chain")],
        est.output_tok_s,
        0.0,
        est.output_tok_s,
        "none: the benchmark fixes the batch and the chain",
        "FEASIBLE",
    )
    path = out / f"plan-{stages}stage.json"
    save_plan(build_plan(cap, cl, wl, _plan_request(model, cluster, prompt, output), sol, {}), path)
    return path


def plans(model: Path, out: Path, profile: Path, batch: int, prompt: int, output: int) -> tuple[Path, Path, Path]:
    """(1-stage plan, 2-stage plan, the planner's own plan for 2 devices)."""
    from hetc.partitioner.planner import make_plan
    from hetc.plan import save_plan

    c1, c2 = cluster_yaml(out, profile, 1), cluster_yaml(out, profile, 2)
    p1, p2 = plan_at(model, c1, 1, batch, prompt, output, out), plan_at(model, c2, 2, batch, prompt, output, out)
    free = make_plan(_plan_request(model, c2, prompt, output))
    save_plan(free, out / "plan-free.json")
    return p1, p2, out / "plan-free.json"


def describe(plan: Path) -> str:
    """One line: replicas, stages, batch, each stage's units and predicted decode step."""
    doc = json.loads(plan.read_text())
    parts = []
    for p in doc["pipelines"]:
        cuts = " | ".join(f"units {s['units'][0]}–{s['units'][1]} (decode {s['predicted_ms']['decode']:.1f} ms)" for s in p["stages"])
        parts.append(f"{p['replicas']} replica(s) × {len(p['stages'])} stage(s), batch {p['batch']}: {cuts}")
    return "; ".join(parts) + f"; predicted {doc['predicted']['output_tok_s']:.1f} output tok/s"


def process_ticks() -> tuple[dict[int, list[int]], dict[int, int]]:
    """(each process's children, each process's CPU ticks so far, user + system), from /proc."""
    kids: dict[int, list[int]] = {}
    ticks: dict[int, int] = {}
    for p in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{p}/stat") as f:
                st = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        kids.setdefault(int(st[1]), []).append(int(p))
        ticks[int(p)] = int(st[11]) + int(st[12])
    return kids, ticks


def _cpu_ticks() -> tuple[int, int]:
    """(busy CPU ticks of the whole host, CPU ticks of this process and its descendants)."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:8]]  # user nice system idle iowait irq softirq
    host = sum(v) - v[3] - v[4]
    kids, ticks = process_ticks()
    ours, todo = 0, [os.getpid()]
    while todo:
        p = todo.pop()
        ours += ticks.get(p, 0)
        todo += kids.get(p, [])
    return host, ours


def others_share(since: tuple[tuple[int, int], float]) -> float:
    """Share of the host's CPU that processes not ours used since `since` = (_cpu_ticks(), monotonic)."""
    (h0, o0), t0 = since
    h1, o1 = _cpu_ticks()
    return max(0.0, (h1 - h0) - (o1 - o0)) / ((time.monotonic() - t0) * os.sysconf("SC_CLK_TCK") * os.cpu_count())


def wait_quiet(limit_s: float = 900.0, busy: float = 0.05) -> float:
    """Wait until other processes used at most `busy` of the host for 3 s in a row. A 2-thread
    configuration loses far more than its share to one busy core (its OpenMP team waits for the
    descheduled thread at every parallel region: 1 s instead of 50 ms per step, measured), so
    measurements start on a quiet host only. Returns the seconds waited."""
    t0 = time.monotonic()
    while True:
        since = (_cpu_ticks(), time.monotonic())
        time.sleep(3.0)
        if others_share(since) <= busy:
            return time.monotonic() - t0
        if time.monotonic() - t0 > limit_s:
            print(f"the host is still busy after {limit_s:.0f} s: measuring anyway", flush=True)
            return time.monotonic() - t0


QUIET = 0.05  # the most of the host other processes may use while we measure (--max-busy)


def quiet_run(what: str, fn, tries: int = 6, busy: float | None = None):
    """(fn(), others' share of the host while it ran, seconds waited): run on a quiet host, again
    (up to `tries` times) when another process took more than `busy` of it meanwhile."""
    waited, busy = 0.0, QUIET if busy is None else busy
    if busy >= 1.0:  # --max-busy 1: measure at once (smoke runs on a busy host)
        since = (_cpu_ticks(), time.monotonic())
        return fn(), others_share(since), 0.0
    for i in range(tries):
        waited += wait_quiet(busy=busy)
        since = (_cpu_ticks(), time.monotonic())
        out = fn()
        other = others_share(since)
        if other <= busy or i == tries - 1:
            return out, other, waited
        print(f"{what}: other processes took {other:.0%} of the host meanwhile: measured again", flush=True)


class Server:
    def __init__(self, plan: Path, model: Path, threads: int, max_seqs: int):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "hetc.cli",
                "serve",
                str(plan),
                "--model-dir",
                str(model),
                "--emulate",
                "--port",
                str(self.port),
                "--threads",
                str(threads),
                "--max-num-seqs",
                str(max_seqs),
                "--max-batched-tokens",
                "512",
                "--served-model-name",
                "m",
            ],
            cwd=REPO,
            stderr=subprocess.DEVNULL,
        )

    def __enter__(self) -> "Server":
        if not wait_healthy(self.url, self.proc, 300):
            raise RuntimeError("hetc serve did not start")
        return self

    def __exit__(self, *exc) -> None:
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(120)

    def busy(self) -> dict[str, float]:
        out = {}
        for line in httpx.get(f"{self.url}/metrics").text.splitlines():
            if line.startswith("hetc_stage_busy_seconds_total"):
                out[line.split('stage="')[1].split('"')[0]] = float(line.rsplit(" ", 1)[1])
        return out


async def _request(ac: httpx.AsyncClient, url: str, prompt: list[int], out_len: int, stream: bool = True) -> tuple[float, float, int]:
    """(ttft, e2e, tokens) of one streamed completion; unstreamed: (0, e2e, tokens)."""
    t0 = time.perf_counter()
    if not stream:
        r = await ac.post(f"{url}/v1/completions", json={"model": "m", "prompt": prompt, "max_tokens": out_len, "temperature": 0, "ignore_eos": True})
        return 0.0, time.perf_counter() - t0, r.json()["usage"]["completion_tokens"]
    ttft, n = None, 0
    body = {"model": "m", "prompt": prompt, "max_tokens": out_len, "temperature": 0, "stream": True, "ignore_eos": True, "return_token_ids": True}
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


def offline(srv: Server, batch: int, p_len: int, o_len: int) -> tuple[float, dict[str, float], dict]:
    """(output tok/s, per-stage busy share, per-stage (seconds, count) of its decode steps) for
    `batch` requests sent at once."""

    async def go():
        async with httpx.AsyncClient(timeout=600) as ac:
            # warm-up: two requests at once, so each lane of a 2-replica plan has run once
            await asyncio.gather(*(_request(ac, srv.url, p, 4) for p in prompts(2, p_len, 99)))
            b0, d0 = srv.busy(), decode_totals(srv)
            t0 = time.perf_counter()
            # unstreamed: the engine's throughput, not the client's SSE parsing on the same two cores
            res = await asyncio.gather(*(_request(ac, srv.url, p, o_len, stream=False) for p in prompts(batch, p_len)))
            wall = time.perf_counter() - t0
            b1, d1 = srv.busy(), decode_totals(srv)
            steps = {k: (v[0] - d0.get(k, (0, 0))[0], v[1] - d0.get(k, (0, 0))[1]) for k, v in d1.items()}
            return sum(r[2] for r in res) / wall, {k: (b1[k] - b0.get(k, 0.0)) / wall for k in b1}, steps

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


def decode_totals(srv: Server) -> dict[str, tuple[float, float]]:
    """Per stage, (seconds, count) of its measured decode steps so far, from /metrics."""
    sums, counts = {}, {}
    for line in httpx.get(f"{srv.url}/metrics").text.splitlines():
        if line.startswith("hetc_stage_step_seconds_") and 'phase="decode"' in line:
            stage = line.split('stage="')[1].split('"')[0]
            (sums if line.startswith("hetc_stage_step_seconds_sum") else counts if line.startswith("hetc_stage_step_seconds_count") else {})[stage] = float(
                line.rsplit(" ", 1)[1]
            )
    return {k: (sums[k], counts.get(k, 0.0)) for k in sums}


def predicted_decode(plan: Path) -> dict[str, float]:
    """The plan's decode step (s) per stage, labelled like /metrics (lane.stage)."""
    stages = json.loads(plan.read_text())["pipelines"][0]["stages"]
    return {f"0.{i}": s["predicted_ms"]["decode"] / 1e3 for i, s in enumerate(stages)}


def bare_step_ms(model: Path, plan: Path, stage: int, seqs: int, ctx: int, threads: int, reps: int = 15, new: int = 1) -> float:
    """Median step (ms) of one stage of `plan` run in this process with no runtime around it: `seqs`
    sequences of `new` tokens each (1: a decode step) after `ctx` cached ones, on `threads` torch threads."""
    from hetc.partitioner.capture.capture import load_hf_config
    from hetc.kv_blocks import blocks_for
    from hetc.runtime.kv_cache import AttnMeta
    from hetc.plan import load_plan
    from hetc.runtime.model_runner import StageModel
    from hetc.weights import SafetensorsWeights

    doc = load_plan(plan)
    first, last = doc.pipelines[0].stages[stage].units
    units = doc.units
    cfg, _ = load_hf_config(str(model))
    per_seq = blocks_for(ctx + new)
    torch.set_num_threads(threads)
    sm = StageModel(cfg, units, first, last, dtype=torch.float32, kv_dtype=torch.float32, num_blocks=seqs * per_seq, weights=SafetensorsWeights(model))
    meta = AttnMeta.build([ctx] * seqs, [new] * seqs, [list(range(i * per_seq, (i + 1) * per_seq)) for i in range(seqs)], [True] * seqs)
    x = torch.randint(3, cfg.vocab_size, (seqs * new,)) if first == 0 else torch.randn(seqs * new, cfg.hidden_size)
    times = []
    for i in range(reps + 3):
        t = time.perf_counter()
        sm(x, meta)
        if i >= 3:  # the first steps fault the memory-mapped weights in
            times.append(time.perf_counter() - t)
    return statistics.median(times) * 1e3


class HFGenerate:
    """transformers' generate with a static cache, in this process, on `threads` threads."""

    def __init__(self, model: Path, batch: int, p_len: int, o_len: int, threads: int):
        from transformers import AutoModelForCausalLM

        torch.set_num_threads(threads)
        self.m = AutoModelForCausalLM.from_pretrained(model, dtype=torch.float32).eval()
        self.x = torch.tensor(prompts(batch, p_len))
        self.o_len = o_len
        self.kw = dict(
            attention_mask=torch.ones_like(self.x), do_sample=False, cache_implementation="static", pad_token_id=0, max_new_tokens=o_len, min_new_tokens=o_len
        )
        self.m.generate(self.x, **self.kw)  # warm-up at full size: the static cache is allocated here

    def tok_s(self) -> float:
        t = time.perf_counter()
        self.m.generate(self.x, **self.kw)
        return self.x.shape[0] * self.o_len / (time.perf_counter() - t)


def engine_vs_hf(model: Path, work: Path, profile: Path, batches: list[int], prompt: int, output: int, runs: int, threads: int = 2) -> None:
    """Item 2 alone at each batch: the 1-stage server (`threads` threads, its stage on the serving
    executor) against HF generate on as many threads, measured in turn round after round, each on a
    quiet stretch."""
    print(
        f"model: Llama {MODEL['hidden_size']}×{MODEL['num_hidden_layers']} layers, fp32; prompt {prompt} → "
        f"{output} tokens; host: {os.cpu_count()} cores; 1 stage × {threads} thread(s) vs HF generate (static "
        f"cache, {threads} thread(s))",
        flush=True,
    )
    rows = []
    for batch in batches:
        plan = plan_at(model, cluster_yaml(work, profile, 1), 1, batch, prompt, output, work)
        with Server(plan, model, threads=threads, max_seqs=batch) as srv:
            hf = HFGenerate(model, batch, prompt, output, threads=threads)
            rounds = []
            for i in range(runs):
                (eng, _, _), o1, _ = quiet_run(f"b{batch} round {i + 1}, engine", lambda b=batch: offline(srv, b, prompt, output))
                ref, o2, _ = quiet_run(f"b{batch} round {i + 1}, HF", hf.tok_s)
                rounds.append((eng, ref, max(o1, o2)))
                print(
                    f"batch {batch} round {i + 1}: engine {eng:.1f}, HF {ref:.1f} tok/s, ratio {eng / ref:.2f}; "
                    f"other processes at most {max(o1, o2):.0%} of the host, load {os.getloadavg()[0]:.2f}",
                    flush=True,
                )
            del hf
        med = statistics.median
        rows.append(
            (
                batch,
                med(r[0] for r in rounds),
                med(r[1] for r in rounds),
                med(r[0] / r[1] for r in rounds),
                [r[0] / r[1] for r in rounds],
                max(r[2] for r in rounds),
            )
        )
    print(
        f"| batch | engine output tok/s | HF generate tok/s | engine / HF (median of {runs} paired rounds) | "
        "per round | other processes, max |\n|---:|---:|---:|---:|---|---:|"
    )
    for b, e, h, ratio, per, other in rows:
        print(f"| {b} | {e:.1f} | {h:.1f} | **{ratio:.2f}** | {', '.join(f'{x:.2f}' for x in per)} | {other:.0%} |")


def host_bandwidth(threads: int) -> float:
    """The copy bandwidth `hetc profile` measures (256 MiB at `threads` threads), now: whether the
    host still is the one the profile measured (this VM's memory bandwidth was seen to move from
    11.5 to 7.3 GB/s within an hour, idle)."""
    from hetc.partitioner.profiling import bench, microbench

    old = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        c = bench.run_cases([microbench.copy_case(256 * 2**20, device="cpu")], rounds=3)[0]
    finally:
        torch.set_num_threads(old)
    return c.meta["bytes"] / c.seconds


def predicted_vs_measured(model: Path, work: Path, profile: Path, batches: list[int], prompt: int, output: int, runs: int) -> None:
    """Item 4 alone: at each batch, the planner's 1-stage plan from `profile` served on one device with
    the profile's threads; its measured mean decode step (the workers' own timing, /metrics) against
    the plan's predicted_ms, over `runs` offline rounds. Beside each round, the host's copy bandwidth
    against the profile's: a comparison is only as good as the host is still the profiled one."""
    from hetc.cluster import load_profile

    profiled_bw = load_profile(str(profile)).memory_bandwidth
    threads = yaml.safe_load(profile.read_text()).get("efficiency_curves", {}).get("threads") or 1
    executor = yaml.safe_load(profile.read_text()).get("efficiency_curves", {}).get("executor") or "torch"
    print(f"profile {profile} (executor {executor}, {threads} thread(s)); prompt {prompt} → {output} tokens", flush=True)
    rows = []
    for batch in batches:
        plan = plan_at(model, cluster_yaml(work, profile, 1), 1, batch, prompt, output, work)
        pred = predicted_decode(plan)["0.0"]
        with Server(plan, model, threads=threads, max_seqs=batch) as srv:
            steps, drift = [], []
            for i in range(runs):
                drift.append(host_bandwidth(threads) / profiled_bw)
                (_, _, st), other, _ = quiet_run(f"b{batch} round {i + 1}", lambda b=batch: offline(srv, b, prompt, output))
                steps.append(st["0.0"][0] / st["0.0"][1])
                print(
                    f"batch {batch} round {i + 1}: decode step {steps[-1] * 1e3:.1f} ms (predicted {pred * 1e3:.1f}); "
                    f"host bandwidth {drift[-1]:.2f}× the profile's; other processes {other:.0%}, load "
                    f"{os.getloadavg()[0]:.2f}",
                    flush=True,
                )
        rows.append((batch, pred, statistics.median(steps), statistics.median(drift)))
    print(
        "| batch | predicted decode step ms | measured (median of rounds) ms | measured / predicted | host bandwidth / profile's |\n|---:|---:|---:|---:|---:|"
    )
    for b, p, m, d in rows:
        print(f"| {b} | {p * 1e3:.1f} | {m * 1e3:.1f} | **{m / p:.2f}** | {d:.2f} |")


def main() -> None:
    global QUIET
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="smaller load (a smoke run; figures are noisier)")
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--prompt", type=int, default=32)
    ap.add_argument("--output", type=int, default=64)
    ap.add_argument("--rate", type=float, default=1.0, help="requests/s for the latency run")
    ap.add_argument("--requests", type=int, default=40, help="requests in the latency run")
    ap.add_argument("--runs", type=int, default=5, help="interleaved throughput rounds (medians are reported)")
    ap.add_argument("--engine-vs-hf", default="", help="comma-separated batches: only the engine vs HF generate")
    ap.add_argument("--threads", type=int, default=2, help="threads of the engine and of HF generate (--engine-vs-hf)")
    ap.add_argument("--predicted", default="", help="comma-separated batches: only predicted vs measured stage steps")
    ap.add_argument("--max-busy", type=float, default=QUIET, help="measure only while other processes use at most this share of the host (1: no waiting)")
    ap.add_argument(
        "--profile",
        default=str(REPO / "out" / "profile-cpu.yaml"),
        help="a 1-thread profile of this host from `hetc profile --device cpu --threads 1` (measured first when missing); every plan is made from it",
    )
    a = ap.parse_args()
    QUIET = a.max_busy
    if a.quick:
        a.batch, a.output, a.requests, a.runs = 8, 16, 10, 1
    work = Path(os.environ.get("HETC_BENCH_DIR", Path(tempfile.gettempdir()) / "hetc-bench-runtime"))
    work.mkdir(parents=True, exist_ok=True)
    model = work / "llama-124m-ctx512"
    build_model(model)
    profile = ensure_profile(Path(a.profile))
    if a.engine_vs_hf:
        engine_vs_hf(model, work, profile, [int(b) for b in a.engine_vs_hf.split(",")], a.prompt, a.output, a.runs, a.threads)
        return
    if a.predicted:
        predicted_vs_measured(model, work, profile, [int(b) for b in a.predicted.split(",")], a.prompt, a.output, a.runs)
        return
    p1, p2, pf = plans(model, work, profile, a.batch, a.prompt, a.output)
    print(
        f"model: Llama {MODEL['hidden_size']}×{MODEL['num_hidden_layers']} layers, vocab {MODEL['vocab_size']}, "
        f"fp32; load: {a.batch} requests × prompt {a.prompt} → {a.output} tokens; host: {os.cpu_count()} cores; "
        f"profile {profile}"
    )
    print(f"plan, 1 device: {describe(p1)}\nplan, 2-device chain: {describe(p2)}\n`hetc plan` over 2 devices, left to itself: {describe(pf)}", flush=True)
    # the bound without a runtime first, while nothing else of ours runs
    ctx, m = a.prompt + a.output // 2, json.loads(p2.read_text())["pipelines"][0]["micro_batches"]
    (bare1, bare2), bare_other, waited = quiet_run(
        "bare steps",
        lambda: (bare_step_ms(model, p1, 0, a.batch, ctx, threads=2), {f"0.{i}": bare_step_ms(model, p2, i, a.batch // m, ctx, threads=1) for i in range(m)}),
    )
    print(
        f"bare decode steps (ms): 1 stage × 2 threads, {a.batch} seqs {bare1:.1f}; 2 stages × 1 thread, "
        f"{a.batch // m} seqs " + " / ".join(f"{v:.1f}" for v in bare2.values()) + f" (other processes: {bare_other:.0%} of the host)",
        flush=True,
    )
    # every server up at once (an idle one only sends a heartbeat a second), HF in this process;
    # they are measured in turn, round after round, so a burst of load from another process
    # on this shared host hits all of them alike; medians over the rounds are reported
    s1 = Server(p1, model, threads=2, max_seqs=a.batch)
    s2 = Server(p2, model, threads=1, max_seqs=a.batch)
    s3 = Server(pf, model, threads=1, max_seqs=a.batch)
    with s1, s2, s3:
        hf = HFGenerate(model, a.batch, a.prompt, a.output, threads=2)
        print(f"host load average at the start (1 min): {os.getloadavg()[0]:.2f}")
        rounds = []
        for i in range(a.runs):
            # each measurement on its own quiet stretch (a few seconds each): another process's
            # burst then costs one of them a rerun, not the whole round
            runs = [
                quiet_run(f"round {i + 1}, {name}", fn)
                for name, fn in (
                    ("1×2", lambda: offline(s1, a.batch, a.prompt, a.output)),
                    ("2×1", lambda: offline(s2, a.batch, a.prompt, a.output)),
                    ("planner's own", lambda: offline(s3, a.batch, a.prompt, a.output)),
                    ("HF", hf.tok_s),
                )
            ]
            other = max(r[1] for r in runs)
            waited += sum(r[2] for r in runs)
            rounds.append(tuple(r[0] for r in runs) + (other,))
            r = rounds[-1]
            print(
                f"round {len(rounds)}: 1×2 {r[0][0]:.1f}, 2×1 {r[1][0]:.1f}, planner's own {r[2][0]:.1f}, HF "
                f"{r[3]:.1f} tok/s; 2×1 / 1×2 {r[1][0] / r[0][0]:.2f}, engine / HF {r[0][0] / r[3]:.2f}; busy 2×1 "
                + " / ".join(f"{v:.2f}" for _, v in sorted(r[1][1].items()))
                + f"; other processes at most {other:.0%} of the host, load {os.getloadavg()[0]:.2f}",
                flush=True,
            )
        # the offline rounds' steps only (batch / m sequences per micro-batch)
        measured = {k: sum(r[1][2][k][0] for r in rounds) / sum(r[1][2][k][1] for r in rounds) for k in rounds[0][1][2]}
        lat = at_rate(s2, a.rate, a.requests, a.prompt, a.output)
    med = statistics.median
    one, two, free = (med(r[i][0] for r in rounds) for i in range(3))
    hf_med = med(r[3] for r in rounds)
    busy2 = {k: med(r[1][1][k] for r in rounds) for k in rounds[0][1][1]}
    busy1 = med(next(iter(r[0][1].values()), 0.0) for r in rounds)
    load = os.getloadavg()
    print(
        f"host load average at the end (1/5/15 min): {load[0]:.2f} / {load[1]:.2f} / {load[2]:.2f} "
        f"(our servers' own work counts in it); waited {waited:.0f} s in all for a quiet host"
    )
    print(f"| figure (median of {a.runs} interleaved rounds) | value |\n|---|---:|")
    print(f"| other processes' share of the host during the rounds, median / max | {med(r[4] for r in rounds):.0%} / {max(r[4] for r in rounds):.0%} |")
    print(f"| 1 stage × 2 threads, output tok/s | {one:.1f} |")
    print(f"| 2 stages × 1 thread, output tok/s | {two:.1f} |")
    print(f"| ratio (2×1 / 1×2), target ≥ 0.9 | {two / one:.2f} (per round " + ", ".join(f"{r[1][0] / r[0][0]:.2f}" for r in rounds) + ") |")
    bound = bare1 / (m * max(bare2.values()))
    print(f"| bound on that ratio from bare decode steps, T(1 stage) / ({m} · slowest stage) | {bound:.2f} |")
    for k, v in sorted(busy2.items()):
        print(f"| stage {k}: busy share (pipeline efficiency) / bubble share | {v:.2f} / {1 - v:.2f} |")
    print(f"| 1 stage: busy share | {busy1:.2f} |")
    print(f"| `hetc plan`'s own plan for the 2 devices, 1 thread each, output tok/s / ÷ 1×2 | {free:.1f} / {free / one:.2f} |")
    print(f"| HF generate (static cache, 2 threads), output tok/s | {hf_med:.1f} |")
    print(
        f"| engine (1 stage × 2 threads) / HF generate, target ≥ 1.0 | {one / hf_med:.2f} (per round "
        + ", ".join(f"{r[0][0] / r[3]:.2f}" for r in rounds)
        + ") |"
    )
    print(f"| 2 stages at {a.rate:g} req/s ({a.requests} requests): TTFT p50 / p99 ms | {lat['ttft_p50']:.0f} / {lat['ttft_p99']:.0f} |")
    print(f"| 2 stages at {a.rate:g} req/s: TPOT p50 / p99 ms | {lat['tpot_p50']:.1f} / {lat['tpot_p99']:.1f} |")
    pred = predicted_decode(p2)
    for k in sorted(measured):
        print(
            f"| stage {k} decode step ({a.batch // m} seqs), measured in serving / bare / the plan's predicted_ms | "
            f"{measured[k] * 1e3:.1f} / {bare2[k]:.1f} / {pred[k] * 1e3:.1f} ms (×{measured[k] / pred[k]:.2f}, "
            f"bare ×{bare2[k] / 1e3 / pred[k]:.2f}) |"
        )


if __name__ == "__main__":
    main()
