"""Overload: `hetc serve --emulate` driven at a multiple of its measured capacity.

1. Serves the 3-stage tiny-Llama plan of tests/integration_tests/test_serve.py (random weights,
   one process per device on this CPU).
2. Measures capacity: requests/s of a closed loop at the plan's batch size for `--measure` s.
3. Sends an open-loop (Poisson) stream at `--factor` × that rate for `--duration` s, every
   request streamed with a client timeout, and records each outcome: 200 (completed stream),
   429 (with Retry-After), 503, or no answer (timeout / connection error) — the last must be 0.
4. Reports counts, the TTFT p50/p99 of admitted requests, RSS of every server process before
   and after, and whether the server serves normally afterwards.

    .venv/bin/python benchmarks/overload.py [--factor 2] [--duration 30] [--max-queue-wait 2]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import sys
import tempfile
import time
from pathlib import Path

import httpx2 as httpx  # the HTTP client the openai package uses

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def _tree(pid: int) -> list[int]:
    """`pid` and its descendants (from /proc)."""
    kids: dict[int, list[int]] = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                ppid = int(Path(f"/proc/{d}/stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            kids.setdefault(ppid, []).append(int(d))
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo += kids.get(p, [])
    return out


def _rss_mb(pids: list[int]) -> dict[int, float]:
    out = {}
    for p in pids:
        try:
            line = next(l for l in Path(f"/proc/{p}/status").read_text().splitlines() if l.startswith("VmRSS"))
            out[p] = int(line.split()[1]) / 1024
        except (OSError, StopIteration):
            pass
    return out


async def _one(c: httpx.AsyncClient, prompt: str, max_tokens: int, timeout: float) -> tuple[str, float | None]:
    """(outcome, ttft seconds): outcome is '200', '429', '503', another status, or 'no answer'."""
    t0 = time.perf_counter()
    body = {"model": "tiny", "prompt": prompt, "max_tokens": max_tokens, "stream": True, "ignore_eos": True}
    try:
        async with asyncio.timeout(timeout):
            async with c.stream("POST", "/v1/completions", json=body) as r:
                if r.status_code != 200:
                    await r.aread()
                    if r.status_code == 429:
                        assert "retry-after" in r.headers, "429 without Retry-After"
                    return str(r.status_code), None
                ttft, done = None, False
                async for line in r.aiter_lines():
                    if line.startswith("data: ") and ttft is None:
                        ttft = time.perf_counter() - t0
                    if line == "data: [DONE]":
                        done = True
                    elif line.startswith("data: {") and '"error"' in line:
                        return "503", None  # the stream ended with an error event
                return ("200", ttft) if done else ("no answer", None)
    except (TimeoutError, httpx.TransportError):
        return "no answer", None


async def _closed_loop(url: str, conc: int, seconds: float, prompt: str, max_tokens: int) -> float:
    n, end = 0, time.perf_counter() + seconds
    async with httpx.AsyncClient(base_url=url, timeout=None) as c:

        async def worker():
            nonlocal n
            while time.perf_counter() < end:
                if (await _one(c, prompt, max_tokens, 120))[0] == "200":
                    n += 1

        t0 = time.perf_counter()
        await asyncio.gather(*[worker() for _ in range(conc)])
        return n / (time.perf_counter() - t0)


async def _open_loop(url: str, rate: float, seconds: float, prompt: str, max_tokens: int, timeout: float):
    rng = random.Random(0)
    tasks = []
    limits = httpx.Limits(max_connections=10_000, max_keepalive_connections=100)
    async with httpx.AsyncClient(base_url=url, timeout=None, limits=limits) as c:
        end = time.perf_counter() + seconds
        while time.perf_counter() < end:
            tasks.append(asyncio.create_task(_one(c, prompt, max_tokens, timeout)))
            await asyncio.sleep(rng.expovariate(rate))
        return await asyncio.gather(*tasks)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--factor", type=float, default=2.0, help="offered load as a multiple of measured capacity")
    ap.add_argument("--duration", type=float, default=30.0, help="seconds of offered load")
    ap.add_argument("--measure", type=float, default=15.0, help="seconds of the capacity measurement")
    ap.add_argument("--max-queue-wait", type=float, default=2.0, help="the server's --max-queue-wait")
    ap.add_argument("--max-tokens", type=int, default=16)
    ap.add_argument("--timeout", type=float, default=120.0, help="client timeout per request (no answer beyond)")
    ap.add_argument("--json", metavar="FILE", help="also write the results here")
    ap.add_argument("--executor", choices=["auto", "torch"], default="auto", help="the server's --executor (torch: no stage builds before it serves)")
    a = ap.parse_args()

    from hetc.plan import load_plan
    from tests.fixtures.serving import start_serve, write_three_vendor_plan

    root = Path(tempfile.mkdtemp(prefix="hetc-overload-"))
    plan = write_three_vendor_plan(root)
    batch = load_plan(plan).pipelines[0].batch
    try:
        srv = start_serve(
            plan, "--emulate", "--executor", a.executor, "--served-model-name", "tiny", "--max-queue-wait", a.max_queue_wait, log=root / "serve.log"
        )
    except AssertionError as e:
        print(e, file=sys.stderr)
        return 1
    url, proc = srv.url, srv.proc
    try:
        prompt = "the quick brown fox jumps over the lazy dog " * 3
        asyncio.run(_closed_loop(url, batch, 3.0, prompt, a.max_tokens))  # warm up
        rss0 = _rss_mb(_tree(proc.pid))
        cap = asyncio.run(_closed_loop(url, batch, a.measure, prompt, a.max_tokens))
        rate = a.factor * cap
        t0 = time.perf_counter()
        res = asyncio.run(_open_loop(url, rate, a.duration, prompt, a.max_tokens, a.timeout))
        wall = time.perf_counter() - t0
        time.sleep(2.0)
        rss1 = _rss_mb(_tree(proc.pid))
        after = asyncio.run(_one(httpx.AsyncClient(base_url=url), prompt, a.max_tokens, 60))[0]
        counts: dict[str, int] = {}
        for outcome, _ in res:
            counts[outcome] = counts.get(outcome, 0) + 1
        ttfts = sorted(t for o, t in res if o == "200" and t is not None)

        def pct(q):
            return ttfts[min(len(ttfts) - 1, int(q * len(ttfts)))] * 1e3 if ttfts else float("nan")

        out = {
            "cores": os.cpu_count(),
            "plan_batch": batch,
            "capacity_req_s": cap,
            "offered_req_s": rate,
            "duration_s": a.duration,
            "wall_s": wall,
            "sent": len(res),
            "counts": counts,
            "ttft_p50_ms": pct(0.50),
            "ttft_p99_ms": pct(0.99),
            "max_queue_wait_s": a.max_queue_wait,
            "rss_mb_before": rss0,
            "rss_mb_after": rss1,
            "after": after,
        }
        print(f"host cores: {os.cpu_count()} (load client and the emulated devices share them)")
        print(
            f"capacity (closed loop, {batch} concurrent): {cap:.2f} req/s; offered {rate:.2f} req/s "
            f"({a.factor:g}x) for {a.duration:g} s, --max-queue-wait {a.max_queue_wait:g} s"
        )
        print(f"sent {len(res)}: " + ", ".join(f"{k}: {v}" for k, v in sorted(counts.items())))
        print(f"TTFT of admitted requests: p50 {pct(0.5):.0f} ms, p99 {pct(0.99):.0f} ms")
        for p in sorted(rss0):
            print(f"RSS pid {p}: {rss0[p]:.0f} MB before, {rss1.get(p, float('nan')):.0f} MB after")
        print(f"a request after the run: {after}")
        if a.json:
            Path(a.json).write_text(json.dumps(out, indent=2))
        return 0 if counts.get("no answer", 0) == 0 and after == "200" else 1
    finally:
        srv.stop(30)


if __name__ == "__main__":
    sys.exit(main())
