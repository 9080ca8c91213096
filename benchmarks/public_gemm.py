"""GPU profiles' matmul efficiency by shape, from public per-shape GEMM measurements.

ai-dynamo/aiconfigurator publishes, per GPU system and serving engine, the measured latency of
single GEMMs (m × n × k, BF16 and per-tensor FP8) as each engine runs them
(`systems/data/<system>/gemm/<engine>/<version>/gemm_perf.parquet`). This script turns them
into each profile's `efficiency_curves.matmul[dtype]` (a `Curve2D`: achieved FLOP/s ÷ the
profile's peak, by rows M and weight size N·K), with the same fitting code `hetc profile`
uses on a CPU (partitioner/profiling/fit.py):

- efficiency of one GEMM = 2·m·n·k / (peak · (latency − kernel_overhead)): the backend's
  per-kernel device time (hetc/execution.py) is charged apart by the cost model;
- per (m, n, k): the median over the engines measured (TensorRT-LLM, vLLM, SGLang: newest
  release with its own table), so the curve is the device's, not one engine's;
- M on powers of two; N·K binned to the nearest power of two, over the shapes whose aspect
  n/k lies within 1/8 … 8 (a transformer layer's GEMMs at TP 1–8: QKV, output, gated MLP
  up and down); each cell is the median of its shapes (`fit.table_2d`).

BF16 tables also serve FP16 (the same tensor-core rate on these GPUs). Nothing here looks at
an end-to-end throughput figure.

Usage (needs pyarrow: `pip install -e '.[public-data]'`, and a git copy of the aiconfigurator repository):
    python benchmarks/public_gemm.py --aic PATH/TO/aiconfigurator [--write]
"""

from __future__ import annotations

import argparse
import math
import re
import statistics
import subprocess
from collections import defaultdict
from pathlib import Path

from hetc.cluster import load_profile
from hetc.execution import BACKEND_EXECUTION
from hetc.partitioner.profiling import fit

ROOT = Path(__file__).resolve().parent.parent

DATA = "aic-core/src/aiconfigurator_core/systems/data"
# hetc profile -> aiconfigurator system
SYSTEMS = {"h100-sxm": "h100_sxm", "h200-sxm": "h200_sxm", "b200": "b200_sxm", "a100-80g-sxm": "a100_sxm", "l40s": "l40s"}
DTYPES = {"bfloat16": ("bf16", "fp16"), "fp8": ("fp8",)}  # table dtype -> profile compute dtypes it serves
MAX_ASPECT = 8.0
M_GRID = [1 << i for i in range(16)]  # 1 … 32768


def _git(repo: Path, *args: str) -> bytes:
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, check=True).stdout


def _version_key(v: str) -> tuple:
    return tuple(int(x) if x.isdigit() else x for x in re.split(r"[.]|(?<=\d)(?=[a-z])", v))


def newest_tables(repo: Path, system: str) -> list[str]:
    """The newest gemm_perf.parquet of each engine measured on `system` (paths in the repository)."""
    files = _git(repo, "ls-tree", "-r", "--name-only", "HEAD", f"{DATA}/{system}/gemm").decode().split()
    by_engine: dict[str, list[str]] = defaultdict(list)
    for f in files:
        if f.endswith("/gemm_perf.parquet"):
            by_engine[f.split("/")[-3]].append(f)
    return [max(fs, key=lambda f: _version_key(f.split("/")[-2])) for _, fs in sorted(by_engine.items())]


def read_latencies(repo: Path, path: str) -> dict[tuple[str, int, int, int], float]:
    """(dtype, m, n, k) -> latency in seconds of one table."""
    import io

    import pyarrow.parquet as pq

    t = pq.read_table(io.BytesIO(_git(repo, "show", f"HEAD:{path}"))).to_pydict()
    return {(d, m, n, k): lat * 1e-3 for d, m, n, k, lat in zip(t["gemm_dtype"], t["m"], t["n"], t["k"], t["latency"]) if d in DTYPES}


def curves_for(repo: Path, profile_name: str) -> tuple[dict[str, dict], str]:
    """The profile's matmul curves per compute dtype and their source string."""
    prof = load_profile(profile_name)
    dispatch = BACKEND_EXECUTION[prof.backend].kernel_overhead
    tables = newest_tables(repo, SYSTEMS[profile_name])
    lat: dict[tuple[str, int, int, int], list[float]] = defaultdict(list)
    for path in tables:
        for key, s in read_latencies(repo, path).items():
            lat[key].append(s)
    grid = set(M_GRID)
    out: dict[str, dict] = {}
    for dt, served in DTYPES.items():
        peak = prof.peak_flops.get(served[0])
        ms, nks, effs = [], [], []
        for (d, m, n, k), ss in lat.items():
            if d != dt or m not in grid or abs(math.log2(n / k)) > math.log2(MAX_ASPECT):
                continue
            ms.append(m)
            nks.append(2.0 ** round(math.log2(n * k)))
            effs.append(fit.efficiency(2.0 * m * n * k, statistics.median(ss), peak, dispatch, cap=1.0))
        if not peak or not ms:
            continue
        table = fit.table_2d(ms, nks, effs)
        table["eff"] = [[float(f"{e:.4g}") for e in row] for row in table["eff"]]
        for c in served:
            if c in prof.peak_flops:
                out[c] = table
    commit = _git(repo, "rev-parse", "HEAD").decode().strip()
    engines = ", ".join("/".join(p.split("/")[-3:-1]) for p in tables)
    source = (
        f"matmul curves: ai-dynamo/aiconfigurator @ {commit[:10]} {DATA}/{SYSTEMS[profile_name]}/gemm "
        f"({engines}): measured GEMM latency per (m, n, k); efficiency = 2mnk / (peak × (latency − "
        f"{dispatch * 1e6:g} us kernel overhead)), median over the engines, M on powers of two, N·K binned to "
        f"powers of two over shapes with n/k within 1/8…8 (median per cell); bf16 also serves fp16; "
        f"derived by benchmarks/public_gemm.py"
    )
    return out, source


def yaml_block(curves: dict[str, dict], source: str) -> str:
    """The profile's `efficiency_curves:` block (flow-style rows, one per M)."""
    lines = ["efficiency_curves:", f'  source: "{source}"', "  matmul:"]
    for dt, t in curves.items():
        lines += [f"    {dt}:", f"      m: [{', '.join(str(int(m)) for m in t['m'])}]", f"      nk: [{', '.join(f'{nk:.0f}' for nk in t['nk'])}]", "      eff:"]
        lines += [f"        - [{', '.join(f'{e:g}' for e in row)}]" for row in t["eff"]]
    return "\n".join(lines) + "\n"


def write(profile_name: str, block: str) -> Path:
    """Replace (or append) the profile file's trailing `efficiency_curves:` block."""
    path = ROOT / "hardware_profiles" / f"{profile_name}.yaml"
    text = path.read_text()
    head = text.split("\nefficiency_curves:", 1)[0].rstrip("\n") + "\n"
    path.write_text(head + block)
    return path


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--aic", type=Path, required=True, help="a git copy of ai-dynamo/aiconfigurator")
    ap.add_argument("--write", action="store_true", help="rewrite the profiles' efficiency_curves blocks")
    ap.add_argument("--only", nargs="*", default=list(SYSTEMS))
    a = ap.parse_args()
    for name in a.only:
        curves, source = curves_for(a.aic, name)
        block = yaml_block(curves, source)
        if a.write:
            print(f"{name}: {', '.join(curves)} -> {write(name, block)}")
        else:
            print(f"# {name}\n{block}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
