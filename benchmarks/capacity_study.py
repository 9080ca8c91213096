"""A capacity study a planner would read (BENCHMARKS.md "Capacity planning: a study"), every figure
from hetc's own commands, and the time `hetc compare` and `hetc pareto` take with a warm capture cache.

    python benchmarks/capacity_study.py [--requests N] [--rate R]

1. Llama-3.1-70B (bf16, prompts of 1024 tokens, 256 out) planned by `hetc plan` on the three
   3-vendor example clusters (small-mixed: 6 devices, mixed-rack: 24, big-mixed: 42), then served
   side by side under one load, simulated: `hetc compare A.json B.json C.json --rate R --ttft-slo
   2000 --tpot-slo 150` (Poisson, N requests).
2. The purchase question: the cheapest fleet from examples/catalog.yaml (up to 16 each of H100,
   MI300X, Gaudi2) serving 20 requests/s with TTFT ≤ 2 s and TPOT ≤ 100 ms: `hetc buy`, its bound,
   and the fleet simulated at that rate.
3. Whole-command times, each run twice in a row (the first fills the capture cache; the second,
   warm, is reported): `hetc compare --profiles small-mixed mixed-rack big-mixed llama-3.1-70b`
   and `hetc pareto --profiles mixed-rack llama-3.1-70b --points 8`.
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

REPO = Path(__file__).resolve().parents[1]
MODEL = "llama-3.1-70b"
CLUSTERS = ["small-mixed", "mixed-rack", "big-mixed"]


def hetc(*args: str) -> tuple[str, float]:
    t = time.perf_counter()
    r = subprocess.run([sys.executable, "-m", "hetc.cli", *args], cwd=REPO, capture_output=True, text=True)
    if r.returncode:
        sys.exit(f"hetc {' '.join(args)} failed:\n{r.stderr}")
    return r.stdout, time.perf_counter() - t


def _ms(v: float | None) -> str:
    return "—" if v is None else f"{v:,.0f}" if v >= 100 else f"{v:.3g}"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=1000)
    ap.add_argument("--rate", type=float, default=10.0, help="requests/s for the comparison")
    a = ap.parse_args()
    work = Path(os.environ.get("HETC_BENCH_DIR", Path(tempfile.gettempdir()) / "hetc-bench-capacity"))
    work.mkdir(parents=True, exist_ok=True)
    print(f"host: {os.cpu_count()} cores, load average {os.getloadavg()[0]:.2f} at the start", flush=True)
    plans = []
    for c in CLUSTERS:
        path = work / f"{c}.json"
        _, s = hetc("plan", "--profiles", str(REPO / "examples" / f"{c}.yaml"), MODEL, "-o", str(path))
        plans.append(str(path))
        print(f"planned {c} in {s:.1f} s", flush=True)
    load = ["--rate", str(a.rate), "--requests", str(a.requests), "--ttft-slo", "2000", "--tpot-slo", "150"]
    out, s = hetc("compare", *plans, *load, "--json", "--html", str(work / "compare.html"))
    doc = json.loads(out)
    print(f"\n### {MODEL} on the three example clusters under one load ({s:.0f} s)\n\nLoad: {doc['load']}; SLOs TTFT ≤ 2000 ms, TPOT ≤ 150 ms.\n")
    print(
        "| cluster | devices | plan's saturation tok/s | simulated output tok/s | tok/s/device | tok/s/user | "
        "TTFT p50 / p99 ms | TPOT p50 / p99 ms | 429 | DistServe goodput req/s | USD/M tok | J/tok |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in doc["rows"]:
        print(
            f"| {r['cluster']} | {r['devices']} | {r['saturation_output_tok_s']:,.0f} | {r['output_throughput']:,.0f} | "
            f"{r['tok_s_per_device']:,.1f} | {r['tok_s_per_user'] or 0:.1f} | {_ms(r['median_ttft_ms'])} / "
            f"{_ms(r['p99_ttft_ms'])} | {_ms(r['median_tpot_ms'])} / {_ms(r['p99_tpot_ms'])} | {r['refused_429']} | "
            f"{r['distserve_goodput'] or 0:,.1f} | {r['usd_per_mtok'] or 0:.3f} | {r['joule_per_tok'] or 0:.2f} |"
        )
    out, s = hetc(
        "buy",
        "--catalog",
        str(REPO / "examples" / "catalog.yaml"),
        MODEL,
        "--rate",
        "20",
        "--ttft-slo",
        "2000",
        "--tpot-slo",
        "100",
        "--requests",
        str(a.requests),
        "-o",
        str(work / "fleet.yaml"),
        "--json",
    )
    p = json.loads(out)
    sim = p["simulated"]
    print(f"\n### What to buy for 20 req/s, TTFT ≤ 2 s, TPOT ≤ 100 ms ({s:.0f} s)\n")
    print(
        f"- fleet: {', '.join(f'{k} × {v}' for k, v in p['devices'].items() if v)}, {p['usd_h']:.2f} USD/h; "
        f"predicted {p['predicted_output_tok_s']:,.0f} output tok/s at saturation (the load needs {20 * 256:,})"
    )
    print(f"- bound: no fleet serving the load costs less than {p['bound_usd_h']:.2f} USD/h (bound/cost {p['bound_ratio']:.2f})")
    print(
        f"- simulated at 20 req/s ({sim['load']}): output {sim['output_throughput']:,.0f} tok/s, TTFT p50 / p99 "
        f"{_ms(sim['median_ttft_ms'])} / {_ms(sim['p99_ttft_ms'])} ms, TPOT p50 / p99 {_ms(sim['median_tpot_ms'])} / "
        f"{_ms(sim['p99_tpot_ms'])} ms, {sim['slo_attainment']:.1%} of requests within both SLOs, DistServe goodput "
        f"{sim['distserve_goodput']:.1f} req/s"
    )
    print("\n### Whole-command times, warm capture cache (second of two runs in a row)\n")
    print("| command | cold s | warm s |\n|---|---:|---:|")
    cmds = {
        "hetc compare --profiles small-mixed mixed-rack big-mixed llama-3.1-70b --requests 200": [
            "compare",
            "--profiles",
            *(str(REPO / "examples" / f"{c}.yaml") for c in CLUSTERS),
            MODEL,
            "--requests",
            "200",
        ],
        "hetc pareto --profiles mixed-rack llama-3.1-70b --points 8": [
            "pareto",
            "--profiles",
            str(REPO / "examples" / "mixed-rack.yaml"),
            MODEL,
            "--points",
            "8",
        ],
    }
    for name, args in cmds.items():
        env_cache = str(work / "capture-cache")
        os.environ["HETC_CACHE_DIR"] = env_cache
        subprocess.run(["rm", "-rf", env_cache])
        _, cold = hetc(*args)
        _, warm = hetc(*args)
        print(f"| `{name}` | {cold:.1f} | {warm:.1f} |", flush=True)
    print(f"\nhost load average at the end: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
