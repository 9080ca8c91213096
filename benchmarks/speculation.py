"""Speculative decoding served with and without, against `hetc evaluate`'s prediction of the gain
(docs/speculation.md).

    python benchmarks/speculation.py [--runs 3] [--requests 12] [--concurrency 2] [--k 3] [--draft-layers 1]

Model: a small Llama (hidden 256, 4 layers, 4 heads / 2 KV heads, MLP 688, vocab 32000; random fp32
weights: benchmarks/prefix_cache.py's, with a byte-level BPE of 32,000 tokens). Random weights
accept nothing from an unrelated small model, so the drafter is made from the target itself — its
first `--draft-layers` layers, its embedding, final norm and head (tests/fixtures/serving.py
`draft_plan`). Even so a random target's greedy token moves with every layer (its first 3 of 4
layers agree with it on 0 of 64 tokens), so the target's later layers write into the residual
stream damped: their attention and MLP output projections scaled by DAMP (0.05), which gives one
drafted layer an agreement of about 0.7 — an acceptance in the range real drafters reach. N-gram
lookup runs on repetitive text (prompts of one random 16-token phrase repeated).

Plan: one worker process (`hetc plan --placement h:0 --batch C`, the host's measured 1-thread
profile, as benchmarks/capacity_cpu.py). Three servers, all up for the whole benchmark, each run
interleaving them: the plan served with `--no-speculation`; with `--speculate ngram`; and the plan
with a draft section (the drafter in the worker). `--emulate --executor torch --threads 1`.

Measured client side: output tok/s of a closed loop of C clients (generated tokens / first send →
last token), greedy, EOS ignored, and each server's acceptance from /metrics (accepted over drafted
proposals, and the per-token α = accepted / (accepted + rejected rounds)). Predicted: the plan with
a speculation section of the measured α (`acceptance_source: measured`), `hetc evaluate --json`:
its output tok/s and `no_speculation_output_throughput` — the gain it predicts.
"""

from __future__ import annotations

import argparse
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
sys.path.insert(0, str(REPO))
import runtime_cpu as rc  # noqa: E402  the profile, the cluster file, the host's load
from grammar_mask import train_tokenizer  # noqa: E402
from prefix_cache import MODELS, VOCAB, build_model, closed_loop, hetc, stage_steps  # noqa: E402
from serve_wait import wait_healthy  # noqa: E402

from hetc.host import free_port  # noqa: E402
from hetc.speculation import MeasuredAcceptance, measured_acceptance  # noqa: E402

PROMPT, OUTPUT, PHRASE = 256, 64, 16
DAMP = 0.05  # output projections of the layers the drafter lacks are scaled by it (the docstring says why)


def build_target(d: Path, draft_layers: int) -> None:
    """The benchmark's target: prefix_cache's random Llama, its layers past `draft_layers` damped,
    with a tokenizer (the drafter shares it)."""
    if (d / "model.safetensors").is_file():
        return
    import torch
    from transformers import AutoModelForCausalLM

    build_model(d, MODELS["small"])
    m = AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32)
    with torch.no_grad():
        for layer in m.model.layers[draft_layers:]:
            layer.self_attn.o_proj.weight.mul_(DAMP)
            layer.mlp.down_proj.weight.mul_(DAMP)
    m.save_pretrained(d)
    train_tokenizer(VOCAB, d)


class Server:
    def __init__(self, plan: Path, model: Path, extra: list[str]):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        cmd = [sys.executable, "-m", "hetc.cli", "serve", str(plan), "--model-dir", str(model), "--emulate", "--executor", "torch", "--port", str(self.port)]
        self.proc = subprocess.Popen([*cmd, "--threads", "1", *extra, "--served-model-name", "m"], cwd=REPO, stderr=subprocess.DEVNULL)

    def __enter__(self) -> "Server":
        if not wait_healthy(self.url, self.proc, 900):
            raise RuntimeError("hetc serve did not start")
        return self

    def __exit__(self, *exc) -> None:
        self.proc.terminate()
        self.proc.wait(60)


def spec_counts(url: str) -> dict[str, float]:
    """The server's speculation counters so far."""
    want = {"draft": "hetc_spec_decode_draft_tokens_total{", "accepted": "hetc_spec_decode_accepted_tokens_total{"}
    want |= {"rounds": "hetc_spec_decode_rounds_total{", "rejected": "hetc_spec_decode_rejected_rounds_total{"}
    out = dict.fromkeys(want, 0.0)
    for line in httpx.get(f"{url}/metrics").text.splitlines():
        for k, prefix in want.items():
            if line.startswith(prefix):
                out[k] = float(line.rsplit(" ", 1)[1])
    return out


def workload(n: int, run: int) -> list[list[int]]:
    """`n` prompts, each one random phrase repeated to PROMPT tokens (a run's own phrases)."""
    rng = np.random.default_rng(2000 + run)
    return [(rng.integers(2, VOCAB, PHRASE).tolist() * (PROMPT // PHRASE))[:PROMPT] for _ in range(n)]


def with_speculation(plan: dict, method: str, m: MeasuredAcceptance, drafter: dict | None) -> dict:
    """`plan` with a speculation section of the served run's measured α, K and proposal rate."""
    from hetc.speculation import expected_tokens_per_round

    spec = {
        "method": method,
        "num_speculative_tokens": m.k,
        "acceptance": m.alpha,
        "acceptance_source": "measured",
        "acceptance_from": "benchmarks/speculation.py: the served run's /metrics",
        "expected_tokens_per_round": expected_tokens_per_round(m.alpha, m.k),
        "proposal_rate": m.proposal_rate,
    }
    if drafter is not None:
        spec["drafter"] = drafter
    return {**plan, "speculation": spec}


def main() -> None:
    from tests.fixtures.serving import draft_plan

    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=3, help="runs per setting, interleaved")
    ap.add_argument("--requests", type=int, default=12)
    ap.add_argument("--concurrency", type=int, default=2)
    ap.add_argument("--k", type=int, default=3, help="proposals per round")
    ap.add_argument("--draft-layers", type=int, default=1, help="the drafter's layers, cut from the target's first")
    ap.add_argument("--profile", default=str(REPO / "out" / "profile-cpu.yaml"))
    a = ap.parse_args()
    work = Path(os.environ.get("HETC_BENCH_DIR", Path(tempfile.gettempdir()) / "hetc-bench-spec"))
    work.mkdir(parents=True, exist_ok=True)
    model = work / f"llama-256x4-damped-after-{a.draft_layers}"
    build_target(model, a.draft_layers)
    profile = rc.ensure_profile(Path(a.profile))
    cluster = rc.cluster_yaml(work, profile, 1)
    plan_path = work / "plan.json"
    c = str(a.concurrency)
    hetc("plan", str(model), "--profiles", str(cluster), "-o", str(plan_path), "--dtype", "fp32", "--tp", "1", "--placement", "h:0", "--batch", c,
         "--input-len", str(PROMPT), "--output-len", str(OUTPUT))  # fmt: skip
    plan = json.loads(plan_path.read_text())
    draft_path = draft_plan(model, plan, work, layers=a.draft_layers, k=a.k)
    drafter = json.loads(draft_path.read_text())["speculation"]["drafter"]
    # its decode step priced as the target's scaled by parameters (the head, shared in size, dominates this model)
    ratio = sum(u["param_bytes"] for u in drafter["units"]) / sum(u["param_bytes"] for u in plan["units"])
    drafter["predicted_ms_per_token"] = ratio * plan["pipelines"][0]["stages"][0]["predicted_ms"]["decode"]
    limits = ["--max-num-seqs", c]
    settings = {
        "none": (plan_path, ["--no-speculation"]),
        "ngram": (plan_path, ["--speculate", "ngram", "--num-speculative-tokens", str(a.k)]),
        "draft": (draft_path, []),
    }
    print(
        f"model: Llama 256×4 (vocab 32000), fp32, random weights; drafter: its first {a.draft_layers} layer(s) + head; profile {profile}; "
        f"{rc.describe(plan_path)}; {a.concurrency} clients, {a.requests} requests of {PROMPT} tokens (a {PHRASE}-token phrase repeated), "
        f"{OUTPUT} out, greedy; K = {a.k}",
        flush=True,
    )
    measured: dict[str, list[float]] = {s: [] for s in settings}
    loads: list[float] = []
    servers = {s: Server(p, model, [*limits, *extra]) for s, (p, extra) in settings.items()}
    try:
        for srv in servers.values():
            srv.__enter__()
        for run in range(a.runs):
            prompts = workload(a.requests, run)
            for s, srv in servers.items():
                since = (rc._cpu_ticks(), time.monotonic())
                m = closed_loop(srv.url, prompts, a.concurrency)
                other, la = rc.others_share(since), os.getloadavg()[0]
                loads.append(la)
                measured[s].append(m["output_throughput"])
                print(
                    f"  run {run + 1} {s:5}: output {m['output_throughput']:.1f} tok/s (other processes {other:.0%} of the host, load average {la:.1f})",
                    flush=True,
                )
        counts = {s: spec_counts(servers[s].url) for s in ("ngram", "draft")}
        metrics = {s: httpx.get(f"{servers[s].url}/metrics").text for s in ("ngram", "draft")}
        steps = {s: stage_steps(srv.url) for s, srv in servers.items()}
    finally:
        for srv in servers.values():
            srv.__exit__()
    base = float(np.median(measured["none"]))
    print(
        "\n| speculation | served output tok/s (median; runs) | gain | accepted / drafted | α | tokens / round | rounds / steps | "
        "evaluate gain | evaluate / measured |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    print(f"| none | {base:,.1f} ({', '.join(f'{x:,.1f}' for x in measured['none'])}) | 1.00 | | | | | | |")
    load = ["--concurrency", c, "--requests", str(a.requests), "--input-len-dist", str(PROMPT), "--output-len-dist", str(OUTPUT), *limits, "--json"]
    for s in ("ngram", "draft"):
        n = counts[s]
        # as `hetc plan --acceptance-from` reads a served run: α from the accepted share, K the proposals a round drafted
        m = measured_acceptance(metrics[s], a.k) if n["draft"] else MeasuredAcceptance(0.0, 0.0, a.k, 1.0)
        spec_plan = work / f"{s}-measured.json"
        spec_plan.write_text(json.dumps(with_speculation(plan, s, m, drafter if s == "draft" else None)))
        ev = json.loads(hetc("evaluate", str(spec_plan), *load))
        pred_gain = ev["output_throughput"] / ev["no_speculation_output_throughput"]
        med = float(np.median(measured[s]))
        gain = med / base
        per_round = (n["accepted"] + n["rounds"]) / n["rounds"] if n["rounds"] else 1.0
        print(
            f"| {s} | {med:,.1f} ({', '.join(f'{x:,.1f}' for x in measured[s])}) | {gain:.2f} | {n['accepted'] / max(n['draft'], 1):.1%} | "
            f"{m.alpha:.2f} | {per_round:.2f} | {m.proposal_rate:.2f} | {pred_gain:.2f} | {pred_gain / gain:.2f} |"
        )
    for s in settings:
        print(f"mean stage step, {s}: " + ", ".join(f"{k} {v:.1f} ms" for k, v in sorted(steps[s].items())))
    print(f"\nload average during the runs: {min(loads):.1f}–{max(loads):.1f}")


if __name__ == "__main__":
    main()
