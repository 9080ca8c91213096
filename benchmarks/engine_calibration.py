"""Per-engine kernel figures calibrated on public results under a declared split, then checked.

The split (declared here, before any fit): TRAIN = every figure of benchmarks/gpu_public.py's
rounds 1-9 (the committed training list; rounds 7-9 were held at their own freezes, FROZEN_BY_ROUND, checked
once there and recorded in benchmarks/logs, and join the training rows for the fit frozen before round 10),
CHECK = round 10's held figures (the first fit, frozen before round 7, trained on rounds 1-6 and checked round 7). For each engine and
backend (the engine each figure names, Case.engine in benchmarks/public_figures/case.py), two figures are fitted on its TRAIN
rows only: `matmul`, the factor on the profile's achievable GEMM efficiency (hetc/engine.py), the
grid value that minimises the median |pred / public - 1| of those rows at their public
configuration; and `collective`, the factor on the link model's tensor-parallel all-reduce time, where
the group has figures of tensor-parallel runs (else 1.0) — the two by coordinate descent (each the
best grid value given the other, COORDINATE_ROUNDS times). The fit is then frozen and printed, and only then are the CHECK rows predicted with
it. Groups without TRAIN rows keep 1.0.

Round 10's held prediction is gpu_public.py's (`--round 10 --fit`); the check here predicts the same rows
in-process and is not run separately for the record (one prediction per held round).

Predictions are made in-process (estimate_pipeline of one replica × the run's replicas, at the
batch gpu_public.run_batch gives), which is what `hetc plan --placement ... --batch ...` predicts.

Usage: python benchmarks/engine_calibration.py [--grid-step 0.02] [--write]
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import sys

import yaml
from collections import defaultdict
from functools import cache
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import gpu_public  # noqa: E402
from public_figures import CASES  # noqa: E402
from public_figures.case import Case  # noqa: E402

from hetc.cluster import Cluster  # noqa: E402
from hetc.engine import FIT_FILE, FIT_HEADER, EngineFigures, apply_engine  # noqa: E402
from hetc.partitioner.capture.capture import CapturedModel, capture  # noqa: E402
from hetc.partitioner.estimate.simulate import StagePlan, Workload, estimate_pipeline  # noqa: E402
from hetc.placement import parse_placement  # noqa: E402

TRAIN_ROUNDS = (1, 2, 3, 4, 5, 6, 7, 8, 9)
COORDINATE_ROUNDS = 2
COLLECTIVE_GRID = [round(0.25 + 0.125 * i, 3) for i in range(23)]  # 0.25 … 3.00
CHECK_ROUNDS = (10,)


@cache
def _capture(model: str, dtype: str, kv_dtype: str | None) -> CapturedModel:
    return capture(model, dtype=dtype, kv_dtype=kv_dtype)


@cache
def _cluster(case: Case, matmul: float, collective: float) -> Cluster:
    """The case's cluster under its engine, every node's GEMM efficiency × `matmul` and all-reduce time ×
    `collective` on top (trial figures)."""
    cluster = gpu_public.cluster_of(case, case.engine)
    if matmul == collective == 1.0:
        return cluster
    trial = EngineFigures(matmul=matmul, collective=collective, sources=["calibration trial"])
    return dataclasses.replace(cluster, nodes=[dataclasses.replace(n, profile=apply_engine(n.profile, trial)) for n in cluster.nodes])


def predicted(case: Case, fig: tuple[float, float] = (1.0, 1.0)) -> float:
    """Output tok/s of the whole run at its public configuration, the engine's figures × `fig` (matmul, collective)."""
    m = _capture(case.model, case.dtype, case.kv_dtype)
    cluster = _cluster(case, *fig)
    spec = parse_placement(case.placement, cluster, m.num_layers)
    stage = spec[0].stages[0]
    node = next(n for n in cluster.nodes if n.name == stage.node)
    wl = Workload(case.isl, case.osl, case.dtype, m.kv_dtype)
    est = estimate_pipeline(m.units, [StagePlan(node, 0, len(m.units) - 1, stage.tp)], cluster, wl, gpu_public.run_batch(case))
    assert est is not None, case.name
    return est.output_tok_s * sum(p.replicas for p in spec)


def fit(cases: list[Case], grid: list[float]) -> tuple[float, float]:
    """(matmul, collective) minimising the median |error| of `cases` (ties: nearest 1), by coordinate descent."""

    def cost(f: tuple[float, float]) -> tuple[float, float]:
        return med([predicted(c, f) / c.public - 1 for c in cases]), abs(f[0] - 1) + abs(f[1] - 1)

    tp_rows = any(p.stages[0].tp > 1 for c in cases for p in parse_placement(c.placement, _cluster(c, 1.0, 1.0), 80))
    f = (1.0, 1.0)
    for _ in range(COORDINATE_ROUNDS):
        f = min(((k, f[1]) for k in grid), key=cost)
        if tp_rows:
            f = min(((f[0], k) for k in COLLECTIVE_GRID), key=cost)
    return f


def write_fit(fitted: dict[tuple[str, str], tuple[float, float]], groups: dict[tuple[str, str], list[Case]]) -> None:
    """The fitted figures as the engines' `fit` release (hetc/engine.py FIT_FILE), each with its training rows;
    the per-architecture (BACKEND:TARGET) figures benchmarks/moe_public.py fits are kept as they are."""
    old = yaml.safe_load(FIT_FILE.read_text()) if FIT_FILE.is_file() else {}
    doc: dict[str, dict[str, dict]] = defaultdict(dict)
    for eng, backends in (old or {}).items():
        doc[eng].update({k: v for k, v in backends.items() if ":" in k})
    for (eng, backend), (k, r) in sorted(fitted.items()):
        rows = groups[(eng, backend)]
        named = ", ".join(sorted({c.named_engine for c in rows}))
        doc[eng][backend] = {
            "matmul": k,
            "collective": r,
            "calibrated_on": [c.name for c in rows],
            "sources": [
                f"matmul {k}, collective {r}: fitted by benchmarks/engine_calibration.py on the {len(rows)} figures of benchmarks/gpu_public.py "
                f"rounds {', '.join(map(str, TRAIN_ROUNDS))} measured with {named} on {backend} (calibrated_on): the factors on the profile's "
                "GEMM efficiency and on the link model's all-reduce time that minimise their median |pred / public - 1| at their public "
                "configurations; they absorb whatever the engine does differently from the profile's assumptions (kernels, collectives, "
                "scheduling), not GEMMs and all-reduces alone"
            ],
        }
    FIT_FILE.write_text(FIT_HEADER + yaml.safe_dump(dict(doc), sort_keys=False, width=200))
    print(f"\nwrote {FIT_FILE}")


def med(errs: list[float]) -> float:
    return statistics.median(abs(e) for e in errs) if errs else float("nan")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--grid-step", type=float, default=0.02, help="the matmul grid's step over 0.50 … 1.20")
    ap.add_argument("--write", action="store_true", help="freeze the fit into hardware_profiles/engines/fit.yaml (the engines' `fit` release)")
    a = ap.parse_args()
    grid = [round(0.5 + a.grid_step * i, 4) for i in range(int(0.7 / a.grid_step) + 1)]  # 0.50 … 1.20
    train = [c for c in CASES if c.round in TRAIN_ROUNDS]
    check = [c for c in CASES if c.round in CHECK_ROUNDS and c.held]
    groups: dict[tuple[str, str], list[Case]] = defaultdict(list)
    for c in train:
        groups[(c.engine, gpu_public.backend_of(c))].append(c)
    fitted: dict[tuple[str, str], tuple[float, float]] = {}
    print("## Fit (TRAIN: rounds " + ", ".join(map(str, TRAIN_ROUNDS)) + ")\n")
    print("| engine | backend | rows | matmul × | collective × | median before | median after | rows (named engines) |")
    print("|---|---|---:|---:|---:|---:|---:|---|")
    for (eng, backend), cases in sorted(groups.items()):
        base = {c.name: predicted(c) for c in cases}
        best = fitted[(eng, backend)] = fit(cases, grid)
        named = ", ".join(sorted({c.named_engine for c in cases}))
        before = med([base[c.name] / c.public - 1 for c in cases])
        after = med([predicted(c, best) / c.public - 1 for c in cases])
        print(f"| {eng} | {backend} | {len(cases)} | {best[0]:.2f} | {best[1]:.2f} | {before:.1%} | {after:.1%} | {named} |", flush=True)
    if a.write:
        write_fit(fitted, groups)
    print(f"\nFrozen. CHECK (rounds {', '.join(map(str, CHECK_ROUNDS))}, held rows):\n")
    print("| case | vendor | engine | public | before | −1 | calibrated | −1 |")
    print("|---|---|---|---:|---:|---:|---:|---:|")
    before_e, after_e = [], []
    for c in check:
        k = fitted.get((c.engine, gpu_public.backend_of(c)), (1.0, 1.0))
        p0, p1 = predicted(c), predicted(c, k)
        before_e.append((c, p0 / c.public - 1))
        after_e.append((c, p1 / c.public - 1))
        print(
            f"| {c.name} | {c.vendor} | {c.named_engine} | {c.public:,.0f} | {p0:,.0f} | {p0 / c.public - 1:+.0%} | {p1:,.0f} | {p1 / c.public - 1:+.0%} |",
            flush=True,
        )
    print()
    for what, errs in (("before", before_e), ("calibrated", after_e)):
        print(f"- {what}: all {med([e for _, e in errs]):.1%} ({len(errs)})")
        for v in ("nvidia", "amd", "intel"):
            print(f"  - {v}: {med([e for c, e in errs if c.vendor == v]):.1%}")
        for n in sorted({c.named_engine for c, _ in errs}):
            print(f"  - engine {n}: {med([e for c, e in errs if c.named_engine == n]):.1%} ({sum(c.named_engine == n for c, _ in errs)})")


if __name__ == "__main__":
    main()
