"""The JSON records `make bench` writes (benchmarks/results/AREA.json) and BENCHMARKS.md's tables are drawn from.

Each area's file maps a row key (a scenario, a command) to its latest measurement: the figures, and
the commit, date and machine they were taken at. A script records with `record(area, key, row)`;
`benchmarks/tables.py` renders every area's table into BENCHMARKS.md.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
from pathlib import Path
from typing import Any

from hetc.host import cpu_name

RESULTS = Path(__file__).resolve().parent / "results"

__all__ = ["RESULTS", "load", "machine", "record"]


def machine() -> str:
    """What ran the measurement: the CPU, its cores and the 1-minute load while it ran."""
    return f"{cpu_name()}, {os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}"


def _commit() -> str:
    out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=RESULTS.parent)
    dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], capture_output=True, text=True, cwd=RESULTS.parent).stdout.strip()
    return out.stdout.strip() + ("+changes" if dirty else "") if out.returncode == 0 else "unknown"


def load(area: str) -> dict[str, dict[str, Any]]:
    path = RESULTS / f"{area}.json"
    return json.loads(path.read_text()) if path.is_file() else {}


def record(area: str, key: str, row: dict[str, Any]) -> None:
    """Store `row` as the latest measurement of `key` in `area`, stamped with commit, date and machine.

    Args:
        area: the results file (`solver`, `planning`).
        key: the row's name in that area (a scenario, a command).
        row: the figures, as the area's table renders them.
    """
    rows = load(area)
    rows[key] = {**row, "commit": _commit(), "date": dt.date.today().isoformat(), "machine": machine()}
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / f"{area}.json").write_text(json.dumps(rows, indent=2, sort_keys=True) + "\n")
