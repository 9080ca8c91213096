"""Column generation against brute force on a tiny model: pricing finds every key's chain of best
reduced cost exactly, and the bound lies above the best plan of pipelines, tensor-parallel groups
and prefill/decode pools, on clusters of two to four device types."""

import itertools
from collections import Counter

import numpy as np
import pytest

from hetc.cluster import load_cluster
from hetc.partitioner.search import solver as solver_module
from hetc.partitioner.bounds.aggregate import keys
from hetc.partitioner.estimate.batches import Regimes
from hetc.partitioner.bounds.cell_bound import Pipeline
from hetc.partitioner.bounds import colgen
from hetc.partitioner.bounds.colgen import column_bound
from hetc.partitioner.bounds.price_dp import typed_dp
from hetc.partitioner.bounds.pricing import KeyPricer, Worth
from hetc.partitioner.search.solver import solve
from hetc.partitioner.bounds.stage_costs import StageCosts
from hetc.partitioner.estimate.tables import Tables, kinds_of, type_key
from hetc.partitioner.search.templates import generate
from hetc.scheduling import Objective, Phase
from tests.brute_force import best_per_set, best_reduced_cost, best_with_pools, options
from tests.conftest import two_type_cluster
from tests.fixtures.fleets import WL, disjoint_fleets, many_type_cluster, solution_spend, three_type_cluster


@pytest.mark.parametrize("types", [2, 3])
@pytest.mark.parametrize("phase", [Phase.BOTH, Phase.DECODE, Phase.PREFILL])
def test_pricing_finds_the_best_reduced_cost_exactly(tmp_path, tiny, types, phase):
    """Against every chain of every key of short pipelines, at prices under which some chains pay
    and others don't: an upper estimate above the best reduced cost, and a chain that attains at
    least what pricing found, which is the best to 1e-9 or more (never more than the best padded
    chain: rows where every link is within R take that relaxation)."""
    cluster = many_type_cluster(tmp_path, types)
    costs = StageCosts(Tables(tiny.units, WL), kinds_of(cluster), cluster)
    rng = np.random.default_rng(types)
    checked = 0
    for key in keys(phase, 3, 40, Regimes(WL, phase, 40)):
        pricer = KeyPricer(costs, key, tp_groups=phase == Phase.BOTH)
        if not len(pricer.cand):
            continue
        free = pricer.rate / pricer.cand[0]  # the best tok/s of any chain: prices around a share of it
        for _ in range(2):
            prices = rng.uniform(0.05, 0.6, len(costs.kinds)) * free * costs.tp
            want = best_reduced_cost(pricer, prices, Worth(0.7))
            padded = best_reduced_cost(pricer, prices, Worth(0.7), padded=True)
            got = pricer.price(prices, 0.7, -np.inf, 0.0)
            assert got.upper >= max(want, got.found) - 1e-9 * abs(want), key
            if not np.isfinite(padded):
                assert got.chain is None
                continue
            assert want - 1e-9 * abs(want) <= got.found <= padded + 1e-9 * abs(padded), key
            ks, cuts = got.chain
            assert 1 <= len(ks) <= key.hi
            case = pricer.case
            R = max(case.P[g, b] - case.P[g, a] + case.over[g] for g, a, b in zip(ks, cuts, cuts[1:]))
            R = max([R] + [case.cheapest[costs.type_of[x], costs.type_of[y]] for x, y in zip(ks, ks[1:])])
            assert R <= got.R * (1 + 1e-9)
            assert 0.7 * pricer.rate / R - sum(prices[g] for g in ks) >= got.found - 1e-9 * abs(got.found)
            checked += 1
    assert checked >= 4


@pytest.mark.parametrize("types,first_count", [(2, 2), (3, 2), (4, 1)])
def test_bound_is_above_the_best_plan_on_two_to_four_types(tmp_path, tiny, types, first_count):
    """Every plan of disjoint pipelines (tp groups and pools included) at every integer batch, by
    brute force: the column bound lies above the best, and so does the solver's bound with it."""
    cluster = many_type_cluster(tmp_path, types, first_count)
    want = best_with_pools(best_per_set(options(tiny.units, cluster, WL, tp=True, phases=tuple(Phase))))
    assert want > 0
    tables = Tables(tiny.units, WL)
    devices = sum(n.count for n in cluster.nodes)
    got = column_bound(tables, kinds_of(cluster), cluster, min(len(tiny.units), devices), 4096, phases=tuple(Phase))
    assert got.value >= want * (1 - 1e-9)
    assert got.value <= want * 3  # a bound, not infinity
    assert got.pipelines


def test_solver_counts_types_with_columns_past_the_cell_limit(tmp_path, tiny, monkeypatch):
    """Past MAX_CELLS count vectors the solver bounds with column generation (no types counted
    together): its plan is a real one under that bound, the bound is above the brute-force best,
    and the same inputs give the same plan and bound."""
    cluster = two_type_cluster(tmp_path, "0.8 MB", "2 MB", a_count=2)
    want = best_with_pools(best_per_set(options(tiny.units, cluster, WL, tp=True, phases=tuple(Phase))))
    monkeypatch.setattr(solver_module, "MAX_CELLS", 1)
    sol = solve(tiny.units, cluster, WL, tp="auto", disaggregate="auto")
    assert "column generation" in sol.bound_method
    assert sol.bound >= want * (1 - 1e-9)
    assert sol.output_tok_s <= sol.bound * (1 + 1e-9)
    assert not any("counted together" in n for n in sol.notes)
    again = solve(tiny.units, cluster, WL, tp="auto", disaggregate="auto")
    assert (again.bound, again.output_tok_s) == (sol.bound, sol.output_tok_s)


@pytest.mark.parametrize("objective", [Objective.COST, Objective.ENERGY])
@pytest.mark.parametrize("share", [0.25, 0.5, 0.75, 0.95])
def test_cost_with_a_floor_past_the_cell_limit(tmp_path, tiny, monkeypatch, objective, share):
    """Past MAX_CELLS, cost and energy with a floor price pipelines by their spend (colgen's
    demand): its least spend is spent by no brute-forced fleet giving the floor (every chain,
    split and batch) and is not nothing, and the solver's fleet is the brute-force optimum."""
    cluster = three_type_cluster(tmp_path)
    fleets = disjoint_fleets(best_per_set(options(tiny.units, cluster, WL)))
    tok = lambda f: sum(o.estimate.output_tok_s for o in f)  # noqa: E731
    floor, of = share * max(map(tok, fleets)), 0 if objective == Objective.COST else 1
    want = min(sum((o.usd_h(cluster), o.watts())[of] for o in f) for f in fleets if tok(f) >= floor)
    monkeypatch.setattr(solver_module, "MAX_CELLS", 1)
    sol = solve(tiny.units, cluster, WL, objective=objective, min_tok_s=floor, tp="1")
    assert "column generation" in sol.bound_method
    assert 0.2 * want <= sol.least_spend <= want * (1 + 1e-9)
    assert sol.output_tok_s >= floor * (1 - 1e-9)
    assert solution_spend(cluster, sol)[of] == pytest.approx(want, rel=1e-9)


def test_uneven_templates_are_every_fitting_mix_of_two_kinds(tmp_path):
    """templates.generate(uneven=…): every chain of a groups of one kind and b of another of the
    bound's pipelines (a, b ≥ 1, a + b up to the longest that `uneven` runs: 3) that fits one
    replica, none that doesn't; those of two kinds `uneven` runs are tried first (`early`)."""
    cluster = many_type_cluster(tmp_path, 3, first_count=4)  # fast ×4 (tp1 and tp2 groups), big ×1, mid ×1
    kinds = kinds_of(cluster)
    at = {k.name: g for g, k in enumerate(kinds)}
    runs = [Pipeline(Phase.BOTH, (at["fast×tp2"], at["big"]), (0, 1, 2), 4, 1.0), Pipeline(Phase.BOTH, (at["fast"],) * 3, (0, 1, 2, 3), 4, 1.0)]
    other = Pipeline(Phase.BOTH, (at["mid"],), (0, 5), 4, 1.0)  # not run: mixed, not early
    name = {(k.type_key, k.tp): k.name for k in kinds}
    mixes = {tuple(sorted(Counter(name[(type_key(s.node), s.tp)] for s in t.chain).items())): t.early for t in generate(kinds, runs + [other], 10, uneven=runs)}
    want = {}
    for a_name, b_name in itertools.combinations(["fast×tp2", "fast", "big", "mid"], 2):
        for a in range(1, 3):
            for b in range(1, 4 - a):
                mix = Counter({a_name: a, b_name: b})
                fast = sum(n * (2 if k == "fast×tp2" else 1) for k, n in mix.items() if k.startswith("fast"))
                if fast <= 4 and mix["big"] <= 1 and mix["mid"] <= 1 and mix["fast×tp2"] <= 2:
                    want[tuple(sorted(mix.items()))] = "mid" not in mix
    assert len(want) >= 8
    for mix, early in want.items():
        assert mixes.get(mix) == early, mix
    assert not any(dict(m).get("big", 0) > 1 or dict(m).get("fast×tp2", 0) > 2 for m in mixes)
    assert not any(sum(n for _, n in m) > 3 for m, early in mixes.items() if early)


def test_rows_with_links_out_of_reach_take_the_exact_dp_only_where_the_relaxation_leaves_room(tmp_path, tiny):
    """pricing._dp: where some link is not within R it runs free_dp with the links ignored first and the exact
    typed_dp only on the rows where that stays below their cap. Against typed_dp on every such row: a lower
    bound on its least price, the same least price (and chain price) wherever that is below the cap, and
    some rows ruled out without it (10 GbE between the types: the long keys' rows)."""
    many_type_cluster(tmp_path, 3)
    path = tmp_path / "c.yaml"
    path.write_text(path.read_text().replace("{default: ethernet-10g}", "{default: {bandwidth: 100 Mbit/s, latency: 200 us}}"))
    cluster = load_cluster(path)
    costs = StageCosts(Tables(tiny.units, WL), kinds_of(cluster), cluster)
    rng = np.random.default_rng(7)
    ruled_out = compared = 0
    for key in keys(Phase.BOTH, 6, 40, Regimes(WL, Phase.BOTH, 40)):
        pricer = KeyPricer(costs, key, tp_groups=True)
        if not len(pricer.cand):
            continue
        Rs = pricer.cand
        typed = ~(pricer.case.cheapest[None] <= (Rs * (1 + 1e-9))[:, None, None]).all(axis=(1, 2))
        if not typed.any():
            continue
        prices = rng.uniform(0.05, 0.6, len(costs.kinds)) * pricer.rate / Rs[0] * costs.tp
        cap = pricer.rate / Rs * rng.uniform(0.2, 1.2)
        low, best, _ = pricer._dp(Rs, prices, cap)
        u0 = pricer._reach_u0(Rs[typed])
        pk = prices[pricer.kinds]
        _, want_best, _ = typed_dp(
            u0, pk, pricer.type_of, pricer.T, pricer.case.cheapest[None] <= (Rs[typed] * (1 + 1e-9))[:, None, None], key.lo, min(key.hi, costs.u), cap[typed]
        )
        exact, _, _ = typed_dp(
            u0, pk, pricer.type_of, pricer.T, pricer.case.cheapest[None] <= (Rs[typed] * (1 + 1e-9))[:, None, None], key.lo, min(key.hi, costs.u)
        )
        assert (low[typed] <= exact * (1 + 1e-12) + 1e-12).all(), key
        below = exact < cap[typed]
        assert np.allclose(low[typed][below], exact[below], rtol=1e-12) and np.allclose(best[typed][below], want_best[below], rtol=1e-12), key
        ruled_out += int((low[typed] >= cap[typed]).sum())
        compared += int(typed.sum())
    assert compared and ruled_out


def test_a_column_of_a_key_at_the_floor_is_worth_what_pricing_found(tmp_path, tiny):
    """A key whose every batch is priced at the floor (decode pools past the budget) enters the master at the
    tok/s pricing valued its chain at, so that its reduced cost there is what pricing found and the LP can
    price it out; valued at the most sequences it holds exactly (here 2.5 budgets: three steps short of
    full), it was worth less, kept a positive reduced cost inside the master, and the bound stayed above the LP."""
    cluster = two_type_cluster(tmp_path, "1 GB", "1 GB")
    costs = StageCosts(Tables(tiny.units, WL), kinds_of(cluster), cluster)
    regimes = Regimes(WL, Phase.DECODE, 4096)
    key = next(k for k in keys(Phase.DECODE, 1, 4096, regimes) if k.batch >= regimes.floor_from(k.lo))
    assert key.top == 4096
    pricer = KeyPricer(costs, key, tp_groups=False)
    prices = np.full(len(costs.kinds), 1.0)
    got = pricer.price(prices, 1.0, -np.inf, 0.0)
    most = int(2.5 * WL.step_budget)
    col = colgen._column(costs, Phase.DECODE, got.chain, most, pricer.rate, len(costs.kinds), got.R)
    assert col.pipe.tok_s - col.stages @ prices == pytest.approx(got.found, rel=1e-9)
    exact = colgen._column(costs, Phase.DECODE, got.chain, most, pricer.rate, len(costs.kinds))
    assert exact.pipe.tok_s < col.pipe.tok_s * (1 - 1e-3)


def test_the_pipelines_hold_the_optimum_over_pipelines_that_fit(tmp_path, tiny, monkeypatch):
    """Where the master runs pipelines that take more devices of a type than exist, the templates' seeds
    also hold the optimum of the master over the columns that fit (one seed of each kind here): the
    search's pipelines can then be those of a plan."""
    cluster = many_type_cluster(tmp_path, 3, 1)
    tables = Tables(tiny.units, WL)
    costs = StageCosts(tables, kinds_of(cluster), cluster)

    def fits(kinds) -> bool:
        return bool((costs.devices_of(kinds) <= costs.devices).all())

    monkeypatch.setattr(colgen, "TEMPLATES", 1)
    got = column_bound(tables, kinds_of(cluster), cluster, min(len(tiny.units), sum(n.count for n in cluster.nodes)), 4096, phases=tuple(Phase))
    both = [p for p in got.pipelines if p.phase == Phase.BOTH]
    assert not fits(both[0].kinds)  # the master's own optimum runs one that over-uses a type
    assert any(fits(p.kinds) for p in both[1:])
