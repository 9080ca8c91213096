"""The search for plans with prefill/decode pools (issue 31, generated clusters): CP-SAT values a
prefill pool at what its KV links carry to the decode pools (uncapped, it chose pools those links
then capped below a mix without pools), and the bound seeds the search with pipelines of each kind."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from ortools.sat.python import cp_model

from hetc.partitioner.budget import CpuBudget
from hetc.partitioner.bounds.colgen import TEMPLATES, _seeds
from hetc.partitioner.cost_models.links import hops, transfer_time
from hetc.partitioner.estimate.simulate import Workload
from hetc.partitioner.estimate.split import Slot
from hetc.partitioner.search import mix
from hetc.partitioner.search.mix import Option, choose_replicas
from hetc.partitioner.search.kv_routes import cap_feeds
from hetc.partitioner.search.templates import Template
from hetc.scheduling import Phase
from tests.conftest import two_type_cluster

WL = Workload(32, 16, "fp32", "fp32", prefill_chunk=32)


def _option(node, phase: Phase, tok_s: float) -> Option:
    """One single-device pipeline on `node` predicted at `tok_s` (only what CP-SAT reads)."""
    stage = SimpleNamespace(node=node, tp=1)
    return Option(Template(f"{phase}:{node.name}", (Slot(node, 1),), phase), SimpleNamespace(estimate=SimpleNamespace(output_tok_s=tok_s), stages=[stage]))


def test_pools_whose_kv_link_caps_them_lose_to_a_pipeline_that_does_both(tmp_path):
    cluster = two_type_cluster(tmp_path, "16 GB", "16 GB", a_count=1)
    a, b = cluster.nodes
    both, prefill, decode = _option(a, Phase.BOTH, 100.0), _option(b, Phase.PREFILL, 1000.0), _option(a, Phase.DECODE, 1000.0)
    opts = [both, prefill, decode]
    assert choose_replicas(opts, cluster, 0.0, 5.0) == {1: 1, 2: 1}  # uncapped: the pools (1000 > 100)
    prefill.feed = 10.0  # its KV link carries 10 tok/s of decoding: the pools give 10
    got = choose_replicas(opts, cluster, 0.0, 5.0)
    assert got.get(0) == 1 and 2 not in got  # the pipeline that does both, on the device the decode pool wanted


def test_a_prefill_options_feed_is_its_slowest_route_to_a_decode_type(tmp_path, tiny):
    cluster = two_type_cluster(tmp_path, "16 GB", "16 GB", a_count=2)
    a, b = cluster.nodes
    opts = [_option(b, Phase.PREFILL, 1e9), _option(a, Phase.DECODE, 1e9), _option(a, Phase.BOTH, 1e9)]
    cap_feeds(tiny.units, opts, cluster, WL)
    kv = WL.input_len * sum(u.kv_bytes_per_token for u in tiny.units)
    path = hops(cluster, b, a)  # the big AMD device's host link, the 10 GbE network, the fast NVIDIA node's host link
    assert len(path) == 3
    assert opts[0].feed == WL.output_len / sum(link.latency + kv / link.bandwidth for link in path)
    assert opts[0].feed == WL.output_len / transfer_time(kv, path)
    assert opts[1].feed == opts[2].feed == float("inf")  # only prefill pools feed


def test_the_bound_seeds_pipelines_doing_both_phases_even_where_pools_rank_first():
    """Column generation hands the search TEMPLATES pipelines of each kind: pools that rank first
    (the master's optimum, high tok/s per device) no longer leave the pipelines doing both none."""
    pipe = lambda phase: SimpleNamespace(pipe=SimpleNamespace(phase=phase))  # noqa: E731
    cols = [pipe(Phase.PREFILL if j % 2 else Phase.DECODE) for j in range(2 * TEMPLATES)] + [pipe(Phase.BOTH) for _ in range(5)]
    got = _seeds(list(range(len(cols))), cols)  # type: ignore[arg-type]
    assert got == list(range(TEMPLATES)) + list(range(2 * TEMPLATES, 2 * TEMPLATES + 5))


class _CutShort:
    """A CpSolver that the CPU limit stopped at once: its time spent, `status` (no fleet, or the empty one)."""

    status = 0

    def __init__(self) -> None:
        self.parameters = SimpleNamespace(num_workers=1, max_deterministic_time=0.0, max_time_in_seconds=0.25)

    def Solve(self, model) -> int:  # noqa: N802  # CpSolver's name
        return self.status

    def WallTime(self) -> float:  # noqa: N802
        return self.parameters.max_time_in_seconds

    def Value(self, x) -> int:  # noqa: N802
        return 0


@pytest.mark.parametrize("status", [cp_model.UNKNOWN, cp_model.FEASIBLE])
def test_cpsat_cut_short_by_the_cpu_limit_still_returns_its_warm_start(tmp_path, monkeypatch, status):
    """On a loaded host CP-SAT may get no CPU before the limit (gen41 of the generated clusters once
    failed to plan: 'no placement fits'); the warm start (the best option replicated) is a fleet."""
    cluster = two_type_cluster(tmp_path, "16 GB", "16 GB", a_count=2)
    a, b = cluster.nodes
    opts = [_option(b, Phase.BOTH, 50.0), _option(a, Phase.BOTH, 100.0)]
    monkeypatch.setattr(mix.cp_model, "CpSolver", type("Cut", (_CutShort,), {"status": status}))
    late = CpuBudget(0.0)
    assert choose_replicas(opts, cluster, 0.0, 5.0, cpu=late) == {1: 2}  # 2 × 100 tok/s on node a
    assert late.stopped == ["cp-sat"]
