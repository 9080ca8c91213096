"""How many replicas of each evaluated pipeline to run: CP-SAT over the options, per objective.

An option is one template (a chain of stage kinds) at one batch with its best split. Every
objective chooses r_j ≥ 0 replicas per option within what the nodes hold (every tp group
inside one node: `slots_of`) and the power / price caps; what "best" means:

- throughput: the most output tok/s (decode pools count what prefill pools feed them), at
  least --min-tok-s.
- latency: the fleet's TPOT is its slowest pipeline's. First the least TPOT T* at which the
  options of TPOT ≤ T* can together give --min-tok-s (a threshold search: feasibility only
  grows with T), then the most tok/s among fleets whose every pipeline is at TPOT ≤ T*.
  Without a floor T* is the fastest option's and the fleet is the options at T* replicated
  as far as the nodes and caps hold them.
- cost (energy): with --min-tok-s F, the fleet of least USD/h (least watts) whose summed tok/s
  is at least F — the cheapest way to serve the demand F; its figure is USD per M tokens at
  F (F tokens per joule); among fleets of that cost, the most tok/s. Without a floor the
  figure is USD/h per tok/s at saturation, and a ratio of sums Σc/Σt is never below the best
  c_j/t_j: one pipeline of the best ratio is optimal, found by a scan (no CP-SAT).

Rates, prices and watts enter CP-SAT as integers rounded against the plan (rates down where a
floor must hold, spends up), so a fleet CP-SAT accepts meets the floor and caps for real.
"""

from __future__ import annotations

import math
from typing import Any
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

from ortools.sat.python import cp_model

from hetc.cluster import TP_SIZES, Cluster
from hetc.errors import BadInput
from hetc.partitioner.budget import CpuBudget
from hetc.partitioner.estimate.simulate import StagePlan
from hetc.partitioner.estimate.split import Found
from hetc.partitioner.estimate.tables import type_key
from hetc.partitioner.search.templates import Template, usage
from hetc.scheduling import Objective, Phase

__all__ = ["Caps", "NO_CAPS", "Option", "choose", "choose_replicas", "slot_use", "slots_of"]

SCALE = 1000  # tok/s, W and USD/h in thousandths in CP-SAT


@dataclass(frozen=True, slots=True)
class Caps:
    """Limits on what the chosen pipelines may draw and cost, all replicas together (None: no limit)."""

    watts: float | None = None  # every used device at its profile's power
    usd_h: float | None = None

    def __post_init__(self) -> None:
        for name in ("watts", "usd_h"):
            v = getattr(self, name)
            if v is not None and not v > 0:
                raise ValueError(f"{name} cap must be > 0, got {v}")

    def spend(self, stages: list[StagePlan], cluster: Cluster) -> tuple[float, float]:
        """(watts, USD/h) of one replica of a pipeline over `stages`."""
        return (sum(s.node.profile.power * s.tp for s in stages), sum(cluster.price(s.node.profile) * s.tp for s in stages))

    def most_replicas(self, stages: list[StagePlan], cluster: Cluster) -> float:
        """How many replicas of one pipeline the caps allow on their own."""
        w, usd = self.spend(stages, cluster)
        return min(self.watts / w if self.watts and w else float("inf"), self.usd_h / usd if self.usd_h and usd else float("inf"))


NO_CAPS = Caps()


@dataclass(slots=True)
class Option:
    template: Template
    found: Found
    feed: float = math.inf  # a prefill pool: the output tok/s one replica's KV links carry to the decode pools


def _value(o: Option) -> float:
    """Output tok/s one replica of `o` gives (a prefill pool: what it feeds, at most its KV links carry)."""
    return min(o.found.estimate.output_tok_s, o.feed)


def slots_of(cluster: Cluster) -> Counter:
    """(type, s): how many groups of s devices the type's nodes hold, each node apart. Stage
    sizes divide one another, so a set of stages fits the nodes exactly when, for every s, the
    stages of s or more devices need at most that many s-slots (counting tp/s each)."""
    out: Counter = Counter()
    for n in cluster.nodes:
        for s in TP_SIZES:
            out[(type_key(n), s)] += n.count // s
    return out


def slot_use(groups: Counter) -> Counter:
    """(type, s) slots that stages {(type, tp): count} take."""
    out: Counter = Counter()
    for (t, tp), k in groups.items():
        for s in TP_SIZES:
            if tp >= s:
                out[(t, s)] += k * tp // s
    return out


@dataclass(slots=True)
class _Model:
    """The replica variables of a set of options within the nodes and caps."""

    m: Any  # a cp_model.CpModel, through the CamelCase methods its stubs leave out
    r: list
    most: list[int]
    spend: list[tuple[float, float]]


def runs_alone(o: Option, cluster: Cluster, caps: Caps) -> bool:
    """At least one replica of `o` fits the cluster's devices and the caps."""
    return _most(o, slot_use(usage(o.template)), slots_of(cluster), cluster, caps) >= 1


def _most(o: Option, use: Counter, slots: Counter, cluster: Cluster, caps: Caps) -> int:
    """Replicas of one option that the nodes and the caps hold on their own."""
    return int(min(min(slots[k] // c for k, c in use.items()), caps.most_replicas(o.found.stages, cluster)))


def _model(opts: list[Option], cluster: Cluster, caps: Caps) -> _Model:
    slots = slots_of(cluster)
    m: Any = cp_model.CpModel()  # its CamelCase methods are left out of ortools' stubs
    uses = [slot_use(usage(o.template)) for o in opts]
    most = [_most(o, use, slots, cluster, caps) for o, use in zip(opts, uses)]
    r = [m.NewIntVar(0, k, f"r{j}") for j, k in enumerate(most)]
    for key, cnt in slots.items():
        terms = [r[j] * uses[j][key] for j in range(len(opts)) if uses[j][key]]
        if terms:
            m.Add(sum(terms) <= cnt)
    spend = [caps.spend(o.found.stages, cluster) for o in opts]
    for i, cap in enumerate((caps.watts, caps.usd_h)):
        if cap:  # rounded against the plan: a rounded plan never exceeds the cap
            m.Add(sum(math.ceil(s[i] * SCALE) * x for s, x in zip(spend, r)) <= math.floor(cap * SCALE))
    return _Model(m, r, most, spend)


LAST_RESORT = 0.2  # CP-SAT's deterministic time where the CPU limit left it none to find a fleet


def _solve(model: cp_model.CpModel, r: list, time_limit: float, cpu: CpuBudget | None = None, fallback: dict[int, int] | None = None) -> dict[int, int]:
    """Replicas per option (the indices of `r` not zero); {} where CP-SAT proved none or found none.

    Args:
        fallback: a fleet known to be feasible (the warm start), returned where the CPU limit left
            CP-SAT no time to find one, instead of the error.
    """
    s = cp_model.CpSolver()
    s.parameters.num_workers = 1  # deterministic
    s.parameters.max_deterministic_time = time_limit  # work, not seconds: the same plan on any machine
    if cpu is not None:  # and the CPU left: one worker spends at most a CPU second per wall second, so wall = CPU left holds it
        s.parameters.max_time_in_seconds = cpu.seconds_for_cpsat(workers=1)
    status = s.Solve(model)
    timed_out = cpu is not None and status != cp_model.OPTIMAL and s.WallTime() >= s.parameters.max_time_in_seconds * 0.99
    if timed_out:
        cpu.stop("cp-sat")  # type: ignore[union-attr]  # timed_out implies a budget
        got = {j: s.Value(x) for j, x in enumerate(r) if s.Value(x)} if status == cp_model.FEASIBLE else {}
        if got:
            return got
        # the wall time ran out before CP-SAT took even its warm start (a loaded host): a little
        # deterministic time, past the limit, rather than no fleet
        s = cp_model.CpSolver()
        s.parameters.num_workers = 1
        s.parameters.max_deterministic_time = min(time_limit, LAST_RESORT)
        status = s.Solve(model)
        if status == cp_model.UNKNOWN and fallback:
            return fallback
        if status == cp_model.UNKNOWN:
            raise BadInput(
                "CP-SAT found no fleet before --time-limit's CPU seconds ran out (the bound and the templates took them).",
                field="--time-limit",
                fix="give a longer --time-limit.",
            )
    if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return {}
    return {j: s.Value(x) for j, x in enumerate(r) if s.Value(x)}


def _rate(o: Option, down: bool = False) -> int:
    x = _value(o) * SCALE
    return math.floor(x) if down else round(x)


def choose_replicas(
    opts: list[Option], cluster: Cluster, min_tok_s: float, time_limit: float, caps: Caps = Caps(), cpu: CpuBudget | None = None
) -> dict[int, int]:
    """Replicas per option maximising tok/s within the nodes and caps, at least `min_tok_s`
    (decode pools produce no more than the prefill pools feed); {} if none is found."""
    mm = _model(opts, cluster, caps)
    m, r, most = mm.m, mm.r, mm.most
    rate = [_rate(o, down=bool(min_tok_s)) for o in opts]
    gain = [g if o.template.phase == Phase.BOTH else 0 for o, g in zip(opts, rate)]
    pools = {p: [j for j, o in enumerate(opts) if o.template.phase == p] for p in (Phase.PREFILL, Phase.DECODE)}
    total = sum(g * x for g, x in zip(gain, r))
    if pools[Phase.DECODE]:  # decode pools give what prefill pools feed them, at most their own rate
        fed = m.NewIntVar(0, sum(rate[j] * most[j] for j in pools[Phase.DECODE]), "fed")
        m.Add(fed <= sum(rate[j] * r[j] for j in pools[Phase.DECODE]))
        m.Add(fed <= sum(rate[j] * r[j] for j in pools[Phase.PREFILL]))
        total += fed
    if min_tok_s:
        m.Add(total >= math.ceil(min_tok_s * SCALE))
    m.Maximize(total)
    best = max(range(len(opts)), key=lambda j: gain[j] * most[j])
    for j, x in enumerate(r):  # warm start: the best option replicated as far as it goes
        m.AddHint(x, most[j] if j == best and gain[j] else 0)
    warm = {best: most[best]} if gain[best] and most[best] and gain[best] * most[best] >= math.ceil(min_tok_s * SCALE) else {}

    def value(got: dict[int, int]) -> int:
        fed = [sum(rate[j] * got.get(j, 0) for j in pools[p]) for p in (Phase.PREFILL, Phase.DECODE)]
        return sum(gain[j] * k for j, k in got.items()) + min(fed)

    got = _solve(m, r, time_limit, cpu, warm)
    # CP-SAT cut short by the CPU limit on a loaded host may end below its own warm start, or with no
    # fleet at all (gen41 of the generated clusters once failed to plan so); the warm start is a fleet
    return got if value(got) >= value(warm) else warm


def _undominated(opts: list[Option], key: Callable[[Option], tuple]) -> list[Option]:
    """Per template, the options no other of the same template beats or ties on every figure of
    `key` (smaller is better): they take the same slots, so a dominated one is never needed."""
    by: dict[tuple, list[tuple[tuple, Option]]] = {}
    for o in opts:
        by.setdefault(o.template.key, []).append((key(o), o))
    out = []
    for group in by.values():
        group.sort(key=lambda p: p[0])
        kept: list[tuple] = []
        for k, o in group:
            if not any(all(a <= b for a, b in zip(q, k)) for q in kept):
                kept.append(k)
                out.append(o)
    return out


def _fastest(opts: list[Option], cluster: Cluster, min_tok_s: float, time_limit: float, caps: Caps, cpu: CpuBudget | None) -> dict[int, int]:
    """Latency: the least T* whose options (TPOT ≤ T*) meet the floor, then their most tok/s."""
    order = sorted(range(len(opts)), key=lambda j: opts[j].found.estimate.tpot_s)
    tpots = sorted({opts[j].found.estimate.tpot_s for j in order})
    slots = slots_of(cluster)
    most = [_most(o, slot_use(usage(o.template)), slots, cluster, caps) for o in opts]

    def within(t: float) -> list[int]:
        return [j for j in order if opts[j].found.estimate.tpot_s <= t]

    calls = max(1, math.ceil(math.log2(len(tpots) + 1)) + 1)

    def feasible(t: float) -> bool:
        js = within(t)
        if not min_tok_s:
            return any(most[j] for j in js)
        if sum(opts[j].found.estimate.output_tok_s * most[j] for j in js) < min_tok_s:
            return False  # every option there at its most replicas is short: no CP-SAT needed
        if any(math.floor(opts[j].found.estimate.output_tok_s * SCALE) * most[j] >= math.ceil(min_tok_s * SCALE) for j in js):
            return True  # one option replicated meets it
        return bool(choose_replicas([opts[j] for j in js], cluster, min_tok_s, time_limit / calls, caps, cpu))

    lo, hi = 0, len(tpots) - 1
    if not feasible(tpots[hi]):
        return {}
    while lo < hi:  # feasibility only grows with the threshold
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if feasible(tpots[mid]) else (mid + 1, hi)
    js = within(tpots[lo])
    got = choose_replicas([opts[j] for j in js], cluster, min_tok_s, time_limit / calls, caps, cpu)
    return {js[i]: k for i, k in got.items()}


def _cheapest(opts: list[Option], cluster: Cluster, min_tok_s: float, time_limit: float, caps: Caps, of: int, cpu: CpuBudget | None) -> dict[int, int]:
    """Cost (of=1: USD/h) or energy (of=0: watts) with a floor: the least spend meeting it, then
    the most tok/s at that spend."""
    mm = _model(opts, cluster, caps)
    m, r = mm.m, mm.r
    spend = [math.ceil(s[of] * SCALE) for s in mm.spend]
    rate = [_rate(o, down=True) for o in opts]
    m.Add(sum(t * x for t, x in zip(rate, r)) >= math.ceil(min_tok_s * SCALE))
    total = sum(c * x for c, x in zip(spend, r))
    m.Minimize(total)
    first = _solve(m, r, time_limit / 2, cpu)
    if not first:
        return {}
    m.Add(total <= sum(spend[j] * k for j, k in first.items()))
    m.ClearObjective()
    m.ClearHints()
    for j, x in enumerate(r):
        m.AddHint(x, first.get(j, 0))
    m.Maximize(sum(t * x for t, x in zip(rate, r)))
    return _solve(m, r, time_limit / 2, cpu) or first


def choose(
    objective: Objective, opts: list[Option], cluster: Cluster, min_tok_s: float, time_limit: float, caps: Caps = Caps(), cpu: CpuBudget | None = None
) -> list[tuple[Option, int]]:
    """The replicas of each option that are best for `objective` (module docstring); [] if no
    fleet meets the floor within the nodes and caps.

    Args:
        opts: every option evaluated (templates × batches), all within the SLOs.
        time_limit: CP-SAT's deterministic time, all its solves together.
        cpu: the planner's CPU budget: each solve also stops at its deadline.
    """
    if objective == Objective.THROUGHPUT:
        best: dict[tuple, Option] = {}  # one batch per template: the fastest
        for o in opts:
            cur = best.get(o.template.key)
            if cur is None or o.found.estimate.output_tok_s > cur.found.estimate.output_tok_s:
                best[o.template.key] = o
        pool = list(best.values())
        got = choose_replicas(pool, cluster, min_tok_s, time_limit, caps, cpu)
        return [(pool[j], k) for j, k in sorted(got.items())]
    if objective == Objective.LATENCY:
        pool = _undominated(opts, lambda o: (o.found.estimate.tpot_s, -o.found.estimate.output_tok_s, *caps.spend(o.found.stages, cluster)))
        got = _fastest(pool, cluster, min_tok_s, time_limit, caps, cpu)
        return [(pool[j], k) for j, k in sorted(got.items())]
    of = 0 if objective == Objective.ENERGY else 1
    if not min_tok_s:  # Σc/Σt ≥ min c/t: one pipeline of the best ratio, if the caps let one run
        slots = slots_of(cluster)
        fits = [o for o in opts if _most(o, slot_use(usage(o.template)), slots, cluster, caps) >= 1]
        one = min(fits, default=None, key=lambda o: (caps.spend(o.found.stages, cluster)[of] / o.found.estimate.output_tok_s, -o.found.estimate.output_tok_s))
        return [] if one is None else [(one, 1)]
    pool = _undominated(opts, lambda o: (-o.found.estimate.output_tok_s, *caps.spend(o.found.stages, cluster)))
    got = _cheapest(pool, cluster, min_tok_s, time_limit, caps, of, cpu)
    return [(pool[j], k) for j, k in sorted(got.items())]
