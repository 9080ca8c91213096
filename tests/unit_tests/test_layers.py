"""The partitioner's rooms import one way (partitioner/__init__.py), and the partitioner never imports
the runtime or the capacity tools. Imports are read from the source with `ast`, function-level and
TYPE_CHECKING ones included, so a lazy import cannot hide a cycle."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PART = ROOT / "partitioner"

# the rooms each room may import besides itself: capture → cost_models → estimate → bounds → search → planner,
# with profiling beside the chain (capture and cost_models only), and the CPU budget (budget.py) below the
# bounds, the search and the planner that spend it
MAY_IMPORT = {
    "budget": set(),
    "capture": set(),
    "cost_models": {"capture"},
    "profiling": {"capture", "cost_models"},
    "estimate": {"capture", "cost_models"},
    "bounds": {"capture", "cost_models", "estimate", "budget"},
    "search": {"capture", "cost_models", "estimate", "bounds", "budget"},
    "planner": {"capture", "cost_models", "estimate", "bounds", "search", "budget"},
}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PART).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(["hetc", "partitioner", *parts])


def imported(path: Path, text: str | None = None) -> set[str]:
    """Every module `path` (or `text` as its source) imports, anywhere in the file (`from a import b` gives a.b and a)."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text() if text is None else text, str(path))):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            out.add(mod)
            out.update(f"{mod}.{a.name}" for a in node.names)
    return out


def room(module: str) -> str | None:
    """The room of a partitioner module (`planner` for planner.py), None for the package itself."""
    parts = module.split(".")
    if parts[:2] != ["hetc", "partitioner"] or len(parts) < 3:
        return None
    return parts[2]


SOURCES = sorted(PART.rglob("*.py"))


def test_every_module_is_in_a_room():
    rooms = {room(module_name(p)) for p in SOURCES} - {None}
    assert rooms == set(MAY_IMPORT), "a new room (or module at the top of partitioner/) needs its place in MAY_IMPORT"


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(ROOT)))
def test_imports_follow_the_chain(path: Path):
    mine = room(module_name(path))
    if mine is None:
        return
    wrong = sorted(m for m in imported(path) if room(m) not in (None, mine) and room(m) not in MAY_IMPORT[mine])
    assert not wrong, f"{mine} may import only {sorted(MAY_IMPORT[mine])}; it imports {wrong}"


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_runtime_or_capacity(path: Path):
    bad = sorted(m for m in imported(path) if m.split(".")[:2] in (["hetc", "runtime"], ["hetc", "capacity"]))
    assert not bad, f"the partitioner imports {bad}"


def test_the_reader_sees_function_level_and_relative_imports():
    assert any(room(m) == "bounds" for m in imported(PART / "search" / "solver.py"))
    code = "def f():\n    from hetc.partitioner.search.solver import solve\n    from ..estimate import simulate\n"
    found = imported(PART / "capture" / "fake.py", code)
    assert {"hetc.partitioner.search.solver", "hetc.partitioner.estimate", "hetc.partitioner.estimate.simulate"} <= found
