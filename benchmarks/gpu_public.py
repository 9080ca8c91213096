"""hetc's GPU predictions against public measured throughput of other engines.

For each public figure below (engine, devices, model, dtype, input/output lengths, where it
came from), run hetc twice on the same devices and workload:
- at the public run's own configuration: `hetc plan --placement SPEC [--batch N]` (one pipeline,
  one tensor-parallel group of the devices the run used, the run's batch where the source
  states it or the engine's cap on running sequences, else the best batch that fits);
- as `hetc plan` would run it (its own choice of parallelism, pools and batch).
It prints a markdown table with pred/public − 1, then the median |error| over the figures held
to the target (HELD_ROUNDS: gathered after the cost model was frozen, at FROZEN_BY_ROUND[round]), overall and per
vendor over the held rounds together and per round, with the earlier rounds reported beside (round 1:
the first comparison; rounds 2, 3, 4 and 5 + 6: gathered after the freezes at 11b21d7, 48fca1d, fd4908c and
005d8e2). Every public figure is output tokens per
second of the whole system, all its devices together (`predicted.output_tok_s`).

The cost model and profiles were frozen at FROZEN (the commit recorded in BENCHMARKS.md) before
any figure held to the target was looked at, and again at FROZEN_BY_ROUND[8] before round 8's; the
script says if any of FROZEN_PATHS has moved since (each held round against its own freeze).
Nothing in the cost model is fitted to these figures and there are no per-case constants.

Every figure is predicted with the engine its source names (`--engine`, hetc/engine.py; SOURCE_ENGINE,
HETC_ENGINE: vLLM's figures stand in for optimum-habana, TGI-Gaudi and LLMBoost).

`--per-release` predicts each figure at the figures fitted for the engine release it names
(benchmarks/engine_releases.py: `vllm@0.9`), the engine's `fit` where that release has none (said per row).

The figures, their sources and the freezes are data, in benchmarks/public_figures/ (a module per group of
rounds; case.py: one figure's record; freeze.py: FROZEN, FROZEN_BY_ROUND, HELD_ROUNDS, FROZEN_PATHS).

Usage: python benchmarks/gpu_public.py [--only NAME] [--round N ...] [--no-plan] [--fit | --per-release]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from functools import cache
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # public_figures, also when this file is loaded by its path
from public_figures import CASES, SOURCES  # noqa: E402
from public_figures.case import HETC_ENGINE, MLPERF_LENGTHS, STAND_INS, Case  # noqa: E402
from public_figures.freeze import FROZEN, FROZEN_BY_ROUND, FROZEN_PATHS, HELD_ROUNDS  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
CLUSTERS = "benchmarks/public_gpu"


def frozen_state(commit: str = FROZEN) -> str:
    """Whether the frozen paths still match `commit` (FROZEN, or a round's FROZEN_BY_ROUND; working tree included)."""
    moved = subprocess.run(["git", "-C", str(ROOT), "diff", "--quiet", commit, "--", *FROZEN_PATHS]).returncode
    return "unchanged" if moved == 0 else "CHANGED since the freeze"


def plan(case: Case, *extra: str, release: str | None = None) -> dict:
    """`hetc plan` of the case's cluster and workload (with `extra` flags) under the case's engine (at
    `release` of it: `fit`, the figures fitted by engine_calibration.py), as plan.json."""
    with tempfile.NamedTemporaryFile(suffix=".json") as f:
        subprocess.run(
            [
                sys.executable,
                "-m",
                "hetc.cli",
                "plan",
                "--profiles",
                f"{CLUSTERS}/{case.cluster}.yaml",
                case.model,
                "--dtype",
                case.dtype,
                "--input-len",
                str(case.isl),
                "--output-len",
                str(case.osl),
                "--engine",
                f"{case.engine}@{release}" if release else case.engine,
                *(["--kv-dtype", case.kv_dtype] if case.kv_dtype else []),
                "-o",
                f.name,
                *extra,
            ],
            check=True,
            cwd=ROOT,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        return json.load(open(f.name))


@cache
def run_batch(case: Case) -> int:
    """The batch the public run held per replica: its stated batch (or the engine's cap on running
    sequences), no more than fits one replica in hetc's memory model (every sequence reserves its
    prompt + output); with no stated batch, the largest that fits."""
    from hetc.partitioner.capture.capture import capture
    from hetc.partitioner.estimate.simulate import StagePlan, Workload, max_batch
    from hetc.placement import parse_placement

    m = capture(case.model, dtype=case.dtype, kv_dtype=case.kv_dtype)
    cluster = cluster_of(case, case.engine)
    tp = parse_placement(case.placement, cluster, m.num_layers)[0].stages[0].tp
    stages = [StagePlan(cluster.nodes[0], 0, len(m.units) - 1, tp)]
    return max_batch(m.units, stages, Workload(case.isl, case.osl, case.dtype, m.kv_dtype), limit=case.batch or 4096)


def cluster_of(case: Case, engine: str | None = None):
    """The cluster file of `case`'s devices (benchmarks/public_gpu), under `engine` (None: the file's own)."""
    from hetc.cluster import load_cluster

    return load_cluster(str(ROOT / CLUSTERS / f"{case.cluster}.yaml"), engine=engine)


def backend_of(case: Case) -> str:
    """The backend of `case`'s devices (the per-engine figures are fitted per engine and backend)."""
    return cluster_of(case).nodes[0].profile.backend


def at_public_config(case: Case, release: str | None = None) -> dict:
    return plan(case, "--placement", case.placement, "--batch", str(run_batch(case)), release=release)


def shape(p: dict) -> str:
    """The plan in brief: replicas × (stages × TP), batch per pipeline (pools marked P / D)."""
    mark = {"prefill": "P ", "decode": "D "}
    return ", ".join(
        f"{mark.get(pl['phase'], '')}{pl['replicas']}×[{'+'.join('tp' + str(s['tp']) for s in pl['stages'])}] b{pl['batch']}" for pl in p["pipelines"]
    )


def medians(errs: list[tuple[Case, float]]) -> str:
    if not errs:
        return "no figures"
    e = [x for _, x in errs]
    return (
        f"median |pred/public − 1| = {statistics.median(abs(x) for x in e):.1%} over {len(e)} "
        f"(signed {statistics.median(e):+.1%}, range {min(e):+.0%} … {max(e):+.0%})"
    )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--only", help="one case by name")
    ap.add_argument("--round", type=int, action="append", help="only the cases of this round (repeatable)")
    ap.add_argument("--no-plan", action="store_true", help="skip hetc plan's own choice (the slower half)")
    ap.add_argument("--fit", action="store_true", help="each engine's figures fitted on the training rounds (ENGINE@fit, engine_calibration.py TRAIN_ROUNDS)")
    ap.add_argument(
        "--per-release", action="store_true", help="each row at its engine release's fitted figures (ENGINE@REL, engine_releases.py), else ENGINE@fit"
    )
    a = ap.parse_args()
    if a.per_release:
        import engine_releases  # imports this module: loaded here, not at the top
    figures = ", each row's release (@REL, engine_releases.py; @fit where it has none)" if a.per_release else ", their fitted figures (@fit)" if a.fit else ""
    print(f"cost model frozen at {FROZEN[:12]}: {frozen_state()}; engines: each figure's own{figures}")
    for r, commit in sorted(FROZEN_BY_ROUND.items()):
        if commit != FROZEN and (not a.round or r in a.round):
            print(f"round {r}'s figures: cost model frozen at {commit[:12]}: {frozen_state(commit)}")
    print()
    cols = (
        "case",
        "vendor",
        "engine",
        "public out tok/s",
        "public run",
        "hetc at public config",
        "−1",
        "hetc plan",
        "−1",
        "hetc plan's choice",
        "round",
        "source",
    )
    print("| " + " | ".join(cols) + " |")
    print("|---|---|---|---:|---|---:|---:|---:|---:|---|---|---|")
    at: list[tuple[Case, float]] = []
    own: list[tuple[Case, float]] = []
    for c in CASES:
        if (a.only and a.only != c.name) or (a.round and c.round not in a.round):
            continue
        release, why = engine_releases.release_for(c) if a.per_release else ("fit" if a.fit else None, "")
        cfg = at_public_config(c, release)["predicted"]["output_tok_s"]
        at.append((c, cfg / c.public - 1))
        mine, choice = "", ""
        if not a.no_plan:
            p = plan(c, release=release)
            mine, choice = f"{p['predicted']['output_tok_s']:,.0f} | {p['predicted']['output_tok_s'] / c.public - 1:+.0%}", shape(p)
            own.append((c, p["predicted"]["output_tok_s"] / c.public - 1))
        b = run_batch(c)
        run = f"{c.placement} b{b}" + (f" (of {c.batch}: memory)" if c.batch and b < c.batch else "") + (f"; {c.note}" if c.note else "")
        eng = f"{c.named_engine} → {c.engine}" + (f"@{release}" if release else "") + (f" ({why})" if why else "")
        mark = " (held)" if c.held else " (beside)" if c.round in HELD_ROUNDS else ""
        print(
            f"| {c.name} | {c.vendor} | {eng} | {c.public:,.0f} | {run} | {cfg:,.0f} | {cfg / c.public - 1:+.0%} | "
            f"{mine or '– | –'} | {choice or '–'} | {c.round}{mark} | {c.source} |",
            flush=True,
        )
    print()
    held_rounds = sorted({c.round for c, _ in at if c.held})
    groups = [(f"held figures, rounds {' + '.join(map(str, held_rounds))} together", lambda c: c.held)] if len(held_rounds) > 1 else []
    for r in sorted({c.round for c, _ in at}, reverse=True):
        if r in HELD_ROUNDS:
            groups.append((f"held figures, round {r}", lambda c, r=r: c.round == r and c.held))
            groups.append((f"round {r}, set aside by its rule (reported beside)", lambda c, r=r: c.round == r and not c.held))
        else:
            groups.append((f"round {r} (reported beside)", lambda c, r=r: c.round == r))
    for what, member in groups:
        errs = [(c, e) for c, e in at if member(c)]
        if not errs:
            continue
        print(f"- at the public configuration, {what}: {medians(errs)}")
        for v in ("nvidia", "amd", "intel"):
            print(f"  - {v}: {medians([(c, e) for c, e in errs if c.vendor == v])}")
        for named in sorted({c.named_engine for c, _ in errs}):
            stand_in = " (stand-in)" if named in STAND_INS else ""
            print(f"  - engine {named} (--engine {HETC_ENGINE[named]}{stand_in}): {medians([(c, e) for c, e in errs if c.named_engine == named])}")
        if own:
            print(f"  - hetc plan's own choice vs the public figure: {medians([(c, e) for c, e in own if member(c)])}")
        worst = max(errs, key=lambda ce: abs(ce[1]))
        print(f"  - worst: {worst[0].name} {worst[1]:+.1%}")
    print(f"\n{MLPERF_LENGTHS}")
    print("\nSources:")
    for k, v in SOURCES.items():
        print(f"- {k}: {v}")


if __name__ == "__main__":
    main()
