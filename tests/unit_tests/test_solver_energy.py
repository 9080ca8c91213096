"""The energy objective and the power / price caps against brute force on tiny instances:
every ordered chain of devices, every split, every integer batch (tests/brute_force.py)."""

import pytest

from hetc.partitioner.planner import PlanRequest, make_plan
from hetc.partitioner.estimate.simulate import Workload
from hetc.partitioner.search.solver import Caps, solve
from hetc.errors import Infeasible
from tests.brute_force import all_devices, best_per_set, options, packings
from tests.conftest import FIXTURES, two_type_cluster

WL = Workload(32, 16, "fp32", "fp32", prefill_chunk=32)


def _cluster(tmp_path, fast_w: str = "300 W", big_w: str = "100 W"):
    two_type_cluster(tmp_path, "0.6 MB", "2 MB")
    for name, w in (("fast", fast_w), ("big", big_w)):
        f = tmp_path / f"{name}.yaml"
        f.write_text(f.read_text().replace("power: 100 W", f"power: {w}"))
    from hetc.cluster import load_cluster

    return load_cluster(tmp_path / "c.yaml")


def _watts(cluster, s):
    power = {n.name: n.profile.power for n in cluster.nodes}
    return sum(power[node] for node, _ in s)


def test_energy_objective_matches_brute_force(tmp_path, tiny):
    cluster = _cluster(tmp_path)
    best = best_per_set(options(tiny.units, cluster, WL), value=lambda o: o.estimate.output_tok_s / o.watts())
    # a mix of pipelines draws the sum of their watts: its tokens per joule is at most its best pipeline's
    want = max(o.estimate.output_tok_s / o.watts() for o in best.values())
    sol = solve(tiny.units, cluster, WL, objective="energy", tp="1")
    watts = sum(sp.node.profile.power * sp.tp * c.replicas for c in sol.pipelines for sp in c.stages)
    assert sol.output_tok_s / watts == pytest.approx(want, rel=1e-9)


def test_energy_bound_is_above_the_optimum(tmp_path, tiny):
    _cluster(tmp_path, fast_w="150 W", big_w="400 W")
    tok_j = make_plan(
        PlanRequest(
            model=str(FIXTURES / "tiny-llama"),
            profiles=str(tmp_path / "c.yaml"),
            dtype="fp32",
            input_len=32,
            output_len=16,
            objective="energy",
            tp="1",
            time_limit=2,
        )
    )
    assert tok_j.solver.bound >= tok_j.solver.objective * (1 - 1e-9)
    assert tok_j.solver.objective == pytest.approx(tok_j.predicted.output_tok_s / tok_j.predicted.watts)


@pytest.mark.parametrize("budget", [120.0, 350.0, 450.0, 1000.0])
def test_power_budget_matches_brute_force(tmp_path, tiny, budget):
    cluster = _cluster(tmp_path)
    sets = packings(best_per_set(options(tiny.units, cluster, WL)), all_devices(cluster))
    want = max((v for s, v in sets.items() if _watts(cluster, s) <= budget), default=0.0)
    if want == 0.0:
        with pytest.raises(Infeasible, match="cap"):
            solve(tiny.units, cluster, WL, tp="1", disaggregate="off", caps=Caps(watts=budget))
        return
    sol = solve(tiny.units, cluster, WL, tp="1", disaggregate="off", caps=Caps(watts=budget))
    watts = sum(sp.node.profile.power * sp.tp * c.replicas for c in sol.pipelines for sp in c.stages)
    assert watts <= budget
    assert sol.output_tok_s == pytest.approx(want, rel=1e-9)
    assert sol.bound >= want * (1 - 1e-9)


def test_price_cap_is_kept(tmp_path, tiny):
    cluster = _cluster(tmp_path)  # both test profiles cost 1 USD/h
    sol = solve(tiny.units, cluster, WL, tp="1", disaggregate="off", caps=Caps(usd_h=2.0))
    assert sum(sp.tp * c.replicas for c in sol.pipelines for sp in c.stages) <= 2
