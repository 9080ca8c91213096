"""Type-check every `hetc.*` package, each import resolved to its file: `python tools/typecheck.py [MYPY ARGS]`.

pyproject.toml maps folders beside hetc/ into the `hetc` namespace (`hetc.partitioner` → partitioner/,
`hetc.runtime` → runtime/, ...). The default editable install serves that mapping through an import
hook, which type checkers cannot read. This script builds the tree the mapping describes, as symlinks
under .venv/typing/ (hetc/'s own files, and one link per folder mapped beside it), runs mypy on the
package `hetc` found there, and prints its messages with the files' real paths (partitioner/search/
solver.py, not .venv/typing/hetc/partitioner/search/solver.py). The tree is rebuilt on every run, so a
new file is seen without re-installing anything. An IDE can be pointed at it too (an extra search path
of .venv/typing; `make setup` builds it).

Exit status: mypy's.
"""

from __future__ import annotations

import os
import re
import shutil
import sys
from pathlib import Path

try:
    import tomllib
except ImportError:  # Python 3.10: mypy depends on tomli there
    import tomli as tomllib  # type: ignore[no-redef]

ROOT = Path(__file__).resolve().parents[1]
TREE = ROOT / ".venv" / "typing"
TOP = "hetc"


def build_tree() -> Path:
    """TREE/hetc: a link per file of hetc/, and a link per folder pyproject maps into the namespace."""
    conf = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    dirs: dict[str, str] = conf["package-dir"]
    top = TREE / TOP
    if TREE.exists():
        shutil.rmtree(TREE)
    top.mkdir(parents=True)
    for f in sorted((ROOT / dirs[TOP]).iterdir()):
        if f.is_file():
            (top / f.name).symlink_to(f)
    for pkg, folder in sorted(dirs.items()):
        parts = pkg.split(".")
        if pkg == TOP or parts[0] != TOP:
            continue
        parent = ".".join(parts[:-1])
        if parent != TOP and Path(dirs.get(parent, "")) / parts[-1] == Path(folder):
            continue  # where its parent's folder already puts it (hetc.backends.cuda → backends/cuda)
        if parent != TOP:
            raise SystemExit(f"package-dir {pkg} = {folder}: a subpackage outside its parent's folder is not handled")
        (top / parts[-1]).symlink_to(ROOT / folder, target_is_directory=True)
    return TREE


def main() -> int:
    tree = build_tree()
    if sys.argv[1:] == ["--tree-only"]:
        return 0
    from mypy import api

    os.environ["MYPYPATH"] = str(tree)
    out, err, status = api.run(["-p", TOP, *sys.argv[1:]])
    where = re.compile(r"^(\S+?\.pyi?)(?=:)", re.M)

    def real(m: re.Match[str]) -> str:
        path = Path(m.group(1))
        if not path.is_absolute():
            path = Path.cwd() / path
        if tree not in path.parents:
            return m.group(1)
        return os.path.relpath(path.resolve(), Path.cwd())

    sys.stdout.write(where.sub(real, out))
    sys.stderr.write(err)
    return status


if __name__ == "__main__":
    sys.exit(main())
