"""`hetc` command line: parses, calls one function, prints. Human output goes to stderr."""

from __future__ import annotations

import argparse
import json
import os
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import NoReturn

from rich.console import Console

from hetc.errors import BadInput, HetcError, Infeasible
from hetc.experts import ExpertLayout
from hetc.partitioner.capture.terms import MODEL_DTYPES
from hetc.requests import BuyRequest, CompareRequest, EvaluateRequest, LoadRequest, PlanRequest, ServeLimits, SloRequest, SpecRequest, default
from hetc.scheduling import MAX_WAITING, PREFILL_CHUNK, Disaggregate, Objective
from hetc.speculation import MAX_SPECULATIVE_TOKENS, SpeculationMethod

err = Console(stderr=True, highlight=False, width=None if sys.stderr.isatty() else 140)


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # argparse's usage errors are bad input too: exit 2
        self.print_usage(sys.stderr)
        err.print(f"hetc: error: {message}", markup=False)
        raise SystemExit(2)


def _positive_int(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if v < 1:
        raise argparse.ArgumentTypeError(f"must be ≥ 1, got {v}")
    return v


def _nonneg_int(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if v < 0:
        raise argparse.ArgumentTypeError(f"must be ≥ 0, got {v}")
    return v


def _nonneg(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if v < 0:
        raise argparse.ArgumentTypeError(f"must be ≥ 0, got {v}")
    return v


DTYPES = list(MODEL_DTYPES)
ENGINE_HELP = (
    "the serving engine the figures assume: hetc, vllm, sglang or trtllm, NAME@RELEASE where the engine's file "
    "names releases (docs/profile.md, engines); default: the cluster file's `engine`, else hetc (what `hetc serve` runs)"
)


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="hetc", description="Plan and serve PyTorch models across heterogeneous accelerators.")
    sub = p.add_subparsers(dest="command", required=True, parser_class=_Parser)

    pl = sub.add_parser("plan", help="place MODEL on the cluster and write plan.json")
    pl.add_argument("model", metavar="MODEL")
    pl.add_argument("--profiles", required=True, metavar="CLUSTER.yaml", help="cluster file")
    pl.add_argument("-o", "--output", default="plan.json", help="where to write the plan (default plan.json)")
    pl.add_argument("--json", action="store_true", help="print the plan JSON to stdout")
    pl.add_argument("--plot", metavar="PNG", help="draw the plan to an image")
    d = lambda name: default(PlanRequest, name)  # noqa: E731  the CLI's defaults are the request's
    pl.add_argument("--dtype", choices=DTYPES, default=d("dtype"), help="the weights' dtype (default %(default)s)")
    pl.add_argument("--kv-dtype", choices=DTYPES, default=d("kv_dtype"), help="the KV cache's dtype (default: --dtype)")
    pl.add_argument("--input-len", type=_positive_int, default=d("input_len"), help="prompt tokens per request (default %(default)s)")
    pl.add_argument("--output-len", type=_positive_int, default=d("output_len"), help="generated tokens per request (default %(default)s)")
    pl.add_argument(
        "--prefix-len",
        type=_nonneg_int,
        default=d("prefix_len"),
        metavar="N",
        help="the first N tokens of every prompt are one of --prefix-groups shared prefixes: prefill and KV priced with their prefix-cache hits (default 0)",
    )
    pl.add_argument("--prefix-groups", type=_positive_int, default=d("prefix_groups"), metavar="G", help="distinct shared prefixes (default 1)")
    pl.add_argument(
        "--objective",
        choices=[o.value for o in Objective],
        default=d("objective"),
        help="what to optimise (default %(default)s; docs/solver.md); energy: output tokens per joule (devices at their profiles' power)",
    )
    pl.add_argument(
        "--placement",
        default=d("placement"),
        metavar="SPEC",
        help="evaluate this placement instead of searching: 'a:0-1@30|b:0@50 x2' (';' pipelines, '|' stages, NODE:FIRST-LAST devices, @L layers, xN replicas)",
    )
    pl.add_argument("--batch", type=_positive_int, default=d("batch"), help="with --placement: sequences in flight per pipeline")
    pl.add_argument(
        "--max-num-seqs",
        type=_positive_int,
        default=d("max_num_seqs"),
        metavar="N",
        help="most sequences in flight per pipeline, as an engine's max_num_seqs caps them (default: what memory admits)",
    )
    pl.add_argument(
        "--power-budget",
        type=_nonneg,
        default=d("power_budget_w"),
        metavar="W",
        help="the plan's devices together draw at most W watts (at their profiles' power)",
    )
    pl.add_argument(
        "--min-tok-s",
        type=_nonneg,
        default=d("min_tok_s"),
        metavar="TOK_S",
        help="a floor on the plan's summed output tok/s; with --objective latency/cost/energy the demand the fleet must serve (default none)",
    )
    pl.add_argument("--ttft-slo", type=_nonneg, default=d("ttft_slo_ms"), metavar="MS", help="every pipeline's predicted time to first token at most MS")
    pl.add_argument("--tpot-slo", type=_nonneg, default=d("tpot_slo_ms"), metavar="MS", help="every pipeline's predicted time per output token at most MS")
    pl.add_argument(
        "--disaggregate",
        choices=[o.value for o in Disaggregate],
        default=d("disaggregate"),
        help="separate prefill and decode pools: auto (where they serve more), on, off (default %(default)s)",
    )
    pl.add_argument(
        "--tp", choices=["auto", "1"], default=d("tp"), help="auto: tensor-parallel groups within a node where they help; 1: none (default %(default)s)"
    )
    pl.add_argument("--time-limit", type=_nonneg, default=d("time_limit"), metavar="SECONDS", help="solver + bound CPU s (default %(default)s)")
    pl.add_argument("--engine", metavar="ENGINE", help=ENGINE_HELP)
    pl.add_argument(
        "--experts",
        choices=["default", "auto", *(x.value for x in ExpertLayout)],
        default=d("experts"),
        help="an MoE model's layout on tensor-parallel groups: tp (experts split), ep (experts whole, E/g each), dp-ep (attention "
        "data-parallel, experts EP); default: the one the engine runs unless told (vLLM, SGLang, TensorRT-LLM: tp; hetc: ep); "
        "auto: each the engines serve, solved in a share of --time-limit, the best kept (docs/moe.md)",
    )
    pl.add_argument(
        "--expert-imbalance",
        type=float,
        default=d("imbalance"),
        metavar="X",
        help="under expert parallelism, the busiest device's routed tokens over the mean (default %(default)s: an assumption with its source in plan.json)",
    )
    _spec_args(pl)

    ins = sub.add_parser("inspect", help="per-unit FLOPs, bytes, params and KV of MODEL")
    ins.add_argument("model", metavar="MODEL")
    ins.add_argument("--dtype", choices=DTYPES, default="bf16")
    ins.add_argument("--kv-dtype", choices=DTYPES, default=None)
    ins.add_argument("--input-len", type=_positive_int, default=1024)
    ins.add_argument("--output-len", type=_positive_int, default=256)
    ins.add_argument("--json", action="store_true")

    sub.add_parser("devices", help="local devices and known profiles")

    sv = sub.add_parser("serve", help="serve a plan behind an OpenAI-compatible API")
    sv.add_argument("plan", metavar="plan.json")
    sv.add_argument("--model-dir", metavar="DIR", help="Hugging Face model dir with the weights (default: the plan's model.ref when it is a dir with weights)")
    sv.add_argument("--random-weights", action="store_true", help="initialize the weights instead of loading them")
    sv.add_argument("--emulate", action="store_true", help="run every device of the plan as a process on this CPU")
    sv.add_argument("--host", default="127.0.0.1")
    sv.add_argument("--port", type=_positive_int, default=8000)
    sv.add_argument("--api-key", default=os.environ.get("HETC_API_KEY"), help="require 'Authorization: Bearer KEY'")
    sv.add_argument("--served-model-name", default=None, help="the model id clients send (default: the dir's name)")
    sv.add_argument(
        "--nnodes",
        type=_positive_int,
        default=None,
        help="hosts serving the plan; its cluster nodes are split over them in order (default 1; under torchrun, torchrun's)",
    )
    sv.add_argument("--node-rank", type=int, default=None, help="this host (0 runs the HTTP server and the frontend; default 0; under torchrun, torchrun's)")
    sv.add_argument("--master-addr", default=None, help="node rank 0's address (with --nnodes > 1)")
    sv.add_argument("--master-port", type=_positive_int, default=None, help="a free port on node rank 0")
    sv.add_argument("--max-num-seqs", type=_positive_int, default=None, help="sequences running at once (default: the plan's batch)")
    sv.add_argument("--max-batched-tokens", type=_positive_int, default=PREFILL_CHUNK, help=f"prefill chunk (default {PREFILL_CHUNK})")
    sv.add_argument("--max-waiting", type=_positive_int, default=MAX_WAITING, help="wait-queue bound; beyond it 429")
    sv.add_argument(
        "--max-queue-wait",
        type=_nonneg,
        default=30.0,
        metavar="SECONDS",
        help="refuse (429, Retry-After) a request predicted to wait longer for its first token",
    )
    sv.add_argument("--max-body-bytes", type=_positive_int, default=1 << 20, help="larger request bodies get 413")
    sv.add_argument("--idle-timeout", type=_nonneg, default=5.0, metavar="SECONDS", help="close keep-alive connections idle this long")
    sv.add_argument("--num-kv-blocks", type=_positive_int, default=None, help="cap each lane's KV blocks")
    sv.add_argument("--threads", type=_positive_int, default=None, help="torch threads per worker")
    sv.add_argument("--timeout", type=_nonneg, default=60.0, metavar="SECONDS", help="transport receive timeout")
    sv.add_argument(
        "--executor",
        choices=["auto", "torch"],
        default="auto",
        help="auto: under --emulate each stage runs its vendor's CPU lowering (Intel: OpenVINO, AMD: IREE "
        "llvm-cpu, NVIDIA: Inductor; cpu and Gaudi stages: OpenVINO, the fastest CPU executor measured here) "
        "and a real cpu stage runs OpenVINO; "
        "torch: eager everywhere",
    )
    sv.add_argument(
        "--artifacts", default=None, metavar="DIR", help="load compiled stages from this `hetc compile` folder (default: build them at start, cached)"
    )
    sv.add_argument(
        "--max-restarts", type=int, default=3, metavar="N", help="restart attempts of a pipeline whose worker died before it stays down (default 3; 0: never)"
    )
    sv.add_argument("--drain-timeout", type=_nonneg, default=30.0, metavar="SECONDS", help="on SIGTERM, how long open requests may take to finish (default 30)")
    sv.add_argument(
        "--no-cuda-graphs", action="store_true", help="run cuda stages' decode steps eagerly (default: replayed from CUDA graphs captured at start)"
    )
    sv.add_argument(
        "--no-prefix-caching",
        action="store_true",
        help="prefill every prompt in full (default: reuse the KV of full blocks an earlier prompt with the same prefix computed)",
    )
    sv.add_argument("--no-speculation", action="store_true", help="decode one token per step even when the plan speculates (docs/speculation.md)")
    sv.add_argument(
        "--speculate",
        choices=["ngram"],
        default=None,
        help="a plan without a speculation section: speculate with n-gram prompt lookup (default: as the plan says)",
    )
    sv.add_argument(
        "--num-speculative-tokens", type=_positive_int, default=None, metavar="K", help="proposals per round (default: the plan's; 3 with --speculate ngram)"
    )
    sv.add_argument(
        "--enable-auto-tool-choice", action="store_true", help='chat\'s tool_choice "auto": tool calls found in the free text (needs --tool-call-parser)'
    )
    sv.add_argument("--tool-call-parser", choices=["hermes", "llama3_json"], default=None, help="the model's tool-call format (vLLM's names; docs/serving.md)")

    pr = sub.add_parser("profile", help="measure the local device and fit a profile; --validate: fidelity report")
    pr.add_argument("--device", required=True, choices=["cpu", "cuda", "hpu", "xpu"])
    pr.add_argument(
        "-o", "--output", default=None, metavar="profile.yaml", help="where to write the fitted profile (default profile.yaml; with --validate: not written)"
    )
    pr.add_argument("--validate", action="store_true", help="compare predictions with held-out measurements made in a separate process")
    pr.add_argument("--profile", default=None, metavar="profile.yaml", help="with --validate: the profile to check (default: fit one first)")
    pr.add_argument("--quick", action="store_true", help="a reduced set of shapes (seconds; coarser)")
    pr.add_argument("--threads", type=_positive_int, default=None, help="torch threads to measure with (default: all cores; --validate: the profile's)")
    pr.add_argument("--name", default=None, help="the fitted profile's name (default local-cpu)")
    pr.add_argument(
        "--executor",
        choices=["auto", "openvino", "torch"],
        default="auto",
        help="what runs the measured kernels (default auto: OpenVINO, which serves cpu stages; torch: eager, for plans served with --executor torch)",
    )
    pr.add_argument("--json", action="store_true", help="print the fit details / fidelity report as JSON on stdout")

    co = sub.add_parser("compile", help="lower every stage of a plan with its vendor's toolchain; manifest.json")
    co.add_argument("plan", metavar="plan.json")
    co.add_argument("-o", "--output", required=True, metavar="DIR", help="where the artifacts and manifest.json go")
    co.add_argument("--model-dir", default=None, help="Hugging Face model dir with safetensors (default: the plan's)")
    co.add_argument("--random-weights", action="store_true", help="random weights instead of the model's")
    co.add_argument("--no-check", action="store_true", help="skip running the CPU lowerings against torch eager")
    co.add_argument("--only", default="", metavar="LIST", help="comma-separated toolchains (openvino,onnx,iree,inductor,hpu); each must build (else exit 2)")

    by = sub.add_parser("buy", help="the cheapest fleet from a catalog that serves a rate within SLOs, and its plan")
    by.add_argument("model", metavar="MODEL")
    b = lambda name: default(BuyRequest, name)  # noqa: E731
    by.add_argument("--catalog", required=True, metavar="CATALOG.yaml", help="what can be bought (docs/capacity.md)")
    by.add_argument("--rate", required=True, type=float, metavar="REQ_S", help="requests per second to sustain")
    by.add_argument("--ttft-slo", type=_nonneg, default=b("ttft_slo_ms"), metavar="MS", help="time to first token the requests must meet (default none)")
    by.add_argument("--tpot-slo", type=_nonneg, default=b("tpot_slo_ms"), metavar="MS", help="time per output token the requests must meet (default none)")
    by.add_argument(
        "--attainment", type=float, default=b("attainment"), help="the simulated check: the share of requests that must meet the SLOs (default 0.9)"
    )
    by.add_argument("--requests", type=_positive_int, default=b("requests"), help="requests in the simulated check")
    by.add_argument("--input-len", type=_positive_int, default=b("input_len"), help="prompt tokens per request (default %(default)s)")
    by.add_argument("--output-len", type=_positive_int, default=b("output_len"), help="generated tokens per request (default %(default)s)")
    by.add_argument("--dtype", choices=DTYPES, default=b("dtype"), help="the weights' dtype (default %(default)s)")
    by.add_argument("--kv-dtype", choices=DTYPES, default=b("kv_dtype"), help="the KV cache's dtype (default: --dtype)")
    by.add_argument(
        "--budget",
        type=_nonneg,
        default=b("budget_usd_h"),
        metavar="USD_H",
        help="instead of the cheapest fleet: the most output tok/s within this many USD per hour",
    )
    by.add_argument(
        "--tp", choices=["auto", "1"], default=b("tp"), help="auto: tensor-parallel groups within a node where they help; 1: none (default %(default)s)"
    )
    by.add_argument("--time-limit", type=_nonneg, default=b("time_limit"), metavar="SECONDS", help="solver + bound CPU s per plan (default %(default)s)")
    by.add_argument("--engine", metavar="ENGINE", help=ENGINE_HELP + "; written into the fleet's cluster file")
    by.add_argument("-o", "--output", default="fleet.yaml", help="the fleet as a cluster file (default fleet.yaml); its plan goes beside it as NAME.plan.json")
    by.add_argument("--json", action="store_true", help="print the purchase as JSON on stdout")

    pa = sub.add_parser("pareto", help="output tok/s per device against tok/s per user: the frontier of plans")
    pa.add_argument("model", metavar="MODEL")
    pa.add_argument("--profiles", required=True, metavar="CLUSTER.yaml", help="cluster file")
    pa.add_argument(
        "--metric",
        choices=["tok_s_per_device", "usd_per_mtok", "joule_per_tok"],
        default="tok_s_per_device",
        help="the y axis (default output tok/s per device)",
    )
    pa.add_argument("--points", type=_positive_int, default=8, help="TPOT ceilings per series (default 8)")
    pa.add_argument("--input-len", type=_positive_int, default=1024)
    pa.add_argument("--output-len", type=_positive_int, default=256)
    pa.add_argument("--dtype", choices=DTYPES, default="bf16")
    pa.add_argument("--kv-dtype", choices=DTYPES, default=None)
    pa.add_argument("--time-limit", type=_nonneg, default=10.0, metavar="SECONDS", help="each plan's solver and bound, in CPU seconds (default 10)")
    pa.add_argument("--engine", metavar="ENGINE", help=ENGINE_HELP)
    pa.add_argument("--png", metavar="FILE", help="draw the chart")
    pa.add_argument("--csv", metavar="FILE", help="every plan of the sweep, one row each")
    pa.add_argument("--json", action="store_true", help="every plan of the sweep as JSON on stdout")
    _spec_args(pa)

    ev = sub.add_parser("evaluate", help="simulate serving a plan under a load: vLLM's latency and throughput figures")
    ev.add_argument("plan", metavar="PLAN.json")
    _load_args(ev)
    _slo_args(ev)
    ev.add_argument("--json", action="store_true", help="the figures as JSON on stdout")
    ev.add_argument("-o", "--output", default=None, metavar="FILE", help="write the figures as JSON to FILE")
    ev.add_argument(
        "--engine", metavar="ENGINE", help=ENGINE_HELP.replace("the cluster file's `engine`, else hetc (what `hetc serve` runs)", "the engine the plan names")
    )

    sp = sub.add_parser("compare", help="plans, or clusters planned once each, side by side under one load (simulated)")
    sp.add_argument("items", nargs="*", metavar="PLAN.json | MODEL", help="plans to compare; with --profiles, the one MODEL to plan on each cluster")
    sp.add_argument("--profiles", nargs="+", default=None, metavar="CLUSTER.yaml", help="clusters to plan MODEL on")
    d = lambda name: default(CompareRequest, name)  # noqa: E731
    sp.add_argument("--dtype", choices=DTYPES, default=d("dtype"))
    sp.add_argument("--input-len", type=_positive_int, default=d("input_len"), help="with --profiles: the planned workload")
    sp.add_argument("--output-len", type=_positive_int, default=d("output_len"))
    sp.add_argument("--time-limit", type=_nonneg, default=d("time_limit"), metavar="SECONDS")
    sp.add_argument("--engine", metavar="ENGINE", help=ENGINE_HELP + "; plan files: simulated under it instead of the engine each names")
    _load_args(sp)
    _slo_args(sp)
    sp.add_argument("--json", action="store_true", help="the rows as JSON on stdout")
    sp.add_argument("--csv", metavar="FILE")
    sp.add_argument("--html", metavar="FILE", help="a self-contained page: table, latency CDFs, Pareto chart, placements")
    return p


def _spec_args(p: argparse.ArgumentParser) -> None:
    """Speculative decoding (docs/speculation.md): plan and pareto take the same flags."""
    sd = lambda name: default(SpecRequest, name)  # noqa: E731
    p.add_argument("--draft", metavar="MODEL", default=None, help="speculate with this draft model (the target's tokenizer); the solver places it")
    p.add_argument(
        "--speculate", choices=[m.value for m in SpeculationMethod], default=None, help="ngram: prompt lookup, no draft model (draft: needs --draft)"
    )
    p.add_argument(
        "--num-speculative-tokens",
        type=int,
        default=sd("num_speculative_tokens"),
        metavar="K",
        help=f"proposals per round, 1 … {MAX_SPECULATIVE_TOKENS} (default %(default)s)",
    )
    p.add_argument("--acceptance", type=float, default=None, metavar="ALPHA", help="per-token acceptance α in [0, 1] (or --acceptance-from, when speculating)")
    p.add_argument("--acceptance-from", default=None, metavar="METRICS", help="α from a served run's /metrics text (vLLM's accepted/draft token counters)")
    p.add_argument(
        "--proposal-rate",
        type=float,
        default=None,
        metavar="R",
        help="share of decode steps that propose, in (0, 1] (n-gram lookup finds no match on the rest; default: from --acceptance-from, else 1)",
    )


def _spec_of(a: argparse.Namespace) -> SpecRequest:
    return SpecRequest(
        method=a.speculate,
        draft=a.draft,
        num_speculative_tokens=a.num_speculative_tokens,
        acceptance=a.acceptance,
        acceptance_from=a.acceptance_from,
        proposal_rate=a.proposal_rate,
    )


def _load_args(p: argparse.ArgumentParser) -> None:
    """The load and server flags of the simulating commands (defaults: LoadRequest's and ServeLimits')."""
    ld = lambda name: default(LoadRequest, name)  # noqa: E731
    sl = lambda name: default(ServeLimits, name)  # noqa: E731
    g = p.add_mutually_exclusive_group()
    g.add_argument("--rate", type=float, default=ld("rate"), metavar="REQ_S", help="open loop: requests/s, Poisson (or gamma, --burstiness)")
    g.add_argument(
        "--concurrency",
        type=_positive_int,
        default=ld("concurrency"),
        metavar="C",
        help="closed loop: C clients, each sending its next request when its last one ends (default: as many as the plan's pipelines hold sequences)",
    )
    g.add_argument("--trace", default=ld("trace"), metavar="FILE.jsonl", help='requests as JSON lines {"arrival": s, "input_len": n, "output_len": n}')
    p.add_argument("--requests", type=_positive_int, default=ld("requests"), metavar="N", help="requests to send")
    p.add_argument(
        "--input-len-dist",
        default=ld("input_len_dist"),
        metavar="DIST",
        help="N, uniform:LO-HI, normal:MEAN,STD or lognormal:MEDIAN,SIGMA (default: the plan's input length)",
    )
    p.add_argument("--output-len-dist", default=ld("output_len_dist"), metavar="DIST", help="as --input-len-dist")
    p.add_argument("--burstiness", type=float, default=ld("burstiness"), help="gamma shape of the arrivals (1: Poisson; < 1 burstier)")
    p.add_argument("--seed", type=int, default=ld("seed"))
    p.add_argument(
        "--warmup",
        default=ld("warmup"),
        metavar="N|Ts|P%",
        help="leave the run's start out of the figures: its first N requests, T seconds or P%% of the requests (default none, as vLLM's bench serve)",
    )
    p.add_argument("--cooldown", default=ld("cooldown"), metavar="N|Ts|P%", help="leave its end out: its last N requests, T seconds or P%% (default none)")
    p.add_argument(
        "--max-num-seqs", type=_positive_int, default=sl("max_num_seqs"), help="as hetc serve: sequences running at once per lane (default: the plan's batch)"
    )
    p.add_argument(
        "--max-batched-tokens",
        type=_positive_int,
        default=sl("max_batched_tokens"),
        help="as hetc serve: tokens in one step (a data-parallel rank's, where the plan's experts.dp_budget is per-rank)",
    )
    p.add_argument("--max-waiting", type=_positive_int, default=sl("max_waiting"))
    p.add_argument("--max-queue-wait", type=_nonneg, default=sl("max_queue_wait"), metavar="SECONDS")
    p.add_argument("--num-kv-blocks", type=_positive_int, default=sl("num_kv_blocks"))
    p.add_argument("--no-prefix-caching", action="store_true", help="as hetc serve: prefill every prompt in full (default: cached prefixes are reused)")
    p.add_argument(
        "--prefix-len",
        type=_nonneg_int,
        default=ld("prefix_len"),
        metavar="N",
        help="the first N tokens of every prompt are one of --prefix-groups shared prefixes (default: the plan's; 0: none)",
    )
    p.add_argument("--prefix-groups", type=_positive_int, default=ld("prefix_groups"), metavar="G", help="distinct shared prefixes (default: the plan's, or 1)")


def _slo_args(p: argparse.ArgumentParser) -> None:
    d = lambda name: default(SloRequest, name)  # noqa: E731
    p.add_argument("--ttft-slo", type=_nonneg, default=d("ttft_slo_ms"), metavar="MS")
    p.add_argument("--tpot-slo", type=_nonneg, default=d("tpot_slo_ms"), metavar="MS")
    p.add_argument(
        "--attainment", type=float, default=d("attainment"), help="DistServe's goodput: the highest rate at which this share of requests meets the SLOs"
    )
    p.add_argument("--pue", type=float, default=default(EvaluateRequest, "pue"), help="facility watts per device watt (default 1.0)")


def _slo_of(a: argparse.Namespace) -> SloRequest:
    return SloRequest(ttft_slo_ms=a.ttft_slo, tpot_slo_ms=a.tpot_slo, attainment=a.attainment)


def _load_of(a: argparse.Namespace) -> tuple[LoadRequest, ServeLimits]:
    return (
        LoadRequest(
            rate=a.rate,
            concurrency=a.concurrency,
            trace=a.trace,
            requests=a.requests,
            input_len_dist=a.input_len_dist,
            output_len_dist=a.output_len_dist,
            burstiness=a.burstiness,
            seed=a.seed,
            warmup=a.warmup,
            cooldown=a.cooldown,
            prefix_len=a.prefix_len,
            prefix_groups=a.prefix_groups,
        ),
        ServeLimits(
            max_num_seqs=a.max_num_seqs,
            max_batched_tokens=a.max_batched_tokens,
            max_waiting=a.max_waiting,
            max_queue_wait=a.max_queue_wait,
            num_kv_blocks=a.num_kv_blocks,
            prefix_caching=not a.no_prefix_caching,
        ),
    )


@contextmanager
def _status(text: str):
    if err.is_terminal:
        with err.status(text) as st:
            yield lambda msg: st.update(msg)
    else:
        yield lambda msg: None


def cmd_plan(a: argparse.Namespace) -> int:
    from hetc.partitioner.planner import PlanRequest, make_plan
    from hetc.plan import save_plan
    from hetc.report import print_plan

    req = PlanRequest(
        model=a.model,
        profiles=a.profiles,
        dtype=a.dtype,
        kv_dtype=a.kv_dtype,
        input_len=a.input_len,
        output_len=a.output_len,
        objective=a.objective,
        min_tok_s=a.min_tok_s,
        ttft_slo_ms=a.ttft_slo,
        tpot_slo_ms=a.tpot_slo,
        disaggregate=a.disaggregate,
        tp=a.tp,
        time_limit=a.time_limit,
        power_budget_w=a.power_budget,
        placement=a.placement,
        batch=a.batch,
        max_num_seqs=a.max_num_seqs,
        prefix_len=a.prefix_len,
        prefix_groups=a.prefix_groups,
        spec=_spec_of(a),
        engine=a.engine,
        experts=a.experts,
        imbalance=a.expert_imbalance,
    )
    with _status("planning") as update:
        plan = make_plan(req, progress=update)
    save_plan(plan, a.output)
    print_plan(plan, err)
    err.print(f"wrote {a.output}")
    if a.plot:
        from hetc.report import plot_plan

        plot_plan(plan, a.plot)
        err.print(f"wrote {a.plot}")
    if a.json:
        sys.stdout.write(plan.to_json() + "\n")
    return 0


def cmd_inspect(a: argparse.Namespace) -> int:
    from hetc.partitioner.capture.capture import capture
    from hetc.report import inspect_rows, kernels_per_layer, print_inspect

    with _status(f"capturing {a.model}"):
        model = capture(a.model, dtype=a.dtype, kv_dtype=a.kv_dtype)
    rows, totals = inspect_rows(model, a.input_len, a.output_len)
    if a.json:
        doc = {
            "model": model.ref,
            "dtype": model.dtype,
            "kv_dtype": model.kv_dtype,
            "num_layers": model.num_layers,
            "params": model.num_params,
            "graph_hash": model.graph_hash,
            "notes": model.notes,
            "units": rows,
            "totals": totals,
        }
        per_layer = kernels_per_layer(rows)
        if per_layer:
            doc["kernels_per_layer"] = {"eager": per_layer[0], "fused": per_layer[1]}
        sys.stdout.write(json.dumps(doc, indent=2) + "\n")
    else:
        print_inspect(model, rows, totals, Console(width=None if sys.stdout.isatty() else 140))
    return 0


def cmd_devices(a: argparse.Namespace) -> int:
    from hetc.report import print_devices

    print_devices(Console(width=None if sys.stdout.isatty() else 140))
    return 0


def cmd_serve(a: argparse.Namespace) -> int:
    from hetc.runtime.launch import ServeOptions, serve

    o = ServeOptions(
        plan=a.plan,
        model_dir=a.model_dir,
        random_weights=a.random_weights,
        emulate=a.emulate,
        host=a.host,
        port=a.port,
        api_key=a.api_key,
        served_model_name=a.served_model_name,
        nnodes=a.nnodes,
        node_rank=a.node_rank,
        master_addr=a.master_addr,
        master_port=a.master_port,
        max_num_seqs=a.max_num_seqs,
        max_batched_tokens=a.max_batched_tokens,
        max_waiting=a.max_waiting,
        num_kv_blocks=a.num_kv_blocks,
        threads=a.threads,
        timeout=a.timeout,
        max_restarts=a.max_restarts,
        drain_timeout=a.drain_timeout,
        executor=a.executor,
        artifacts=a.artifacts,
        max_queue_wait=a.max_queue_wait,
        max_body_bytes=a.max_body_bytes,
        idle_timeout=a.idle_timeout,
        cuda_graphs=not a.no_cuda_graphs,
        prefix_caching=not a.no_prefix_caching,
        speculation=not a.no_speculation,
        speculate=a.speculate,
        num_speculative_tokens=a.num_speculative_tokens,
        enable_auto_tool_choice=a.enable_auto_tool_choice,
        tool_call_parser=a.tool_call_parser,
    )
    return serve(o, log=lambda msg: err.print(f"hetc serve: {msg}", markup=False, soft_wrap=True))


def cmd_profile(a: argparse.Namespace) -> int:
    from hetc.cluster import load_profile
    from hetc.partitioner.profiling.calibrate import calibrate, check_device, check_executor, profile_yaml
    from hetc.profile_report import print_calibration, print_fidelity

    check_device(a.device)
    if a.profile and not a.validate:
        raise BadInput(
            "--profile names a profile to check: it goes with --validate.",
            field="--profile",
            fix="add --validate, or drop --profile to measure and fit a new profile.",
        )
    out: dict = {}
    if a.profile:
        prof = load_profile(a.profile)
    else:
        with _status("measuring (hetc profile)") as update:
            from hetc.runtime.serving_probe import measure_serving

            cal = calibrate(
                a.device, quick=a.quick, threads=a.threads, name=a.name, executor=check_executor(a.executor), serving=measure_serving, progress=update
            )
        prof = cal.profile
        path = a.output or (None if a.validate else "profile.yaml")
        if path:
            with open(path, "w") as f:
                f.write(profile_yaml(cal.doc))
        print_calibration(prof, cal.details, path, err)
        out = {"profile": cal.doc, "details": cal.details}
    if a.validate:
        from hetc.partitioner.profiling.fidelity import validate

        with _status("validating") as update:
            report = validate(prof, quick=a.quick, threads=a.threads if a.profile else None, progress=update)
        print_fidelity(report, err)
        out = {**out, "fidelity": report.to_json()} if not a.profile else report.to_json()
    if a.json:
        sys.stdout.write(json.dumps(out, indent=2, default=str) + "\n")
    return 0


def cmd_compile(a: argparse.Namespace) -> int:
    from hetc.report import print_manifest
    from hetc.runtime.compile import CompileOptions, compile_plan

    with _status("compiling") as update:
        manifest = compile_plan(
            CompileOptions(
                plan=a.plan,
                out_dir=a.output,
                model_dir=a.model_dir,
                random_weights=a.random_weights,
                check=not a.no_check,
                only=tuple(t for t in a.only.split(",") if t),
            ),
            progress=update,
        )
    print_manifest(manifest, err)
    err.print(f"wrote {Path(a.output) / 'manifest.json'}")
    failed = [f"{s['stage']}/{x['toolchain']}" for s in manifest["stages"] for x in s["artifacts"] if x.get("check", {}).get("ok") is False]
    if failed:
        err.print(f"hetc: numerical check failed for {', '.join(failed)} (see manifest.json)")
        return 1
    return 0


def cmd_buy(a: argparse.Namespace) -> int:
    from hetc.capacity.buy import buy_checked
    from hetc.capacity_report import print_purchase, print_slo_check, print_tries
    from hetc.catalog import load_catalog
    from hetc.report import print_plan

    req = BuyRequest(
        model=a.model,
        rate=a.rate,
        input_len=a.input_len,
        output_len=a.output_len,
        ttft_slo_ms=a.ttft_slo,
        tpot_slo_ms=a.tpot_slo,
        dtype=a.dtype,
        kv_dtype=a.kv_dtype,
        tp=a.tp,
        time_limit=a.time_limit,
        budget_usd_h=a.budget,
        attainment=a.attainment,
        requests=a.requests,
        engine=a.engine,
    )
    catalog = load_catalog(a.catalog)
    plan_path = str(Path(a.output).with_suffix("")) + ".plan.json"
    with _status("choosing what to buy") as update:
        got = buy_checked(catalog, req, a.output, plan_path, progress=update)
    print_purchase(got.purchase, catalog, req, err)
    print_plan(got.plan, err)
    print_tries(got, err)
    print_slo_check(got.check, req, err, got.stopped)
    err.print(f"wrote {a.output} and {plan_path}")
    if a.json:
        sys.stdout.write(json.dumps(got.to_json(catalog), indent=2) + "\n")
    return 0


def cmd_pareto(a: argparse.Namespace) -> int:
    import csv

    from hetc.capacity.pareto import Metric, frontier, sweep
    from hetc.capacity_report import plot_pareto, print_pareto

    metric = Metric(a.metric)
    with _status("sweeping plans") as update:
        points = sweep(
            a.model,
            a.profiles,
            input_len=a.input_len,
            output_len=a.output_len,
            dtype=a.dtype,
            kv_dtype=a.kv_dtype,
            points=a.points,
            time_limit=a.time_limit,
            spec=_spec_of(a),
            engine=a.engine,
            progress=update,
        )
    if not points:
        raise Infeasible("no plan fits this cluster at all; `hetc plan` says why.")
    front = frontier(points, metric)
    print_pareto(points, front, metric, err)
    if a.csv:
        with open(a.csv, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=[*points[0].as_dict(), "on_frontier"])
            w.writeheader()
            w.writerows({**p.as_dict(), "on_frontier": p in front} for p in points)
        err.print(f"wrote {a.csv}")
    if a.png:
        plot_pareto(points, front, metric, f"{a.model} on {Path(a.profiles).stem}", a.png)
        err.print(f"wrote {a.png}")
    if a.json:
        sys.stdout.write(json.dumps([{**p.as_dict(), "on_frontier": p in front} for p in points], indent=2) + "\n")
    return 0


def cmd_evaluate(a: argparse.Namespace) -> int:
    from hetc.capacity.evaluate import evaluate
    from hetc.capacity_report import print_evaluation

    load, limits = _load_of(a)
    req = EvaluateRequest(plan=a.plan, load=load, limits=limits, slo=_slo_of(a), pue=a.pue, engine=a.engine)
    with _status("simulating") as update:
        result = evaluate(req, progress=update)
    print_evaluation(result, err)
    doc = json.dumps(result.as_dict(), indent=2)
    if a.output:
        Path(a.output).write_text(doc + "\n")
        err.print(f"wrote {a.output}")
    if a.json:
        sys.stdout.write(doc + "\n")
    return 0


def cmd_compare(a: argparse.Namespace) -> int:
    import csv

    from hetc.capacity.compare import compare
    from hetc.capacity_report import print_compare

    items, profiles = list(a.items), list(a.profiles or [])
    if profiles and not items and not profiles[-1].endswith((".yaml", ".yml")):
        items = [profiles.pop()]  # `--profiles c1.yaml c2.yaml MODEL`: argparse hands MODEL to --profiles
    load, limits = _load_of(a)
    one_model = bool(profiles) and len(items) == 1
    req = CompareRequest(
        plans=[] if one_model else items,
        model=items[0] if one_model else None,
        profiles=profiles,
        dtype=a.dtype,
        input_len=a.input_len,
        output_len=a.output_len,
        time_limit=a.time_limit,
        load=load,
        limits=limits,
        slo=_slo_of(a),
        pue=a.pue,
        engine=a.engine,
    )
    with _status("comparing") as update:
        result = compare(req, progress=update)
    print_compare(result.rows, result.load, err)
    if a.csv:
        with open(a.csv, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(result.rows[0].as_dict()))
            w.writeheader()
            w.writerows(r.as_dict() for r in result.rows)
        err.print(f"wrote {a.csv}")
    if a.html:
        result.write_html(a.html)
        err.print(f"wrote {a.html}")
    if a.json:
        sys.stdout.write(json.dumps({"load": result.load, "rows": [r.as_dict() for r in result.rows]}, indent=2) + "\n")
    return 0


def main(argv: list[str] | None = None) -> int:
    a = build_parser().parse_args(argv)
    handler = {
        "plan": cmd_plan,
        "inspect": cmd_inspect,
        "devices": cmd_devices,
        "serve": cmd_serve,
        "profile": cmd_profile,
        "buy": cmd_buy,
        "pareto": cmd_pareto,
        "compile": cmd_compile,
        "compare": cmd_compare,
        "evaluate": cmd_evaluate,
    }[a.command]
    try:
        return handler(a)
    except HetcError as e:
        err.print(f"hetc: {e}", soft_wrap=True, markup=False)
        return e.exit_code
    except KeyboardInterrupt:
        err.print("hetc: interrupted")
        return 130
    except Exception as e:  # an internal error: say so, keep the traceback for HETC_DEBUG=1
        if os.environ.get("HETC_DEBUG"):
            raise
        err.print(f"hetc: internal error: {type(e).__name__}: {e}. Rerun with HETC_DEBUG=1 for the traceback and report it.", markup=False)
        return 1


if __name__ == "__main__":
    sys.exit(main())
