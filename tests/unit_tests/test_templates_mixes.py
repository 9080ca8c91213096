"""Templates (partitioner/search/templates.py): even mixes of tensor-parallel groups of one degree over
two or three device types — a pipeline of an H200 TP8 group and a Gaudi 3 TP8 group is one the bound's own
pipelines need not name (the three-vendor DeepSeek-V3 plan needed it: expert-parallelism log, 2026-11-29)."""

from __future__ import annotations

from hetc.cluster import load_cluster
from hetc.partitioner.estimate.tables import kinds_of, type_key
from hetc.partitioner.search.solver import _by_promise
from hetc.partitioner.search.templates import generate
from hetc.scheduling import Phase


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


def test_every_kinds_short_chains_come_before_any_kinds_long_ones(tmp_path):
    """The search's order (solver._by_promise), which a spent CPU limit cuts: every kind's one-stage
    chains before any kind's two-stage ones. In kind order, one type's chains of every length came
    first and the next type's single device was never tried (gen20 of the generated clusters: 18
    H100s in a row for a 7B model evaluated, a lone MI300X not)."""
    (tmp_path / "c.yaml").write_text(
        "engine: vllm\nnodes:\n"
        "  - {name: h, device: h100-sxm, count: 6, link: nvlink4}\n"
        "  - {name: m, device: mi300x, count: 6, link: infinity-fabric}\n"
        "network: {default: roce-400g}\n"
    )
    kinds = kinds_of(load_cluster(tmp_path / "c.yaml"))
    ordered = _by_promise(generate(kinds, [], max_stages=6, phases=tuple(Phase)))
    homogeneous = [t for t in ordered if len({type_key(s.node) for s in t.chain}) == 1]
    assert [len(t.chain) for t in homogeneous] == sorted(len(t.chain) for t in homogeneous)
    first_mi300x = next(i for i, t in enumerate(ordered) if t.phase == Phase.BOTH and type_key(t.chain[0].node)[0] == "mi300x")
    assert all(len(t.chain) == 1 for t in ordered[:first_mi300x])
