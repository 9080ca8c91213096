"""No test module imports another's private names, nor anything from another test module (issue 27):
what test modules share lives in tests/fixtures/ (or tests/conftest.py, tests/brute_force.py) under a
public name, so running or changing one test module never depends on another."""

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]


def test_no_test_module_imports_another_modules_privates():
    found = []
    for path in sorted(TESTS.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("tests."):
                found += [f"{path.relative_to(TESTS)}: {node.module}.{a.name}" for a in node.names if a.name.startswith("_")]
    assert not found, found


def test_no_test_module_imports_from_another_test_module():
    found = []
    for path in sorted(TESTS.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom) and (node.module or "").rsplit(".", 1)[-1].startswith("test_"):
                found.append(f"{path.relative_to(TESTS)}: from {node.module} import …")
    assert not found, found
