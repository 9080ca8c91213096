"""How far the public figures of benchmarks/gpu_public.py disagree among themselves.

Groups the cases that ran one configuration — the same devices, model, dtypes, input/output
lengths, parallelism and batch — under different engine releases, submitters or pages, and
prints each group's spread (largest / smallest − 1) and every figure's distance from its
group's median. A model that knows nothing of the engine's release cannot be nearer to every
member of a group than half its spread; this is the floor the releases themselves set.

Read-only: no prediction is made; it reads the CASES table only.

Usage: python benchmarks/gpu_public_spread.py
"""

from __future__ import annotations

import statistics
import sys
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from public_figures import CASES  # noqa: E402
from public_figures.case import Case  # noqa: E402


def groups() -> list[list[Case]]:
    """Configurations with more than one public figure, widest spread first."""
    by: dict[tuple, list[Case]] = defaultdict(list)
    for c in CASES:
        by[(c.cluster, c.model, c.dtype, c.kv_dtype, c.isl, c.osl, c.placement, c.batch)].append(c)
    many = [cs for cs in by.values() if len(cs) > 1]
    return sorted(many, key=lambda cs: -max(c.public for c in cs) / min(c.public for c in cs))


def main() -> None:
    gs = groups()
    spreads, dists = [], []
    print("| devices | model | isl/osl | parallelism, batch | figures (source: out tok/s) | spread |")
    print("|---|---|---|---|---|---:|")
    for cs in gs:
        vals = [c.public for c in cs]
        spread = max(vals) / min(vals) - 1
        mid = statistics.median(vals)
        spreads.append(spread)
        dists += [abs(v / mid - 1) for v in vals]
        c0 = cs[0]
        figs = ", ".join(f"{c.source}: {c.public:,.0f}" for c in cs)
        print(f"| {c0.cluster} | {c0.model} | {c0.isl}/{c0.osl} | {c0.placement}, b{c0.batch} | {figs} | {spread:.1%} |")
    print(
        f"\n{len(gs)} configurations with more than one figure ({sum(map(len, gs))} of {len(CASES)} "
        f"cases): spread median {statistics.median(spreads):.1%}, max {max(spreads):.1%}; "
        f"|figure / its group's median − 1| median {statistics.median(dists):.1%}, "
        f"{sum(s > 0.2 for s in spreads)} groups spread over 20%"
    )


if __name__ == "__main__":
    main()
