"""Column generation over pipelines: a bound on output tok/s that scales with the number of device types.

The cell bound (cell_bound.py) counts every vector of device counts, which stops scaling past
a few types (9^8 vectors for 8 types of 8 devices). Here a column is one pipeline: a chain of
stage kinds, its cuts, the key (aggregate.Key) it was priced at and its relaxed tok/s there.
The master LP takes columns fractionally within the devices of each type and the tp groups of
each kind; decode pools give at most what prefill pools feed. Its duals price stage kinds, and
pricing (pricing.py) finds every key's chain of best reduced cost (to GAP; over chains padded
with empty stages where no link binds, price_dp.py: a relaxation, so the bound holds).

Bound (Lagrangian): for duals π ≥ 0 per device type, σ ≥ 0 per tp kind and μ_d + μ_p ≥ 1 on
the two feed rows, every plan (integer or not) has tok/s ≤ π·N + σ·G + Σ_p x_p·rc_p ≤
π·N + σ·G + N_dev·max(0, max_p rc_p / d_p), rc_p a pipeline's reduced cost and d_p its
devices. Pricing with π + ε per device gives, per key, u_k ≥ max over its chains of rc − ε·d,
and a chain of a key of lengths ≥ lo takes d ≥ lo devices, so rc/d ≤ ε + max(0, u_k)/lo and the
bound is π·N + σ·G + N_dev·(ε + max(0, max_k u_k / lo_k)). It holds because pricing's tok/s bounds every pipeline at
every batch of its key (batches.py) — whatever the columns are; they only steer the duals.
Every full pricing pass gives such a bound; the least is reported. In a full pass a key is priced
only as far as its upper estimate per device stays below the best one so far: it cannot raise the
bound. Pricing uses duals smoothed toward those of the best bound (Wentges), and all its work
(DP cells, the cost model at new keys) counts against the budget, the last full pass included.

Cost or energy with a floor F (a `Demand`, spend s_t per device of type t): the master is the
least Σ spend·x with Σ tok/s·x ≥ F, and pricing values a chain at λ·tok/s − Σ (s_t + π_t)·devices −
σ·groups, λ ≥ 0 the floor row's dual. Any plan x giving F within the devices then spends
Σ s·d·x ≥ λ·F − π·N − σ·G − N_dev·(ε + max(0, max_k u_k / lo_k)) (the same argument, less Σ x·rc),
and tok/s ≤ ((s + π)·N + σ·G + N_dev·(ε + …)) / λ: each full pass gives both; the best of each is
reported. Its optimum's pipelines are the cheapest ways to give tok/s, the solver's templates.

Prefill pools are capped by their KV routes (routes.py), where a network is slow enough to cap them.

Pricing does not count devices per type, so the master may run fractions of pipelines that need more
devices of a type than exist (a 235B model: most columns). Where fitting.COUNT_STATES > 1 (default 0),
once the passes converge with budget left the master keeps only the columns that fit and pricing goes on
within each over-used type's devices (fitting.py: a valid bound, every real pipeline fits the fleet).
The search's seeds are the master's optimum, and where some columns do not fit, also the optimum of the
master over those that do (a pipeline of a plan: explore gen3716 0.937 → 0.961, gen0 0.969 → 0.979).
The master's LP is in master.py.

Where a key's best chain holds fewer sequences than the key's top, the key's batch interval is
split there (as refine.py splits a cell's) and the rest halved in log; where it is longer than the shortest length of its
class, the class is split into that length and the rest: both make the priced tok/s the chain's
own, so the bound closes on the pipelines the LP uses.
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from typing import Any, NamedTuple, cast
from dataclasses import dataclass

import numpy as np

from hetc.cluster import Cluster
from hetc.partitioner.bounds.aggregate import Key, keys
from hetc.partitioner.budget import CpuBudget
from hetc.partitioner.estimate.batches import Regimes
from hetc.partitioner.bounds.cell_bound import WORK_PER_SECOND, CellBound, Demand, Pipeline
from hetc.partitioner.bounds import fitting
from hetc.partitioner.bounds.fitting import Fitting
from hetc.partitioner.bounds.master import Column as _Column, master as _master, no_ends as _no_ends
from hetc.partitioner.bounds.pricing import KeyPricer
from hetc.partitioner.bounds.refine import chain_most, chain_round
from hetc.partitioner.bounds.routes import Group, Routes
from hetc.partitioner.bounds.stage_costs import StageCosts
from hetc.partitioner.estimate.tables import Kind, Tables
from hetc.scheduling import Phase

__all__ = ["ColumnBound", "Converged", "column_bound", "column_bound_rounds", "METHOD"]

TOLERANCE = 1e-3  # ε per device, as a share of the master's value per device
GAP = 1e-3  # pricing resolves reduced costs to this share of the master's value per device: the bound ends within ≈ 0.2% of the LP
TEMPLATES = 32  # pipelines handed to the solver as templates, of each kind (doing both phases; pools)
MANY = 24  # columns found before the master is solved again (then that pass gives no bound)
SMOOTH = 0.5  # pricing's duals: this share of the best bound's plus the rest of the master's (Wentges)
# a kind's unit costs at a new operating point, and a unit's stage time at a step not met before (the cost
# model; rounds of other batches share steps, tables.py): with the key's setup, ~5.4 s for 23,185 and 97,045 on types8-64
EVALUATION = 1.1e-4 * WORK_PER_SECOND
STEP_COST = 3e-5 * WORK_PER_SECOND
AHEAD = 1.3  # the last full pass is started where this many times its estimate still fits the budget: full passes cost
# more as the duals converge (+10–25% a pass on types8-64), and the first, estimated from partial passes, ran 16% over
SHARE = 0.5  # while searching, a key is priced only where it may beat this share of the best reduced cost so far
STALL = 1e-6  # a pass's columns that move the master by less than this share of its value leave it where it was

METHOD = (
    "column generation over pipelines: an LP over device counts per type with a Lagrangian bound from exact chain pricing (loop term and link choice relaxed)"
)


@dataclass(slots=True)
class ColumnBound(CellBound):
    used: int = 0  # the first `used` pipelines are those the master's optimum runs (x > 0)


class Converged(NamedTuple):
    """Where column generation converged: its columns, the master's optimum over them, the routes it priced."""

    cols: list[_Column]
    x: list[float]
    routes: Routes | None


def _column(costs: StageCosts, phase: Phase, chain: tuple, most: int, rate: float, n_kinds: int, floor_R: float | None = None) -> _Column:
    """A chain as a column, valued at the most sequences it holds within its key (prefill pools: `rate`
    output tokens per prompt); in a key at the floor, as pricing valued it (`rate` / `floor_R`): at `most`
    it was worth less, kept its reduced cost in the master and the bound stayed above the LP (gen38: 0.8%)."""
    kinds_ = list(chain[0])
    devices = costs.devices_of(kinds_)
    tokens = rate if phase == Phase.PREFILL else most
    tok_s = rate / floor_R if floor_R is not None else tokens / chain_round(costs, phase, most, chain)
    return _Column(Pipeline(phase, chain[0], chain[1], most, tok_s), devices, np.bincount(np.array(kinds_), minlength=n_kinds))


def _split(key: Key, most: int, n: int, prefill: bool, flat: bool) -> list[Key]:
    """`key` cut where its best chain stops holding sequences (at `most`; not where `flat`: priced at the
    floor, a chain's tok/s is the same at every batch of the key) or is longer than the class's shortest
    (n > lo); [key] when neither."""
    if not prefill and not flat and key.batch <= most < key.top:
        mid = int(np.sqrt((most + 1) * key.top))  # the rest in two, evenly in log: a chain that holds a few more
        rest: Any = (
            [key._replace(batch=most + 1)]
            if mid <= most + 1 or mid >= key.top
            else [key._replace(batch=most + 1, top=mid, m=min(key.lo, mid)), key._replace(batch=mid + 1)]
        )
        return [key._replace(top=most, m=min(key.lo, most))] + rest
    if key.hi > key.lo and (n > key.lo if prefill else min(n, key.top) > key.m):
        rest = key._replace(lo=key.lo + 1, batch=key.lo + 1, top=key.lo + 1) if prefill else key._replace(lo=key.lo + 1, m=min(key.lo + 1, key.top))
        return [key._replace(hi=key.lo), rest]
    return [key]


def _ranked(cols: list[_Column], x: list[float], spend: np.ndarray | None) -> list[int]:
    """Columns the master's optimum runs first (most first), then the best per device (tok/s, or spend per tok/s)."""
    per = (lambda k: -k.pipe.tok_s / k.devices.sum()) if spend is None else (lambda k: float(spend @ k.devices) / k.pipe.tok_s)
    return sorted(range(len(cols)), key=lambda j: (-(x[j] if j < len(x) else 0.0), per(cols[j])))


def _seeds(ranked: list[int], cols: list[_Column]) -> list[int]:
    """The first TEMPLATES of `ranked` that do both phases and the first TEMPLATES pools, in rank
    order: where the master's optimum runs pools (valued before their KV links) and prefill pools
    rank high per device, one shared list left the pipelines doing both few seeds, and the search
    found worse mixes of them with --disaggregate auto than off (gen7 of the generated clusters:
    336k tok/s against 388k)."""
    taken = {True: 0, False: 0}
    out = []
    for j in ranked:
        both = cols[j].pipe.phase == Phase.BOTH
        if taken[both] < TEMPLATES:
            taken[both] += 1
            out.append(j)
    return out


def column_bound(
    tables: Tables,
    kinds: list[Kind],
    cluster: Cluster,
    max_stages: int,
    ceiling: int,
    *,
    phases: tuple[Phase, ...] = (Phase.BOTH,),
    budget: float = 4e8,
    demand: Demand | None = None,
    progress: Callable[[str], None] | None = None,
) -> ColumnBound:
    """The bound over pipelines of `phases` at any batch up to `ceiling`, and the pipelines of the
    master's optimum, within `budget` pricing work (a last full pass always runs, so the bound
    is valid whatever the budget).

    Args:
        phases: "both" (pipelines that prefill and decode) and/or "prefill", "decode" (pools).
        budget: pricing work, in cell_bound.WORK_PER_SECOND's unit (deterministic, unlike seconds).
        demand: cost or energy with a floor (pipelines that prefill and decode only): the master
            is the least spend giving the floor, and each full pass gives both bounds (module
            docstring); `least_spend` is the best of the spend bounds, the pipelines the cheapest.
        progress: called with a line per iteration.
    """
    last = None
    for snap, _ in column_bound_rounds(tables, kinds, cluster, max_stages, ceiling, phases=phases, budget=budget, demand=demand, progress=progress):
        last = snap
    assert last is not None  # the last pass is a full one
    return last()


def column_bound_rounds(
    tables: Tables,
    kinds: list[Kind],
    cluster: Cluster,
    max_stages: int,
    ceiling: int,
    *,
    phases: tuple[Phase, ...] = (Phase.BOTH,),
    budget: float = 4e8,
    demand: Demand | None = None,
    progress: Callable[[str], None] | None = None,
    cpu: CpuBudget | None = None,
    within: Routes | None = None,
    columns: list[_Column] | None = None,
) -> Generator[tuple[Callable[[], ColumnBound], bool], None, Converged | None]:
    """`column_bound` pass by pass: after each, (the bound and pipelines so far, and whether to
    pause). It pauses only after a full pass (a valid bound): the one it starts where `cpu`'s
    deadline leaves no room for another (AHEAD times the last full pass's CPU), or any once the
    deadline has passed. A pass the deadline reaches (once some column is found) stops there, its
    keys not priced bounded by `KeyPricer.per_device`: still a valid bound. The caller may resume with a later deadline (the solver's search runs
    between); the work budget ends it as before.

    Args:
        cpu: the planner's CPU budget; None: the work budget alone.
        within: the pools' KV routes (default: `Routes.where_slow`'s; route_sets.py passes a set of them).
        columns: columns the master starts from.

    Returns:
        Where the passes converged within the work budget: the columns, the master's optimum and the routes.
    """
    costs = StageCosts(tables, kinds, cluster)
    N = costs.devices.astype(float)  # per type
    n_dev = float(N.sum())
    groups = {g: k.groups for g, k in enumerate(kinds) if k.tp > 1}
    pools = Phase.PREFILL in phases and Phase.DECODE in phases
    if demand is not None and phases != (Phase.BOTH,):
        raise ValueError("a demand (cost or energy with a floor) prices pipelines that prefill and decode only")
    spend = None if demand is None else np.array([demand.spend[t] for t in costs.types])
    floor = demand.floor if demand is not None else 0.0
    G = np.array([groups.get(g, 0) for g in range(len(kinds))], dtype=float)
    least = -np.inf  # with a demand: the best spend bound so far
    regimes = {p: Regimes(tables.wl, p, ceiling) for p in phases}
    # pools are priced per type of the stage their KV leaves or enters by (routes.py), at a cap that can bind
    base = {(Phase.PREFILL, k): KeyPricer(costs, k, tp_groups=False) for k in keys(Phase.PREFILL, max_stages, ceiling, regimes[Phase.PREFILL])} if pools else {}
    routes = within if within is not None else Routes.where_slow(costs, list(base.values())) if pools else None
    grouped = {p: [Group(None, None)] if routes is None or p == Phase.BOTH else routes.groups(p) for p in phases}
    todo = [(p, k, g) for p in phases for k in keys(p, max_stages, ceiling, regimes[p]) for g in range(len(grouped[p]))]
    pricers: dict[tuple[Phase, Key, int], KeyPricer | Fitting] = {}
    split_from: dict[tuple[Phase, Key, int], Fitting] = {}  # a key split while counting: the pricer of the key it was cut from
    cols: list[_Column] = list(columns or [])
    seen: set = set()
    counting = False  # converged over every chain: priced since within the devices per type (fitting.py)
    best, work, it = np.inf, 0.0, 0
    x: list[float] = []
    last: dict[tuple[Phase, Key, int], float] = {}  # each key's upper estimate when last priced: the order to price in
    center = None  # the duals of the best bound so far (before any, pricing takes the master's own)
    spent, priced = 0.0, [0.0, 0]  # the work of the last full pass; of pricing so far, and the keys priced
    missed = False  # the last pass priced smoothed duals and found nothing: price the master's own
    stall = None  # the master's value before the last pass's columns, where it priced smoothed duals and found some
    clock = cpu.clock if cpu is not None else (lambda: 0.0)
    cpu0, pass_cpu = clock(), 0.0  # CPU at the start; of the last full pass
    shown: Callable[[], ColumnBound] | None = None  # the last pass's bound, once a full pass made it valid
    while True:
        if cpu is not None and shown is not None and cpu.left() <= pass_cpu:
            yield shown, True  # another full pass would end past the deadline: pause (the caller may extend it)
            continue
        it += 1
        z, x, pi, sigma, mu, ends = (
            _master(cols, N, groups, pools, spend, floor, routes) if cols or spend is not None else (0.0, [], np.zeros(len(N)), {}, {}, _no_ends(len(N)))
        )
        # smoothed duals' columns that leave the master where it was are a misprice (Wentges): price its own next
        # (gen41 without pools: an early center found 24 such columns a pass for 80 passes, none full)
        if stall is not None and (z <= stall * (1 + STALL) if spend is None else z >= stall * (1 - STALL)):
            missed = True
        if pools and not cols:
            mu = {Phase.DECODE: 0.5, Phase.PREFILL: 0.5}
        mus = np.array([mu.get(Phase.DECODE, 0.0), mu.get(Phase.PREFILL, 0.0)])
        rho = routes.feasible(mus, ends[0], ends[1]) if routes is not None else ends[0]
        duals = (pi, np.array([sigma.get(g, 0.0) for g in range(len(kinds))]), mus, rho, ends[1], ends[2])
        # this pass would end past the budget (a full pass costs what the last one did, or before any,
        # what a key has cost so far per key; AHEAD times that): price every key, then stop
        ahead = AHEAD * (spent or len(todo) * priced[0] / max(1, priced[1]))
        final = work + ahead >= budget
        # the CPU deadline: a full pass now where another would not fit (its CPU: the last full pass's, or
        # before any, AHEAD times this pass's work at the CPU per work seen so far). Started later (at the
        # raw estimate, a tighter bound) the first pass ran past its deadline on a loaded host and left the
        # search 3.6 s of 30 (70b-types6-48-latency-4k: plan/bound 0.435): the search's time comes first
        per_work = (clock() - cpu0) / work if work else 0.0
        due = cpu is not None and cpu.left() <= max(AHEAD * pass_cpu, ahead * per_work)
        final_or_due = final or due
        smooth = center is not None and not missed
        if smooth:
            duals = tuple(SMOOTH * c + (1 - SMOOTH) * d for c, d in zip(cast(tuple, center), duals))
        pi, sig, mus, rho, beta, kappa = duals
        mu_d = mus[0]
        scale = z if spend is None else min(z, float(spend @ N))  # the short tok/s' price is no scale
        eps = TOLERANCE * scale / n_dev
        # with a demand a column's gain is λ·tok/s less its devices' spend and duals (μ_d holds λ)
        paid = pi if spend is None else pi + spend
        prices = costs.tp * (paid[costs.type_of] + eps) + sig
        plain = {Phase.BOTH: 1.0 if spend is None else mu_d, Phase.DECODE: mu_d, Phase.PREFILL: mus[1]}
        worth = {
            pk: plain[pk[0]] if routes is None or pk[0] == Phase.BOTH else routes.worth(pk[0], grouped[pk[0]][pk[2]], mus, rho, beta, kappa) for pk in todo
        }
        tol = GAP * max(scale, 1e-9) / n_dev
        start, evaluations, steps, start_cpu = work, tables.evaluations, tables.step_costs, clock()
        for pk in todo:
            if pk not in pricers:
                one = base.get(pk[:2]) or base.setdefault(pk[:2], KeyPricer(costs, pk[1], tp_groups=pk[0] == Phase.BOTH))
                g = grouped[pk[0]][pk[2]]
                ends = g.first is not None or g.last is not None
                pricers[pk] = one.restricted(g.first, g.last) if ends else Fitting(one, split_from.pop(pk, None)) if counting else one
        work += EVALUATION * (tables.evaluations - evaluations) + STEP_COST * (tables.step_costs - steps)
        # keys most promising first (as last priced, else by the certificate); a pass that finds MANY
        # columns stops there (no bound), else it priced every key
        cert = {pk: pricers[pk].certificate(prices, worth[pk]) for pk in todo}
        order = sorted(todo, key=lambda pk: -min(cert[pk], last.get(pk, np.inf)))
        new: list[Any]
        nxt: list[Any]
        top, upper, new, nxt, full = 0.0, -np.inf, [], [], True  # top, upper: per device (a chain of a key has ≥ lo)
        cut = False  # the CPU deadline stopped this pass: the keys left are bounded by their certificates
        for i, pk in enumerate(order):
            if len(new) >= MANY and not final_or_due:
                nxt += order[i:]
                full = False
                break
            if cpu is not None and (new or cols) and cpu.past():  # not before some column: they seed the search's templates
                # the deadline, mid-pass: each key left pays at most its certificate per device (pricing.py),
                # so the pass still gives a valid, looser bound; its keys are priced in later passes
                upper = max([upper] + [pricers[k].per_device(prices, worth[k]) for k in order[i:]])
                nxt += order[i:]
                cut = True
                break
            lo = max(1, pk[1].lo)
            # a key whose reduced cost per device stays below the best upper estimate so far leaves the bound
            # where it is: it is priced only as far as that (and its columns past SHARE of the best found)
            beat = max(lo * top * (1.0 if final_or_due else SHARE), lo * upper - tol if np.isfinite(upper) else -np.inf)
            got = pricers[pk].price(prices, worth[pk], beat, tol)
            work += got.work
            priced[0], priced[1] = priced[0] + got.work, priced[1] + 1
            upper = max(upper, got.upper / lo)
            last[pk] = got.upper / lo
            if got.chain is None or got.found <= tol:
                nxt.append(pk)
                continue
            top = max(top, got.found / lo)
            phase, key, gi = pk
            most = key.top if phase == Phase.PREFILL else min(key.top, chain_most(costs, phase, got.chain))
            flat = key.batch >= regimes[phase].floor_from(key.lo)  # priced at the floor at every batch of the key
            parts = _split(key, most, len(got.chain[0]), phase == Phase.PREFILL, flat)
            nxt += [(phase, k, gi) for k in parts]
            parent = pricers[pk]
            if isinstance(parent, Fitting) and len(parts) > 1:  # its parts start from its counts
                split_from.update(dict.fromkeys(((phase, k, gi) for k in parts), parent))
            for k in parts:
                last[(phase, k, gi)] = got.upper / lo
            col = _column(costs, phase, got.chain, most, pricers[pk].rate, len(kinds), got.R if flat else None)
            if (phase, got.chain, most) not in seen:
                seen.add((phase, got.chain, most))
                new.append(col)
        if full:  # every key was priced against these duals (or cut: bounded by its certificate): a valid bound (keys split meanwhile cover theirs)
            if not cut:  # a cut pass says nothing of a full one's cost
                spent, pass_cpu = work - start, clock() - start_cpu
            rest = float(sig @ G + kappa[0] + n_dev * (eps + max(0.0, upper)))  # κ: the node row's right side, 1
            if spend is None:
                value = float(pi @ N) + rest
            else:  # λ·tok/s ≤ (spend + π)·N + rest and spend ≥ λ·F − π·N − rest (module docstring)
                value = float(paid @ N + rest) / mu_d if mu_d > 0 else np.inf
                if mu_d * floor - float(pi @ N) - rest > least:
                    least, center = mu_d * floor - float(pi @ N) - rest, duals
            if value < best:
                best = value
                center = duals if spend is None else center
        missed = smooth and not new and not cut  # a cut pass found nothing for want of time
        stall = z if smooth and new else None
        todo = nxt
        cols += new
        if progress:
            spent_on = "" if spend is None else f", least spend {least:,.2f}"
            progress(
                f"column generation {it}: LP {z:,.2f}, bound {best:,.0f} tok/s{spent_on}, {len(cols)} pipelines, {len(todo)} keys, work {work / budget:.0%}"
            )
        ended = full and not cut and (final or not new and not smooth)

        def snapshot(x: list = x, new: list = new, best: float = best, least: float = least, cols: list = cols) -> ColumnBound:
            if new:  # the last pass's columns too: the pipelines of the master's optimum over all of them
                x = _master(cols, N, groups, pools, spend, floor)[1]
            ranked = _seeds(_ranked(cols, x, spend), cols)
            fit = [j for j, c in enumerate(cols) if not (c.devices > N).any()]
            if spend is None and 0 < len(fit) < len(cols):  # and the optimum over pipelines a plan can run (module docstring)
                xf = _master([cols[j] for j in fit], N, groups, pools, spend, floor)[1]
                ranked += [j for j in _seeds([fit[j] for j in _ranked([cols[j] for j in fit], xf, spend)], cols) if j not in ranked]
            pipes = [cols[j].pipe for j in ranked]
            used = sum(1 for j in ranked if j < len(x) and x[j] > 1e-9)
            return ColumnBound(best, pipes, least_spend=max(0.0, least) if spend is not None else 0.0, used=used)

        if full:
            shown = snapshot
        yield snapshot, full and (due or cpu is not None and cpu.past())
        if ended and not final and not counting and fitting.COUNT_STATES > 1 and any((c.devices > N).any() for c in cols):
            # converged with budget left and columns no plan can run: price only chains within the devices
            # of the types they over-use, over a master of the columns that fit (a valid bound: fitting.py)
            counting, center, missed, stall = True, None, False, None
            cols = [c for c in cols if not (c.devices > N).any()]
            pricers = {pk: Fitting(p) if isinstance(p, KeyPricer) and p.first is None and p.last is None else p for pk, p in pricers.items()}
            continue
        if ended:
            return Converged(cols, x, routes) if full and not final else None
