"""Placement search: pipelines, their stages (devices or tp groups), unit ranges and batch.

1. Group identical devices into kinds (type × tp) and build per-kind tables (tables.py).
2. The cell bound (cell_bound.py): an integer knapsack over device-count vectors of
   per-pipeline upper bounds gives the bound on output tok/s, and the pipelines of its
   optimum; past MAX_CELLS vectors, column generation (colgen.py) does, with an exact
   pricing DP, so that the bound scales with the number of device types.
3. Templates (templates.py): homogeneous chains, even mixes, and those pipelines as chains
   of kinds (where the bound's best does not fit: chains that do, fitted.py, and chains of tp
   groups of different degrees over a few types, degree_mixes.py; cost or energy with a floor past MAX_CELLS: also every mix of two kinds the
   column-generation optimum runs, in any counts). Each is evaluated exactly — best split per batch (split.py) and the
   saturation model (simulate.py) — at every batch of the grid, most promising first, within
   a work budget.
4. CP-SAT picks how many replicas of each option (template × batch) to run within the
   device counts and caps, for the objective as mix.py defines it.
5. Replicas get real devices (TP groups inside one node), and are re-estimated there.
"""

from __future__ import annotations

import math
import time
from typing import Any, Literal
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace

from hetc.cluster import TP_SIZES, Cluster, Node
from hetc.errors import Infeasible
from hetc.partitioner.estimate.batches import MAX_BATCH, batch_ceiling
from hetc.partitioner.bounds.bound import cost_bound
from hetc.partitioner.bounds.cell_bound import MAX_CELLS, METHOD, WORK_PER_SECOND, CellBound, Demand, cell_bound_rounds
from hetc.partitioner.bounds.colgen import METHOD as COLUMNS
from hetc.partitioner.bounds.colgen import ColumnBound
from hetc.partitioner.bounds.route_sets import column_bound_sets
from hetc.partitioner.bounds.stage_costs import StageCosts
from hetc.partitioner.budget import CpuBudget, Pause
from hetc.partitioner.cost_models.memory import stage_memory
from hetc.partitioner.cost_models.envelope import falling_curves
from hetc.partitioner.estimate.simulate import PipelineEstimate, StagePlan, Workload, estimate_pipeline
from hetc.partitioner.estimate.split import Found, batch_options, slo_filter, split_chain
from hetc.partitioner.estimate.tables import Tables, devices_per_type, kinds_of, type_key
from hetc.partitioner.search.mix import NO_CAPS, Caps, Option, choose, runs_alone
from hetc.partitioner.search.degree_mixes import degree_mixes
from hetc.partitioner.search.fitted import fitted, unfit_batches
from hetc.partitioner.search import kv_routes
from hetc.partitioner.search.kv_routes import KVRoute
from hetc.partitioner.search.templates import Template, fits, generate
from hetc.partitioner.capture.units import Unit
from hetc.quantity import Kind, format_quantity
from hetc.scheduling import Disaggregate, Objective, Phase

__all__ = ["OBJECTIVES", "Candidate", "Caps", "Solution", "solve"]  # Caps: mix.py's, for callers

PHASES = {Disaggregate.OFF: (Phase.BOTH,), Disaggregate.ON: (Phase.PREFILL, Phase.DECODE), Disaggregate.AUTO: tuple(Phase)}

OBJECTIVES: dict[Objective, tuple[Literal["max", "min"], str]] = {
    Objective.THROUGHPUT: ("max", "output tok/s"),
    Objective.LATENCY: ("min", "ms TPOT"),
    Objective.COST: ("min", "USD per M output tokens"),
    Objective.ENERGY: ("max", "output tokens per J"),
}


@dataclass(slots=True)
class Candidate:
    """`replicas` identical pipelines over `stages`; replica j of a stage uses devices first + j·tp."""

    stages: list[StagePlan]
    replicas: int
    estimate: PipelineEstimate
    first_device: list[int] = field(default_factory=list)  # per stage, replica 0's first device index
    template: str = ""
    phase: Phase = Phase.BOTH


@dataclass(slots=True)
class Solution:
    pipelines: list[Candidate]
    output_tok_s: float
    seconds: float
    bound: float
    bound_method: str
    status: str
    explored: int = 0
    notes: list[str] = field(default_factory=list)
    kv_transfers: list[KVRoute] = field(default_factory=list)
    batch_ceiling: int = MAX_BATCH  # the most sequences a pipeline could run (batches.batch_ceiling)
    cpu_seconds: float = 0.0  # the process's CPU time in solve (a shared host stretches `seconds`, not this)
    least_spend: float = 0.0  # cost / energy with a floor: the cell bound's (colgen's) least USD/h (W) of any plan giving it
    tables: Tables | None = None  # the unit costs the search computed (the planner's objective bound reuses them)
    rounds: Iterator | None = None  # solve(defer_bound=True): the bound's rounds the deadline paused, for the caller to resume


def _tok_s(cands: list[Candidate], feed_cap: dict[int, float] | None = None) -> float:
    """Output tok/s: pipelines that do both, plus decode pools as far as prefill pools feed them.

    Args:
        feed_cap: per prefill candidate (index), the output tok/s its KV link can carry.
    """
    both = sum(c.estimate.output_tok_s * c.replicas for c in cands if c.phase == Phase.BOTH)
    decode = sum(c.estimate.output_tok_s * c.replicas for c in cands if c.phase == Phase.DECODE)
    feed = sum(min(c.estimate.output_tok_s, (feed_cap or {}).get(i, float("inf"))) * c.replicas for i, c in enumerate(cands) if c.phase == Phase.PREFILL)
    return both + min(decode, feed)


# one split and estimate of a chain at one batch costs about this much work (cell_bound.WORK_PER_SECOND)
# per unit of the model and per 20 stages (measured: ~0.7 ms for 163 units and 6 stages)
EVALUATION_WORK = 100.0
COLUMN_SHARE = 0.6  # of --time-limit, column generation's pricing (all its work counted); templates get a sixth
# --time-limit in CPU seconds (partitioner/budget.py): the shares each phase's deadline leaves to those after it
SEARCH_RESERVE = 0.25  # what the bound's first rounds leave: templates, CP-SAT, re-estimation
SEARCH_LEAST = 0.1  # the search's CPU even where the bound's last pass (not interruptible) ran into its reserve
TAIL_RESERVE = 0.06  # what the search leaves by default: the planner's plan (its baselines run before the search)
# latency: the solver's tok/s bound is not the objective's (planner._bound's TPOT bound is), its rounds run for
# their pipelines (the templates' seeds) only: until this share of the limit, and not again after the search
SEEDS_ONLY_SHARE = 0.05
FITTED_SHARE = 0.1  # of --time-limit, as work: chains within the cluster's counts where column generation's seeds do not fit (fitted.py)
MIXES_SHARE = 0.03  # of --time-limit, as work, the same cases: chains of tp groups of different degrees over a few types (degree_mixes.py)
BOUND, SEARCH = "bound", "search"  # plan.json solver.time: where the CPU went


def _allocate(choice: list[tuple[Option, int]], units: list[Unit], cluster: Cluster, wl: Workload) -> tuple[list[Candidate], list[str]]:
    """Real devices for every replica's stages: largest groups first, each beside its own replica's
    neighbouring stage where that node has room, else beside the previous replica's same stage, else on
    the node of its type with the most room, which never fails for a choice within `mix.slots_of`;
    replicas placed alike make one candidate. A replica's stages are placed one after another (not
    stage 0 of every replica first): placed stage by stage, the previous replica's stage filled a node
    first and each replica's next stage crossed the network (gen24 of the generated clusters: six
    replicas of four MI325X stages over 25 GbE, 8.3k tok/s each against 9.0k inside one node)."""
    by_type: dict[tuple, list[Node]] = {}
    for n in cluster.nodes:
        by_type.setdefault(type_key(n), []).append(n)
    used = {n.name: 0 for n in cluster.nodes}
    jobs = sorted(((-sp.tp, j, r, s) for j, (opt, want) in enumerate(choice) for s, sp in enumerate(opt.found.stages) for r in range(want)))
    where: dict[tuple, tuple[Node, int]] = {}
    notes = []
    for neg_tp, j, r, s in jobs:
        tp, nodes = -neg_tp, by_type[type_key(choice[j][0].found.stages[s].node)]
        prev = where.get((j, s, r - 1))
        # a stage goes beside its own replica's neighbouring stage where that node has room (a link inside the node,
        # not the network): a single device always, a group where every node that holds one holds a whole number of
        # them (largest first, every node's room then stays a multiple of the group: any node with room does)
        mine = {nd.name for nd in nodes}
        aligned = tp == 1 or all(nd.count % tp == 0 for nd in nodes if nd.count >= tp)
        near = [where[k][0] for k in ((j, s - 1, r), (j, s + 1, r)) if aligned and k in where and where[k][0].name in mine]
        near = [nd for nd in near if nd.count - used[nd.name] >= tp]
        if near:
            node = near[0]
        elif prev and prev[0].count - used[prev[0].name] >= tp:
            node = prev[0]
        else:
            node = max(nodes, key=lambda nd: nd.count - used[nd.name])
        if node.count - used[node.name] < tp:
            notes.append(f"a replica of {choice[j][0].template.label} found no devices left")
            continue
        where[(j, s, r)] = (node, used[node.name])
        used[node.name] += tp
    out: list[list[Any]] = []
    for j, (opt, want) in enumerate(choice):
        stages = opt.found.stages
        for r in range(want):
            spots: list[Any] = [where.get((j, s, r)) for s in range(len(stages))]
            if None in spots:
                continue
            last = out[-1] if out and out[-1][0] == j else None
            if last and all(nd.name == pn.name and first == f0 + last[2] * sp.tp for (nd, first), (pn, f0), sp in zip(spots, last[1], stages)):
                last[2] += 1  # one more replica in the same blocks
            else:
                out.append([j, spots, 1])
    cands = []
    for j, spots, reps in out:
        opt = choice[j][0]
        stages = [replace(sp, node=nd) for sp, (nd, _) in zip(opt.found.stages, spots)]
        est = estimate_pipeline(units, stages, cluster, wl, opt.found.estimate.batch, opt.template.phase)
        cands.append(Candidate(stages, reps, est or opt.found.estimate, [f for _, f in spots], opt.template.label, opt.template.phase))
    return cands, notes


def solve(
    units: list[Unit],
    cluster: Cluster,
    wl: Workload,
    *,
    objective: Objective = Objective.THROUGHPUT,
    min_tok_s: float = 0.0,
    ttft_slo_s: float | None = None,
    tpot_slo_s: float | None = None,
    tp: str = "auto",
    disaggregate: Disaggregate = Disaggregate.AUTO,
    time_limit: float = 30.0,
    caps: Caps = NO_CAPS,
    max_num_seqs: int | None = None,
    progress: Callable[[str], None] | None = None,
    cpu: CpuBudget | None = None,
    reserve: float = TAIL_RESERVE,
    defer_bound: bool = False,
) -> Solution:
    """Search placements and return the best for `objective`.

    Args:
        tp: "auto" allows tensor-parallel groups of 2, 4 or 8 devices inside a node; "1" does not.
        disaggregate: "off" (every pipeline prefills and decodes), "on" (prefill and decode pools
            only) or "auto" (both kinds, whichever predicts better; throughput objective only).
        caps: power (W) and price (USD/h) the chosen pipelines may use together.
        max_num_seqs: the most sequences in flight per pipeline (default: what memory admits).
        time_limit: roughly the seconds to spend, as deterministic work: half as the cell bound's
            refinement budget (COLUMN_SHARE as column generation's pricing budget, past MAX_CELLS
            count vectors), a sixth for evaluating templates, a third as CP-SAT's deterministic time
            (so plans don't depend on the machine's load; the cell bound's first pass is not
            budgeted). Latency with a floor: another sixth for every batch below the fleet's TPOT,
            and CP-SAT again for each of up to FILL_ROUNDS rounds (_fill_batches).
        cpu: the same limit in process CPU seconds, which every phase also stops at (default: a
            budget of `time_limit` from now): the bound's rounds until SEARCH_RESERVE of it is
            left (latency: until SEEDS_ONLY_SHARE is spent), the search until `reserve` is, the
            bound again with the rest if the deadline paused it (not for latency). Where no
            deadline is reached first the plan is the work budgets' alone.
        reserve: the share of the CPU limit left after the solver (the planner's plan and
            objective bound: TAIL_RESERVE, or more where the objective has a bound of its own).
        defer_bound: search without the bound's rounds (nor their pipelines as templates) and
            leave them to the caller (`Solution.rounds`, the bound inf until they run: layouts.py
            runs those whose bound still matters once every layout has its plan).

    Raises:
        Infeasible: nothing meets memory, floors and SLOs; the message says which and by how much.
        BadInput: a device's profile names no peak for the weights' dtype.
    """
    cluster.require_flops(wl.dtype)
    cpu = cpu or CpuBudget(time_limit)
    t0, cpu0 = time.perf_counter(), time.process_time()
    kinds = kinds_of(cluster, TP_SIZES if tp == "auto" else (1,))
    tables = Tables(units, wl)
    max_stages = min(len(units), sum(n.count for n in cluster.nodes))
    phases = PHASES[disaggregate] if objective == Objective.THROUGHPUT else (Phase.BOTH,)
    ceiling = batch_ceiling(units, cluster, wl, max_num_seqs)
    few = math.prod(c + 1 for c in devices_per_type(cluster).values()) <= MAX_CELLS  # count vectors the cell bound can count
    # column generation has no unbudgeted first pass: it gets COLUMN_SHARE of the limit where the cell bound gets half
    # cost / energy with a floor: the cheapest devices giving it (cell_bound.Demand), or the cheapest pipelines (colgen)
    spends = {Objective.COST: cluster.price, Objective.ENERGY: lambda p: p.power}
    demand = Demand({type_key(n): spends[objective](n.profile) for n in cluster.nodes}, min_tok_s) if objective in spends and min_tok_s else None
    # the bound's rounds first (their pipelines seed the templates), until the work budget or the
    # deadline that leaves the search its reserve; the search; then, if the deadline paused the
    # bound, its rounds again with what is left (a good plan early, the proof after)
    if few:
        rounds = cell_bound_rounds(
            tables, kinds, cluster, max_stages, ceiling, phases=phases, budget=time_limit * 0.5 * WORK_PER_SECOND, demand=demand, progress=progress, cpu=cpu
        )
    else:
        rounds = column_bound_sets(
            tables,
            kinds,
            cluster,
            max_stages,
            ceiling,
            phases=phases,
            budget=time_limit * COLUMN_SHARE * WORK_PER_SECOND,
            demand=demand,
            progress=progress,
            cpu=cpu,
        )
    seeds_only = objective == Objective.LATENCY
    cpu.deadline(min(SEEDS_ONLY_SHARE, 1.0 - reserve - SEARCH_RESERVE) if seeds_only else 1.0 - reserve - SEARCH_RESERVE)
    first, paused = (CellBound(math.inf), Pause.DEADLINE) if defer_bound else _timed(rounds, cpu)  # deferred: no bound yet, no seeds
    if paused == Pause.DEADLINE and not defer_bound and not seeds_only:
        cpu.stop(BOUND)
    assert first is not None  # the first round always yields
    bound = first
    bound_value, method = bound.value, METHOD if few else COLUMNS
    if caps.watts or caps.usd_h:  # tok/s ≤ cap / (the least W or USD/h any plan spends per tok/s)
        per_tok = {"watts": lambda n: n.profile.power, "usd_h": lambda n: cluster.price(n.profile)}
        for name, of in per_tok.items():
            cap = getattr(caps, name)
            if cap:
                with cpu.phase(BOUND):
                    least = cost_bound(tables, kinds, max_stages, {type_key(n): of(n) for n in cluster.nodes}, ceiling)
                bound_value = min(bound_value, cap / least if least > 0 else float("inf"))
        method += f"; capped at the caps over the least {'/'.join(k for k in per_tok if getattr(caps, k))} per tok/s"
    notes: list[str] = []
    for name, curves in {n.profile.name: falling_curves(n.profile) for n in cluster.nodes}.items():
        if curves:
            notes.append(
                f"profile {name}: efficiency falls with size in {', '.join(curves)}; the bound costs it with "
                "each curve's running maximum (valid for every batch, looser than the profile)"
            )
    uneven = bound.pipelines[: bound.used] if demand is not None and isinstance(bound, ColumnBound) else None
    within_slos = slo_filter(ttft_slo_s, tpot_slo_s)

    cpu.deadline(1.0 - reserve)
    search_from = cpu.clock()
    if cpu.left() < SEARCH_LEAST * cpu.limit:  # the bound's pass ran into the search's reserve: the plan comes first
        cpu.until = search_from + SEARCH_LEAST * cpu.limit
    seeds = bound.pipelines
    best = next((p for p in seeds if p.phase == Phase.BOTH), None)
    if objective == Objective.THROUGHPUT and best is not None and not fits(best.kinds, kinds):
        # the bound's best pipeline need not fit the cluster (column generation counts no devices; the cell bound's
        # chain DP no tp groups per node): chains that do, at their batches, first (fitted.py)
        def half() -> bool:  # the search's CPU half spent: the templates get the rest
            return cpu.left() < 0.5 * (cpu.until - search_from)

        costs = StageCosts(tables, kinds, cluster)
        fit = fitted(costs, seeds, max_stages, time_limit * FITTED_SHARE * WORK_PER_SECOND, half)
        # and chains of tp groups of different degrees over a few types each, as one fleet (degree_mixes.py)
        mixes = degree_mixes(costs, unfit_batches(costs, seeds), max_stages, time_limit * MIXES_SHARE * WORK_PER_SECOND, half)
        seeds = fit + mixes + seeds
    templates = _by_promise(generate(kinds, seeds, max_stages, phases, uneven=uneven))
    opts: list[Option] = []
    splits: list[tuple[Template, Callable[[int], list[StagePlan] | None]]] = []  # each template's best split per batch
    memo: dict = {}  # split_chain's per-kind costs, shared by every template
    work, budget = 0.0, time_limit / 6 * WORK_PER_SECOND
    for i, t in enumerate(templates):
        # work, not seconds: the same templates on any machine; within the CPU limit too; never
        # before the options can serve alone (a pipeline doing both phases, or both pools, that fits)
        if (work >= budget or cpu.past()) and _servable(opts, cluster, caps):
            if work < budget:
                cpu.stop("templates")
            notes.append(
                f"the last {len(templates) - i} of {len(templates)} templates (the widest mixes of device types) "
                f"were not evaluated within --time-limit ({'its CPU seconds' if work < budget else 'its work'}); a longer limit tries them"
            )
            break
        if progress:
            progress(f"templates {i + 1}/{len(templates)}: {t.label}")
        chain = list(t.chain)
        evaluations = 0

        def split(batch: int, chain: list = chain, phase: Phase = t.phase) -> list[StagePlan] | None:
            nonlocal evaluations
            evaluations += 1
            return split_chain(units, chain, cluster, wl, batch, phase, memo)

        found = batch_options(units, chain, cluster, wl, split, phase=t.phase, ceiling=ceiling, objective=objective, hints=t.batches)
        work += evaluations * EVALUATION_WORK * (len(units) + 20 * len(chain))
        splits.append((t, split))
        opts += [Option(t, f) for f in found if within_slos(f)]
    if not opts:
        raise Infeasible(_why_infeasible(units, cluster, wl, min_tok_s, ttft_slo_s, tpot_slo_s, Phase.BOTH not in phases))
    if progress:
        progress(f"CP-SAT over {len(opts)} options ({len(templates)} templates × batches)")
    picks = choose(objective, opts, cluster, min_tok_s, max(0.1, time_limit / 3), caps, cpu)
    if objective == Objective.LATENCY and min_tok_s and picks:
        picks = _fill_batches(picks, opts, splits, units, cluster, wl, ceiling, within_slos, min_tok_s, time_limit, caps, cpu)
    if not picks:
        if caps.watts or caps.usd_h:
            raise Infeasible(_over_caps(opts, cluster, caps))
        raise Infeasible(_why_infeasible(units, cluster, wl, min_tok_s, ttft_slo_s, tpot_slo_s, Phase.BOTH not in phases))
    cands, more = _allocate(picks, units, cluster, wl)
    kv = kv_routes.kv_transfers(units, cands, cluster, wl)
    tok_s = _tok_s(cands, kv_routes.feed_caps(kv, wl))
    if objective == Objective.THROUGHPUT and kv:
        # CP-SAT valued pools before their KV links capped them: again with each prefill option at its
        # slowest route (a guess: the routes are the allocation's), then without pools; the best real fleet
        kv_routes.cap_feeds(units, opts, cluster, wl)
        both = [o for o in opts if o.template.phase == Phase.BOTH]
        for alt_opts in (opts, both) if Phase.BOTH in phases else (opts,):
            alt = choose(objective, alt_opts, cluster, min_tok_s, max(0.1, time_limit / 3), caps, cpu) if alt_opts else []
            if alt:
                alt_cands, alt_more = _allocate(alt, units, cluster, wl)
                alt_kv = kv_routes.kv_transfers(units, alt_cands, cluster, wl)
                alt_tok_s = _tok_s(alt_cands, kv_routes.feed_caps(alt_kv, wl))
                if alt_tok_s > tok_s:
                    cands, more, kv, tok_s = alt_cands, alt_more, alt_kv, alt_tok_s
    notes += more
    cpu.charge(SEARCH, search_from)
    if paused and not defer_bound and not seeds_only:
        with cpu.phase(BOUND):
            more_bound, _ = _rounds(rounds)
        if more_bound is not None and more_bound.value < bound.value:
            notes.append(f"the bound went on after the search, within --time-limit's CPU seconds: {bound.value:,.0f} → {more_bound.value:,.0f} tok/s")
            bound_value = min(bound_value, more_bound.value)
            bound = replace(bound, value=more_bound.value, least_spend=max(bound.least_spend, more_bound.least_spend))
    gap = 1.0 if math.isinf(bound_value) else (bound_value - tok_s) / bound_value if bound_value else 0.0  # inf: deferred, not bounded yet
    status = "OPTIMAL" if objective == Objective.THROUGHPUT and gap <= 1e-6 else "FEASIBLE"
    return Solution(
        cands,
        tok_s,
        time.perf_counter() - t0,
        bound_value,
        method,
        status,
        explored=len(templates),
        notes=notes,
        kv_transfers=kv,
        batch_ceiling=ceiling,
        cpu_seconds=time.process_time() - cpu0,
        least_spend=bound.least_spend,
        tables=tables,
        rounds=rounds if paused and defer_bound else None,
    )


def _servable(opts: list[Option], cluster: Cluster, caps: Caps) -> bool:
    """The options hold a pipeline that prefills and decodes, or a prefill and a decode pool, that
    the cluster's devices and the caps can run."""
    phases = {o.template.phase for o in opts if runs_alone(o, cluster, caps)}
    return Phase.BOTH in phases or {Phase.PREFILL, Phase.DECODE} <= phases


def _timed(rounds: Iterator[tuple[Callable[[], CellBound], Pause | bool]], cpu: CpuBudget) -> tuple[CellBound | None, Pause]:
    """`_rounds`, its CPU charged to the bound."""
    with cpu.phase(BOUND):
        return _rounds(rounds)


def _rounds(rounds: Iterator[tuple[Callable[[], CellBound], Pause | bool]]) -> tuple[CellBound | None, Pause]:
    """The bound's rounds until they end (NO) or pause (at the CPU deadline, or where the work budget
    is spent with refinement left for the CPU after the search): the bound so far (None: they had ended already)."""
    last = None
    for last, pause in rounds:
        if pause:
            return last(), Pause(pause)
    return (last() if last is not None else None), Pause.NO


FILL_ROUNDS = 3  # latency with a floor: rounds of every batch below the fleet's TPOT, then CP-SAT again


def _fill_batches(
    picks: list[tuple[Option, int]],
    opts: list[Option],
    splits: list[tuple[Template, Callable[[int], list[StagePlan] | None]]],
    units: list[Unit],
    cluster: Cluster,
    wl: Workload,
    ceiling: int,
    keep: Callable[[Found], bool],
    min_tok_s: float,
    time_limit: float,
    caps: Caps,
    cpu: CpuBudget,
) -> list[tuple[Option, int]]:
    """Latency with a floor: the search tried a few batches per template (batches.search), but the
    fleet's TPOT is set by the batch at which each pipeline reaches it. Each round tries every
    batch of every template whose TPOT stays below the fleet's (from 1 up, until one exceeds it),
    within a sixth of the limit's work, and runs CP-SAT again while the fleet's TPOT falls."""
    work, budget = 0.0, time_limit / 6 * WORK_PER_SECOND
    seen: dict[tuple[tuple, int], Found | None] = {(o.template.key, o.found.estimate.batch): o.found for o in opts}
    for _ in range(FILL_ROUNDS):
        tpot = max(o.found.estimate.tpot_s for o, _ in picks)
        added = 0
        for t, split in splits:
            if t.phase != Phase.BOTH:
                continue
            for b in range(1, ceiling + 1):
                if work >= budget or cpu.past():
                    if work < budget:
                        cpu.stop("fill")
                    break
                if (t.key, b) not in seen:
                    work += EVALUATION_WORK * (len(units) + 20 * len(t.chain))
                    stages = split(b)
                    est = estimate_pipeline(units, stages, cluster, wl, b) if stages else None
                    seen[t.key, b] = Found(est, stages) if est is not None and stages is not None else None
                    if seen[t.key, b] is not None and keep(seen[t.key, b]):  # type: ignore[arg-type]
                        opts.append(Option(t, seen[t.key, b]))  # type: ignore[arg-type]
                        added += 1
                got = seen[t.key, b]
                if got is None or got.estimate.tpot_s >= tpot:
                    break
        if not added:
            break
        again = choose(Objective.LATENCY, opts, cluster, min_tok_s, max(0.1, time_limit / 3), caps, cpu)
        if not again or max(o.found.estimate.tpot_s for o, _ in again) >= tpot:
            break
        picks = again
    return picks


def _by_promise(templates: list[Template]) -> list[Template]:
    """The cell bound's pipelines first (where the bound says plans are), then mixes of the kinds
    they run (templates.generate's `uneven`), then by how many device types a chain mixes
    (homogeneous chains, then even mixes of two types, …), then by stages: the order in which a
    spent budget leaves templates out. Shorter chains first, every kind's one-stage chain before
    any kind's two: in kind order, one kind's chains of every length (18 H100s in a row for a 7B
    model) used the CPU before the next kind's single device was tried (gen20 of the generated
    clusters: MI300X served only as pools, 0.92 of the bound, against 0.996 with every template)."""
    return sorted(templates, key=lambda t: (not t.batches, not t.early, len({type_key(s.node) for s in t.chain}), len(t.chain)))


def _over_caps(opts: list[Option], cluster: Cluster, caps: Caps) -> str:
    """What the cheapest and the least power-hungry pipelines need, against the caps."""
    watts = min(caps.spend(o.found.stages, cluster)[0] for o in opts)
    usd_h = min(caps.spend(o.found.stages, cluster)[1] for o in opts)
    parts = ([f"the least power-hungry pipeline draws {watts:,.0f} W (--power-budget {caps.watts:,.0f} W)"] if caps.watts else []) + (
        [f"the cheapest costs {usd_h:,.2f} USD/h (--budget {caps.usd_h:,.2f} USD/h)"] if caps.usd_h else []
    )
    return "no placement fits: " + "; ".join(parts) + " (with the floors and SLOs given). Raise the budget."


def _why_infeasible(
    units: list[Unit], cluster: Cluster, wl: Workload, min_tok_s: float, ttft_slo_s: float | None, tpot_slo_s: float | None, pools_only: bool = False
) -> str:
    params: dict[str, float] = {}
    for u in units:
        params.update(u.params)
    need = sum(params.values())
    free = sum(n.profile.usable_memory * n.count for n in cluster.nodes)
    one = stage_memory(units, batch=1, context=wl.context, prefill_chunk=min(wl.prefill_chunk, wl.input_len), windowed=wl.windowed)
    if one.total > free:
        return (
            f"the model needs {format_quantity(one.total, Kind.BYTES)} at {wl.dtype} (weights {format_quantity(need, Kind.BYTES)} + KV and "
            f"activations for one sequence of {wl.context} tokens); all devices together have "
            f"{format_quantity(free, Kind.BYTES)} free after reserved memory — short by {format_quantity(one.total - free, Kind.BYTES)}. "
            "Add devices, or use a smaller --dtype."
        )
    if pools_only:
        devices = sum(n.count for n in cluster.nodes)
        return (
            f"with --disaggregate on, a prefill pool and a decode pool run on separate devices and each holds "
            f"the whole model ({format_quantity(need, Kind.BYTES)} of weights at {wl.dtype}, one device per stage); no such "
            f"pair fits the {devices} device(s) with {format_quantity(free, Kind.BYTES)} free in all. Use --disaggregate auto "
            "or off, or add devices."
        )
    if min_tok_s or ttft_slo_s or tpot_slo_s:
        return "no placement meets the floors/SLOs given (--min-tok-s, --ttft-slo, --tpot-slo); relax them or add devices."
    biggest = max(units, key=lambda u: u.param_bytes)
    return (
        f"no placement fits: the largest unit needs {format_quantity(biggest.param_bytes, Kind.BYTES)} and the largest device "
        f"has {format_quantity(max(n.profile.usable_memory for n in cluster.nodes), Kind.BYTES)} free."
    )
