"""Render BENCHMARKS.md's generated tables from benchmarks/results/*.json (what `make bench` records).

Each generated table sits between `<!-- table:AREA -->` and `<!-- /table:AREA -->` in BENCHMARKS.md;
the rest of the file is prose and hand-kept tables (GPU runs, public-figure rounds: records that
cannot be regenerated here).

Usage: python benchmarks/tables.py [--check]   (--check: exit 1 when BENCHMARKS.md is not what the records give)
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from results import load
from solver_scenarios import SCENARIOS

BENCHMARKS = Path(__file__).resolve().parents[1] / "BENCHMARKS.md"


def _figure(v: float) -> str:
    return f"{v:,.0f}" if abs(v) >= 1000 else f"{v:.4g}"


def _seconds(wall: float | None, cpu: float | None) -> str:
    if wall is None:
        return "" if cpu is None else f"{cpu:.1f} CPU"
    return f"{wall:.1f} ({cpu:.1f})" if cpu is not None else f"{wall:.1f}"


def _record(r: dict[str, Any]) -> str:
    return f"[{Path(r['record']).stem}]({r['record']})" if r.get("record") else ""


def solver_table(rows: dict[str, dict[str, Any]]) -> list[str]:
    order = [s[0] for s in SCENARIOS]
    lines = [
        "| scenario | types | objective | plan | bound | plan/bound | solver s (CPU) | command s | commit, date | record |",
        "|---|---:|---|---:|---:|---:|---:|---:|---|---|",
    ]
    for name in sorted(rows, key=lambda n: order.index(n) if n in order else len(order)):
        r = rows[name]
        objective = r["objective"] + (f", floor {r['min_tok_s'] / 1000:g}k tok/s" if r.get("min_tok_s") else "")
        ratio = f"{r['plan_over_bound']:.3f}"
        ratio = ratio if r["plan_over_bound"] >= 0.97 else f"**{ratio}**"  # below the target
        command_s = "" if r.get("command_s") is None else f"{r['command_s']:.1f}"
        label = name + (f" ({r['dtype']})" if r.get("dtype") not in (None, "bf16") else "")
        lines.append(
            f"| {label} | {r['types']} | {objective} | {_figure(r['plan'])} {r['unit']} | {_figure(r['bound'])} | "
            f"{ratio} | {_seconds(r.get('solver_s'), r.get('solver_cpu_s'))} | {command_s} | {r['commit']}, {r['date']} | {_record(r)} |"
        )
    return lines


def planning_table(rows: dict[str, dict[str, Any]]) -> list[str]:
    lines = ["| planning speed | median s (min–max, runs) | command | commit, date | record |", "|---|---:|---|---|---|"]
    for what, r in rows.items():
        spread = f"{r['median_s']:.2f} ({r['min_s']:.2f}–{r['max_s']:.2f}, {r['runs']})"
        lines.append(f"| `{what}` | {spread} | `{r['command']}` | {r['commit']}, {r['date']} | {_record(r)} |")
    return lines


TABLES: dict[str, Callable[[dict[str, dict[str, Any]]], list[str]]] = {"solver": solver_table, "planning": planning_table}


def render(text: str) -> str:
    """BENCHMARKS.md's text with every generated table redrawn from its records."""
    for area, table in TABLES.items():
        begin, end = f"<!-- table:{area} -->", f"<!-- /table:{area} -->"
        pattern = re.compile(re.escape(begin) + r"\n.*?" + re.escape(end), re.S)
        if not pattern.search(text):
            raise SystemExit(f"BENCHMARKS.md has no {begin} … {end} block")
        block = "\n".join([begin, *table(load(area)), end])
        text = pattern.sub(lambda _m, block=block: block, text)  # a function: the block's backslashes stay literal
    return text


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--check", action="store_true", help="exit 1 when BENCHMARKS.md differs from what the records give")
    a = ap.parse_args()
    old = BENCHMARKS.read_text()
    new = render(old)
    if a.check:
        if new != old:
            print("BENCHMARKS.md is out of date with benchmarks/results/: run `python benchmarks/tables.py`", file=sys.stderr)
            sys.exit(1)
        return
    BENCHMARKS.write_text(new)


if __name__ == "__main__":
    main()
