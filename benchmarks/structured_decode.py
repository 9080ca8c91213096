"""Decode throughput with and without grammar support: unconstrained requests on a server of
another checkout (before: e.g. main) and of this one (after), and requests held to a JSON schema
on this one — interleaved runs, medians (benchmarks/logs/structured-output-*.md).

    python benchmarks/structured_decode.py --base-python /path/to/main/.venv/bin/python [--runs 5]

Model and plan: the serve tests' tiny Llama (hidden 64, 4 layers, a BPE of 320 tokens; random fp32
weights) over 3 emulated devices of 3 vendors (tests/fixtures/serving.py `write_three_vendor_plan`),
`hetc serve --emulate --executor torch --threads 1`: 3 stage processes, looked-ahead decode steps
fed back from the last stage to the first — what grammar support touches per step is per-step
Python on the last stage, which a tiny model leaves nothing to hide behind.
Load: a closed loop of `--concurrency` clients, `--requests` completions, prompt `TEXTS[i]`.
- unconstrained: `max_tokens` `--tokens`, EOS ignored (every request decodes exactly that many);
- constrained (this checkout only): `response_format` json_schema of an array of exactly
  `--tokens // 3` integers 10..99 (each 2 digits and a comma: about `--tokens` tokens), greedy
  as the unconstrained ones: the difference between the two on this checkout is the grammar's.
Figure: output tokens per second (completion tokens / wall time of the run). Each run's host load
(load average, other processes' share of the CPUs) is printed beside it.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx2 as httpx

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))
from serve_wait import wait_healthy  # noqa: E402

from tests.fixtures.serving import TEXTS, free_port, write_three_vendor_plan  # noqa: E402


def start(python: str, cwd: Path, plan: Path, log: Path) -> tuple[str, subprocess.Popen]:
    port = free_port()
    args = [python, "-m", "hetc.cli", "serve", str(plan), "--port", str(port), "--emulate", "--executor", "torch", "--threads", "1", "--max-queue-wait", "600"]
    proc = subprocess.Popen(args, cwd=cwd, stdout=open(log, "w"), stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    if not wait_healthy(url, proc, 300):
        proc.kill()
        raise SystemExit(f"{' '.join(args)} did not come up: {log.read_text()[-3000:]}")
    return url, proc


def cpu_busy() -> tuple[float, float]:
    """(load average, share of the host's CPU time used in the last second)."""

    def ticks():
        v = [int(x) for x in open("/proc/stat").readline().split()[1:]]
        return sum(v), v[3] + v[4]

    t0, i0 = ticks()
    time.sleep(1.0)
    t1, i1 = ticks()
    return os.getloadavg()[0], 1 - (i1 - i0) / max(1, t1 - t0)


def run(url: str, requests: int, concurrency: int, tokens: int, constrained: bool) -> tuple[float, int]:
    """(output tokens per second, completion tokens) of one closed-loop run."""
    model = httpx.get(f"{url}/v1/models").json()["data"][0]["id"]
    schema = {"type": "array", "items": {"type": "integer", "minimum": 10, "maximum": 99}, "minItems": tokens // 3, "maxItems": tokens // 3}

    def one(i: int) -> int:
        body: dict = {"model": model, "prompt": TEXTS[i % len(TEXTS)], "max_tokens": tokens}
        if constrained:
            fmt = {"type": "json_schema", "json_schema": {"name": "numbers", "schema": schema}}
            body |= {"response_format": fmt, "max_tokens": 2 * tokens, "temperature": 0}
        else:
            body |= {"ignore_eos": True, "temperature": 0}
        r = httpx.post(f"{url}/v1/completions", json=body, timeout=600)
        r.raise_for_status()
        return r.json()["usage"]["completion_tokens"]

    t0 = time.perf_counter()
    with ThreadPoolExecutor(concurrency) as ex:
        done = sum(ex.map(one, range(requests)))
    return done / (time.perf_counter() - t0), done


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--base-python", required=True, help="the python whose `hetc` is the checkout to compare with (before)")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--requests", type=int, default=16)
    ap.add_argument("--concurrency", type=int, default=4)
    ap.add_argument("--tokens", type=int, default=60)
    a = ap.parse_args(argv)
    root = Path(tempfile.mkdtemp(prefix="hetc-structured-"))
    plan = write_three_vendor_plan(root)
    # run outside any checkout: a checkout's hetc/ folder on sys.path would shadow the python's own
    where = "import hetc.batching, pathlib; print(pathlib.Path(hetc.batching.__file__).parents[1])"
    base_dir = Path(subprocess.check_output([a.base_python, "-c", where], text=True, cwd="/").strip())
    if base_dir == REPO:
        raise SystemExit(f"{a.base_python} runs this checkout's hetc: give the python of another checkout")
    head = subprocess.check_output(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, text=True).strip()
    base = subprocess.check_output(["git", "rev-parse", "--short", "HEAD"], cwd=base_dir, text=True).strip()
    servers = {"before": start(a.base_python, base_dir, plan, root / "before.log"), "after": start(sys.executable, REPO, plan, root / "after.log")}
    print(f"before: {base} ({base_dir}); after: {head}; {a.concurrency} clients, {a.requests} requests, {a.tokens} tokens each")
    figures: dict[str, list[float]] = {"before": [], "after": [], "after, json_schema": []}
    try:
        for url, _ in servers.values():  # warm-up: first requests, and the last stage's tokenizer index
            run(url, a.concurrency, a.concurrency, 8, False)
        run(servers["after"][0], a.concurrency, a.concurrency, 9, True)
        for i in range(a.runs):
            for name, (url, constrained) in (
                ("before", (servers["before"][0], False)),
                ("after", (servers["after"][0], False)),
                ("after, json_schema", (servers["after"][0], True)),
            ):
                load, busy = cpu_busy()
                tps, done = run(url, a.requests, a.concurrency, a.tokens, constrained)
                figures[name].append(tps)
                print(f"  run {i + 1} {name:18s}: {tps:7.1f} output tok/s ({done} tokens; load average {load:.1f}, host {100 * busy:.0f}% busy)", flush=True)
    finally:
        for _, proc in servers.values():
            proc.terminate()
            proc.wait(60)
    for name, v in figures.items():
        print(f"{name:18s}: median {statistics.median(v):.1f} output tok/s over {len(v)} runs (min {min(v):.1f}, max {max(v):.1f})")
    b, f = statistics.median(figures["before"]), statistics.median(figures["after"])
    print(f"after / before (unconstrained): {f / b:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
