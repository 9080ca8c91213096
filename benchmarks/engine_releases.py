"""Engine figures per release: which release each public figure of gpu_public.py ran, figures fitted per release.

Round 8 (benchmarks/logs/gpu-public-round8.md) showed one set of figures per engine (`ENGINE@fit`) misses
early releases of the same configurations by 20-80%. So a row's engine release is recorded where its
source states it (`release_of`: the row's note, SOURCE_RELEASE, ROW_RELEASE; else unknown, with why), and
`--write` fits the same two figures as engine_calibration.py (GEMM efficiency × `matmul`, all-reduce time ×
`collective`; no step overhead: engine_calibration.py fits none for these rows) per engine, backend and
release key (KEY: major.minor, `vllm@0.9`) on the training rows (engine_calibration.TRAIN_ROUNDS) that name
that release. A (release, backend) with fewer than MIN_ROWS such rows takes the engine's `fit` figures there,
written as such (`same_as: fit`) into hetc.engine.FIT_RELEASES_FILE. Held rows are neither fitted on nor
predicted here: the in-sample medians printed are of the training rows only.

`gpu_public.py --per-release` predicts each row at `release_for(case)`: its release's key where that key has
figures fitted on the row's backend, else `ENGINE@fit`, the reason printed.

Usage: python benchmarks/engine_releases.py [--grid-step 0.02] [--write]
"""

from __future__ import annotations

import argparse
import re
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
import gpu_public  # noqa: E402
from public_figures.case import STAND_INS, Case  # noqa: E402

from hetc.engine import FIT, FIT_RELEASES_FILE, SAME_AS  # noqa: E402

MIN_ROWS = 2  # a release's figures on a backend need at least this many training rows, else `fit`'s
HEADER = "# Written by `python benchmarks/engine_releases.py --write`: do not edit by hand.\n"
# whole sources of one release, as their SOURCES text names it
SOURCE_RELEASE: dict[str, tuple[str, str]] = {
    "trt17": ("0.17", "SOURCES trt17: 'TensorRT-LLM v0.17 perf overview'"),
    "trt10": ("1.0", "SOURCES trt10: 'TensorRT-LLM v1.0 perf overview'"),
    "rocm25": ("0.11.1", "SOURCES rocm25: docker 'rocm/vllm:rocm7.0.0_vllm_0.11.1_20251103'"),
}
# rows whose release is in the submission's system description, not in SOURCES (read 2026-11-29)
_V41 = "'framework': 'vLLM 0.4.3+rocm614' of closed/AMD/systems/{}.json, mlcommons/inference_results_v4.1 @ a2f5d66d"
ROW_RELEASE: dict[str, tuple[str, str]] = {
    "mlperf41-8xmi300x-amd": ("0.4.3", _V41.format("8xMI300X_2xEPYC-9374F")),
    "mlperf41-8xmi300x-amd-turin": ("0.4.3", _V41.format("8xMI300X_2xEPYC-TURIN")),
    "mlperf41-1xmi300x-amd": ("0.4.3", _V41.format("1xMI300X_2xEPYC-9374F")),
    "mlperf50-8xmi325x-amd": (
        "0.6.5",
        "'framework': 'vLLM 0.6.5.dev964+mlperf50' of closed/AMD/systems/8xMI325X_2xEPYC_9575F.json (AMD's v5.0 vLLM "
        "system; its other, 8xMI325x_2xEPYC-9655, runs shark-ai), ntuhpc/mlperf_inference_results_v5.0 @ cf354115",
    ),
}
# MLPerf rows run on NVIDIA's TensorRT-LLM code (engine trtllm): the TensorRT-LLM its harness builds, as the round's
# closed/NVIDIA/Makefile.build pins it (USE_RELEASE_TRTLLM=1: TRTLLM_PUBLIC_HASH of github.com/NVIDIA/TensorRT-LLM; v5.1:
# TRTLLM_HASH). Not a numbered release but a snapshot of main (v4.0-v5.0) or of a side branch (v5.1), named here by it;
# the key is the whole name (release_key). Other submitters run NVIDIA's code of the same round (SOURCES mlperf41x,
# mlperf51x, mlperf40x): ⚠ their own copies of Makefile.build were not read.
_MK = "TRTLLM{} = {} ('{}') of closed/NVIDIA/Makefile.build, {}"
MLPERF_TRTLLM: dict[str, tuple[str, str]] = {
    "mlperf40": ("main-2024-02-21", _MK.format("_PUBLIC_HASH", "eb8f26c7", "2/21/2024 Github main", "mlcommons/inference_results_v4.0 @ 27fd4ed2")),
    "mlperf41": ("main-2024-07-16", _MK.format("_PUBLIC_HASH", "2d234357", "7/16/2024 Github main", "mlcommons/inference_results_v4.1 @ a2f5d66d")),
    "mlperf50": ("main-2025-02-18", _MK.format("_PUBLIC_HASH", "2ea17cda", "2/18/2025 GitHub release main", "mlcommons/inference_results_v5.0 @ 823da2c9")),
    "mlperf51": ("1.0-mlpinf", _MK.format("_HASH", "18c0333e", "7/24/25 1.0-mlpinf side branch (AG optimization)", "ntuhpc/inference_results_v5.1 @ a634ab77")),
}
# why the release of the other rows is not recorded, by source
UNKNOWN = {
    "mlperf": "MLPerf: AMD systems' files other than those of ROW_RELEASE not read",
    "oci": "Oracle's post names no vLLM release",
    "krai51": "the TensorRT-LLM B200 run names no release",
}
_RELEASE_IN_NOTE = re.compile(r"\b(vLLM|SGLang|TensorRT-LLM|TRT-LLM) v?(\d+\.\d+(?:\.\d+)?)")


def release_of(case: Case) -> tuple[str | None, str]:
    """The release of its named engine the row ran, and where that is stated (or why it is unknown)."""
    if case.named_engine in STAND_INS:
        return None, f"{case.named_engine} is predicted with a stand-in engine's figures: no release of it"
    m = _RELEASE_IN_NOTE.search(case.note)
    if m and m.group(1).replace("TRT-LLM", "TensorRT-LLM") == case.named_engine:
        return m.group(2), f"the row's note: {case.note!r}"
    for table, key in ((ROW_RELEASE, case.name), (SOURCE_RELEASE, case.source)):
        if key in table:
            return table[key]
    mlperf = case.name.split("-")[0]
    if case.engine == "trtllm" and case.source.startswith("mlperf") and mlperf in MLPERF_TRTLLM:
        return MLPERF_TRTLLM[mlperf]
    return None, "not stated: " + UNKNOWN.get("mlperf" if case.source.startswith("mlperf") else case.source, "the source names no release")


def release_key(release: str) -> str:
    """The key a release's figures are fitted and named under: major.minor (0.9.2 → 0.9); a snapshot named
    by its branch and date (MLPERF_TRTLLM: main-2024-02-21, 1.0-mlpinf) is its own key."""
    return ".".join(release.split(".")[:2])


def fitted_releases() -> dict[str, dict[str, dict[str, Any]]]:
    """FIT_RELEASES_FILE as written: {engine: {key: {backend: figures or {same_as: fit, why}}}}."""
    return (yaml.safe_load(FIT_RELEASES_FILE.read_text()) or {}) if FIT_RELEASES_FILE.is_file() else {}


def release_for(case: Case) -> tuple[str, str]:
    """The release of `case.engine` to predict the row at, and why: its release's key where fitted on the
    row's backend, else FIT (the engine's figures fitted on every training row of it)."""
    backend = gpu_public.backend_of(case)
    release, where = release_of(case)
    if release is None:
        return FIT, f"release unknown ({where})"
    key = release_key(release)
    fig = fitted_releases().get(case.engine, {}).get(key, {}).get(backend)
    if fig is None:
        return FIT, f"{case.engine} {key}: no figures fitted"
    if SAME_AS in fig:
        return FIT, f"{case.engine}@{key} on {backend}: {fig['why']}"
    return key, release


def fit_groups(cases: list[Case]) -> tuple[dict[tuple[str, str, str], list[Case]], list[tuple[Case, str]]]:
    """Training rows by (engine, release key, backend), and the rows left to `fit` with why."""
    groups: dict[tuple[str, str, str], list[Case]] = defaultdict(list)
    unknown: list[tuple[Case, str]] = []
    for c in cases:
        release, where = release_of(c)
        if release is None:
            unknown.append((c, where))
        else:
            groups[(c.engine, release_key(release), gpu_public.backend_of(c))].append(c)
    return groups, unknown


def write(fitted: dict[tuple[str, str, str], tuple[float, float]], groups: dict[tuple[str, str, str], list[Case]], grid: list[float]) -> None:
    """The fitted release figures, and for every other key of the engine's `fit` the fallback, as FIT_RELEASES_FILE."""
    import engine_calibration as ec

    from hetc.engine import EngineName, load_engine

    doc: dict[str, dict[str, dict[str, Any]]] = defaultdict(dict)
    for (eng, key, backend), (k, r) in sorted(fitted.items()):
        rows = groups[(eng, key, backend)]
        # a figure at its grid's end: the rows ask for more than the grid allows (2 rows fit 2 figures exactly)
        edge = " (at the end of its grid: weakly determined)" if k in (grid[0], grid[-1]) or r in (ec.COLLECTIVE_GRID[0], ec.COLLECTIVE_GRID[-1]) else ""
        releases = ", ".join(sorted({release_of(c)[0] or "" for c in rows}))
        doc[eng].setdefault(key, {})[backend] = {
            "matmul": k,
            "collective": r,
            "calibrated_on": [c.name for c in rows],
            "sources": [
                f"matmul {k}, collective {r}{edge}: fitted by benchmarks/engine_releases.py on the {len(rows)} figures of benchmarks/gpu_public.py "
                f"rounds {', '.join(map(str, ec.TRAIN_ROUNDS))} measured with {eng} {releases} on {backend} (calibrated_on; each row's release and where "
                "it is stated: engine_releases.release_of), as engine_calibration.py fits `fit`: the factors on the profile's GEMM efficiency "
                "and the link model's all-reduce time minimising their median |pred / public - 1| at their public configurations"
            ],
        }
    for eng, keys in doc.items():
        fit = load_engine(EngineName(eng)).releases.get(FIT, {})
        for key, backends in keys.items():
            for b in fit:
                if b not in backends:
                    rows = [c.name for c in groups.get((eng, key, b), [])]
                    why = f"{len(rows)} training row(s) of release {key} ({', '.join(rows) or 'none'}; fewer than {MIN_ROWS}): the engine's `fit` figures"
                    backends[b] = {SAME_AS: FIT, "why": why}
    FIT_RELEASES_FILE.write_text(HEADER + yaml.safe_dump(dict(doc), sort_keys=True, width=200))
    print(f"\nwrote {FIT_RELEASES_FILE}")


def main() -> None:
    import engine_calibration as ec
    from public_figures import CASES

    from hetc.engine import EngineName, load_engine

    ap = argparse.ArgumentParser()
    ap.add_argument("--grid-step", type=float, default=0.02, help="the matmul grid's step over 0.50 … 1.20")
    ap.add_argument("--write", action="store_true", help=f"freeze the fit into {FIT_RELEASES_FILE.name}")
    a = ap.parse_args()
    grid = [round(0.5 + a.grid_step * i, 4) for i in range(int(0.7 / a.grid_step) + 1)]
    train = [c for c in CASES if c.round in ec.TRAIN_ROUNDS and not c.held]  # never a held row
    groups, unknown = fit_groups(train)
    print(f"## Releases of the training rows (rounds {', '.join(map(str, ec.TRAIN_ROUNDS))}): {len(train) - len(unknown)} named, {len(unknown)} unknown\n")
    for why in sorted({w for _, w in unknown}):
        print(f"- unknown ({sum(w == why for _, w in unknown)} rows): {why}")
    print("\n| engine | release key | backend | rows | matmul × | collective × | rows (releases) |\n|---|---|---|---:|---:|---:|---|")
    fitted: dict[tuple[str, str, str], tuple[float, float]] = {}
    for (eng, key, backend), cases in sorted(groups.items()):
        named = ", ".join(f"{c.name} ({release_of(c)[0]})" for c in cases)
        if len(cases) < MIN_ROWS:
            print(f"| {eng} | {key} | {backend} | {len(cases)} | – | – | too few: `fit`'s; {named} |")
            continue
        k, r = fitted[(eng, key, backend)] = ec.fit(cases, grid)
        print(f"| {eng} | {key} | {backend} | {len(cases)} | {k:.2f} | {r:.2f} | {named} |", flush=True)
    if a.write:
        write(fitted, groups, grid)

    def at_fit(c: Case) -> tuple[float, float]:
        f = load_engine(EngineName(c.engine)).releases[FIT].get(gpu_public.backend_of(c))
        return (f.matmul, f.collective) if f else (1.0, 1.0)

    def per_release(c: Case) -> tuple[float, float]:
        release, _ = release_of(c)
        key = release_key(release) if release else None
        return fitted.get((c.engine, key or "", gpu_public.backend_of(c))) or at_fit(c)

    errs = {
        what: {c.name: ec.predicted(c, f(c)) / c.public - 1 for c in train}
        for what, f in (("base", lambda c: (1.0, 1.0)), ("@fit", at_fit), ("per release", per_release))
    }
    print(f"\n## In-sample (training rows, rounds {', '.join(map(str, ec.TRAIN_ROUNDS))}: the rows every figure was fitted on; not a check)\n")
    print("| rows | n | base | `@fit` | per release |\n|---|---:|---:|---:|---:|")
    subsets = [("all", lambda c: True)] + [(v, lambda c, v=v: c.vendor == v) for v in ("nvidia", "amd", "intel")]
    subsets += [(f"engine {n}", lambda c, n=n: c.named_engine == n) for n in sorted({c.named_engine for c in train})]
    for what, member in subsets:
        rows = [c for c in train if member(c)]
        print(f"| {what} | {len(rows)} | " + " | ".join(f"{ec.med([e[c.name] for c in rows]):.1%}" for e in errs.values()) + " |")


if __name__ == "__main__":
    main()
