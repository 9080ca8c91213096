"""The cell bound: an integer upper bound on output tok/s, and the pipelines that nearly attain it.

1. First pass (aggregate.py): for every phase and cell (devices per type), a quick upper
   bound on one pipeline's tok/s on exactly those devices, per operating point (batch, class
   of pipeline lengths).
2. The knapsack (cells.py) over those bounds gives an upper bound on every plan. A prefill pool
   counts at most what its prompts' KV can cross to a decode pool (kv_feed.py's `route_caps`: the
   fastest route from its last stage's type, inside a node only where every decode pool starts on
   that type; a refined cell per group of last-stage types); the rounds steer with every route open
   until they settle, then by each set of routes a plan's decode pools may open.
3. The cells of its optimum are refined (refine.py): the chain DP finds their best pipeline of
   each length exactly, costed at the top of a batch interval with memory at its first batch
   (batches.py); where that chain holds fewer sequences than the top, its value at the most it
   holds is what the cell attains, and the interval is split there. A refined cell takes the
   largest of its attained value, its open pieces and the first-pass bounds not yet refined.
   Then the knapsack again, until its optimum uses settled cells only, or the work budget is
   spent. Every knapsack value is a valid bound; the last one is reported, and the refined
   chains of its optimum become templates.
4. Cost or energy with a floor F (a `Demand`): K[c], the knapsack's best tok/s on the devices
   of c, bounds every plan on those devices, so a plan giving F spends at least
   min {spend·c : K[c] ≥ F} (devices and pipelines whole). Refinement then follows the cells of
   that cheapest c instead, and their chains come first as templates.
The chain DP counts the pipelines' loop term (loop_dp.py) for every objective (throughput: chains of up to
refine.LOOP_STAGES stages, whose loop binds most and costs least to count): a pipeline of two
stages runs two micro-batches, each passing both stages and the link between in turn, so the link's
time is on its round (DeepSeek-V3 dp-ep, H200 TP8 → Gaudi 3 TP8: 4.6%); dropped, the throughput
bound stayed that far above the plans.
Work is counted in DP cells, not seconds, so the same inputs give the same bound and plan.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import numpy as np

from hetc.cluster import Cluster
from hetc.partitioner.bounds.aggregate import PER_OCTAVE, Rows, cell_per_octave, most_sequences
from hetc.partitioner.budget import CpuBudget, Pause
from hetc.partitioner.estimate.batches import Regimes
from hetc.partitioner.bounds.cells import CountSpace, closure, combine, decompose
from hetc.partitioner.bounds.kv_feed import combine_sets, end_groups, every_route, feed_cap, route_caps, under_routes
from hetc.partitioner.bounds.refine import LOOP_STAGES, STEP, best_chain, chain_most, chain_round, model_work
from hetc.partitioner.bounds.stage_costs import StageCosts
from hetc.partitioner.estimate.tables import Kind, Tables
from hetc.scheduling import Phase

__all__ = ["CellBound", "Demand", "Pipeline", "cell_bound", "cell_bound_rounds", "MAX_CELLS", "METHOD", "WORK_PER_SECOND"]

# Refinement is budgeted in DP cells, not seconds, so that a plan does not depend on the
# machine's load; about this many take a second on one core of the reference machine.
WORK_PER_SECOND = 4e7
MAX_CELLS = 13_000  # count vectors the cell bound enumerates at most (4 types of 8 devices: 6,561); past that, colgen.py
TEMPLATES = 64  # refined pipelines handed to the solver as templates: at 32, the largest cells crowded out small ones the plan runs (gen39: Gaudi 3 ×3 → H100)
TOLERANCE = 1e-3  # a cell is settled when its attained value is within this of its bound; the bound, when its optimum attains it within this
REST_SAMPLES = 16  # keys the first pass times `rest` on, spread over the pass (its cost, where the deadline cuts the pass)
REST_AHEAD = 2.0  # the first pass is cut where the deadline leaves less than this many times the CPU its looser bound for the keys left has cost a key
STEPS = 4  # refinement steps on each cell of the knapsack's optimum before the knapsack is solved again

METHOD = (
    "integer knapsack over device-count vectors of a per-pipeline upper bound: an order-free "
    "relaxation (weighted unit coverage) refined by an exact chain DP on the cells the optimum uses "
    "(the loop term counted; link choice relaxed to the fastest path)"
)


@dataclass(frozen=True, slots=True)
class Pipeline:
    phase: Phase
    kinds: tuple[int, ...]
    cuts: tuple[int, ...]
    batch: int
    tok_s: float  # the bound's value for it (prefill pools: output tok/s they feed)


@dataclass(frozen=True, slots=True)
class Demand:
    """Cost or energy with a floor: what each device type spends (USD/h or W per device), and the
    output tok/s a plan must give."""

    spend: dict[tuple[str, str], float]
    floor: float


@dataclass(slots=True)
class CellBound:
    value: float
    pipelines: list[Pipeline] = field(default_factory=list)  # refined pipelines: the optimum's first
    least_spend: float = 0.0  # with a Demand: the least spend of any plan giving its floor (inf: none does)


def _cheapest(space: CountSpace, K: np.ndarray, types: list[tuple[str, str]], demand: Demand) -> tuple[float, int]:
    """The least spend of any cell c whose K[c] reaches the demand's floor (within rounding, so
    that the bound stays one), and that c; (inf, 0) if none does."""
    total = space.cells @ np.array([demand.spend[t] for t in types])
    ok = K >= demand.floor * (1 - 1e-9)
    if not ok.any():
        return float("inf"), 0
    c = int(np.argmin(np.where(ok, total, np.inf)))
    return float(total[c]), c


@dataclass(frozen=True, slots=True)
class _Piece:
    """Pipelines of exactly n stages on one cell at batches fit … top, bounded by `ub` (tokens and
    costs at top, memory at fit: batches.py)."""

    ub: float
    fit: int
    top: int
    n: int


class _Cells:
    """Per phase: each cell's first-pass bound per key, the pieces refinement split them into,
    and the best pipeline refinement found on it (a value it attains)."""

    def __init__(
        self,
        costs: StageCosts,
        space: CountSpace,
        phase: Phase,
        max_stages: int,
        ceiling: int,
        loop: bool = False,
        loop_stages: int = LOOP_STAGES,
        per_octave: int = PER_OCTAVE,
    ) -> None:
        self.costs, self.space, self.phase, self.loop, self.loop_stages = costs, space, phase, loop, loop_stages
        self.tp_groups = any(costs.tp > 1) and phase == Phase.BOTH
        # the first pass prices keys past the budget at its floor (budget_floor.py); refinement splits them at every
        # change of the steps and costs its pieces exactly, as a pipeline runs
        self.regimes = Regimes(costs.tables.wl, phase, ceiling, floor=False)
        self.rows = Rows(costs, space, phase, max_stages, ceiling, per_octave=per_octave)  # the first pass (`_first_pass` runs it)
        self.keys, self.V = self.rows.keys, self.rows.V  # V [keys, cells]
        self.most = most_sequences(costs, space, phase)
        # prefill pools: within the KV routes any decode pools open (the tightest set: `route_caps`)
        self.cap = feed_cap(costs, space, np.ones(len(costs.types), dtype=bool)) if phase == Phase.PREFILL else np.full(len(space), np.inf)
        self.groups = end_groups(costs)  # prefill pools: refined per group of last-stage types alike in their KV feed (kv_feed.py)
        self.ends: dict[int, np.ndarray] = {}  # prefill pools: per refined cell, the best tok/s of a chain ending in each group
        self.pieces: dict[int, list[_Piece]] = {}
        self.exact: dict[int, tuple[float, Pipeline | None]] = {}
        self.ub = np.zeros(len(space))

    def refresh(self) -> None:
        """Each cell's bound again, after the first pass wrote rows."""
        self.ub = np.minimum(self.V.max(axis=0), self.cap) if len(self.keys) else np.zeros(len(self.space))
        for c in self.pieces.keys() | self.exact.keys():
            self.ub[c] = max(self.exact.get(c, (0.0, None))[0], self._open(c))

    def _open(self, c: int) -> float:
        """Cell c's bound over what refinement has not settled (prefill pools: within their KV cap)."""
        return min(max(self.V[:, c].max(initial=0.0), max((p.ub for p in self.pieces.get(c, ())), default=0.0)), self.cap[c])

    def settled(self, c: int) -> bool:
        return self.ub[c] <= 0 or (c in self.exact and self.exact[c][0] * (1 + TOLERANCE) >= self._open(c))

    def refine(self, c: int) -> float:
        """One step on cell c's most promising part: a first-pass key is split into a piece per
        pipeline length of its class; a piece gets the chain DP (memory at its first batch, costs
        at its top), whose best chain either fits at the top (the piece is exact) or is evaluated
        at the most sequences it holds (a value the cell attains) and the piece split there.
        Returns the work done (DP cells)."""
        pieces = self.pieces.setdefault(c, [])
        ki = int(np.argmax(self.V[:, c]))
        if not pieces or self.V[ki, c] > max(p.ub for p in pieces):
            key, v0 = self.keys[ki], float(self.V[ki, c])
            self.V[ki, c] = 0.0
            total = int(self.space.cells[c].sum())
            lengths = range(key.lo, min(key.hi, total) + 1) if self.tp_groups else [total] if key.lo <= total <= key.hi else []
            if self.phase == Phase.PREFILL:
                todo = [_Piece(v0, n, n, n) for n in lengths]
            else:  # no pipeline on the cell holds more sequences than its memory (aggregate.most_sequences)
                top = int(min(key.top, self.most[c]))
                todo = [_Piece(v0, b, t, n) for n in lengths for b, t in self.regimes.runs(n, key.batch, top)]
        else:
            todo = [pieces.pop(int(np.argmax([p.ub for p in pieces])))]
        work = sum(self._split(c, p) for p in todo)
        best = self.exact.get(c, (0.0, None))[0]
        if self.phase != Phase.PREFILL:  # a prefill piece below the best may still end on a type fed faster
            self.pieces[c] = [p for p in self.pieces[c] if p.ub > best]
        self.ub[c] = max(best, self._open(c))
        return work

    def under(self, cap: np.ndarray, feed: np.ndarray) -> np.ndarray:
        """Prefill pools: each cell's bound under one set of KV routes (its per-cell `cap`, per-type
        `feed`: kv_feed.route_caps), with the chains refinement found per end group."""
        rest = {c: max(self.V[:, c].max(initial=0.0), max((p.ub for p in self.pieces.get(c, ())), default=0.0)) for c in self.ends}
        return under_routes(self.ub, cap, feed, {c: (e, rest[c]) for c, e in self.ends.items()}, self.groups)

    def _split(self, c: int, piece: _Piece) -> float:
        costs, phase = self.costs, self.phase
        if phase == Phase.PREFILL:
            return self._split_ends(c, piece)
        rate = costs.tables.wl.output_len if phase == Phase.PREFILL else piece.top
        best = self.exact.get(c, (0.0, None))
        got, work = best_chain(
            costs,
            phase,
            piece.top,
            piece.n,
            self.space.cells[c],
            self.tp_groups,
            below=rate / best[0] if best[0] else np.inf,
            fit=piece.fit,  # only a better chain matters
            above=rate / piece.ub,
            loop=self.loop,
            loop_stages=self.loop_stages,
        )
        if got is None:
            return work
        before = costs.tables.evaluations, costs.tables.step_costs  # best_chain charged its own operating points; chain_round's, here
        R, chain = got
        ub = min(rate / R, piece.ub, self.cap[c])  # the first pass bounded it already; prefill pools: their KV cap
        most = piece.top if phase == Phase.PREFILL else min(piece.top, chain_most(costs, phase, chain))
        value, batch = ub, most
        if most < piece.top:  # the chain holds fewer sequences than the top: its value there, and split
            value = min(most / chain_round(costs, phase, most, chain, self.loop), ub)
            self.pieces[c] += [_Piece(ub, piece.fit, most, piece.n), _Piece(ub, most + 1, piece.top, piece.n)]
        if value > best[0]:
            self.exact[c] = (value, Pipeline(phase, chain[0], chain[1], batch, value))
        return work + STEP + model_work(costs, before)

    def _split_ends(self, c: int, piece: _Piece) -> float:
        """A prefill piece: its best chain ending in each group of types the cell holds (only those
        better than the group's best so far), each a value the cell attains (within its KV cap)."""
        costs, counts = self.costs, self.space.cells[c]
        rate = costs.tables.wl.output_len
        ends = self.ends.setdefault(c, np.zeros(len(self.groups)))
        work = 0.0
        for k, mask in enumerate(self.groups):
            if not (counts[mask] > 0).any():
                continue
            below = rate / ends[k] if ends[k] else np.inf
            got, w = best_chain(costs, Phase.PREFILL, piece.top, piece.n, counts, self.tp_groups, below=below, above=rate / piece.ub, last=mask)
            work += w + STEP
            if got is None:
                continue
            R, chain = got
            ends[k] = max(ends[k], min(rate / R, piece.ub))
            value = min(ends[k], self.cap[c])
            if value > self.exact.get(c, (0.0, None))[0]:
                self.exact[c] = (value, Pipeline(Phase.PREFILL, chain[0], chain[1], piece.top, value))
        return work


def _first_pass(rows: list[Rows], cpu: CpuBudget | None, keep: float) -> bool:
    """Every phase's first-pass rows in turn, until `cpu`'s deadline, less `keep` seconds (the
    knapsack after), would leave less than the CPU to bound the keys left by `FirstPass.rest` (at
    REST_AHEAD times its mean cost on keys spread over the pass: `_rest_cost`): then those keys that
    way (a looser bound; a later call with a later deadline tightens them, row by row until it).
    Returns whether it cut the pass."""
    per_rest = _rest_cost(rows, cpu) if cpu is not None and any(r.left and not r.cut for r in rows) else 0.0
    row_cpu, n = 0.0, -1  # CPU of `row` over the n keys timed (not the first: it builds shared tables)
    for r in rows:
        while r.left:
            if cpu is not None and n >= 1 and not r.cut:
                if cpu.left() - keep <= row_cpu / n + REST_AHEAD * per_rest * sum(x.left for x in rows if not x.cut):
                    for x in rows:
                        if x.left and not x.cut:
                            x.cut_here()
                    return True
            if cpu is not None and r.cut and cpu.left() <= keep:
                return True
            t = cpu.clock() if cpu is not None else 0.0
            r.step()
            if cpu is not None and n >= 0:
                row_cpu += cpu.clock() - t
            n += 1
    return False


def _rest_cost(rows: list[Rows], cpu: CpuBudget) -> float:
    """The mean CPU of `FirstPass.rest` on REST_SAMPLES keys spread evenly over the rows not cut (its
    cost differs by key: a sample from the first keys alone read 0.4× the mean on 64 devices). The
    values are kept for `Rows.cut_here`."""
    at = [(r, ki) for r in rows if not r.cut for ki in range(r.done, len(r.keys))]
    picks = sorted({int(i) for i in np.linspace(0, len(at) - 1, min(len(at), REST_SAMPLES))})
    times = []
    for i in picks:
        r, ki = at[i]
        t = cpu.clock()
        r.rested[ki] = r.fp.rest(r.keys[ki])
        times.append(cpu.clock() - t)
    times = times[1:] or times  # the first call builds shared tables
    return sum(times) / len(times) if times else 0.0


def cell_bound(
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
) -> CellBound:
    """The knapsack bound over pipelines of `phases` at any batch up to `ceiling`, refined within
    `budget` DP cells (`cell_bound_rounds` to the end).

    Args:
        phases: "both" (pipelines that prefill and decode) and/or "prefill", "decode" (pools).
        budget: refinement work, in DP cells (deterministic, unlike seconds).
        demand: cost or energy with a floor (pipelines that prefill and decode only): refine the
            cells of the cheapest devices that can give the floor (module docstring, 4.).
        progress: called with a line per round.
    """
    last = None
    for snap, _ in cell_bound_rounds(tables, kinds, cluster, max_stages, ceiling, phases=phases, budget=budget, demand=demand, progress=progress):
        last = snap
    assert last is not None  # every run has a first round
    return last()


def cell_bound_rounds(
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
) -> Iterator[tuple[Callable[[], CellBound], Pause | bool]]:
    """`cell_bound` round by round: after each knapsack, (the bound so far, and whether `cpu`'s
    deadline has passed). Every round's bound is valid; a caller may stop at any, and resume
    later with a new deadline (the solver's search runs between). Refinement stops at the work
    budget or, first, where `cpu`'s deadline leaves no time for another knapsack round (then the
    round ends and yields `True`). The first pass is cut where the deadline would not leave the CPU
    to bound its keys left (`_first_pass`: those by `FirstPass.rest`), and made exact on resuming.

    Args:
        cpu: the planner's CPU budget; None: the work budget alone.
    """
    if demand is not None and phases != (Phase.BOTH,):
        raise ValueError("a demand bounds pipelines that prefill and decode only")
    costs = StageCosts(tables, kinds, cluster)
    space = CountSpace(costs.devices)
    # a floor's cheapest devices turn on a few percent of one pipeline: the loop counted at every length there
    loop_stages = max_stages if demand is not None else LOOP_STAGES
    # batch intervals per octave in the first pass; a floor's least spend comes from refining the cheapest cells,
    # each refinement dearer by the keys' number: one (70b-24dev-cost-10k at four: least spend 0.6389 -> 0.6167 USD/M)
    per = cell_per_octave(costs, space, phases, max_stages, ceiling, budget) if demand is None else PER_OCTAVE
    table = {p: _Cells(costs, space, p, max_stages, ceiling, loop=True, loop_stages=loop_stages, per_octave=per) for p in phases}
    if progress:
        progress(f"cell bound: first pass, {'/'.join(phases)} pipelines over {len(space):,} device-count vectors")
    pools = Phase.PREFILL in phases and Phase.DECODE in phases
    one = (np.full((1, len(space)), np.inf), np.ones((1, len(space)), dtype=bool), np.full((1, len(costs.types)), np.inf))  # no pools: no routes
    caps, admit, feeds = route_caps(costs, space) if pools else one
    steer = every_route(costs, space)
    every = np.ones(len(space), dtype=bool)  # the decode cells under every route open
    routed = False  # the rounds steer by every KV route open until they settle, then by the sets decode pools open (cheaper first)
    round_cpu = (len(phases) + 1) * space.closure_work / WORK_PER_SECOND  # a knapsack round's CPU: estimated, then measured
    cut = _first_pass([table[p].rows for p in phases], cpu, round_cpu)
    if cut and progress:
        progress("cell bound: first pass cut at the CPU deadline; the keys left are bounded by a looser relaxation")
    for p in phases:
        table[p].refresh()
    zero = np.zeros(len(space))
    least = 0.0
    work, rounds = 0.0, 0
    # the deadline leaves no time for another knapsack round: refinement stops, the rounds pause
    late = (lambda: False) if cpu is None else (lambda: cpu.left() <= round_cpu)
    while True:
        round_from = cpu.clock() if cpu is not None else 0.0
        rounds += 1
        K: dict[Phase, np.ndarray] = {Phase.BOTH: closure(space, table[Phase.BOTH].ub)} if Phase.BOTH in phases else {}
        ub = {p: table[p].ub for p in K}
        if pools:  # every route open until the rounds settle (None), then each set of routes (`route_caps`)
            sets = list(range(len(caps))) if routed else [None]
            fed = [table[Phase.PREFILL].under(*(steer if s is None else (caps[s], feeds[s]))) for s in sets]
            allow = [every if s is None else admit[s] for s in sets]
            got_sets = combine_sets(space, K.get(Phase.BOTH, zero), table[Phase.DECODE].ub, fed, allow)
            value, (c1, c2, c3), s, ub[Phase.DECODE], K[Phase.DECODE], K[Phase.PREFILL] = got_sets
            ub[Phase.PREFILL] = fed[s]
            work += (len(K) - 2 + 3 * len(sets)) * space.closure_work  # the closures and the combines
        else:
            value, (c1, c2, c3) = combine(space, K[Phase.BOTH], zero, zero[None], np.zeros(len(space), dtype=np.int64))
            work += 2 * space.closure_work
        items = [(p, c) for p, top in ((Phase.BOTH, c1), (Phase.DECODE, c2), (Phase.PREFILL, c3)) if p in phases for c in decompose(space, ub[p], K[p], top)]
        # a prefill cell whose pipeline reaches its cap under the decode pools' routes is settled too
        todo = sorted({(p, c) for p, c in items if not table[p].settled(c) and table[p].exact.get(c, (0.0,))[0] * (1 + TOLERANCE) < ub[p][c]})
        got = {p: sum(min(table[p].exact.get(c, (0.0,))[0], ub[p][c]) for q, c in items if q == p) for p in Phase}
        attained = got[Phase.BOTH] + min(got[Phase.DECODE], got[Phase.PREFILL])  # by pipelines the optimum's cells hold
        done = value <= attained * (1 + TOLERANCE)
        if demand is not None:  # the cheapest devices' cells are the ones that matter: done when they are settled
            least, cheapest = _cheapest(space, K[Phase.BOTH], costs.types, demand)
            items = [(Phase.BOTH, c) for c in decompose(space, table[Phase.BOTH].ub, K[Phase.BOTH], cheapest)]
            todo, done = sorted({(p, c) for p, c in items if not table[p].settled(c)}), False
        if progress:
            progress(
                f"cell bound round {rounds}: {value:,.0f} tok/s ({attained:,.0f} attained), {len(todo)} cells to refine"
                + (f"; least spend for {demand.floor:,.0f} tok/s {least:,.2f}" if demand is not None else "")
            )

        if cpu is not None:
            round_cpu = cpu.clock() - round_from

        def snapshot(value: float = value, items: list = items, least: float = least, routed: bool = routed, round_cpu: float = round_cpu) -> CellBound:
            # the optimum's refined pipelines first, then every other refined one, best first
            refined = sorted(((v, p, c) for p in phases for c, (v, pipe) in table[p].exact.items() if pipe), key=lambda e: -e[0])
            first = [(p, c) for p, c in items if c in table[p].exact and table[p].exact[c][1]]
            pipes = [table[p].exact[c][1] for p, c in dict.fromkeys(first + [(p, c) for _, p, c in refined])][:TEMPLATES]
            # refinement only tightens the tables: their bound holds for this round too. Where the deadline leaves
            # less than twice its CPU (a closure per set, at the last round's CPU per closure), the round's stands
            routed_cpu = 3 * len(caps) * round_cpu / (len(phases) + 1)
            if pools and not routed and len(caps) > 1 and (cpu is None or cpu.left() >= 2 * routed_cpu):
                both = closure(space, table[Phase.BOTH].ub) if Phase.BOTH in table else zero
                prefill = [table[Phase.PREFILL].under(caps[s], feeds[s]) for s in range(len(caps))]
                value = min(value, combine_sets(space, both, table[Phase.DECODE].ub, prefill, list(admit))[0])
            return CellBound(value, pipes, least)  # type: ignore[arg-type]  # refined cells with a pipeline only (above)

        yield snapshot, late()
        while late() and (cut or not (not todo or work >= budget or done)):
            yield snapshot, True  # resumed with no time for a round: the same bound, until a later deadline
        if cut:  # the cut keys' rows first, until the deadline
            cut = _first_pass([table[p].rows for p in phases], cpu, round_cpu)
            for p in phases:
                table[p].refresh()
            continue
        finished = (not todo or done) and (routed or len(caps) == 1 or late())
        if work >= budget and not finished and cpu is not None:
            # the work budget spent: the plan is the budget's (deterministic); resumed after the search, the
            # refinement goes on with the CPU the search left, until a deadline
            budget = math.inf
            yield snapshot, Pause.WORK
        elif work >= budget or finished:
            return
        if not todo or done:  # settled with every KV route open: on, steering by the routes decode pools' types open
            routed = True
            continue
        for p, c in todo:  # a few steps each, then the knapsack again: it says which cells still matter
            for _ in range(STEPS):
                if work >= budget or table[p].settled(c) or late():
                    break
                work += table[p].refine(c)
