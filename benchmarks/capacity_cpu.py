"""The serving simulator against the real server (BENCHMARKS.md "Capacity planning: the simulator
against hetc serve").

    python benchmarks/capacity_cpu.py [--quick] [--profile out/profile-cpu.yaml] [--bare-only]
    python benchmarks/capacity_cpu.py --model moe [--profile out/profile-cpu-torch.yaml]

Model and profile as benchmarks/runtime_cpu.py: a Llama of hidden 768, 12 layers, vocab 32000
(124M parameters, random fp32 weights), plans made with a measured 1-thread profile of this host
(`hetc profile --device cpu --threads 1`, measured first when the file is missing). Three plans,
each from `hetc plan` (fp32, tp 1):

- "1 stage": `--placement h:0 --batch B` on a cluster of one device;
- "2 stages": `--placement h:0|h:1 --batch B` on two devices (linked by the profile's own gloo
  measurement between two processes);
- "pools": `--disaggregate on` on the same two devices: a prefill pool and a decode pool (planned
  for prompts of P + O tokens: `hetc serve` takes a request only when prompt + output fit its
  smallest lane's KV pool, and a prefill pool's holds the planned prompts only).

For each plan and rate, one arrival trace is drawn (Poisson, prompt P, output O tokens, EOS
ignored) and written to a JSONL file; the same file is replayed into `hetc serve --emulate`
(every request streamed, sent at its arrival time) and into `hetc evaluate --trace` (the
simulator). Both run with the same server limits (`--max-num-seqs`, `--max-batched-tokens`,
`--max-queue-wait`). The simulator's step times come from the profile and the cost model only —
nothing it uses is measured from a served run — so the comparison is not circular. Rates: one
below the plan's predicted saturation and one past it (there the figures to compare are the
output throughput and the count of 429s, not an ever-growing p99).

Compared (client side for the server, the same definitions for the simulator): output
throughput (tokens / first arrival to last token), TTFT and TPOT p50 and p99, 429s. Targets:
throughput within 10%, p50 within 15%, p99 within 25%. Each served run waits for a quiet host
(runtime_cpu.quiet_run) and is run again when other processes took more than 5% of it, or when the
reference steps (REFERENCE_STEPS), timed bare just before and just after it, are off the cost model by
more than the profile's own 10% bar: then the host ran unlike the profile the simulator reads, and a
row measured so is printed "not judgeable" rather than compared.

`--model moe`: a Qwen3-MoE of the same width and depth (16 routed experts of 512, top 2; 330M
parameters, random fp32 weights; the embedding drawn wide enough that a prompt's tokens spread over
the experts as a load-balanced router's do: EMBED_STD, and the run prints the spread it measured). Its stages run on the eager torch stage (MoE routing has no
compiled lowering: backends/decoder.py eager_only), so the profile is one measured on that executor
(`hetc profile --device cpu --threads 1 --executor torch`). Plans: "1 stage" as above, and "EP 2":
one stage over both devices (`--placement h:0-1`), attention tensor-parallel and each worker holding
8 experts whole (`--experts ep`, what hetc serve runs), joined by gloo.
"""

from __future__ import annotations

import argparse
import asyncio
import json
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
import runtime_cpu as rc  # noqa: E402  the model, the profile and the quiet-host gating

from hetc.host import free_port  # noqa: E402
from hetc.capacity.load import LengthDist, Load, write_trace  # noqa: E402

TARGETS = {"output_throughput": 0.10, "p50_ttft_ms": 0.15, "p50_tpot_ms": 0.15, "p99_ttft_ms": 0.25, "p99_tpot_ms": 0.25}


def hetc(*args: str) -> str:
    r = subprocess.run([sys.executable, "-m", "hetc.cli", *args], cwd=REPO, capture_output=True, text=True)
    if r.returncode:
        sys.exit(f"hetc {' '.join(args)} failed:\n{r.stderr}")
    return r.stdout


# a Qwen3-MoE as wide and deep as runtime_cpu.MODEL's Llama
MOE_MODEL = dict(
    vocab_size=32000,
    hidden_size=768,
    intermediate_size=2048,
    moe_intermediate_size=512,
    num_experts=16,
    num_experts_per_tok=2,
    num_hidden_layers=12,
    num_attention_heads=12,
    num_key_value_heads=4,
    head_dim=64,
    max_position_embeddings=512,
)


# The embedding's init std. At transformers' 0.02 the random layers' outputs swamp each token's own
# direction in the residual stream (by layer 11 the tokens of a prompt share 96% of their norm), so a
# random router sends a 32-token prompt to 6.5 of 16 experts where a load-balanced router sends it to
# 15.8: a step far cheaper than the cost model's uniform routing prices. At 2.0 the token dominates
# and a prompt's tokens spread over the experts as uniform routing expects (`routing_spread`).
EMBED_STD = 2.0


def build_moe(d: Path) -> None:
    import torch
    from transformers import Qwen3MoeConfig, Qwen3MoeForCausalLM

    if (d / "model.safetensors").is_file():
        return
    torch.manual_seed(0)
    model = Qwen3MoeForCausalLM(Qwen3MoeConfig(**MOE_MODEL)).eval()
    torch.nn.init.normal_(model.model.embed_tokens.weight, std=EMBED_STD)
    model.save_pretrained(d)


def routing_spread(model: Path, tokens: tuple[int, ...] = (1, 8, 32, 128), prompts: int = 6) -> list[tuple[int, float, float]]:
    """(tokens, experts a prompt of that many tokens touches per MoE layer, the count uniform routing
    expects: E·(1 − (1 − k/E)^T), which the cost model prices), measured with transformers on
    random prompts."""
    import torch
    from transformers import AutoModelForCausalLM

    hf = AutoModelForCausalLM.from_pretrained(model, dtype=torch.float32).eval()
    e, k = MOE_MODEL["num_experts"], MOE_MODEL["num_experts_per_tok"]
    g = torch.Generator().manual_seed(1)
    out = []
    for t in tokens:
        touched = []
        for _ in range(prompts):
            with torch.no_grad():
                logits = hf(torch.randint(3, MOE_MODEL["vocab_size"], (1, t), generator=g), output_router_logits=True).router_logits
            touched += [int(torch.bincount(r.topk(k, dim=-1).indices.flatten(), minlength=e).count_nonzero()) for r in logits]
        out.append((t, float(np.mean(touched)), e * (1 - (1 - k / e) ** t)))
    return out


def make_plans(model: Path, work: Path, profile: Path, batch: int, prompt: int, output: int, moe: bool) -> dict[str, Path]:
    c1, c2 = rc.cluster_yaml(work, profile, 1), rc.cluster_yaml(work, profile, 2)
    common = ["--dtype", "fp32", "--input-len", str(prompt), "--output-len", str(output), "--time-limit", "5"]
    at = ["--batch", str(batch)]
    cases = (
        (("1 stage", c1, ["--tp", "1", "--placement", "h:0", *at]), ("EP 2", c2, ["--experts", "ep", "--placement", "h:0-1", *at]))
        if moe
        else (
            ("1 stage", c1, ["--tp", "1", "--placement", "h:0", *at]),
            ("2 stages", c2, ["--tp", "1", "--placement", "h:0|h:1", *at]),
            ("pools", c2, ["--tp", "1", "--disaggregate", "on"]),
        )
    )
    out = {}
    for name, cluster, extra in cases:
        path = work / f"plan-{name.replace(' ', '-')}.json"
        args = [*common, *extra]
        if name == "pools":  # the server takes prompt + output ≤ its smallest lane's KV, and a prefill pool's
            args[args.index("--input-len") + 1] = str(prompt + output)  # holds the plan's prompts only
        hetc("plan", str(model), "--profiles", str(cluster), "-o", str(path), *args)
        out[name] = path
    return out


class Server(rc.Server):
    """hetc serve --emulate with the limits both sides share."""

    def __init__(self, plan: Path, model: Path, limits: list[str]):
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
                "1",
                *limits,
                "--served-model-name",
                "m",
            ],
            cwd=REPO,
            stderr=subprocess.DEVNULL,
        )


async def _one(ac: httpx.AsyncClient, url: str, prompt: list[int], out_len: int) -> dict:
    t0 = time.perf_counter()
    times: list[float] = []
    body = {"model": "m", "prompt": prompt, "max_tokens": out_len, "temperature": 0, "stream": True, "ignore_eos": True, "return_token_ids": True}
    async with ac.stream("POST", f"{url}/v1/completions", json=body) as r:
        if r.status_code != 200:
            await r.aread()
            return {"status": r.status_code, "sent": t0}
        async for line in r.aiter_lines():
            if line.startswith("data: {"):
                k = len(json.loads(line[6:])["choices"][0].get("token_ids") or [])
                times += [time.perf_counter()] * k
    return {"status": 200, "sent": t0, "times": times}


def replay(srv: Server, trace: list[dict], prompt_seed: int) -> list[dict]:
    """Send every request of `trace` at its arrival time; what each got (status, token times)."""
    prompts = rc.prompts(len(trace), max(r["input_len"] for r in trace), prompt_seed)

    async def go():
        async with httpx.AsyncClient(timeout=600, limits=httpx.Limits(max_connections=1000)) as ac:
            await _one(ac, srv.url, prompts[0][:8], 2)  # warm-up
            t0 = time.perf_counter()
            tasks = []
            for r, p in zip(trace, prompts):
                await asyncio.sleep(max(0.0, t0 + r["arrival"] - time.perf_counter()))
                tasks.append(asyncio.create_task(_one(ac, srv.url, p[: r["input_len"]], r["output_len"])))
            return await asyncio.gather(*tasks)

    return asyncio.run(go())


def quiet(fn, wait_s: float, busy: float = 0.05, tries: int = 3, judgeable=lambda out: True):
    """(fn(), others' share of the host while it ran, seconds waited): each try waits up to `wait_s`
    for a quiet host (runtime_cpu.wait_quiet); a run during which other processes took more than
    `busy` of the host, or whose output `judgeable` refuses, is made again, up to `tries` times (the
    last one is kept, its share reported)."""
    waited = 0.0
    for i in range(tries):
        waited += rc.wait_quiet(limit_s=wait_s, busy=busy)
        since = (rc._cpu_ticks(), time.monotonic())
        out = fn()
        other = rc.others_share(since)
        if (other <= busy and judgeable(out)) or i == tries - 1:
            return out, other, waited
        why = f"other processes took {other:.0%} of the host meanwhile" if other > busy else "the host ran unlike its profile"
        print(f"  {why}: measured again", flush=True)
    raise AssertionError("unreachable")


# The steps that tell whether the host runs as its profile says, measured bare just before and just
# after each served run: a host whose speed moved (these 2-core hosts swing by 10-20% within minutes,
# and by 2x at times) makes served-vs-simulated a measure of that move, not of the simulator.
REFERENCE_STEPS = {True: ("decode b8 ", "prefill 32 "), False: ("decode b8 ", "prefill b1 t32")}
AS_PROFILED = 0.10  # the profile's own bar for whole steps (fidelity_cpu.py: prefill and decode steps ≤ 10%)


def as_profiled(model: Path, plan: Path, moe: bool) -> float:
    """The median cost-model/bare ratio over the reference steps now: 1.0 where the host runs as profiled."""
    return float(np.median([m / b for _, b, m in bare_vs_model(model, plan, moe, REFERENCE_STEPS[moe])]))


def steady(ratios: tuple[float, float]) -> bool:
    """Both reference readings (before, after a run) within the profile's bar of its cost model."""
    return all(abs(r - 1) <= AS_PROFILED for r in ratios)


def cpu_seconds(frontend: int) -> dict[str, float]:
    """CPU seconds so far of the server's frontend, each of its workers (its children) and this
    client process: what our own processes ask of the host's cores."""
    kids, ticks = rc.process_ticks()
    tck = os.sysconf("SC_CLK_TCK")
    return {"client": sum(os.times()[:2]), "frontend": ticks.get(frontend, 0) / tck, **{f"worker {w}": ticks.get(w, 0) / tck for w in kids.get(frontend, [])}}


def run_queue_waits(frontend: int) -> dict[str, float]:
    """Seconds each of the server's workers (the frontend's children) has spent runnable but not
    running so far, over all its threads (/proc/PID/task/*/schedstat, second field): time its
    steps lose waiting for a core that another process holds — which a profile measured with the
    device alone never sees."""
    kids, _ = rc.process_ticks()
    out = {}
    for w in kids.get(frontend, []):
        total = 0
        for t in os.listdir(f"/proc/{w}/task") if os.path.isdir(f"/proc/{w}/task") else []:
            try:
                with open(f"/proc/{w}/task/{t}/schedstat") as f:
                    total += int(f.read().split()[1])
            except (OSError, IndexError, ValueError):
                continue
        out[f"worker {w}"] = total / 1e9
    return out


def stage_steps(url: str) -> dict[str, list[float]]:
    """Per stage (lane.stage), [seconds, count] of every micro-batch step it ran so far: the
    workers' own timing (forward and their host work around it), from /metrics."""
    out: dict[str, list[float]] = {}
    for line in httpx.get(f"{url}/metrics").text.splitlines():
        for i, suffix in enumerate(("_sum{", "_count{")):
            if line.startswith("hetc_stage_step_seconds" + suffix):
                stage = line.split('stage="')[1].split('"')[0]
                out.setdefault(stage, [0.0, 0.0])[i] += float(line.rsplit(" ", 1)[1])
    return out


def step_ms(before: dict[str, list[float]], after: dict[str, list[float]]) -> dict[str, float]:
    """Mean step (ms) per stage between two `stage_steps` readings."""
    return {k: (v[0] - before.get(k, [0, 0])[0]) / max(1.0, v[1] - before.get(k, [0, 0])[1]) * 1e3 for k, v in after.items()}


def bare_vs_model(model: Path, plan: Path, moe: bool, only: tuple[str, ...] = ()) -> list[tuple[str, float, float]]:
    """(step, measured ms, the simulator's cost-model part ms): the whole model's steps run bare in
    this process by the executor that serves it (OpenVINO for the Llama, as `hetc profile` runs its
    probe; the eager torch stage for the MoE: no frontend, transport or second process), against what
    the 1-stage lane's step costs in the simulator less the profile's serving host work — which part of
    a gap is the cost model's. `only`: the steps whose names start with one of these (default all)."""
    from hetc.capacity.evaluate import model_of
    from hetc.capacity.lanes import StepShape, lanes_of
    from hetc.cluster import Cluster
    from hetc.partitioner.cost_models.analytic import Step
    from hetc.partitioner.profiling.bench import run_cases
    from hetc.partitioner.profiling.compiled_steps import OpenVinoLlama
    from hetc.partitioner.estimate.simulate import Workload
    from hetc.plan import load_plan

    p = load_plan(plan)
    units = model_of(p, str(plan)).units
    lane = lanes_of(p, units, Cluster.from_json(p.cluster), Workload(32, 64, p.model.dtype, p.model.kv_dtype))[0]
    sv, vocab = lane.stages[0].node.profile.serving, lane.stages[0].vocab
    assert vocab  # the 1-stage lane samples

    def wanted(name: str) -> bool:
        return not only or name.startswith(only)

    if moe:  # decode steps at context 64 and one-prompt prefills (runtime_cpu.bare_step_ms: the served stage class on 1 thread)
        decodes, prefills = [b for b in (1, 2, 4, 8) if wanted(f"decode b{b} ")], [t for t in (8, 32, 128) if wanted(f"prefill {t} ")]
        steps = [(f"decode b{b} ctx64", Step(b, b, 64), rc.bare_step_ms(model, plan, 0, b, 64, 1) / 1e3) for b in decodes]
        steps += [(f"prefill {t} tokens", Step(t, 1, t / 2), rc.bare_step_ms(model, plan, 0, 1, 0, 1, new=t) / 1e3) for t in prefills]
    else:
        ov = OpenVinoLlama(json.loads((model / "config.json").read_text()), units=units, threads=1)
        cases = [c for c in (*(ov.decode_case(b, 64) for b in (1, 4, 8, 16)), ov.prefill_case(1, 32)) if wanted(c.name)]
        run_cases(cases, rounds=3)
        steps = [(c.name, c.meta["step"], c.seconds) for c in cases]
    out = []
    for name, st, seconds in steps:
        seqs, tokens = int(st.seqs), int(st.tokens)
        shape = StepShape(Step(st.tokens, st.seqs, st.ctx), seqs, seqs, tokens)
        host = sv.stage_step(seqs, tokens) + seqs * lane.overheads.sample_per_row
        out.append((name, seconds * 1e3, (lane.step_time(0, shape) - host) * 1e3))
    return out


def measured_metrics(res: list[dict]) -> dict[str, float]:
    ok = [r for r in res if r["status"] == 200 and r["times"]]
    ttft = np.array([(r["times"][0] - r["sent"]) * 1e3 for r in ok])
    tpot = np.array([(r["times"][-1] - r["times"][0]) / (len(r["times"]) - 1) * 1e3 for r in ok if len(r["times"]) > 1])
    span = max(r["times"][-1] for r in ok) - min(r["sent"] for r in res)
    return {
        "output_throughput": sum(len(r["times"]) for r in ok) / span,
        "refused_429": sum(r["status"] == 429 for r in res),
        "completed": len(ok),
        "p50_ttft_ms": float(np.median(ttft)),
        "p99_ttft_ms": float(np.percentile(ttft, 99)),
        "p50_tpot_ms": float(np.median(tpot)),
        "p99_tpot_ms": float(np.percentile(tpot, 99)),
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="fewer requests (a smoke run)")
    ap.add_argument("--requests", type=int, default=120)
    ap.add_argument("--batch", type=int, default=8, help="the placements' batch and the server's --max-num-seqs")
    ap.add_argument("--prompt", type=int, default=32)
    ap.add_argument("--output", type=int, default=64)
    ap.add_argument("--loads", default="0.5,1.5", help="rates as fractions of each plan's predicted saturation")
    ap.add_argument("--max-queue-wait", type=float, default=3.0)
    ap.add_argument("--only", default="", help="comma-separated plan names (default: all)")
    ap.add_argument("--model", choices=("llama", "moe"), default="llama", help="the served model (above)")
    ap.add_argument("--profile", default=None, help="default out/profile-cpu.yaml (llama), out/profile-cpu-torch.yaml (moe)")
    ap.add_argument("--quiet-wait", type=float, default=900.0, help="seconds to wait for a quiet host before each run")
    ap.add_argument("--tries", type=int, default=3, help="runs made when other processes took over 5%% of the host")
    ap.add_argument("--bare-only", action="store_true", help="only the whole model's bare steps against the cost model (no server; a minute)")
    a = ap.parse_args()
    if a.quick:
        a.requests = 30
    work = Path(os.environ.get("HETC_BENCH_DIR", Path(tempfile.gettempdir()) / "hetc-bench-runtime"))
    work.mkdir(parents=True, exist_ok=True)
    moe = a.model == "moe"
    model = work / ("qwen3moe-330m-ctx512-spread" if moe else "llama-124m-ctx512")
    (build_moe if moe else rc.build_model)(model)
    profile = rc.ensure_profile(Path(a.profile or REPO / "out" / ("profile-cpu-torch.yaml" if moe else "profile-cpu.yaml")), "torch" if moe else "auto")
    plans = make_plans(model, work, profile, a.batch, a.prompt, a.output, moe)
    if a.bare_only:
        print_bare(model, plans["1 stage"], moe)
        return
    limits = ["--max-num-seqs", str(a.batch), "--max-batched-tokens", "512", "--max-queue-wait", str(a.max_queue_wait)]
    print(
        f"model: {'Qwen3-MoE 768×12, 16 experts top 2' if moe else 'Llama 768×12'}, fp32; profile {profile}; host {os.cpu_count()} cores; "
        f"load: Poisson, prompt {a.prompt}, output {a.output}, {a.requests} requests; limits {' '.join(limits)}",
        flush=True,
    )
    rows = []
    only = set(filter(None, a.only.split(",")))
    for name, plan in plans.items():
        if only and name not in only:
            continue
        doc = json.loads(plan.read_text())
        sat = doc["predicted"]["output_tok_s"] / a.output
        print(f"{name}: {rc.describe(plan)}", flush=True)
        with Server(plan, model, limits) as srv:
            for frac in map(float, a.loads.split(",")):
                rate = sat * frac
                trace = work / f"trace-{plan.stem}-{frac:g}.jsonl"
                load = Load.open(rate, a.requests, LengthDist.parse(str(a.prompt), "p"), LengthDist.parse(str(a.output), "o"), seed=1)
                write_trace(load.requests, trace)
                reqs = [json.loads(x) for x in trace.read_text().splitlines()]

                def run(reqs=reqs) -> dict:
                    """The served run between two readings of the reference steps; its own figures."""
                    host0 = as_profiled(model, plans["1 stage"], moe)
                    steps0, cpu0, rq0, t0 = stage_steps(srv.url), cpu_seconds(srv.proc.pid), run_queue_waits(srv.proc.pid), time.monotonic()
                    got = replay(srv, reqs, 7)
                    wall, cpu1 = time.monotonic() - t0, cpu_seconds(srv.proc.pid)
                    return {
                        "meas": measured_metrics(got),
                        "steps": step_ms(steps0, stage_steps(srv.url)),
                        "cores": {k: (v - cpu0.get(k, 0.0)) / wall for k, v in cpu1.items()},
                        "waits": {k: (v - rq0.get(k, 0.0)) / wall for k, v in run_queue_waits(srv.proc.pid).items()},
                        "host": (host0, as_profiled(model, plans["1 stage"], moe)),
                    }

                r, other, waited = quiet(run, a.quiet_wait, tries=a.tries, judgeable=lambda r: steady(r["host"]))
                meas, steps, cores, waits = r["meas"], r["steps"], r["cores"], r["waits"]
                sim = json.loads(hetc("evaluate", str(plan), "--trace", str(trace), "--json", *limits))
                rows.append((name, frac, rate, meas, sim, other, os.getloadavg()[0], r["host"]))
                sim_steps = {f"{s['lane']}.{s['stage']}": s["step_ms"] for s in sim["stages"]}
                print(
                    f"  {frac:g}× ({rate:.2f} req/s): measured {_fmt(meas)}\n      simulated {_fmt(sim)}"
                    f"  (other processes {other:.0%}, waited {waited:.0f} s)\n      mean stage step, served / simulated: "
                    + ", ".join(f"{k} {v:.1f} / {sim_steps.get(k, float('nan')):.1f} ms" for k, v in sorted(steps.items()))
                    + "\n      our processes' CPU, cores: "
                    + ", ".join(f"{k} {v:.2f}" for k, v in sorted(cores.items()))
                    + "\n      workers runnable but waiting for a core, share of the run: "
                    + ", ".join(f"{k} {v:.1%}" for k, v in sorted(waits.items()))
                    + "\n      reference steps' cost model / bare, before and after: "
                    + " and ".join(f"{h:.2f}" for h in r["host"])
                    + ("" if steady(r["host"]) else f" (not within {AS_PROFILED:.0%}: the host ran unlike its profile, not judgeable)"),
                    flush=True,
                )
    print("\n| plan | load (others' share of the host, load average) | figure | measured | simulated | sim/meas | target |\n|---|---|---|---:|---:|---:|---|")
    for name, frac, rate, meas, sim, other, load, host in rows:
        for k in ("output_throughput", "refused_429", "p50_ttft_ms", "p99_ttft_ms", "p50_tpot_ms", "p99_tpot_ms"):
            m, s = meas[k], sim[k]
            tol = TARGETS.get(k)
            past = frac > 1 and k != "output_throughput" and k != "refused_429"
            verdict = "" if tol is None or past else ("✓" if m and abs(s / m - 1) <= tol else "✗") + f" ±{tol:.0%}"
            if verdict and not steady(host):
                verdict = "not judgeable (host unlike its profile)"
            ratio = f"{s / m:.2f}" if m else "—"
            print(f"| {name} | {frac:g}× ({rate:.2f} req/s; {other:.0%}, {load:.1f}) | {k} | {m:,.1f} | {s:,.1f} | {ratio} | {verdict} |")
    if not only or "1 stage" in only:
        print_bare(model, plans["1 stage"], moe)
    print(f"\nhost load average at the end: {os.getloadavg()[0]:.2f}")


def print_bare(model: Path, plan: Path, moe: bool) -> None:
    load = rc._cpu_ticks(), time.monotonic()
    rows = bare_vs_model(model, plan, moe)
    print(
        f"\nbare steps of the whole model ({'the eager torch stage' if moe else 'OpenVINO'}, this process) vs the "
        f"simulator's cost-model part of the 1-stage lane's step (other processes {rc.others_share(load):.0%} of the "
        f"host, load average {os.getloadavg()[0]:.1f}):\n| step | bare ms | cost model ms | model/bare |\n|---|---:|---:|---:|"
    )
    for name, meas, model_ms in rows:
        print(f"| {name} | {meas:.1f} | {model_ms:.1f} | {model_ms / meas:.2f} |")
    if moe:
        print("\nrouting (transformers, random prompts): experts a prompt touches per MoE layer, measured / uniform routing's count")
        print("| tokens | touched | uniform |\n|---:|---:|---:|")
        for t, touched, uniform in routing_spread(model):
            print(f"| {t} | {touched:.2f} | {uniform:.2f} |")


def _fmt(m: dict) -> str:
    return (
        f"{m['output_throughput']:.1f} tok/s, 429 {m['refused_429']}, TTFT p50/p99 {m['p50_ttft_ms']:.0f}/"
        f"{m['p99_ttft_ms']:.0f} ms, TPOT p50/p99 {m['p50_tpot_ms']:.1f}/{m['p99_tpot_ms']:.1f} ms"
    )


if __name__ == "__main__":
    main()
