"""A flow relaxation of all plans: the lower bound on the cost objective (USD per hour per
output tok/s).

Any plan is a set of pipelines, each of n stages at one batch B. Group pipelines by n and by
an interval [b, top] holding B (octaves cut where the step regime changes: batches.py). A
stage of kind g holding c_σ units of each cost signature σ (attention, MLP, embedding, …:
units of one signature cost the same) carries X tok/s with X · busy ≤ top, busy = over_g +
Σ_σ c_σ · cost_gσ at `top` (a stage's tok/s B / busy(B) never exceeds top / busy(top) within
the interval), and holds its weights and KV at b: Σ_σ c_σ · mem_gσ ≤ its memory. Summed over
the stages of kind g in a group's pipelines (flow-weighted), with F_g the flow through them,
Y_gσ the flow × σ-units they hold and G_g the stage groups (devices / tp) they take:

    over_g · F_g + Σ_σ cost_gσ · Y_gσ ≤ top · G_g      (every stage within its rate)
    Σ_σ mem_gσ · Y_gσ ≤ memory_g · F_g;  Σ_σ Y_gσ ≥ F_g (every stage holds ≥ 1 unit)
    Σ_g F_g = n · X;  Σ_g Y_gσ = N_σ · X               (n stages; every unit once)
    lo_στ · F_g ≤ Y_gσ − Y_gτ ≤ hi_στ · F_g             (stages hold contiguous ranges)
    Σ X = 1;  minimise Σ price · tp · G_g

The last rows hold because a stage's units are contiguous: c_σ − c_τ of any range of units
lies within [lo_στ, hi_στ], its least and most over all ranges (attention and MLP blocks
alternate: within ±1); rows are kept only where that is narrower than the counts imply.
Without them the relaxation gave KV-light MLP blocks to small-memory devices and attention
blocks to large ones.

Every plan scaled to one tok/s is a feasible point: contiguity (beyond those rows), links, the
loop term, activations' memory, integrality and device counts are relaxed (one pipeline's
stages do fit each type's devices and each kind's groups). Counting units per signature, not in all, keeps
the relaxation from covering the model with its cheapest ranges (an embedding and an attention
block priced as two units). (The throughput bound is cell_bound.py's.)
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from ortools.linear_solver import pywraplp
from ortools.sat.python import cp_model

from hetc.cluster import Cluster
from hetc.partitioner.bounds.aggregate import keys
from hetc.partitioner.budget import OBJECTIVE_BOUND, CpuBudget, OutOfTime
from hetc.partitioner.estimate.batches import MAX_BATCH, Regimes
from hetc.partitioner.cost_models.memory import stage_memory
from hetc.partitioner.estimate.simulate import Workload
from hetc.partitioner.estimate.tables import Kind, Tables, devices_per_type, type_key
from hetc.partitioner.capture.units import Unit
from hetc.partitioner.bounds.whole_devices import whole_devices_bound
from hetc.scheduling import KV_BLOCK_TOKENS, Phase

__all__ = ["cost_bound", "least_holding"]

FLOW = 1e4  # tok/s the LP's flows sum to (then its groups are O(1), within the solver's tolerances)


def _signatures(tables: Tables, context: int) -> tuple[list[int], list[int], list[float], list[float]]:
    """Per cost signature (Tables' grouping): its first unit's index, how many units have it, and
    the least weight bytes and KV bytes per sequence one of them holds (a tied weight counted in
    neither unit that reads it, so a stage holding both is never overcounted)."""
    readers: dict[str, int] = {}
    for u in tables.units:
        for name in u.params:
            readers[name] = readers.get(name, 0) + 1
    blocks = math.ceil(context / KV_BLOCK_TOKENS) * KV_BLOCK_TOKENS
    n = len(tables.reps)
    first, count = [-1] * n, [0] * n
    weights, kv = [math.inf] * n, [math.inf] * n
    for j, (u, c) in enumerate(zip(tables.units, tables.signature.tolist())):
        if first[c] < 0:
            first[c] = j
        count[c] += 1
        weights[c] = min(weights[c], sum(v for name, v in u.params.items() if readers[name] == 1))
        kv[c] = min(kv[c], u.kv_bytes(blocks, tables.wl.windowed))
    return first, count, weights, kv


def _balances(signature: np.ndarray, n: int) -> list[tuple[int, int, int, int]]:
    """(σ, τ, lo, hi): c_σ − c_τ over every contiguous range of units lies in [lo, hi], for the
    pairs of the `n` signatures (`signature`: each unit's) where that says more than 0 ≤ c ≤ the counts."""
    have = np.zeros((len(signature) + 1, n), dtype=np.int64)  # prefix counts per signature
    have[1:] = np.cumsum(np.eye(n, dtype=np.int64)[signature], axis=0)
    out = []
    for a in range(n):
        for b in range(a + 1, n):
            d = have[:, a] - have[:, b]  # a range [i, j) has d[j] − d[i]
            run_min = np.minimum.accumulate(d)[:-1]
            run_max = np.maximum.accumulate(d)[:-1]
            lo, hi = int((d[1:] - run_max).min()), int((d[1:] - run_min).max())
            if lo > -have[-1, b] or hi < have[-1, a]:
                out.append((a, b, lo, hi))
    return out


def cost_bound(
    tables: Tables,
    kinds: list[Kind],
    max_stages: int,
    price: dict[tuple[str, str], float],
    ceiling: int = MAX_BATCH,
    floor: float = 0.0,
    cpu: CpuBudget | None = None,
) -> float:
    """Lower bound on USD per hour per output tok/s over all plans (module docstring).

    Args:
        floor: with a floor F > 0, the bound is on (USD/h of any plan giving at least F tok/s) / F:
            the flow is F, so each type's devices (and each kind's tp groups) are limited to the
            cluster's; and at least whole_devices.py's bound, where each type's devices are bought
            whole. inf where no plan in the relaxation reaches F. Without one, counts never bind
            (a ratio does not change with scale) and are left out.
        cpu: the planner's CPU budget: OutOfTime where its deadline passes before the LP has
            solved; past it during the whole-device bound, the LP's value (still a bound).
    """
    wl = tables.wl
    rep, n_of, weights, kv = _signatures(tables, wl.kv_tokens())  # the shared prefixes' KV left out: still a lower bound
    balances = _balances(tables.signature, len(rep))
    solver = pywraplp.Solver.CreateSolver("GLOP")
    inf = solver.infinity()
    count = {g.type_key: sum(n.count for n in g.nodes) for g in kinds}
    most = [int(tables.most(g).max()) for g in kinds]  # the most sequences any unit range of the kind holds
    xs = []
    devices: dict[tuple[str, str], list] = {}  # per type: tp × the stage groups the flow takes
    groups: dict[int, list] = {}

    def row(lo: float, hi: float, terms: list[tuple[pywraplp.Variable, float]]) -> None:
        c = solver.Constraint(lo, hi)
        for v, a in terms:
            c.SetCoefficient(v, a)

    # pipelines of lengths key.lo … key.hi at batches key.batch … key.top, costed at m = key.m
    # micro-batches (the fewest of the class: no dearer, aggregate.keys)
    for key in keys(Phase.BOTH, max_stages, ceiling, Regimes(wl, Phase.BOTH, ceiling)):
        if cpu is not None:
            cpu.check()
        x = solver.NumVar(0, inf, "")
        flows: list[tuple[pywraplp.Variable, float]] = []
        held: list[list[tuple[pywraplp.Variable, float]]] = [[] for _ in rep]
        per_type: dict[tuple[str, str], list] = {}
        for gi, g in enumerate(kinds):
            if most[gi] < key.batch:
                continue
            cost, over = tables.unit_costs(g, key.m, key.top, floor=True)
            f, big_g = solver.NumVar(0, inf, ""), solver.NumVar(0, inf, "")
            y = [solver.NumVar(0, inf, "") for _ in rep]
            row(-inf, 0, [(f, over), (big_g, -key.top), *((v, float(cost[j])) for j, v in zip(rep, y))])
            row(-inf, 0, [(f, -1.0), *((v, (w + key.batch * k) / (g.tp * g.profile.usable_memory)) for w, k, v in zip(weights, kv, y))])
            row(0, inf, [(f, -1.0), *((v, 1.0) for v in y)])  # every stage holds a unit
            for a, b, lo, hi in balances:  # contiguous ranges: c_a − c_b within [lo, hi] per stage
                row(0, inf, [(y[a], 1.0), (y[b], -1.0), (f, -float(lo))])
                row(-inf, 0, [(y[a], 1.0), (y[b], -1.0), (f, -float(hi))])
            row(-inf, 0, [(f, 1.0), (x, -g.groups)])  # one pipeline's stages of kind g: at most its groups
            per_type.setdefault(g.type_key, []).append((f, g.tp))
            flows.append((f, 1.0))
            for c, v in enumerate(y):
                held[c].append((v, 1.0))
            devices.setdefault(g.type_key, []).append((big_g, g.tp))
            groups.setdefault(gi, []).append((big_g, 1.0))
        if not flows:
            continue
        row(0, inf, [*flows, (x, -key.lo)])  # lo … hi stages
        row(-inf, 0, [*flows, (x, -key.hi)])
        for c, vs in enumerate(held):
            row(0, 0, [*vs, (x, -n_of[c])])
        for t, terms in per_type.items():  # one pipeline's stages fit the type's devices
            row(-inf, 0, [*terms, (x, -count[t])])
        xs.append(x)
    if not xs:
        return 0.0
    row(FLOW, FLOW, [(x, 1.0) for x in xs])
    objective = solver.Objective()
    if floor > 0:  # the flow is F: each type's devices and each kind's groups within the cluster's
        for t, terms in devices.items():
            row(-inf, count[t], [(v, a * floor / FLOW) for v, a in terms])
        for gi, terms in groups.items():
            row(-inf, kinds[gi].groups, [(v, a * floor / FLOW) for v, a in terms])
    for t, terms in devices.items():
        for v, a in terms:
            objective.SetCoefficient(v, price[t] * a)
    objective.SetMinimization()
    limit_ms = None
    if cpu is not None:  # GLOP stops on wall time: the CPU left as wall time (budget.wall_left)
        cpu.check()
        solver.SetTimeLimit(limit_ms := int(max(1.0, cpu.wall_left() * 1e3)))
    status = solver.Solve()
    if limit_ms and status not in (pywraplp.Solver.OPTIMAL, pywraplp.Solver.INFEASIBLE) and solver.WallTime() >= 0.99 * limit_ms:
        raise OutOfTime
    if floor > 0 and status == pywraplp.Solver.INFEASIBLE:
        return float("inf")
    if status != pywraplp.Solver.OPTIMAL:
        raise RuntimeError("the cost-bound LP did not solve to optimality")
    least = objective.Value() / FLOW
    if floor > 0:  # whole devices decide on small clusters
        try:
            least = max(least, whole_devices_bound(tables, kinds, max_stages, price, ceiling, floor, cpu))
        except OutOfTime:  # the LP's value is a bound on its own
            if cpu is not None:
                cpu.stop(OBJECTIVE_BOUND)
    return least


def least_holding(units: list[Unit], wl: Workload, cluster: Cluster, cost: dict[tuple[str, str], float]) -> float:
    """The least `cost` (USD/h, or W) of any set of the cluster's devices whose usable memory
    holds the weights plus one sequence's KV and activations: every plan has a pipeline, which
    holds at least that (an integer knapsack, CP-SAT; its proven bound, so the
    answer stays a lower bound whether or not it finishes). 0 if nothing holds it."""
    need = stage_memory(units, batch=1, context=wl.context, prefill_chunk=min(wl.prefill_chunk, wl.input_len), windowed=wl.windowed).total
    count = devices_per_type(cluster)
    memory = {type_key(n): n.profile.usable_memory for n in cluster.nodes}
    types = list(count)
    m: Any = cp_model.CpModel()  # its CamelCase methods are left out of ortools' stubs
    x = [m.NewIntVar(0, count[t], "") for t in types]
    kib = [int(memory[t] // 1024) for t in types]  # memory rounded down, need up, costs down: still a bound
    m.Add(sum(k * v for k, v in zip(kib, x)) >= int(-(-need // 1024)))
    m.Minimize(sum(math.floor(cost[t] * 1e4) * v for t, v in zip(types, x)))
    s = cp_model.CpSolver()
    s.parameters.num_workers = 1
    s.parameters.max_time_in_seconds = 5.0
    if s.Solve(m) not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return 0.0
    return max(0.0, s.BestObjectiveBound() / 1e4)
