"""benchmarks/generated_clusters.py (issue 31): every seed of both blocks gives a valid cluster.yaml
within the drawn ranges, with a model and dtype that fit it, the same on every run; no tuning seed is a
check seed."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from hetc.cluster import load_cluster

REPO = Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("generated_clusters", REPO / "benchmarks" / "generated_clusters.py")
gen = importlib.util.module_from_spec(spec)
sys.modules["generated_clusters"] = gen  # its dataclass looks its module up
spec.loader.exec_module(gen)

SEEDS = [*gen.TUNE_SEEDS, *gen.TUNE_WIDE_SEEDS, *gen.CHECK_SEEDS]


def test_blocks_are_disjoint_and_the_check_block_is_large_enough():
    tuning = [*gen.TUNE_SEEDS, *gen.TUNE_WIDE_SEEDS, *gen.SMALL_SEEDS]
    assert len(set(tuning)) == len(tuning), "the tuning blocks do not overlap each other"
    assert not set(tuning) & set(gen.CHECK_SEEDS), "no seed tuned on is ever a check seed"
    assert len(gen.CHECK_SEEDS) >= 30


@pytest.mark.slow  # the first generate() captures every catalog model in every dtype (minutes on 2 cores)
@pytest.mark.parametrize("seed", SEEDS)
def test_seed_gives_a_valid_cluster_that_fits_its_model(tmp_path, seed):
    case = gen.generate(seed)
    assert case == gen.generate(seed), "a seed is one case"
    cl = load_cluster(case.write(tmp_path))  # the cluster.yaml contract, checked by hetc's own loader
    types = {n.profile.name for n in cl.nodes}
    assert gen.MIN_TYPES <= len(types) <= gen.MAX_TYPES
    assert gen.MIN_DEVICES <= len(cl.devices) <= gen.MAX_DEVICES
    assert not types & set(gen.EXCLUDED)
    assert all(case.dtype in n.profile.peak_flops for n in cl.nodes), "every device computes the dtype"
    usable = sum(n.count * (n.profile.memory - n.profile.reserved_memory) for n in cl.nodes)
    assert gen._weight_bytes(case.model, case.dtype) <= gen.WEIGHT_SHARE * usable
    assert all(n.count == 1 or n.link is not None for n in cl.nodes)
    assert (len(cl.nodes) > 1) == (cl.network is not None)


@pytest.mark.slow
def test_blocks_mix_what_they_draw():
    """The check block is not one shape repeated: several models, dtypes, networks and sizes."""
    cases = [gen.generate(s) for s in gen.CHECK_SEEDS]
    assert len({c.model for c in cases}) >= 4
    assert len({c.dtype for c in cases}) >= 2
    assert len({c.cluster["network"]["default"] for c in cases if "network" in c.cluster}) >= 4
    assert any(sum(n["count"] for n in c.cluster["nodes"]) >= 40 for c in cases)
