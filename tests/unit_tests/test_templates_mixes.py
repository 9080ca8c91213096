"""Templates (partitioner/search/templates.py): even mixes of tensor-parallel groups of one degree over
two or three device types — a pipeline of an H200 TP8 group and a Gaudi 3 TP8 group is one the bound's own
pipelines need not name (the three-vendor DeepSeek-V3 plan needed it: expert-parallelism log, 2026-11-29)."""

from __future__ import annotations

from hetc.cluster import load_cluster
from hetc.partitioner.estimate.tables import kinds_of, type_key
from hetc.partitioner.search.templates import generate


def _chains(tmp_path, nodes: str) -> set[tuple]:
    (tmp_path / "c.yaml").write_text(f"engine: vllm\nnodes:\n{nodes}network: {{default: roce-400g}}\n")
    cluster = load_cluster(tmp_path / "c.yaml")
    return {tuple((type_key(s.node)[0], s.tp) for s in t.chain) for t in generate(kinds_of(cluster), [], max_stages=8)}


def test_groups_of_one_degree_mix_evenly_over_types(tmp_path):
    chains = _chains(
        tmp_path,
        "  - {name: h, device: h200-sxm, count: 8, link: nvlink4}\n"
        "  - {name: g, device: gaudi3, count: 8, link: gaudi3-roce}\n"
        "  - {name: m, device: mi300x, count: 4, link: infinity-fabric}\n",
    )
    assert (("h200-sxm", 8), ("gaudi3", 8)) in chains  # one group of each
    assert (("h200-sxm", 4), ("h200-sxm", 4), ("gaudi3", 4), ("gaudi3", 4)) in chains  # two of each, r = 1
    assert (("h200-sxm", 4), ("gaudi3", 4)) in chains  # r = 2: one of each per replica
    assert (("h200-sxm", 4), ("h200-sxm", 4), ("gaudi3", 4), ("gaudi3", 4), ("mi300x", 4)) in chains  # three types, every group
    assert not any({tp for _, tp in c} == {2, 4} for c in chains if len({n for n, _ in c}) > 1)  # one degree per mix
    assert (("h200-sxm", 8), ("mi300x", 4)) not in chains  # degrees are not mixed (no MI300X TP8 here)
