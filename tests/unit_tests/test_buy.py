"""`hetc buy`: the purchase meets the rate, costs no more than needed on tiny catalogs (checked
against planning every possible fleet), its bound is below every fleet that serves the load, and
its latency SLOs are checked by simulating the fleet at the rate."""

import itertools
import json
import subprocess
import sys

import pytest

from hetc.capacity.buy import buy
from hetc.requests import BuyRequest
from hetc.catalog import load_catalog
from hetc.errors import BadInput, Infeasible
from hetc.partitioner.capture.capture import capture
from hetc.partitioner.estimate.simulate import Workload
from hetc.partitioner.search.solver import solve
from tests.conftest import FIXTURES, PROFILE

MODEL = str(FIXTURES / "tiny-llama")


def _catalog(tmp_path, fast_max=2, big_max=2):
    (tmp_path / "fast.yaml").write_text(PROFILE.format(name="fast", vendor="nvidia", backend="cuda", memory="40 MB", bw="40 GB/s", flops="4 TFLOP/s"))
    (tmp_path / "big.yaml").write_text(PROFILE.format(name="big", vendor="amd", backend="rocm", memory="400 MB", bw="10 GB/s", flops="0.5 TFLOP/s"))
    (tmp_path / "catalog.yaml").write_text(f"""devices:
  - {{device: ./fast.yaml, max: {fast_max}, per_node: 2, link: pcie4, price: 3 USD/h}}
  - {{device: ./big.yaml, max: {big_max}, per_node: 1, price: 1 USD/h}}
network: {{default: ethernet-10g}}
""")
    return load_catalog(tmp_path / "catalog.yaml")


def _cheapest_by_enumeration(cat, req) -> float:
    """Plan every fleet the catalog allows (throughput objective) and keep the cheapest that serves the load."""
    model = capture(MODEL, dtype="fp32")
    wl = Workload(req.input_len, req.output_len, "fp32", "fp32")
    best = float("inf")
    for counts in itertools.product(*(range(e.max + 1) for e in cat.entries)):
        if not any(counts):
            continue
        cluster = cat.cluster(dict(enumerate(counts)))
        try:
            sol = solve(model.units, cluster, wl, tpot_slo_s=(req.tpot_slo_ms or 0) / 1e3 or None, time_limit=2)
        except Infeasible:
            continue
        if sol.output_tok_s >= req.output_tok_s:
            best = min(best, sum(cluster.price(n.profile) * n.count for n in cluster.nodes))
    return best


@pytest.mark.parametrize("rate", [2.0, 1000.0, 3000.0])
def test_purchase_serves_the_rate_and_bound_is_below_every_fleet(tmp_path, rate):
    cat = _catalog(tmp_path)
    req = BuyRequest(model=MODEL, rate=rate, input_len=64, output_len=32, dtype="fp32", time_limit=2)
    p = buy(cat, req)
    assert p.output_tok_s >= req.output_tok_s
    assert all(0 <= p.counts.get(i, 0) <= e.max for i, e in enumerate(cat.entries))
    assert p.usd_h == pytest.approx(3 * p.counts.get(0, 0) + 1 * p.counts.get(1, 0))
    cheapest = _cheapest_by_enumeration(cat, req)
    assert p.bound_usd_h <= cheapest * (1 + 1e-9) <= p.usd_h * (1 + 1e-9)
    # the fleet document is a cluster `hetc plan` reads, holding exactly what was bought
    fleet = cat.cluster({i: k for i, k in p.counts.items()})
    assert sum(n.count for n in fleet.nodes) == sum(p.counts.values())


@pytest.mark.parametrize("budget", [1.0, 3.0, 5.0])
def test_budget_buys_the_most_throughput_it_can(tmp_path, budget):
    cat = _catalog(tmp_path)
    req = BuyRequest(model=MODEL, rate=1e6, input_len=64, output_len=32, dtype="fp32", time_limit=2, budget_usd_h=budget)
    p = buy(cat, req)
    assert p.usd_h <= budget
    model = capture(MODEL, dtype="fp32")
    wl = Workload(64, 32, "fp32", "fp32")
    most = 0.0
    for counts in itertools.product(*(range(e.max + 1) for e in cat.entries)):
        cluster = cat.cluster(dict(enumerate(counts))) if any(counts) else None
        if cluster and sum(cluster.price(n.profile) * n.count for n in cluster.nodes) <= budget:
            most = max(most, solve(model.units, cluster, wl, time_limit=2).output_tok_s)
    assert p.output_tok_s == pytest.approx(most, rel=1e-6)
    assert p.bound_tok_s >= most * (1 - 1e-9)


def test_more_load_never_buys_less(tmp_path):
    cat = _catalog(tmp_path, fast_max=4)
    costs = [buy(cat, BuyRequest(model=MODEL, rate=r, input_len=64, output_len=32, dtype="fp32", time_limit=2)).usd_h for r in (1.0, 1000.0, 3000.0)]
    assert costs == sorted(costs)


def test_catalog_errors_name_the_field(tmp_path):
    cat = tmp_path / "c.yaml"
    cat.write_text("devices:\n  - {device: h100-sxmm, max: 2, link: nvlink4}\n")
    with pytest.raises(BadInput) as e:
        load_catalog(cat)
    assert e.value.field == "devices[0].device" and "h100-sxm" in e.value.fix
    cat.write_text("devices:\n  - {device: h100-sxm, max: 2}\n")
    with pytest.raises(BadInput) as e:
        load_catalog(cat)
    assert e.value.field == "devices[0].link"
    cat.write_text("devices:\n  - {device: h100-sxm, max: 2, per_node: 1}\n  - {device: l40s, max: 1}\n")
    with pytest.raises(BadInput) as e:
        load_catalog(cat)
    assert e.value.field == "network"


def test_cli_writes_a_fleet_that_plans_and_refuses_the_impossible(tmp_path):
    _catalog(tmp_path)
    out = tmp_path / "fleet.yaml"
    run = [
        sys.executable,
        "-m",
        "hetc.cli",
        "buy",
        "--catalog",
        str(tmp_path / "catalog.yaml"),
        MODEL,
        "--input-len",
        "64",
        "--output-len",
        "32",
        "--dtype",
        "fp32",
        "--time-limit",
        "2",
        "-o",
        str(out),
    ]
    r = subprocess.run([*run, "--rate", "2", "--tpot-slo", "50", "--requests", "100", "--json"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    sim = doc["simulated"]  # the fleet's plan served at the rate, simulated: the latency SLOs checked
    assert sim["completed"] == 100 and 0 <= sim["slo_attainment"] <= 1 and sim["tpot_slo_ms"] == 50
    assert "of requests meet the SLOs" in r.stderr
    plan = json.loads((tmp_path / "fleet.plan.json").read_text())
    assert plan["predicted"]["output_tok_s"] >= 2 * 32
    assert sum(doc["devices"].values()) == sum(n["count"] for n in plan["cluster"]["nodes"])
    r = subprocess.run([*run, "--rate", "1e9"], capture_output=True, text=True)
    assert r.returncode == 3 and "Traceback" not in r.stderr and "whole stock serves at most" in r.stderr
    r = subprocess.run([*run, "--rate", "0"], capture_output=True, text=True)
    assert r.returncode == 2 and "--rate" in r.stderr


def test_a_purchase_whose_simulation_misses_the_slos_is_bought_again_bigger(tmp_path, monkeypatch):
    """`buy_checked`: the first fleet's simulated goodput is half the rate (the check is stubbed to
    say so; the purchases, plans and files are real), so it buys for twice the capacity; the second
    meets the SLOs and is the one written. A check that never passes stops after PURCHASES."""
    import hetc.capacity.buy as B
    from hetc.capacity.evaluate import Evaluation

    cat = _catalog(tmp_path)
    req = BuyRequest(model=MODEL, rate=1250.0, input_len=64, output_len=32, dtype="fp32", time_limit=2, tpot_slo_ms=50)
    said = iter([(0.4, 625.0), (0.95, 1300.0)])
    monkeypatch.setattr(
        B,
        "check_slos",
        lambda plan, path, r: Evaluation(
            name="fleet", load="stub", metrics=dict(zip(("slo_attainment", "distserve_goodput"), next(said))), stages=[], overheads={}
        ),
    )
    got = B.buy_checked(cat, req, tmp_path / "fleet.yaml", tmp_path / "fleet.plan.json")
    first, second = got.tries
    assert first.floor_tok_s == req.output_tok_s and second.floor_tok_s == pytest.approx(2 * req.output_tok_s)
    assert got.purchase.output_tok_s >= second.floor_tok_s and second.usd_h > first.usd_h and got.stopped is None
    assert (tmp_path / "fleet.plan.json").exists() and sum(got.purchase.counts.values()) == second.devices
    monkeypatch.setattr(
        B,
        "check_slos",
        lambda plan, path, r: Evaluation(
            name="fleet", load="stub", metrics={"slo_attainment": 0.5, "distserve_goodput": r.rate / 1.1}, stages=[], overheads={}
        ),
    )
    monkeypatch.setattr(B, "PURCHASES", 2)
    got = B.buy_checked(
        cat,
        BuyRequest(model=MODEL, rate=40.0, input_len=64, output_len=32, dtype="fp32", time_limit=2, tpot_slo_ms=50),
        tmp_path / "fleet.yaml",
        tmp_path / "fleet.plan.json",
    )
    assert len(got.tries) == 2 and got.stopped == "2 purchases tried"
    assert got.tries[1].floor_tok_s == pytest.approx(B.RAISE_AT_LEAST * got.tries[0].floor_tok_s)
