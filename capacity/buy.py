"""`hetc buy`: the cheapest fleet from a catalog that serves a request rate within SLOs, with
its placement and a proven lower bound on what any fleet would cost.

The planner does the work (the latency SLOs are then checked by simulating the chosen fleet at the
rate, `check_slos`; where too few requests meet them, `buy_checked` buys again for more capacity):
the catalog's whole stock becomes one cluster, and the solver's
cost objective with the load's output rate as its floor (partitioner/search/mix.py: the fleet of least
USD/h whose pipelines together give the rate) picks the pipelines under the SLOs; what they use
is the purchase. The bound is the larger of two relaxations, each below the price of every fleet
that serves the load: the planner's cost relaxation (partitioner/bounds/bound.py: the least USD/h of
flows giving the rate, each type's devices within the catalog's stock), and the cheapest set of
devices whose memory holds the model and one sequence's KV at all (`bound.least_holding`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, cast

import yaml

from hetc.capacity.evaluate import Evaluation, evaluate_plan
from hetc.capacity.load import LengthDist, Load
from hetc.capacity.metrics import SLO
from hetc.catalog import Catalog
from hetc.cluster import TP_SIZES, Cluster
from hetc.errors import Infeasible
from hetc.plan import Plan, save_plan
from hetc.partitioner.bounds.bound import cost_bound, least_holding
from hetc.partitioner.capture.capture import capture
from hetc.partitioner.planner import PlanRequest, make_plan
from hetc.requests import BuyRequest
from hetc.partitioner.estimate.simulate import Workload
from hetc.partitioner.search.solver import Caps, solve
from hetc.partitioner.estimate.tables import Tables, kinds_of, type_key
from hetc.partitioner.capture.units import Unit
from hetc.scheduling import Objective

__all__ = ["BuyRequest", "Checked", "Purchase", "Try", "buy", "buy_checked", "check_slos", "plan_fleet", "write_fleet"]

PURCHASES = 4  # `buy_checked`: purchases tried before the last one is reported as it is
RAISE_AT_LEAST = 1.1  # a missed check raises the capacity asked for by at least this factor
RAISE_WITHOUT_GOODPUT = 2.0  # ... and by this where no rate tried kept the SLOs (no goodput to scale by)


@dataclass(kw_only=True, slots=True)
class Purchase:
    counts: dict[int, int]  # catalog entry -> devices bought
    usd_h: float
    output_tok_s: float  # what the chosen pipelines predict at saturation
    bound_usd_h: float | None = None  # cheapest mode: no fleet serving the load costs less
    bound_tok_s: float | None = None  # budget mode: no fleet within the budget serves more
    fleet: dict  # the cluster.yaml document

    @property
    def ratio(self) -> float:
        """How close to the best purchase it is provably (1.0: the best): bound/cost, or tok/s / bound."""
        if self.bound_tok_s is not None:
            return self.output_tok_s / self.bound_tok_s if self.bound_tok_s else 1.0
        return cast(float, self.bound_usd_h) / self.usd_h if self.usd_h else 1.0  # set when bound_tok_s is not

    def to_json(self, catalog: Catalog) -> dict:
        return {
            "devices": {catalog.entries[i].profile: k for i, k in sorted(self.counts.items())},
            "usd_h": self.usd_h,
            "predicted_output_tok_s": self.output_tok_s,
            "bound_usd_h": self.bound_usd_h,
            "bound_output_tok_s": self.bound_tok_s,
            "bound_ratio": self.ratio,
            "fleet": self.fleet,
        }


def buy(catalog: Catalog, req: BuyRequest, progress: Callable[[str], None] | None = None, floor_tok_s: float | None = None) -> Purchase:
    """Choose the cheapest purchase from `catalog` that serves `req` (with `req.budget_usd_h`: the
    purchase within the budget that serves the most output tok/s within the SLOs).

    Args:
        floor_tok_s: output tok/s at saturation the purchase must predict (default: the load's,
            `req.output_tok_s`; `buy_checked` raises it when the simulated SLOs miss). The bound is
            always the load's.

    Raises:
        Infeasible: the catalog's whole stock cannot meet the rate or the SLOs, or nothing fits the
            budget (the message says which).
    """
    stock = catalog.cluster(catalog.everything(), name=f"{catalog.name}-stock", engine=req.engine)
    if progress:
        progress(f"capturing {req.model}")
    model = capture(req.model, dtype=req.dtype, kv_dtype=req.kv_dtype)
    wl = Workload(req.input_len, req.output_len, req.dtype, model.kv_dtype, windowed=stock.windowed_kv, experts=stock.expert_layout, dp_budget=stock.dp_budget)
    slo: dict[str, Any] = {
        "ttft_slo_s": req.ttft_slo_ms / 1e3 if req.ttft_slo_ms else None,
        "tpot_slo_s": req.tpot_slo_ms / 1e3 if req.tpot_slo_ms else None,
        "tp": req.tp,
        "time_limit": req.time_limit,
    }
    say = (lambda s: progress(f"solving: {s}")) if progress else None
    if req.budget_usd_h:
        sol = solve(model.units, stock, wl, caps=Caps(usd_h=req.budget_usd_h), **slo, progress=say)
    else:
        try:
            sol = solve(model.units, stock, wl, objective=Objective.COST, min_tok_s=floor_tok_s or req.output_tok_s, **slo, progress=say)
        except Infeasible:
            raise Infeasible(_short_of(model.units, stock, wl, req, slo)) from None
    entry_of = {e.profile: i for i, e in enumerate(catalog.entries)}
    counts: Counter = Counter()
    for cand in sol.pipelines:
        for sp in cand.stages:
            counts[entry_of[sp.node.profile.name]] += sp.tp * cand.replicas
    fleet = catalog.fleet_doc(dict(counts), name=f"{catalog.name}-fleet", engine=req.engine)
    profiles = {n.profile.name: n.profile for n in stock.nodes}
    usd_h = sum(stock.price(profiles[catalog.entries[i].profile]) * k for i, k in counts.items())
    if req.budget_usd_h:  # the solver's bound on output tok/s, capped by the budget
        return Purchase(counts=dict(counts), usd_h=usd_h, output_tok_s=sol.output_tok_s, bound_tok_s=sol.bound, fleet=fleet)
    kinds = kinds_of(stock, TP_SIZES if req.tp == "auto" else (1,))
    price = {type_key(n): stock.price(n.profile) for n in stock.nodes}
    per_tok_s = cost_bound(
        Tables(model.units, wl), kinds, min(len(model.units), sum(n.count for n in stock.nodes)), price, floor=req.output_tok_s
    )  # the catalog's stock limits each type's devices
    bound = max(per_tok_s * req.output_tok_s, least_holding(model.units, wl, stock, price))
    return Purchase(counts=dict(counts), usd_h=usd_h, output_tok_s=sol.output_tok_s, bound_usd_h=bound, fleet=fleet)


@dataclass(frozen=True, slots=True)
class Try:
    """One purchase `buy_checked` made and what its simulation said."""

    floor_tok_s: float  # the capacity asked of it
    usd_h: float
    devices: int
    attainment: float | None  # share of requests within the SLOs (None: no SLO given)
    goodput: float | None  # DistServe goodput, req/s


@dataclass(slots=True)
class Checked:
    purchase: Purchase
    plan: Plan
    check: Evaluation
    tries: list[Try]
    stopped: str | None = None  # why it stopped short of the SLOs (None: met, or nothing to check)

    def to_json(self, catalog: Catalog) -> dict:
        return {**self.purchase.to_json(catalog), "simulated": self.check.as_dict(), "purchases": [asdict(t) for t in self.tries], "stopped": self.stopped}


def buy_checked(catalog: Catalog, req: BuyRequest, fleet_path: str | Path, plan_path: str | Path, progress: Callable[[str], None] | None = None) -> Checked:
    """Buy, plan the fleet and simulate it at the rate; while fewer than `req.attainment` of the
    requests meet the SLOs, buy again asking rate / goodput more capacity (DistServe goodput: the
    rate the fleet serves within them; at least `RAISE_AT_LEAST` more), up to `PURCHASES` times.
    The purchase is sized on capacity at saturation; queueing at the rate is what the simulation
    adds. With a budget there is one purchase: the most the budget buys.

    Args:
        fleet_path, plan_path: where the fleet's cluster.yaml and plan.json are written (the last
            purchase's).

    Raises:
        Infeasible: as `buy`, for the first purchase.
    """
    floor, tries = req.output_tok_s, []
    say = progress or (lambda _: None)
    purchase = buy(catalog, req, progress, floor_tok_s=floor)
    while True:
        write_fleet(purchase, fleet_path)
        say("planning the fleet")
        plan = plan_fleet(purchase, req, fleet_path)
        save_plan(plan, plan_path)
        say("simulating the fleet at the rate")
        check = check_slos(plan, plan_path, req)  # type: ignore[arg-type]  # a Path where a str is annotated, as before
        att, goodput = check.metrics.get("slo_attainment"), check.metrics.get("distserve_goodput")
        tries.append(Try(floor_tok_s=floor, usd_h=purchase.usd_h, devices=sum(purchase.counts.values()), attainment=att, goodput=goodput))
        if req.budget_usd_h or att is None or att >= req.attainment:
            return Checked(purchase, plan, check, tries)
        if len(tries) == PURCHASES:
            return Checked(purchase, plan, check, tries, stopped=f"{PURCHASES} purchases tried")
        floor *= max(RAISE_AT_LEAST, req.rate / goodput if goodput else RAISE_WITHOUT_GOODPUT)
        say(f"{att:.0%} within the SLOs: buying for {floor:,.0f} output tok/s at saturation")
        try:
            purchase = buy(catalog, req, progress, floor_tok_s=floor)
        except Infeasible:
            return Checked(purchase, plan, check, tries, stopped=f"the catalog's stock predicts less than {floor:,.0f} output tok/s within the SLOs")


def _short_of(units: list[Unit], stock: Cluster, wl: Workload, req: BuyRequest, slo: dict) -> str:
    """Why nothing in the catalog serves the load: what its whole stock can do, against what is asked."""
    asked = f"{req.rate:g} req/s × {req.output_len} output tokens = {req.output_tok_s:,.0f} output tok/s"
    try:
        most = solve(units, stock, wl, **slo).output_tok_s
    except Infeasible as e:
        return f"even one pipeline is out of reach of the catalog's whole stock: {e}"
    return (
        f"the catalog's whole stock serves at most {most:,.0f} output tok/s within the SLOs given; the load asks "
        f"{asked} ({req.output_tok_s / most:.1f}×). Raise `max` in the catalog, add device types, or lower --rate."
    )


def plan_fleet(purchase: Purchase, req: BuyRequest, fleet_path: str | Path) -> Plan:
    """The fleet's plan (throughput objective under the same SLOs): what to run on what was bought."""
    return make_plan(
        PlanRequest(
            model=req.model,
            profiles=str(fleet_path),
            dtype=req.dtype,
            kv_dtype=req.kv_dtype,
            input_len=req.input_len,
            output_len=req.output_len,
            ttft_slo_ms=req.ttft_slo_ms,
            tpot_slo_ms=req.tpot_slo_ms,
            tp=req.tp,
            time_limit=req.time_limit,
        )
    )


def write_fleet(purchase: Purchase, path: str | Path) -> None:
    """The purchase as a cluster.yaml that `hetc plan` accepts."""
    text = "# written by `hetc buy`: the cheapest purchase found, as a cluster file\n"
    Path(path).write_text(text + yaml.safe_dump(purchase.fleet, sort_keys=False))


def check_slos(plan: Plan, plan_path: str, req: BuyRequest) -> Evaluation:
    """The chosen fleet's plan served at the request's rate, simulated (Poisson, the request's lengths):
    the latency SLOs hold when `req.attainment` of the requests meet them (`Evaluation.metrics`
    `slo_attainment`). The bound above is on capacity only; this is where latency is checked."""
    fixed = lambda n: LengthDist.parse(str(n), "--input-len")  # noqa: E731
    load = Load.open(req.rate, req.requests, fixed(req.input_len), fixed(req.output_len), seed=0)
    return evaluate_plan(plan, plan_path, load, slo=SLO(req.ttft_slo_ms, req.tpot_slo_ms), attainment=req.attainment)
