"""The public-figure table of benchmarks/gpu_public.py stays consistent with its cluster files
and the model catalog (BENCHMARKS.md "GPU predictions vs public measurements")."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest

from hetc.cluster import load_cluster

REPO = Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("gpu_public", REPO / "benchmarks" / "gpu_public.py")
gpu_public = importlib.util.module_from_spec(spec)
spec.loader.exec_module(gpu_public)


@pytest.mark.parametrize("case", gpu_public.CASES, ids=[c[0] for c in gpu_public.CASES])
def test_case_matches_its_cluster_and_catalog(case):
    name, cluster, model, dtype, isl, osl, public, src, note, batch = case
    cl = load_cluster(str(REPO / gpu_public.CLUSTERS / f"{cluster}.yaml"))
    assert len(cl.nodes) == 1, "one node: the public run's TP group is all its devices"
    tp = re.match(r"TP(\d+)", note)
    assert int(tp.group(1) if tp else 1) == cl.nodes[0].count
    assert (REPO / "hardware_profiles" / "models" / f"{model}.json").is_file()
    assert dtype in ("bf16", "fp16", "fp8") and isl > 0 and osl > 0 and public > 0 and (batch is None or batch > 0)
    assert src in gpu_public.SOURCES


def test_frozen_commit_is_a_full_hash():
    assert re.fullmatch(r"[0-9a-f]{40}", gpu_public.FROZEN)
