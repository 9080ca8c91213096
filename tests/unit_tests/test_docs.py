"""The user documentation stays true to the code: every flag of every subcommand is on its page, every
relative link in the docs points at a file (and heading) that exists, and no message the code prints
or raises points at a file that is not in the repository (such as the team's DESIGN.md)."""

from __future__ import annotations

import argparse
import ast
import re
from pathlib import Path

import pytest

from hetc.cli import build_parser

ROOT = Path(__file__).resolve().parents[2]

# Each subcommand's reference page.
PAGES = {
    "plan": "docs/plan.md",
    "inspect": "docs/inspect.md",
    "devices": "docs/inspect.md",
    "serve": "docs/serving.md",
    "profile": "docs/profile.md",
    "compile": "docs/compile.md",
    "evaluate": "docs/capacity.md",
    "compare": "docs/capacity.md",
    "pareto": "docs/capacity.md",
    "buy": "docs/capacity.md",
}
# The folders whose code the installed `hetc` runs (its messages and help); benchmarks/ and tests/ are not.
CODE_DIRS = ("hetc", "partitioner", "runtime", "backends", "capacity")
DOCS = [
    "README.md",
    "BENCHMARKS.md",
    *sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "docs").glob("*.md")),
    *sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "benchmarks" / "logs").glob("*.md")),
]


def _subcommands() -> dict[str, argparse.ArgumentParser]:
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return dict(sub.choices)


def _flags(parser: argparse.ArgumentParser) -> list[str]:
    return [o for a in parser._actions for o in a.option_strings if o not in ("-h", "--help")]


def test_every_subcommand_has_a_page():
    assert set(_subcommands()) == set(PAGES), "a new subcommand needs a page in PAGES and docs/"


@pytest.mark.parametrize("command", sorted(PAGES))
def test_every_flag_is_on_its_subcommands_page(command):
    text = (ROOT / PAGES[command]).read_text()
    missing = [f for f in _flags(_subcommands()[command]) if not re.search(rf"(?<![\w-]){re.escape(f)}(?![\w-])", text)]
    assert not missing, f"hetc {command}: {missing} not documented in {PAGES[command]}"


def test_the_readme_lists_every_subcommand_with_its_page():
    text = (ROOT / "README.md").read_text()
    for command, page in PAGES.items():
        assert re.search(rf"`hetc {command}`.*\]\({re.escape(page)}", text), f"README: no row for `hetc {command}` linking {page}"


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[`*_]|\[([^\]]*)\]\([^)]*\)", r"\1", heading.strip().lower())
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def _anchors(path: Path) -> set[str]:
    out, seen, fenced = set(), {}, False
    for line in path.read_text().splitlines():
        if line.startswith("```"):
            fenced = not fenced
        m = re.match(r"#{1,6} (.*)", line)
        if m and not fenced:
            s = _slug(m.group(1))
            out.add(s if s not in seen else f"{s}-{seen[s]}")
            seen[s] = seen.get(s, 0) + 1
    return out


def _links(text: str) -> list[str]:
    text = re.sub(r"```.*?```", "", text, flags=re.S)  # code blocks hold no links
    return re.findall(r"\]\(([^)\s]+)\)", text)


@pytest.mark.parametrize("doc", DOCS)
def test_relative_links_point_at_files_that_exist(doc):
    bad = []
    for link in _links((ROOT / doc).read_text()):
        if re.match(r"[a-z]+:", link):  # https:, mailto:
            continue
        target, _, anchor = link.partition("#")
        path = (ROOT / doc).parent / target if target else ROOT / doc
        if not path.exists():
            bad.append(f"{link} (no such file)")
        elif anchor and path.suffix == ".md" and anchor not in _anchors(path):
            bad.append(f"{link} (no such heading)")
    assert not bad, f"{doc}: broken links {bad}"


REPO_DIRS = ("hetc", "partitioner", "runtime", "backends", "capacity", "hardware_profiles", "examples", "benchmarks", "tests", "docs")


@pytest.mark.parametrize("doc", [d for d in DOCS if not d.startswith("benchmarks/logs/")])
def test_repository_paths_the_docs_name_exist(doc):
    """`partitioner/cell_bound.py`, `benchmarks/solver_scenarios.py`, … in the reference pages (the dated
    records in benchmarks/logs/ keep the paths of their day)."""
    text = (ROOT / doc).read_text()
    dirs = "|".join(REPO_DIRS)
    named = {m.group(1) for m in re.finditer(rf"(?<![\w./-])((?:{dirs})/[\w./-]*[\w/])", text)}
    missing = sorted(p for p in named if not (ROOT / p).exists())
    assert not missing, f"{doc} names {missing}, not in the repository"


def _user_strings(path: Path):
    """(line, text) of every string constant in the module that is not a docstring (f-strings' literal parts too)."""
    tree = ast.parse(path.read_text())
    docstrings = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
                docstrings.add(id(first.value))
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
            yield node.lineno, node.value


TOP = {p.name for p in ROOT.iterdir()}


def _missing_files(text: str) -> list[str]:
    """Names of repository files (`*.md`, or paths under one of the repository's folders) the text gives
    that do not exist. Citations of other projects' files (`ROCm/rocm-blogs blogs/.../README.md`) are not ours."""
    out = []
    for m in re.finditer(r"(?<![\w/.-])((?:[\w.-]+/)*[\w.-]+\.(?:md|yaml|py|json|png))\b", text):
        name = m.group(1)
        first = name.split("/")[0]
        if "/" in name and first not in TOP:
            continue  # another project's path
        if "/" not in name and not name.endswith(".md"):
            continue  # plan.json, profile.yaml, fleet.yaml: names a user chooses
        if not (ROOT / name).exists():
            out.append(name)
    return out


def test_no_message_points_at_a_file_not_in_the_repository():
    bad = []
    for folder in CODE_DIRS:
        for path in sorted((ROOT / folder).rglob("*.py")):
            for line, text in _user_strings(path):
                rel = f"{path.relative_to(ROOT)}:{line}"
                missing = _missing_files(text)
                if "DESIGN" in text and "DESIGN.md" not in missing:  # "DESIGN 'predicted.*'" and the like
                    missing.append("DESIGN.md")
                bad += [f"{rel}: names {name}, which is not in the repository (the docs are docs/*.md)" for name in missing]
    assert not bad, "\n".join(bad)


def test_the_file_check_catches_design_md():
    assert _missing_files("see DESIGN.md 'cluster.yaml'") == ["DESIGN.md"]
    assert _missing_files("see docs/nowhere.md") == ["docs/nowhere.md"]
    assert _missing_files("see docs/cluster.md; ROCm/rocm-blogs blogs/x/README.md; write plan.json") == []


def test_shipped_yaml_comments_point_at_files_in_the_repository():
    """The example clusters and the catalog's profiles are read by users: their comments cite docs that exist."""
    bad = []
    for path in sorted([*(ROOT / "examples").rglob("*.yaml"), *(ROOT / "hardware_profiles").rglob("*.yaml")]):
        for line, text in enumerate(path.read_text().splitlines(), 1):
            comment = text.partition("#")[2]
            missing = _missing_files(comment) + (["DESIGN.md"] if "DESIGN" in comment else [])
            bad += [f"{path.relative_to(ROOT)}:{line}: names {name}" for name in missing]
    assert not bad, "\n".join(bad)


def test_benchmarks_tables_are_drawn_from_the_recorded_results():
    """BENCHMARKS.md's solver and planning tables are what benchmarks/results/*.json give (`make bench`
    records, benchmarks/tables.py draws); a hand edit of either side is caught."""
    import subprocess
    import sys

    tables = ROOT / "benchmarks" / "tables.py"
    ok = subprocess.run([sys.executable, str(tables), "--check"], capture_output=True, text=True, cwd=tables.parent)
    assert ok.returncode == 0, ok.stderr
    sys.path.insert(0, str(tables.parent))
    try:
        import tables as drawn  # benchmarks/tables.py

        text = (ROOT / "BENCHMARKS.md").read_text()
        row = next(line for line in text.splitlines() if line.startswith("| 70b-24dev-bf16 |"))
        assert drawn.render(text.replace(row, row.replace("0.999", "0.998"))) == text
    finally:
        sys.path.remove(str(tables.parent))
