"""hetc's MoE predictions against public results (issue 28): InferenceX's DeepSeek-R1 runs and
TensorRT-LLM's perf overview (gpt-oss, DeepSeek-R1, Qwen3-235B on Hopper).

InferenceX (SemiAnalysis; formerly InferenceMAX) serves DeepSeek-R1-0528 on one 8-GPU node per run
with SGLang or TensorRT-LLM, and measures it with its own copy of vLLM's `benchmark_serving.py`:
random prompts of uniform length in [0.8·ISL, ISL] and outputs in [0.8·OSL, OSL]
(`--random-range-ratio 0.8`, EOS ignored), 10 × CONC requests, CONC clients in a closed loop
(`--max-concurrency`). Each row gives the throughput per GPU (input + output tok/s over the GPUs the
server used) and the median TPOT.

For each row this script plans the run's own configuration — one tensor-parallel group of TP devices
(`--placement a:0-{TP-1} --batch CONC`), the layout the run used (EP 1: `tp`; EP = TP: `ep`; with
data-parallel attention: `dp-ep`), the engine, its KV dtype and prefill chunk from the run's launch
script (SERVER) — and runs `hetc evaluate` on the same closed loop. It prints predicted/published − 1.
TensorRT-LLM's rows (TRTLLM_ROWS) are replayed as trtllm-bench ran them (`predict`).

Rows (ROWS_FILE) are the fp8, single-node, non-speculative runs on hardware hetc has a profile for,
the latest date per configuration; rows whose GPU count is not their TP (`num_decode_gpu` 64 on some
TP8 × EP8 runs of one 8-GPU node: which count the per-GPU figure divides by is ambiguous) are left out.
The split into `train` and `held` is fixed by a hash of the configuration (`split_of`: a third held)
and written into the rows file: `--fit` calibrates on the train rows only; the held rows are looked at
only with `--held`, which refuses to run before FROZEN names the commit the model was frozen at (and
says whether FROZEN_PATHS moved since).

Usage:
    python benchmarks/moe_public.py [--held] [--engine-release fit] [--only SUBSTR] [--jobs N] [-o results.json]
    python benchmarks/moe_public.py --fit [--write]   # SGLang's step overhead per AMD architecture → fit.yaml
    python benchmarks/moe_public.py --extract FIXTURE.json [FIXTURE.json ...]   # rebuild ROWS_FILE
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import statistics
import subprocess
import sys
import tempfile
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from functools import cache, partial
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
ROWS_FILE = ROOT / "benchmarks/public_moe/inferencex-dsr1.json"
CLUSTERS = ROOT / "benchmarks/public_gpu"
FROZEN: str | None = "ac425b1"  # the commit the MoE cost model was frozen at before any held row was looked at
FROZEN_PATHS = ("hardware_profiles", "partitioner/cost_models", "partitioner/estimate", "hetc/experts.py", "hetc/engine.py")
HARDWARE = {"h200": "h200-sxm", "b200": "b200", "mi300x": "mi300x", "mi325x": "mi325x", "mi355x": "mi355x"}
ENGINES = {"sglang": "sglang", "trt": "trtllm"}
SOURCE = (
    "InferenceX benchmark rows as the InferenceX app's API serves them, in the app's test fixtures "
    "packages/app/cypress/fixtures/api/benchmarks-history.json and benchmarks.json of "
    "vngcloud/InferenceX-app @ 7fe6d62a (a fork of SemiAnalysisAI/InferenceX-app); each row's run_url is "
    "the SemiAnalysisAI/InferenceX GitHub Actions run that measured it"
)

# Each engine's prefill chunk (max tokens in one step) and KV dtype, from the launch scripts
# benchmarks/single_node/fixed_seq_len/dsr1_fp8_<hw>[_trt].sh of SemiAnalysisAI/InferenceX @ 843c6254.
SERVER = {
    ("h200", "sglang"): {"chunk": 32768, "kv": "bf16"},  # --chunked-prefill-size 32768; KV dtype not set: the model's bf16
    ("b200", "sglang"): {"chunk": 32768, "kv": "fp8"},  # ⚠ 32768 (8192 in the script's other branch); --kv-cache-dtype fp8_e4m3
    ("mi300x", "sglang"): {"chunk": 131072, "kv": "fp8"},
    ("mi325x", "sglang"): {"chunk": 131072, "kv": "fp8"},
    ("mi355x", "sglang"): {"chunk": 196608, "kv": "fp8"},
    ("h200", "trt"): {"chunk": None, "kv": "fp8"},  # max_num_tokens = max(8192, ⌈(CONC + ISL + 64) / 64⌉·64); kv fp8
    ("b200", "trt"): {"chunk": None, "kv": "fp8"},
}


# TensorRT-LLM's perf overview (docs/source/developer-guide/perf-overview.md @ NVIDIA/TensorRT-LLM 03e27c7d):
# trtllm-bench throughput (every request queued at once, exactly ISL/OSL tokens each), PyTorch backend,
# CUDA graphs with padding, output tok/s per GPU. Hopper columns only (Blackwell's are FP4, a dtype hetc does
# not plan); 1000/1000 left out beside 1024/1024. gpt-oss: OpenAI's checkpoint (MXFP4 experts, bf16 rest),
# KV "auto" on Hopper (bf16); DeepSeek-R1-0528 and nvidia/Qwen3-235B-A22B-FP8 with FP8 KV. DEPn: n devices,
# attention data-parallel, experts EP (enable_attention_dp) → dp-ep; TP1: one device.
TRTLLM_REQUESTS = {(1024, 1024): 3000, (8192, 1024): 1500, (1024, 8192): 1500, (32768, 1024): 1000, (1024, 32768): 1000}  # the page's
TRTLLM_ROWS = [
    # model, dtype, kv dtype, hardware, devices, layout, (isl, osl, output tok/s per GPU)...
    ("gpt-oss-120b", "bf16", "bf16", "h200", 1, "tp", ((1024, 1024, 6798), (1024, 8192, 3543), (8192, 1024, 1828), (32768, 1024, 519))),
    ("gpt-oss-120b", "bf16", "bf16", "h100", 4, "dp-ep", ((1024, 1024, 4715), (1024, 32768, 1177), (8192, 1024, 1169), (32768, 1024, 333))),
    ("gpt-oss-20b", "bf16", "bf16", "h200", 1, "tp", ((1024, 1024, 13890), (1024, 8192, 12743), (8192, 1024, 4015), (32768, 1024, 915))),
    ("gpt-oss-20b", "bf16", "bf16", "h100", 1, "tp", ((1024, 1024, 11403), (1024, 8192, 8617), (8192, 1024, 3366), (32768, 1024, 785))),
    ("deepseek-v3", "fp8", "fp8", "h200", 8, "dp-ep", ((1024, 1024, 1620), (1024, 8192, 1218), (1024, 32768, 438))),
    ("qwen3-235b-a22b", "fp8", "fp8", "h200", 4, "dp-ep", ((1024, 1024, 3268), (1024, 8192, 1417), (8192, 1024, 627), (32768, 1024, 134))),
    ("qwen3-235b-a22b", "fp8", "fp8", "h100", 8, "dp-ep", ((1024, 1024, 1935), (1024, 8192, 873))),
]


def trtllm_rows() -> list[dict]:
    rows = []
    for model, dtype, kv, hw, n, lay, figures in TRTLLM_ROWS:
        for isl, osl, tok_s in figures:
            row = {"source": "trtllm-perf", "model": model, "dtype": dtype, "kv_dtype": kv, "hardware": hw, "gpus": n}
            row |= {"layout": lay, "isl": isl, "osl": osl, "output_tput_per_gpu": tok_s}
            rows.append(row | {"split": split_of(key_of(row))})
    return rows


def offline(r: dict) -> bool:
    """A TensorRT-LLM perf-overview row (every request queued at once), not an InferenceX closed loop."""
    return r.get("source") == "trtllm-perf"


def key_of(r: dict) -> str:
    if offline(r):
        return f"trtllm-perf/{r['model']}/{r['hardware']}x{r['gpus']}/{r['layout']}/{r['isl']}-{r['osl']}"
    return f"{r['hardware']}/{r['framework']}/tp{r['tp']}/ep{r['ep']}{'/dpa' if r['dp_attention'] else ''}/{r['isl']}-{r['osl']}/c{r['conc']}"


def server_chunk(r: dict) -> int:
    """Most tokens one engine step of the InferenceX run takes: SGLang's chunked-prefill size, or
    TensorRT-LLM's max_num_tokens = max(8192, ⌈(CONC + ISL + 64) / 64⌉·64) (SERVER's scripts)."""
    return SERVER[(r["hardware"], r["framework"])]["chunk"] or max(8192, -(-(r["conc"] + r["isl"] + 64) // 64) * 64)


def split_of(key: str) -> str:
    """A third of the configurations held, by a hash fixed before any prediction was made."""
    return "held" if int(hashlib.sha256(key.encode()).hexdigest(), 16) % 3 == 0 else "train"


def extract(fixtures: list[str]) -> list[dict]:
    """The rows this comparison uses, from the app's fixtures: the latest date per configuration."""
    latest: dict[str, dict] = {}
    for path in fixtures:
        for r in json.load(open(path)):
            if (r["model"], r["precision"], r["spec_method"]) != ("dsr1", "fp8", "none") or r["disagg"] or r["is_multinode"]:
                continue
            if r["hardware"] not in HARDWARE or r["framework"] not in ENGINES or r["num_decode_gpu"] != r["decode_tp"]:
                continue
            row = {
                "hardware": r["hardware"],
                "framework": r["framework"],
                "tp": r["decode_tp"],
                "ep": r["decode_ep"],
                "dp_attention": r["decode_dp_attention"],
                "isl": r["isl"],
                "osl": r["osl"],
                "conc": r["conc"],
                "date": r["date"],
                "run_url": r["run_url"],
                "tput_per_gpu": r["metrics"]["tput_per_gpu"],
                "median_tpot_ms": 1e3 * r["metrics"]["median_tpot"],
                "median_ttft_ms": 1e3 * r["metrics"]["median_ttft"],
            }
            k = key_of(row)
            if k not in latest or row["date"] > latest[k]["date"]:
                latest[k] = row | {"split": split_of(k)}
    return [latest[k] for k in sorted(latest)]


def layout(r: dict) -> str:
    if "layout" in r:
        return r["layout"]
    if r["dp_attention"]:
        return "dp-ep"
    return "ep" if r["ep"] == r["tp"] else "tp"


def hetc(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "hetc.cli", *args], cwd=ROOT, capture_output=True, text=True)


def plan_at(r: dict, path: Path, release: str | None, *extra: str) -> bool:
    """`hetc plan` of the row's model on its devices at its layout and engine (at `release` of it); False
    where hetc's memory model does not fit it (exit 3, said on stderr)."""
    inferencex = not offline(r)
    gpus = r["tp"] if inferencex else r["gpus"]
    engine = ENGINES[r["framework"]] if inferencex else "trtllm"
    engine = f"{engine}@{release}" if release else engine
    model, dtype = ("deepseek-v3", "fp8") if inferencex else (r["model"], r["dtype"])
    kv = SERVER[(r["hardware"], r["framework"])]["kv"] if inferencex else r["kv_dtype"]
    planned = hetc(
        *("plan", "--profiles", str(CLUSTERS / f"8x{r['hardware']}.yaml"), model, "--dtype", dtype, "--kv-dtype", kv),
        *("--input-len", str(r["isl"]), "--output-len", str(r["osl"]), "--engine", engine),
        *(("--experts", layout(r)) if gpus > 1 else ()),
        *("--placement", f"a:0-{gpus - 1}", "-o", str(path), *extra),
    )
    if planned.returncode == 3:
        print(f"{key_of(r)}: {planned.stderr.strip()}", file=sys.stderr)
        return False
    planned.check_returncode()
    return True


def predict(r: dict, release: str | None = None) -> dict | None:
    """The row's figures as hetc predicts them; None where hetc refuses the configuration.

    InferenceX rows: the plan at the run's concurrency, then `hetc evaluate` of InferenceX's closed loop.
    TensorRT-LLM rows: trtllm-bench's run (every request queued at once) as a closed loop of as many
    clients as its batch."""
    with tempfile.TemporaryDirectory() as d:
        plan = Path(d) / "plan.json"
        if offline(r):
            # trtllm-bench's own settings (tensorrt_llm/bench/build/tuning.py, finetune_setting): as many
            # requests as KV memory holds, at most 4096, and a step of at most that × (1 + ISL/OSL) tokens,
            # at most 32,768; every request queued at once. hetc's memory model stands in for its KV estimate.
            if not plan_at(r, plan, release, "--max-num-seqs", "4096"):
                return None
            conc = json.loads(plan.read_text())["pipelines"][0]["batch"]
            chunk, requests = min(int(conc * (1 + r["isl"] / r["osl"])), 32768), TRTLLM_REQUESTS[(r["isl"], r["osl"])]
            lens = {k: str(r[k]) for k in ("isl", "osl")}  # exactly ISL / OSL tokens each
        else:
            if not plan_at(r, plan, release, "--batch", str(r["conc"])):
                return None
            conc, requests = r["conc"], 10 * r["conc"]
            chunk = server_chunk(r)
            lens = {k: f"uniform:{int(0.8 * r[k])}-{r[k]}" for k in ("isl", "osl")}
        out = hetc(
            *("evaluate", str(plan), "--concurrency", str(conc), "--requests", str(requests)),
            # trtllm-bench's budget is at least 2,048 tokens (finetune_setting)
            *("--input-len-dist", lens["isl"], "--output-len-dist", lens["osl"], "--max-batched-tokens", str(max(chunk, 2048))),
            *("--no-prefix-caching", "--json"),
        )
        out.check_returncode()
    m = json.loads(out.stdout)
    if offline(r):
        return {"output_tput_per_gpu": m["output_throughput"] / r["gpus"]}
    return {
        "tput_per_gpu": m["total_token_throughput"] / r["tp"],
        "median_tpot_ms": m["median_tpot_ms"],
        "median_ttft_ms": m["median_ttft_ms"],
    }


def frozen_state() -> str:
    moved = subprocess.run(["git", "-C", str(ROOT), "diff", "--quiet", str(FROZEN), "--", *FROZEN_PATHS]).returncode
    return "unchanged" if moved == 0 else "CHANGED since the freeze"


THROUGHPUT = ("tput_per_gpu", "output_tput_per_gpu")  # InferenceX: input + output tok/s per GPU; TensorRT-LLM: output
FIGURES = (*THROUGHPUT, "median_tpot_ms", "median_ttft_ms")


def errors(r: dict, p: dict | None) -> dict[str, float] | None:
    return {f: p[f] / r[f] - 1 for f in FIGURES if f in p} if p else None


def report(rows: list[dict], preds: list[dict | None]) -> None:
    """Each row's figures and errors, then the median |error| over every row hetc planned, per source,
    hardware and engine; rows hetc refused are counted apart."""
    errs = [errors(r, p) for r, p in zip(rows, preds, strict=True)]
    print("| configuration | published tok/s/GPU | hetc | error | published TPOT ms | hetc | error | TTFT error |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for r, p, e in zip(rows, preds, errs, strict=True):
        tput = next(f for f in THROUGHPUT if f in r)
        tpot = f"{r['median_tpot_ms']:.1f}" if "median_tpot_ms" in r else "–"
        if p is None or e is None:
            print(f"| {key_of(r)} | {r[tput]:,.0f} | does not fit | | {tpot} | | | |")
            continue
        cells = [f"{r[tput]:,.0f}", f"{p[tput]:,.0f}", f"{e[tput]:+.0%}", tpot]
        cells += [f"{p['median_tpot_ms']:.1f}", f"{e['median_tpot_ms']:+.0%}", f"{e['median_ttft_ms']:+.0%}"] if "median_tpot_ms" in e else ["", "", ""]
        print(f"| {key_of(r)} | " + " | ".join(cells) + " |")
    groups: dict[str, list[int]] = {"all": list(range(len(rows)))}
    for i, r in enumerate(rows):
        source = r.get("source", "inferencex")
        groups.setdefault(source, []).append(i)
        groups.setdefault(f"{source}: {r['hardware']}/{r.get('framework', 'trt')}", []).append(i)
        groups.setdefault(f"vendor: {'amd' if r['hardware'].startswith('mi') else 'nvidia'}", []).append(i)
    print("\n| rows | n | refused | median abs. error tok/s/GPU | signed | median abs. error TPOT | signed |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for name, idx in groups.items():
        planned = [e for i in idx if (e := errs[i]) is not None]
        t = [e[f] for e in planned for f in THROUGHPUT if f in e]
        s = [e["median_tpot_ms"] for e in planned if "median_tpot_ms" in e]
        cells = [f"{statistics.median(map(abs, xs)):.1%} | {statistics.median(xs):+.1%}" if xs else "– | –" for xs in (t, s)]
        print(f"| {name} | {len(idx)} | {len(idx) - len(planned)} | {cells[0]} | {cells[1]} |")


# ---- calibration: per engine and GPU architecture, on the train rows only ----
STEP_GRID = [i / 2 * 1e-3 for i in range(81)]  # 0 … 40 ms per engine step
FIT_GROUPS = (("sglang", "mi300x"), ("sglang", "mi325x"), ("sglang", "mi355x"))  # (framework, hardware) rows whose errors the fit targets


@cache
def _model(kv: str):  # noqa: ANN202 (a CapturedModel)
    from hetc.partitioner.capture.capture import capture

    return capture("deepseek-v3", dtype="fp8", kv_dtype=kv)


@cache
def _cluster(hw: str, engine: str, step: float):  # noqa: ANN202 (a Cluster)
    """The row's node under its engine's base figures with a trial step overhead (seconds) on top."""
    from hetc.cluster import load_cluster
    from hetc.engine import EngineFigures, apply_engine

    cluster = load_cluster(str(CLUSTERS / f"8x{hw}.yaml"), engine=engine)
    trial = EngineFigures(step_overhead=f"{step * 1e3:g} ms", sources=["calibration trial"])
    return dataclasses.replace(cluster, nodes=[dataclasses.replace(n, profile=apply_engine(n.profile, trial)) for n in cluster.nodes])


def quick(r: dict, step: float) -> tuple[float, float] | None:
    """The row's (throughput per GPU, TPOT ms) from the saturation model at batch CONC and the mean lengths
    (what `hetc plan --batch CONC` predicts), at a trial step overhead: the fit's fast stand-in for
    `hetc evaluate`'s closed loop. None where every sequence holding its whole prompt + output does not fit."""
    from hetc.experts import ExpertLayout
    from hetc.partitioner.estimate.simulate import StagePlan, Workload, estimate_pipeline

    server = SERVER[(r["hardware"], r["framework"])]
    m = _model(server["kv"])
    cluster = _cluster(r["hardware"], ENGINES[r["framework"]], step)
    isl, osl = round(0.9 * r["isl"]), round(0.9 * r["osl"])
    wl = Workload.of(isl, osl, "fp8", m.kv_dtype, windowed=cluster.windowed_kv, experts=ExpertLayout(layout(r)))
    wl = dataclasses.replace(wl, prefill_chunk=server_chunk(r))
    est = estimate_pipeline(m.units, [StagePlan(cluster.nodes[0], 0, len(m.units) - 1, r["tp"])], cluster, wl, r["conc"])
    return None if est is None else (est.output_tok_s * (isl + osl) / osl / r["tp"], est.tpot_s * 1e3)


def arch_of(hw: str) -> str:
    """BACKEND:TARGET of the row's hardware: the key its engine's fitted figures go under."""
    from hetc.cluster import load_profile

    prof = load_profile(HARDWARE[hw])
    return f"{prof.backend}:{prof.target}"


def fit_cost(rows: list[dict], step: float) -> float:
    """The mean of the median |error| of throughput per GPU and of TPOT over `rows`."""
    q = [(r, p) for r in rows if (p := quick(r, step)) is not None]
    t = [abs(p[0] / r["tput_per_gpu"] - 1) for r, p in q]
    s = [abs(p[1] / r["median_tpot_ms"] - 1) for r, p in q]
    return (statistics.median(t) + statistics.median(s)) / 2


def calibrate(write: bool) -> None:
    """Fit each (engine, architecture) of FIT_GROUPS on its train rows — one figure, the step overhead (the
    published TPOTs' floor; a GEMM or attention factor beside it lowered the fit's cost by under 1%) —
    print before / after; with
    `write`, merge the figures into the engines' `fit` release (FIT_FILE) as ENGINE: {BACKEND:TARGET: ...}."""
    from hetc.engine import FIT_FILE, FIT_HEADER

    rows = [r for r in json.loads(ROWS_FILE.read_text())["rows"] if r["split"] == "train"]
    groups: dict[tuple[str, str], list[dict]] = defaultdict(list)
    for r in rows:
        if (r["framework"], r["hardware"]) in FIT_GROUPS:
            groups[(ENGINES[r["framework"]], arch_of(r["hardware"]))].append(r)
    doc = yaml.safe_load(FIT_FILE.read_text()) if FIT_FILE.is_file() else {}
    print("| engine | architecture | train rows | step overhead ms | fit cost before | after |")
    print("|---|---|---:|---:|---:|---:|")
    for (engine, arch), grp in sorted(groups.items()):
        step = min(STEP_GRID, key=lambda x: fit_cost(grp, x))
        print(f"| {engine} | {arch} | {len(grp)} | {step * 1e3:.1f} | {fit_cost(grp, 0.0):.1%} | {fit_cost(grp, step):.1%} |", flush=True)
        doc.setdefault(engine, {})[arch] = {
            "step_overhead": f"{step * 1e3:g} ms",
            "calibrated_on": [key_of(r) for r in grp],
            "sources": [
                f"step_overhead {step * 1e3:g} ms: fitted by benchmarks/moe_public.py --fit on the {len(grp)} InferenceX DeepSeek-R1 FP8 "
                f"train rows measured with {engine} on {arch} (calibrated_on; {SOURCE}): the time per engine step that minimises the mean of "
                "the median |pred / published - 1| of throughput per GPU and of TPOT at each run's concurrency (a floor the published TPOTs "
                "show at every concurrency: the engine's build for this architecture, not host time alone)"
            ],
        }
    if write:
        FIT_FILE.write_text(FIT_HEADER + yaml.safe_dump(doc, sort_keys=False, width=200))
        print(f"\nwrote {FIT_FILE.relative_to(ROOT)}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--held", action="store_true", help="the held rows (only once FROZEN is set)")
    ap.add_argument("--only", help="rows whose configuration contains this")
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("-o", "--output", help="rows with predictions as JSON")
    ap.add_argument("--fit", action="store_true", help="calibrate the AMD groups' engine figures on the train rows")
    ap.add_argument("--write", action="store_true", help="with --fit: merge them into hardware_profiles/engines/fit.yaml")
    ap.add_argument("--engine-release", help="predict with ENGINE@RELEASE (e.g. fit) instead of the engine's base figures")
    ap.add_argument("--extract", nargs="+", metavar="FIXTURE", help="rebuild the rows file from the app's fixtures")
    args = ap.parse_args()
    if args.extract:
        rows = extract(args.extract)
        ROWS_FILE.parent.mkdir(exist_ok=True)
        ROWS_FILE.write_text(json.dumps({"source": SOURCE, "rows": rows}, indent=1) + "\n")
        print(f"{len(rows)} rows ({sum(r['split'] == 'held' for r in rows)} held) → {ROWS_FILE.relative_to(ROOT)}")
        return
    if args.fit:
        calibrate(args.write)
        return
    if args.held and FROZEN is None:
        sys.exit("moe_public.py: --held needs FROZEN set to the commit the MoE cost model was frozen at")
    split = "held" if args.held else "train"
    rows = [r for r in json.loads(ROWS_FILE.read_text())["rows"] + trtllm_rows() if r["split"] == split]
    rows = [r for r in rows if not args.only or args.only in key_of(r)]
    if args.held:
        print(f"held rows; cost model {frozen_state()} (FROZEN {FROZEN})")
    with ThreadPoolExecutor(args.jobs) as pool:
        preds = list(pool.map(partial(predict, release=args.engine_release), rows))
    report(rows, preds)
    if args.output:
        Path(args.output).write_text(json.dumps([r | {"hetc": p} for r, p in zip(rows, preds, strict=True)], indent=1))


if __name__ == "__main__":
    main()
