"""Pools inside one node's fabric (issue 31, gen37 of the generated clusters): the solver caps a
prefill pool at its slowest KV route to any decode pool (kv_routes.feed_caps), so a route inside a
node counts only where every decode pool lies in that node. `node_fleets` offers CP-SAT such fleets:
their options bound to one node (mix.Option.node, within its devices), which `_allocate` keeps there."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from hetc.cluster import load_cluster
from hetc.partitioner.capture.capture import capture
from hetc.partitioner.estimate.simulate import Workload
from hetc.partitioner.estimate.split import Slot, batch_options
from hetc.partitioner.search import kv_routes
from hetc.partitioner.search.mix import Option, choose, choose_replicas
from hetc.partitioner.search.solver import _allocate, _tok_s
from hetc.partitioner.search.templates import Template
from hetc.scheduling import Objective, Phase
from tests.conftest import FIXTURES, PROFILE

WL = Workload(32, 16, "fp32", "fp32", prefill_chunk=32)


@pytest.fixture
def slow(tmp_path):
    """Two nodes of four devices on PCIe, joined by a 1 Mbit/s network: a prompt's KV crosses it far
    slower than a pool prefills, and crosses a node's PCIe far faster."""
    (tmp_path / "fast.yaml").write_text(PROFILE.format(name="fast", vendor="nvidia", backend="cuda", memory="2 MB", bw="40 GB/s", flops="4 TFLOP/s"))
    (tmp_path / "c.yaml").write_text(
        "nodes:\n  - {name: a, device: ./fast.yaml, count: 4, link: pcie4}\n"
        "  - {name: b, device: ./fast.yaml, count: 4, link: pcie4}\n"
        "network: {default: {bandwidth: 1 Mbit/s, latency: 10 us}}\n"
    )
    cluster = load_cluster(tmp_path / "c.yaml")
    units = capture(str(FIXTURES / "tiny-llama"), dtype="fp32").units
    node = cluster.nodes[0]

    def option(phase: Phase) -> Option:
        t = Template(f"1×fast {phase}", (Slot(node, 1),), phase)
        return Option(t, max(batch_options(units, list(t.chain), cluster, WL, phase=phase), key=lambda f: f.estimate.output_tok_s))

    return cluster, units, option


def _real(choice: list, units, cluster) -> tuple[float, list]:
    """A fleet's output tok/s once placed, its pools capped at their real KV routes (as solve counts it)."""
    cands, notes = _allocate(choice, units, cluster, WL)
    assert not notes
    return _tok_s(cands, kv_routes.feed_caps(kv_routes.kv_transfers(units, cands, cluster, WL), WL)), cands


def test_pools_inside_one_node_beat_pools_capped_at_the_network(slow):
    cluster, units, option = slow
    opts = [option(Phase.PREFILL), option(Phase.DECODE)]  # --disaggregate on
    kv_routes.cap_feeds(units, opts, cluster, WL)
    assert opts[0].feed < opts[0].found.estimate.output_tok_s / 10  # the network caps a prefill option far below its rate
    before, _ = _real(choose(Objective.THROUGHPUT, opts, cluster, 0.0, 5.0), units, cluster)
    fleets = kv_routes.node_fleets(units, opts, cluster, WL)
    assert len(fleets) == 1  # one type: its (first) largest node
    pick = choose(Objective.THROUGHPUT, fleets[0], cluster, 0.0, 5.0)
    assert pick and all(o.node == "a" for o, _ in pick if o.template.phase == Phase.DECODE)
    assert 0 < sum(k for o, k in pick if o.node == "a") <= 4  # the bound options within node a's four devices
    after, cands = _real(pick, units, cluster)
    assert {c.stages[0].node.name for c in cands if c.phase == Phase.DECODE} == {"a"}
    assert after > 1.5 * before  # routes inside node a: its pools no longer wait on the network


def test_an_option_bound_to_a_node_takes_at_most_its_devices(tmp_path):
    (tmp_path / "fast.yaml").write_text(PROFILE.format(name="fast", vendor="nvidia", backend="cuda", memory="2 MB", bw="40 GB/s", flops="4 TFLOP/s"))
    (tmp_path / "c.yaml").write_text(
        "nodes:\n  - {name: a, device: ./fast.yaml, count: 4, link: pcie4}\n  - {name: b, device: ./fast.yaml, count: 2, link: pcie4}\n"
        "network: {default: ethernet-10g}\n"
    )
    cluster = load_cluster(tmp_path / "c.yaml")
    a = cluster.nodes[0]
    found = SimpleNamespace(estimate=SimpleNamespace(output_tok_s=100.0), stages=[SimpleNamespace(node=a, tp=1)])
    free = Option(Template("both", (Slot(a, 1),)), found)  # type: ignore[arg-type]
    assert choose_replicas([free], cluster, 0.0, 5.0) == {0: 6}
    assert choose_replicas([Option(free.template, free.found, node="b")], cluster, 0.0, 5.0) == {0: 2}
