"""On-disk cache of captured models, so a second `hetc plan` of the same model skips capture.

Key: the model's own files (a catalog entry's JSON, a model dir's config.json, a cached hub
id's resolved config, a .pt2 file's bytes), the dtypes, and the hetc, torch and transformers
versions, plus a hash of hetc's capture code so a code change never serves a stale capture.
`package.module:factory` models run user code whose inputs hetc cannot see: never cached.

Entries are JSON (no pickle): dataclasses are written with their type name and rebuilt
through their constructors, so derived fields (`Unit.cost_key`) are recomputed on load. The
warm path reads files and hashes bytes only; it imports neither transformers nor the export
machinery. Set `HETC_CACHE_DIR` to move the cache, or `HETC_CACHE_DIR=off` to disable it.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import tempfile
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import hetc
from hetc.cluster import PROFILE_DIR
from hetc.partitioner.capture.terms import OpGraph, OpNode, Terms
from hetc.partitioner.capture.op_records import OpRecord
from hetc.partitioner.capture.units import Unit

if TYPE_CHECKING:
    from hetc.partitioner.capture.capture import CapturedModel

__all__ = ["cache_dir", "cache_key", "load", "store"]

SCHEMA = 1
_HERE = Path(__file__).resolve().parent
# the code whose output is cached: a change to any of these invalidates every entry
_CODE = ("capture.py", "capture_cache.py", "graph.py", "terms.py", "units.py", "op_records.py", "fusion.py")


def cache_dir() -> Path | None:
    """Where entries live; None when caching is off (`HETC_CACHE_DIR=off`)."""
    env = os.environ.get("HETC_CACHE_DIR")
    if env is not None:
        return None if env.strip().lower() in ("", "off", "0", "none") else Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "hetc" / "capture"


def _version(dist: str) -> str:
    try:
        return metadata.version(dist)  # reads the dist-info: no import of the package itself
    except metadata.PackageNotFoundError:
        return "absent"


def _hf_cached_config(ref: str) -> Path | None:
    """The config.json of a hub id in the local Hugging Face cache (newest snapshot), found by path."""
    hub = Path(os.environ.get("HF_HUB_CACHE") or Path(os.environ.get("HF_HOME") or Path.home() / ".cache" / "huggingface") / "hub")
    snaps = hub / f"models--{ref.replace('/', '--')}" / "snapshots"
    found = sorted(snaps.glob("*/config.json"), key=lambda p: p.stat().st_mtime) if snaps.is_dir() else []
    return found[-1] if found else None


def _model_files(ref: str) -> list[Path] | None:
    """The files whose bytes define MODEL for capture; None when they cannot be known (factory)."""
    path = Path(ref)
    catalog = PROFILE_DIR / "models" / f"{ref}.json"
    if ref.endswith(".pt2"):
        return [path] if path.is_file() else None
    if catalog.is_file():
        return [cast(Path, catalog)]  # a package of files on disk: resources give a Path
    if path.is_dir():
        return [path / "config.json"] if (path / "config.json").is_file() else None
    if ":" in ref:
        return None
    if ref.count("/") == 1:
        cfg = _hf_cached_config(ref)
        return [cfg] if cfg else None
    return None


def cache_key(ref: str, dtype: str, kv_dtype: str) -> str | None:
    """A hex key for MODEL at these dtypes, or None when MODEL cannot be cached."""
    files = _model_files(ref)
    if files is None:
        return None
    h = hashlib.sha256()
    for f in files:
        h.update(f.read_bytes())
    for name in _CODE:
        h.update((_HERE / name).read_bytes())
    meta = {
        "schema": SCHEMA,
        "ref": ref,
        "dtype": dtype,
        "kv_dtype": kv_dtype,
        "hetc": hetc.__version__,
        "torch": _version("torch"),
        "transformers": _version("transformers"),
    }
    h.update(json.dumps(meta, sort_keys=True).encode())
    return h.hexdigest()


# ---- JSON codec for the captured model's dataclasses ----

_TYPES: dict[str, type] = {}


def _types() -> dict[str, type]:
    if not _TYPES:
        from hetc.partitioner.capture.capture import CapturedModel

        for cls in (CapturedModel, Unit, OpRecord, Terms, OpNode, OpGraph):
            _TYPES[cls.__name__] = cls
    return _TYPES


def _encode(x: Any) -> Any:
    if dataclasses.is_dataclass(x) and not isinstance(x, type):
        name = type(x).__name__
        if _types().get(name) is not type(x):
            raise TypeError(f"capture cache cannot encode {type(x)!r}")
        return {"$t": name, **{f.name: _encode(getattr(x, f.name)) for f in dataclasses.fields(x) if f.init}}
    if isinstance(x, tuple):
        return {"$tuple": [_encode(v) for v in x]}
    if isinstance(x, (set, frozenset)):
        return {"$set": sorted(_encode(v) for v in x)}
    if isinstance(x, list):
        return [_encode(v) for v in x]
    if isinstance(x, dict):
        if not all(isinstance(k, str) for k in x):
            return {"$dict": [[_encode(k), _encode(v)] for k, v in x.items()]}
        return {k: _encode(v) for k, v in x.items()}
    if x is None or isinstance(x, (str, bool, int, float)):
        return x
    raise TypeError(f"capture cache cannot encode {type(x)!r}")


def _decode(x: Any) -> Any:
    if isinstance(x, list):
        return [_decode(v) for v in x]
    if not isinstance(x, dict):
        return x
    if "$t" in x:
        cls = _types()[x["$t"]]
        return cls(**{k: _decode(v) for k, v in x.items() if k != "$t"})
    if "$tuple" in x:
        return tuple(_decode(v) for v in x["$tuple"])
    if "$set" in x:
        return set(_decode(v) for v in x["$set"])
    if "$dict" in x:
        return {_decode(k): _decode(v) for k, v in x["$dict"]}
    return {k: _decode(v) for k, v in x.items()}


def load(key: str) -> CapturedModel | None:
    """The cached capture for `key`, or None (absent, unreadable or from an older schema)."""
    d = cache_dir()
    if d is None:
        return None
    try:
        doc = json.loads((d / f"{key}.json").read_text())
        return _decode(doc["model"]) if doc.get("schema") == SCHEMA else None
    except (OSError, ValueError, KeyError, TypeError):  # a damaged entry is a miss, rewritten by the caller
        return None


def store(key: str, model: CapturedModel) -> None:
    """Write the entry atomically (temp file + rename): a crash never leaves half an entry."""
    d = cache_dir()
    if d is None:
        return
    try:
        d.mkdir(parents=True, exist_ok=True)
        text = json.dumps({"schema": SCHEMA, "model": _encode(model)}, separators=(",", ":"))
        with tempfile.NamedTemporaryFile("w", dir=d, suffix=".tmp", delete=False) as f:
            f.write(text)
        os.replace(f.name, d / f"{key}.json")
    except (OSError, TypeError):  # a read-only disk or an unencodable config: a cold capture next time
        pass
