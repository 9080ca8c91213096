"""guidellm against `hetc serve`, beside `hetc evaluate` of the same plan and load (BENCHMARKS.md
"Capacity planning and simulator fidelity"; issue 32's client check).

    python benchmarks/guidellm_vs_evaluate.py [--concurrency 1,4,16] [--rate 0] [--arrivals constant] [--requests 48] [--runs 3] [--pin] [--control]

Model: the Llama of benchmarks/runtime_cpu.py (hidden 768, 12 layers, vocab 32000, context 512;
random fp32 weights) saved with a 32,000-token byte-level BPE (benchmarks/grammar_mask.py's,
trained offline on the standard library), so that guidellm's synthetic prompts tokenize as the
server reads them. Plan: one worker process (`--placement h:0`, batch = the largest concurrency)
on a cluster of one device of this host's measured 1-thread profile; served `--emulate --threads 1`.

Load, the same for both: prompts of P tokens, O output tokens (EOS ignored), guidellm's
`concurrent` profile at each C (a closed loop of C streams) and, with `--rate R`, an open loop at R
requests/s; N requests each. `hetc evaluate` simulates `--concurrency C` (or the open loop's arrivals)
with `--requests N` and the same lengths. The open loop is guidellm's `constant` profile by default
(request i at i / R, simulated as a trace of those arrivals): guidellm 0.8.1's `poisson` profile sends
every request at once (benchmarks/logs/guidellm-2026-11-28.md); `--arrivals poisson` still runs it. With `--pin`, the server's worker process has
core 0 to itself and the server's frontend and guidellm share core 1 (a device of its own, as on a
real host; by default all share both cores). Figures: output tok/s, TTFT p50/p99,
TPOT p50/p99 — guidellm's per-request `inter_token_latency` (first token excluded, as vLLM's TPOT
and hetc's) against evaluate's TPOT. Targets (issue 32): throughput within 10%, p50s within 15%,
p99s within 25% of the median over the runs, each run a fresh guidellm process against the one
server. With `--control`, each closed loop is also run from the benchmark's own one-process client
(benchmarks/prefix_cache.py's `closed_loop`: random token ids of the same lengths), on guidellm's
cores: on this 2-core host the client's CPU comes out of the server's, and the two clients' figures
side by side say how much.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))
import runtime_cpu as rc  # noqa: E402  the model, profile, cluster and server of the CPU runtime figures
from grammar_mask import train_tokenizer  # noqa: E402
from prefix_cache import hetc  # noqa: E402

from hetc.capacity.load import Request, write_trace  # noqa: E402

TARGETS = {"output_throughput": 0.10, "median_ttft_ms": 0.15, "p99_ttft_ms": 0.25, "median_tpot_ms": 0.15, "p99_tpot_ms": 0.25}


def build(d: Path) -> Path:
    """The benchmark's model folder: weights and tokenizer."""
    rc.build_model(d)
    if not (d / "tokenizer.json").is_file():
        train_tokenizer(rc.MODEL["vocab_size"], d)
    return d


def pin(server: int) -> None:
    """The server's worker processes (every thread) on core 0; its frontend on core 1."""
    import psutil

    def move(pid: int, cpus: set[int]) -> None:
        for tid in os.listdir(f"/proc/{pid}/task"):
            os.sched_setaffinity(int(tid), cpus)

    move(server, {1})
    for child in psutil.Process(server).children(recursive=True):
        move(child.pid, {0})


def guidellm(url: str, model: Path, profile: str, requests: int, prompt: int, output: int, out: Path, cpus: set[int] | None) -> dict[str, float]:
    """One guidellm run (a fresh process); its figures, named as `hetc evaluate` names them.

    From guidellm's JSON report: output tok/s = output tokens / the benchmark's duration; TTFT and
    TPOT percentiles over its successful requests' own `time_to_first_token_ms` and
    `inter_token_latency_ms` ((latency − TTFT) / (tokens − 1): vLLM's TPOT, and hetc's)."""
    cmd = [str(Path(sys.executable).parent / "guidellm"), "run", "--backend", f"kind=openai_http,target={url},model=m,request_format=/v1/completions"]
    cmd += ["--profile", profile, "--constraint", f"kind=max_requests,count={requests}"]
    cmd += ["--data", f"kind=synthetic_text,prompt_tokens={prompt},output_tokens={output}", "--tokenizer", f"kind=hf_auto,model={model}"]
    cmd += ["--output", f"kind=json,path={out}", "--disable-console-interactive"]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    affinity = (lambda: os.sched_setaffinity(0, cpus)) if cpus else None
    r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=3600, preexec_fn=affinity)
    if r.returncode:
        sys.exit(f"guidellm failed ({' '.join(cmd)}):\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}")
    bench = json.loads(out.read_text())["benchmarks"][0]
    ok = bench["requests"]["successful"]
    if len(ok) != requests:  # said, and the figures are over the rest (a 429 is the server's admission)
        errors = [q["info"].get("error", "") for q in bench["requests"]["errored"]]
        print(f"  guidellm: {requests - len(ok)} of {requests} requests failed; the first: {errors[:1]}", flush=True)
    if not ok:
        sys.exit("guidellm: no request succeeded")
    ttft = [q["time_to_first_token_ms"] for q in ok]
    tpot = [q["inter_token_latency_ms"] for q in ok]
    # what guidellm sent, not what it was asked: 0.8.1's poisson profile here sends every request at once
    # (its workers' targets are relative times, compared with the clock: benchmarks/logs/guidellm-2026-11-28.md)
    starts = sorted(q["request_start_time"] for q in ok)
    return {
        "sent_req_s": (len(starts) - 1) / (starts[-1] - starts[0]) if starts[-1] > starts[0] else math.inf,
        "output_throughput": sum(q["output_tokens"] for q in ok) / bench["duration"],
        "median_ttft_ms": float(np.median(ttft)),
        "p99_ttft_ms": float(np.percentile(ttft, 99)),
        "median_tpot_ms": float(np.median(tpot)),
        "p99_tpot_ms": float(np.percentile(tpot, 99)),
    }


def control(url: str, streams: int, a: argparse.Namespace, cpus: set[int] | None, run: int) -> dict[str, float]:
    """The same closed loop from the benchmark's own client: one process, one event loop, a few ms of
    CPU per request where guidellm spends much more; on this 2-core host the client's CPU comes out
    of the server's (`--pin`: the frontend's core), so the two clients' figures differ by its share."""
    from prefix_cache import closed_loop

    rng = np.random.default_rng(run)
    prompts = [rng.integers(100, 30000, a.prompt).tolist() for _ in range(a.requests)]
    mask = os.sched_getaffinity(0)
    if cpus:
        os.sched_setaffinity(0, cpus)
    try:
        return closed_loop(url, prompts, streams, a.output)
    finally:
        os.sched_setaffinity(0, mask)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--concurrency", default="1,4,16", help="guidellm concurrent profiles: streams, comma-separated ('' for none)")
    ap.add_argument("--batch", type=int, default=0, help="the plan's batch and the server's --max-num-seqs (default: the most streams, or 16)")
    ap.add_argument("--rate", type=float, default=0.0, help="also an open loop at this many requests/s (0: none)")
    ap.add_argument("--arrivals", choices=["constant", "poisson"], default="constant", help="the open loop's guidellm profile")
    ap.add_argument("--requests", type=int, default=48, help="requests per profile and run")
    ap.add_argument("--prompt", type=int, default=128)
    ap.add_argument("--output", type=int, default=64)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--profile", default=str(REPO / "out" / "profile-cpu.yaml"))
    ap.add_argument("--pin", action="store_true", help="the server's worker alone on core 0; its frontend and guidellm on core 1")
    ap.add_argument(
        "--control", action="store_true", help="also each closed loop from a one-process client (benchmarks/prefix_cache.py's), on guidellm's cores"
    )
    a = ap.parse_args()
    work = Path(os.environ.get("HETC_BENCH_DIR", Path(tempfile.gettempdir()) / "hetc-bench-guidellm"))
    work.mkdir(parents=True, exist_ok=True)
    model = build(work / "llama-768x12")
    profile = rc.ensure_profile(Path(a.profile))
    cluster = rc.cluster_yaml(work, profile, 1)
    streams = [int(c) for c in a.concurrency.split(",") if c]
    batch = str(a.batch or max(streams, default=16))
    plan = work / "plan.json"
    hetc("plan", str(model), "--profiles", str(cluster), "-o", str(plan), "--dtype", "fp32", "--tp", "1", "--placement", "h:0", "--batch", batch,
         "--input-len", str(a.prompt), "--output-len", str(a.output))  # fmt: skip
    limits = ["--max-num-seqs", batch, "--max-batched-tokens", "512"]
    lengths = ["--requests", str(a.requests), "--input-len-dist", str(a.prompt), "--output-len-dist", str(a.output), *limits]
    # (name, guidellm's profile, evaluate's load, streams of a closed loop or None)
    loads: list[tuple[str, str, list[str], int | None]] = [
        (f"concurrent {c}", f"kind=concurrent,streams={c}", ["--concurrency", str(c), *lengths], c) for c in streams
    ]
    if a.rate and a.arrivals == "poisson":
        loads.append((f"poisson {a.rate:g}/s", f"kind=poisson,rate={a.rate}", ["--rate", str(a.rate), *lengths], None))
    elif a.rate:
        trace = work / f"constant-{a.rate:g}.jsonl"
        write_trace([Request(i / a.rate, a.prompt, a.output) for i in range(a.requests)], trace)
        loads.append((f"constant {a.rate:g}/s", f"kind=constant,rate={a.rate}", ["--trace", str(trace), *limits], None))
    pinned = "; pinned: worker on core 0, frontend and guidellm on core 1" if a.pin else ""
    print(f"model: Llama 768×12 (vocab 32000), fp32; profile {profile}; {rc.describe(plan)}; P {a.prompt}, O {a.output}, N {a.requests}{pinned}", flush=True)
    srv = rc.Server(plan, model, 1, int(batch))
    rows = []
    with srv:
        if a.pin:
            pin(srv.proc.pid)
        for name, gl_profile, ev_load, closed in loads:
            predicted = json.loads(hetc("evaluate", str(plan), *ev_load, "--json"))
            runs, la = [], []
            for run in range(a.runs):
                report = work / f"gl-{name.replace(' ', '-')}-{run}.json"
                runs.append(guidellm(srv.url, model, gl_profile, a.requests, a.prompt, a.output, report, {1} if a.pin else None))
                la.append(os.getloadavg()[0])
                print(f"  {name} run {run + 1}: " + ", ".join(f"{k} {v:,.1f}" for k, v in runs[-1].items()) + f" (load average {la[-1]:.1f})", flush=True)
            print(f"  {name} hetc evaluate: " + ", ".join(f"{k} {predicted[k]:,.1f}" for k in TARGETS), flush=True)
            rows.append((name, runs, predicted, la))
            if a.control and closed:
                light = [control(srv.url, closed, a, {1} if a.pin else None, run) for run in range(a.runs)]
                for run, m in enumerate(light):
                    print(f"  {name} one-process client run {run + 1}: " + ", ".join(f"{k} {v:,.1f}" for k, v in m.items()), flush=True)
                rows.append((f"{name}, one-process client", light, predicted, la))
    print("\n| load | figure | measured (median of runs; each) | hetc evaluate | evaluate / measured | target |\n|---|---|---:|---:|---:|---|")
    for name, runs, predicted, _ in rows:
        for k, target in TARGETS.items():
            if k not in runs[0]:
                continue
            each = [r[k] for r in runs]
            med, pred = float(np.median(each)), predicted[k]
            ok = "✓" if abs(pred / med - 1) <= target else "✗"
            print(f"| {name} | {k} | {med:,.1f} ({', '.join(f'{x:,.1f}' for x in each)}) | {pred:,.1f} | {pred / med:.2f} | {ok} ±{target:.0%} |")
    print(f"\nload average during the runs: {min(min(r[3]) for r in rows):.1f}–{max(max(r[3]) for r in rows):.1f}")


if __name__ == "__main__":
    main()
