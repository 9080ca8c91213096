"""A lower bound on the latency objective: the least TPOT of any pipeline the solver can build.

A pipeline of n stages at batch b keeps m = min(n, b) micro-batches in flight (k ≥ m
micro-steps per pass, simulate.Round.of), and its TPOT is its round × the share of the round a
decoding sequence waits, at least the loop term: TPOT ≥ (k/m)·Σ_i S_i + links, where S_i is a
seat's mean step on stage i (its decode and mixed steps weighted as the round holds them, the
step overhead included) and k/m ≥ 1. A mean is at least its least step, so:
- every step of stage i, whatever its seats, rows and prompt chunks, costs at least one decode
  step of one sequence on the stage's units in the stage's profile made flat (envelope.flat_node:
  every efficiency curve at its maximum along the step's size, so no op costs more than the
  profile says at any size, and an op's time grows with its rows, bytes and context), attending
  to the shorter of the decode and the prompt-chunk contexts (`least_step`); a step with
  prompt tokens is not replayed as a graph and pays every launch. That the flat decode step of one
  sequence is the least is measured, not proved, for the mixed steps' prefill part
  (test_latency_bound.py: every catalog profile, tp 1 and 4, every step of every round of many
  batches and pipeline lengths) — the profile's own curves are not enough: on the NVIDIA profiles
  a GEMM of 32 rows runs faster than one of 1, so a step of more sequences can cost 5% less;
- a link's time is affine and nondecreasing in its bytes.
(The round's mean at one sequence is no bound: there each prompt chunk is a step of its own,
while at a larger batch prompts ride in the decode steps, whose weights stream once.) One
sequence's step is additive over units (simulate.unit_round_costs), so the least TPOT over all
chains of stages — any kind per stage, tensor-parallel groups and their all-reduces included,
each stage's units within its memory at one sequence — is a shortest path over the units: a
dynamic program over where each stage ends and its kind, with the cheapest link between the two
kinds' nodes. Device counts and the shared batch are relaxed.

With a floor on the fleet's tok/s, `tpot_floor_bound` raises it to the least TPOT at which
fleets of pipelines can give the floor within the cluster (LPs over stage flows, below, and over
whole pipelines, latency_columns.py).
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import numpy as np
from ortools.linear_solver import pywraplp

from hetc.cluster import Cluster
from hetc.partitioner.budget import OBJECTIVE_BOUND, CpuBudget, OutOfTime
from hetc.partitioner.cost_models.links import hops
from hetc.partitioner.cost_models.envelope import flat_node
from hetc.partitioner.bounds.latency_columns import Block, columns
from hetc.partitioner.cost_models.analytic import Step
from hetc.partitioner.estimate.simulate import Round, Workload, decode_share_floor, unit_round_costs
from hetc.partitioner.estimate.tables import Kind, Tables, devices_per_type

__all__ = ["least_step", "tpot_bound", "tpot_floor_bound"]


def least_step(wl: Workload) -> Round:
    """One decode step of one sequence, attending to the shorter of a decode's mean context and a
    prompt chunk's (a mixed step's prompt part attends to the prompt's first half). Speculating,
    a verify step of that sequence (K + 1 tokens; a draft unit's K draft steps), of which a
    sequence's TPOT is the share 1 / spec_yield."""
    ctx = min(wl.decode_ctx, wl.input_len / 2)
    if not wl.spec_tokens:
        return Round(((1, Step(1, 1, ctx)),))
    # a step with a decode part verifies K + 1 rows of a sequence at least (the drafter's K steps); a
    # prompt's step alone costs at least the plain one (the drafter prefills once): a seat's mean step
    # is at least their mix at the least share of verify steps any round holds
    w = decode_share_floor(wl)
    return Round(((1 - w, Step(1, 1, ctx)), (w, Step(wl.decode_rows, 1, ctx, spec=wl.spec_tokens))), 1 / wl.spec_yield)


def _links(tables: Tables, kinds: list[Kind], cluster: Cluster, r: Round) -> dict[float, np.ndarray]:
    """{bytes per token: L}: L[g, h] the least seconds per round a stage of kind g sends that many
    bytes per token to a next stage of kind h (any two of their nodes; one node where it holds both)."""
    out: dict[float, np.ndarray] = {}
    for x in {u.out_bytes_per_token for u in tables.units}:
        cost = np.full((len(kinds), len(kinds)), np.inf)
        for (gi, g), (hi, h) in itertools.product(enumerate(kinds), repeat=2):
            for a, b in itertools.product(g.nodes, h.nodes):
                if a is not b or a.count >= g.tp + h.tp:
                    cost[gi, hi] = min(cost[gi, hi], r.link_time(x, hops(cluster, a, b)))
        out[x] = cost
    return out


def tpot_bound(tables: Tables, kinds: list[Kind], cluster: Cluster) -> float:
    """Seconds: no pipeline over `kinds` has a smaller TPOT, at any batch (module docstring).

    Args:
        tables: the units' per-kind costs and memory fits (the planner's workload).
        kinds: the stage kinds plans may use (device type × tp degree).
    """
    u, n = len(tables.units), len(kinds)
    r = least_step(tables.wl)
    links = _links(tables, kinds, cluster, r)
    best = np.full((u + 1, n), np.inf)  # best[i, g]: the least time of units i … u−1, a stage of kind g first
    after = np.full((u + 1, n), np.inf)  # after[e, g]: what follows a stage of kind g that ends before unit e
    after[u] = 0.0
    per_kind = []
    for g in kinds:
        cost, over = unit_round_costs(tables.units, flat_node(g.nodes[0]), g.tp, tables.wl, r)
        per_kind.append((np.concatenate([[0.0], np.cumsum(cost)]), over, tables.fits(g, 1)))
    for i in range(u - 1, -1, -1):
        ends = np.arange(i + 1, u + 1)  # the stage holds units i … end − 1
        for gi, (prefix, over, fits) in enumerate(per_kind):
            ok = fits[i, ends - i]
            if ok.any():
                best[i, gi] = float(np.min((prefix[ends] - prefix[i] + over + after[ends, gi])[ok]))
        if i:  # a stage ending before unit i sends unit i − 1's output to the next, of any kind h
            after[i] = np.min(links[tables.units[i - 1].out_bytes_per_token] + best[i][None, :], axis=1)
    return float(best[0].min()) * r.tpot_share


# With a floor: seats per micro-step are costed in intervals (s, s·S_RATIO] (each side of the
# bound loses at most this factor), the threshold is bisected to T_RESOLUTION (relative), and a
# kind's stages within PER_UNIT of each other's seconds per unit are one LP column (at the lower).
S_RATIO = 1.02
T_RESOLUTION = 1e-3
PER_UNIT = 1e-3


@dataclass(frozen=True, slots=True)
class _Seats:
    """Pipelines whose micro-steps hold s seats, lo < s ≤ hi (lo = 1: 1 ≤ s), per kind: `least`[k]
    the least mean micro-step of a memory-feasible range of k units (inf where none fits), and
    `ready`[k] the least TPOT of any pipeline with such a stage: the stage and chains of stages of
    any kind holding the units before and after it, and for s > 1 twice the stage's own (a stage
    of k < U units shares its pipeline, which then keeps m ≥ 2 micro-batches in flight)."""

    lo: float
    hi: float
    share: float  # the round's TPOT share at lo: at least any s's in the interval
    least: list[np.ndarray]
    ready: list[np.ndarray]

    @property
    def holds(self) -> bool:
        return any(np.isfinite(a[1:]).any() for a in self.least)

    def stages(self) -> list[tuple[int, int, float, float]]:
        """(kind, units k, least mean micro-step a, ready t) of the stages the LP needs, usable where T ≥
        t. The LP's constraints are homogeneous in the flows, so a stage of k units stands for any
        of k' units whose a/k per unit is no less (its flow scaled by k'/k): of each kind only
        those with a/k below that of every stage ready at no more T are needed."""
        out = []
        for g, (least, ready) in enumerate(zip(self.least, self.ready)):
            ks = np.nonzero(np.isfinite(least[1:]))[0] + 1
            per = least[ks] / ks
            order = np.lexsort((per, ready[ks]))  # by ready, then per unit
            best = np.minimum.accumulate(np.concatenate([[np.inf], per[order]]))[:-1]
            front = order[per[order] < best]  # ready rising, per unit falling
            j = 0
            while j < len(front):  # stages within PER_UNIT of the first: one, at the first's ready and the last's a/k
                e = j
                while e + 1 < len(front) and per[front[j]] <= per[front[e + 1]] * (1 + PER_UNIT):
                    e += 1
                k = int(ks[front[e]])
                out.append((g, k, float(least[k]), float(ready[ks[front[j]]])))
                j = e + 1
        return out


def _seat_intervals(wl: Workload, ceiling: int) -> list[tuple[float, float]]:
    """(lo, hi] (the first [1, hi]) covering 1 … min(prefill_chunk, ceiling) seats per
    micro-step, each of ratio at most S_RATIO and within one count r of prompt chunks: a cut
    s_r is the most seats at which a prompt needs r chunks (simulate._seat_life: spare(s) ≥
    input / r), where a round's steps change shape (Regimes)."""
    top = float(min(wl.prefill_chunk, ceiling))
    edges = {top}
    e = 1.0
    while e < top:
        edges.add(e)
        e *= S_RATIO
    dec = wl.decode_steps
    for r in range(1, wl.prefill_len + 1):
        cut = (wl.prefill_chunk - wl.prefill_len / r) * (r + dec) / (wl.decode_rows * dec) if dec > 0 else 0.0
        if cut >= top:
            break
        if cut > 1:
            edges.add(cut)
    x = sorted(edges)
    return list(zip(x, x[1:]))


def _least_over_seats(tables: Tables, kinds: list[Kind], ceiling: int) -> float:
    """Speculating, the one-sequence floor (`tpot_bound`) mixes plain and verify steps at the least
    verify share of any round, which large rounds set; here each interval of seats per micro-step is
    costed with its own round (`_times`, as the floor's LPs are) and the least chain of stages over
    the intervals is the floor. Links relaxed."""
    ranges, out = _Ranges.of(tables), float("inf")
    for lo, hi in _seat_intervals(tables.wl, ceiling):
        if lo > tables.wl.prefill_chunk / tables.wl.decode_rows:
            break  # a micro-step holds no more seats than its token budget has rows for
        _, times = _times(tables, kinds, ranges, lo, hi)
        out = min(out, float(_chains(np.min(times, axis=0))[1][0]))
    return out


def _range_times(cost: np.ndarray, over: float, fits: np.ndarray, ranges: "_Ranges") -> np.ndarray:
    """[i, k]: the busy seconds of units [i, i + k) (inf where they do not fit)."""
    p = np.concatenate([[0.0], np.cumsum(cost)])
    return np.where(fits, p[ranges.i + ranges.k] - p[ranges.i] + over, np.inf)


def _chains(best: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(before, after): before[j] the least Σ of a chain of stages holding units 0 … j − 1, after[j]
    of units j … U − 1, where best[i, k] is the least of a stage holding [i, i + k), any kind."""
    u = best.shape[0] - 1
    before, after = np.full(u + 1, np.inf), np.full(u + 1, np.inf)
    before[0] = after[u] = 0.0
    for j in range(1, u + 1):
        starts = np.arange(j)
        before[j] = np.min(before[starts] + best[starts, j - starts])
    for i in range(u - 1, -1, -1):
        k = np.arange(1, u - i + 1)
        after[i] = np.min(best[i, k] + after[i + k])
    return before, after


@dataclass(frozen=True, slots=True)
class _Ranges:
    """Unit ranges [i, i + k) as index grids."""

    i: np.ndarray
    k: np.ndarray

    @staticmethod
    def of(tables: Tables) -> "_Ranges":
        u = len(tables.units)
        i, k = np.meshgrid(np.arange(u + 1), np.arange(u + 1), indexing="ij")
        inside = i + k <= u  # fits is False outside
        return _Ranges(np.where(inside, i, 0), np.where(inside, k, 0))


def _times(tables: Tables, kinds: list[Kind], ranges: _Ranges, lo: float, hi: float) -> tuple[Round, list[np.ndarray]]:
    """(the round at lo, per kind [i, k] the least mean micro-step of units [i, i + k)) at s seats
    per micro-step, lo < s ≤ hi (lo = 1: 1 ≤ s): a(s) is at least the flat profile's at lo (in the
    regime right of lo) and, since a round's busy seconds per sequence never grow with s within a
    regime (batches.py), lo/hi of the envelope's at hi."""
    at = lo if lo == 1 else lo * (1 + 1e-9)
    r = Round.of(tables.wl, at, 1)  # type: ignore[arg-type]  # a fractional batch, on purpose; k = 1: one micro-step's steps, `passes` of them per round
    top_share = Round.of(tables.wl, hi, 1).tpot_share  # type: ignore[arg-type]
    times = []
    for g in kinds:
        fits = tables.fits(g, math.ceil(lo))
        flat, over = unit_round_costs(tables.reps, flat_node(g.nodes[0]), g.tp, tables.wl, r)
        t = _range_times(np.array(flat)[tables.signature], over, fits, ranges) * r.tpot_share
        if g.profile.efficiency_curves is not None:  # else the flat profile is the profile: its a(lo) is the larger
            cost, over = tables.unit_costs(g, 1, hi)  # type: ignore[arg-type]  # batch hi, m 1: s = hi seats
            t = np.maximum(t, _range_times(cost, over, fits, ranges) * top_share * lo / hi)
        times.append(t)
    return r, times


def _seats(r: Round, times: list[np.ndarray], ranges: _Ranges, lo: float, hi: float) -> _Seats:
    """The stages of pipelines at s seats per micro-step, lo < s ≤ hi (lo = 1: 1 ≤ s), of `_times`."""
    before, after = _chains(np.min(times, axis=0))
    rest = before[ranges.i] + after[ranges.i + ranges.k]
    least = [t.min(axis=0) for t in times]
    ready = [(t + rest).min(axis=0) for t in times]
    if lo > 1:  # s > 1 so B ≥ 2: a pipeline of n ≥ 2 stages (one short of all U units) keeps m ≥ 2
        u = ranges.i.shape[0] - 1  # micro-batches in flight, and TPOT ≥ busy_i / passes = k·a_i ≥ 2·a_i
        for a, t in zip(least, ready):
            t[:u] = np.maximum(t[:u], 2 * a[:u])
    return _Seats(lo, hi, r.tpot_share, least, ready)


class _FloorLP:
    """The most tok/s of fleets whose pipelines' TPOT is at most T (tpot_floor_bound): stage flows
    over `seats`, and whole-pipeline columns (latency_columns) over `blocks`."""

    def __init__(self, seats: list[_Seats], blocks: list[Block], kinds: list[Kind], cluster: Cluster, u: int, cpu: CpuBudget | None = None) -> None:
        self.solver = solver = pywraplp.Solver.CreateSolver("GLOP")
        self.blocks, self.kinds, self.u, self.cpu = blocks, kinds, u, cpu
        self.times: list[tuple] = []
        self.columns: list[pywraplp.Variable] = []  # the last T's pipeline columns
        self.groups = [solver.Constraint(-solver.infinity(), g.groups) for g in kinds]
        devices = {t: solver.Constraint(-solver.infinity(), c) for t, c in devices_per_type(cluster).items()}
        self.of_type = [devices[g.type_key] for g in kinds]  # type_key is slow: once per kind
        self.objective = objective = solver.Objective()
        objective.SetMaximization()
        for st in seats:
            if cpu is not None:
                cpu.check()
            x = solver.NumVar(0, solver.infinity(), "")
            objective.SetCoefficient(x, 1.0)
            cover = solver.Constraint(0, solver.infinity())
            time = solver.Constraint(-solver.infinity(), 0)
            cover.SetCoefficient(x, -u)
            ys = []
            for gi, k, a, ready in st.stages():
                y = solver.NumVar(0, solver.infinity(), "")
                cover.SetCoefficient(y, float(k))
                time.SetCoefficient(y, a)
                self._take(y, {gi: a / (st.hi * st.share)})  # groups per tok/s
                ys.append((y, ready))
            self.times.append((time, x, ys))

    def _take(self, var: pywraplp.Variable, groups: dict[int, float]) -> None:
        """A new `var` takes `groups`[g] groups of each kind g (summed per row: a pair's two kinds may share a type)."""
        rows: dict[pywraplp.Constraint, float] = {}
        for gi, n in groups.items():
            rows[self.groups[gi]] = rows.get(self.groups[gi], 0.0) + n
            rows[self.of_type[gi]] = rows.get(self.of_type[gi], 0.0) + n * self.kinds[gi].tp
        for row, coefficient in rows.items():
            row.SetCoefficient(var, coefficient)

    def _pipelines(self, t: float) -> None:
        """The columns at t, in place of the last T's (held at 0)."""
        for z in self.columns:
            z.SetUb(0.0)
        self.columns = []
        if not self.blocks:
            return
        cols = columns(self.blocks, self.u, t)
        for gi, tok in enumerate(cols.single):
            if tok > 0:
                self.columns.append(z := self.solver.NumVar(0, self.solver.infinity(), ""))
                self.objective.SetCoefficient(z, float(tok))
                self._take(z, {gi: 1.0})
        for gi, hi, of_g, of_h, tok in cols.pairs:
            self.columns.append(z := self.solver.NumVar(0, self.solver.infinity(), ""))
            self.objective.SetCoefficient(z, float(tok))
            self._take(z, {int(gi): float(of_g), int(hi): float(of_h)})  # g ≠ h: K_g < U/N ≤ K_h

    def most(self, t: float) -> float:
        """The relaxation's most tok/s with every pipeline's TPOT at most t seconds; inf where GLOP
        does not solve it to optimality (seen once on a tiny cluster): taken to give any floor, the
        bound can only fall, so it stays a bound (as where the CPU deadline stops GLOP)."""
        for time, x, ys in self.times:
            time.SetCoefficient(x, -t)
            for y, ready in ys:
                y.SetUb(self.solver.infinity() if ready <= t else 0.0)
        self._pipelines(t)
        if self.cpu is not None:  # GLOP stops on wall time: the CPU left as wall time (budget.wall_left)
            self.solver.SetTimeLimit(int(max(1.0, self.cpu.wall_left() * 1e3)))
        if self.solver.Solve() != pywraplp.Solver.OPTIMAL:
            return float("inf")
        return self.solver.Objective().Value()


def _threshold(lps: list[_FloorLP], floor: float, lo: float, cpu: CpuBudget | None = None) -> tuple[float, float, bool]:
    """(lo, hi, paused), hi / lo ≤ 1 + T_RESOLUTION: every LP gives `floor` at hi, not all below lo
    (given: not at lo); inf, inf where they give it at no T below 1,000 s. Past `cpu`'s deadline it
    stops with the lo it has (paused: still not reached there, so still a bound)."""
    reaches = lambda t: all(lp.most(t) >= floor * (1 - 1e-9) for lp in lps)  # noqa: E731
    past = lambda: cpu is not None and cpu.past()  # noqa: E731
    hi = lo
    while not reaches(hi):
        lo, hi = hi, hi * 2
        if hi > 1e3:  # no fleet of the relaxation gives the floor
            return float("inf"), float("inf"), False
        if past():
            return lo, float("inf"), True
    while hi / lo > 1 + T_RESOLUTION:
        if past():
            return lo, hi, True
        mid = math.sqrt(lo * hi)
        lo, hi = (lo, mid) if reaches(mid) else (mid, hi)
    return lo, hi, False


def tpot_floor_bound(tables: Tables, kinds: list[Kind], cluster: Cluster, floor: float, ceiling: int, cpu: CpuBudget | None = None) -> float:
    """Seconds: no fleet giving `floor` output tok/s has every pipeline's TPOT below this.

    A pipeline at B sequences runs k ≥ m micro-steps of s = B/k seats per pass (simulate.Round.of);
    a stage's mean micro-step a_i(s) (busy per round / (k · passes)) bounds both figures:
    TPOT = round · share ≥ share · Σ_i busy_i / m ≥ Σ_i a_i(s), and tok/s = B / round ≤ B / busy_i
    = s · share(s) / a_i(s). With s in (lo, hi]: a_i(s) is at least the flat profile's a_i at lo
    (its steps grow with s within one count of prompt chunks) and lo/hi of the envelope's at hi
    (batches.py: busy per sequence never grows with s within a regime) — both measured on every
    catalog profile, test_latency_bound.py — and share(s) ≤ share(lo) (a seat's life grows with
    s). An LP over stage flows y (tok/s through stages of kind g holding k units at s) then
    relaxes every fleet of TPOT ≤ T: per interval the stages cover the units (Σ k·y ≥ U·X) within
    the time (Σ a·y ≤ T·X), a stage only where some pipeline through it — chains of the least
    stages of any kind before and after it, and TPOT ≥ k·a_i ≥ 2·a_i where it has two or more
    stages at s > 1 — keeps TPOT ≤ T, and the groups they take,
    y / (hi · share / a), fit each kind's groups and each type's devices. A second LP keeps these
    flows for 1 ≤ s ≤ the first interval's hi only and above it takes whole pipelines
    (latency_columns: each of a pipeline's groups at its slowest stage's rate, n stages within T
    only where n · that stage ≤ T), the tighter on the benchmark clusters; T is raised until both
    LPs' most tok/s reach the floor (bisected to T_RESOLUTION, the bound the largest T at which one
    does not). Links, the loop's k/m ≥ 1 and whole devices are relaxed.

    Args:
        floor: output tok/s the fleet gives (0: the least TPOT of one pipeline, `tpot_bound`).
        ceiling: the most sequences a pipeline runs (batches.batch_ceiling).
        cpu: the planner's CPU budget: OutOfTime where its deadline passes before the LPs are
            built; past it during the bisection, the largest T found not to give the floor.
    """
    least = tpot_bound(tables, kinds, cluster)
    if tables.wl.spec_tokens:
        least = max(least, _least_over_seats(tables, kinds, ceiling))
    if floor <= 0:
        return least
    u = len(tables.units)
    seats, blocks = [], []
    ranges = _Ranges.of(tables)
    for lo, hi in _seat_intervals(tables.wl, ceiling):
        if cpu is not None:
            cpu.check()
        r, times = _times(tables, kinds, ranges, lo, hi)
        got = _seats(r, times, ranges, lo, hi)
        if not got.holds:
            break  # nothing holds lo sequences: nothing holds more
        seats.append(got)
        if lo > 1:  # whole pipelines need k ≥ n micro-steps: s > 1 (latency_columns)
            blocks.append(Block.of(got.least, hi * got.share))
    pipelines = _FloorLP(seats[:1], blocks, kinds, cluster, u, cpu)
    lo, _, paused = _threshold([pipelines], floor, least, cpu)  # the tighter on the clusters measured
    if not paused:  # where the stage flows' LP alone is larger, it is the bound; built only now, so that a
        try:  # deadline falling while it is built keeps the pipelines' bound
            stages = _FloorLP(seats, [], kinds, cluster, u, cpu)
            if stages.most(lo) < floor * (1 - 1e-9):
                lo, _, paused = _threshold([pipelines, stages], floor, lo, cpu)
        except OutOfTime:
            paused = True
    if paused and cpu is not None:
        cpu.stop(OBJECTIVE_BOUND)
    return max(least, lo)
