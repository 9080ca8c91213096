"""Replicas get real devices: tensor-parallel groups stay inside a node, and what CP-SAT may
choose always fits the nodes (tp sizes divide one another; largest groups are placed first)."""

from dataclasses import replace

import pytest

from hetc.cluster import load_cluster
from hetc.partitioner.capture.capture import capture
from hetc.partitioner.estimate.simulate import Workload, estimate_pipeline
from hetc.partitioner.search.mix import Option as _Option, slot_use as _slot_use, slots_of as _slots
from hetc.partitioner.search.solver import _allocate
from hetc.partitioner.estimate.split import Slot, batch_options
from hetc.partitioner.search.templates import Template, usage
from tests.conftest import FIXTURES, PROFILE

WL = Workload(32, 16, "fp32", "fp32", prefill_chunk=32)


@pytest.fixture
def setup(tmp_path):
    (tmp_path / "fast.yaml").write_text(PROFILE.format(name="fast", vendor="nvidia", backend="cuda", memory="2 MB", bw="40 GB/s", flops="4 TFLOP/s"))
    (tmp_path / "c.yaml").write_text(
        "nodes:\n  - {name: a, device: ./fast.yaml, count: 4, link: pcie4}\n"
        "  - {name: b, device: ./fast.yaml, count: 4, link: pcie4}\nnetwork: {default: ethernet-10g}\n"
    )
    cluster = load_cluster(tmp_path / "c.yaml")
    units = capture(str(FIXTURES / "tiny-llama"), dtype="fp32").units
    node = cluster.nodes[0]

    def option(label: str, tps: list[int]) -> _Option:
        t = Template(label, tuple(Slot(node, k) for k in tps))
        return _Option(t, batch_options(units, list(t.chain), cluster, WL)[0])

    return cluster, units, option


def test_groups_are_placed_first_so_a_valid_choice_always_fits(setup):
    cluster, units, option = setup
    chain, group = option("four singles", [1, 1, 1, 1]), option("one tp4", [4])
    cands, notes = _allocate([(chain, 1), (group, 1)], units, cluster, WL)
    assert not notes
    by_label = {c.template: c for c in cands}
    tp4 = by_label["one tp4"]
    assert tp4.stages[0].tp == 4 and tp4.first_device == [0]  # a whole node
    singles = by_label["four singles"]
    assert {s.node.name for s in singles.stages} == {"b" if tp4.stages[0].node.name == "a" else "a"}
    assert sorted(singles.first_device) == [0, 1, 2, 3]


def test_slots_count_what_the_nodes_hold(setup):
    cluster, _, option = setup
    slots = _slots(cluster)
    two_groups = _slot_use(usage(option("tp4 + tp4", [4, 4]).template))
    assert all(two_groups[k] <= slots[k] for k in two_groups)  # one tp4 group per node
    three = _slot_use(usage(option("tp4 × 3", [4, 4, 4]).template))
    assert any(three[k] > slots[k] for k in three)  # 12 devices: no
    mixed = option("tp2 + 2 singles + tp4", [2, 1, 1, 4])  # 8 devices: fits only with the tp4 group alone on a node
    use = _slot_use(usage(mixed.template))
    assert all(use[k] <= slots[k] for k in use)
    cands, notes = _allocate([(mixed, 1)], setup[1], cluster, WL)
    assert not notes
    placed = [(s.node.name, f, s.tp) for s, f in zip(cands[0].stages, cands[0].first_device)]
    tp4 = next(p for p in placed if p[2] == 4)
    assert tp4[1] == 0 and all(p[0] != tp4[0] for p in placed if p[2] < 4)


def test_replicas_stages_stay_on_one_node_each(setup, tmp_path):
    """Two replicas of a two-stage chain on two nodes of two: placed stage by stage, both replicas' first
    stages took node x and both second stages y (every replica across the network); a replica's stages
    placed together keep each replica inside one node, and it predicts more."""
    _, units, _ = setup
    (tmp_path / "two.yaml").write_text(
        "nodes:\n  - {name: x, device: ./fast.yaml, count: 2, link: pcie4}\n"
        "  - {name: y, device: ./fast.yaml, count: 2, link: pcie4}\nnetwork: {default: ethernet-10g}\n"
    )
    cluster = load_cluster(tmp_path / "two.yaml")
    t = Template("two singles", (Slot(cluster.nodes[0], 1),) * 2)
    opt = _Option(t, batch_options(units, list(t.chain), cluster, WL)[0])
    cands, notes = _allocate([(opt, 2)], units, cluster, WL)
    assert not notes and sum(c.replicas for c in cands) == 2
    assert sorted(tuple(s.node.name for s in c.stages) for c in cands for _ in range(c.replicas)) == [("x", "x"), ("y", "y")]
    across = estimate_pipeline(units, [replace(s, node=cluster.nodes[i]) for i, s in enumerate(cands[0].stages)], cluster, WL, opt.found.estimate.batch)
    assert across is not None and cands[0].estimate.output_tok_s > across.output_tok_s
