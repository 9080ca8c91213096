"""The public-figure table of benchmarks/gpu_public.py stays consistent with its cluster files
and the model catalog (BENCHMARKS.md "GPU predictions vs public measurements")."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

import pytest

from hetc.cluster import load_cluster
from hetc.placement import parse_placement

REPO = Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("gpu_public", REPO / "benchmarks" / "gpu_public.py")
gpu_public = importlib.util.module_from_spec(spec)
sys.modules["gpu_public"] = gpu_public  # its dataclasses look their module up
spec.loader.exec_module(gpu_public)


@pytest.mark.parametrize("case", gpu_public.CASES, ids=[c.name for c in gpu_public.CASES])
def test_case_matches_its_cluster_and_catalog(case):
    cl = load_cluster(str(REPO / gpu_public.CLUSTERS / f"{case.cluster}.yaml"))
    assert len({n.profile.name for n in cl.nodes}) == 1, "one device type: the public run's devices"
    spec = parse_placement(case.placement, cl, 80)
    assert all(len(p.stages) == 1 for p in spec), "the public runs are tensor-parallel groups, no pipelines"
    assert len({p.stages[0].tp for p in spec}) == 1, "every node runs the same group (a multi-node run's replicas)"
    assert {p.stages[0].node for p in spec} == {n.name for n in cl.nodes}, "the run uses every node of its cluster"
    assert (REPO / "hardware_profiles" / "models" / f"{case.model}.json").is_file()
    assert case.dtype in ("bf16", "fp16", "fp8") and case.isl > 0 and case.osl > 0 and case.public > 0
    assert case.batch is None or case.batch > 0
    assert case.source in gpu_public.SOURCES and case.vendor in ("nvidia", "amd", "intel")


def test_frozen_commit_is_a_full_hash():
    assert re.fullmatch(r"[0-9a-f]{40}", gpu_public.FROZEN)
