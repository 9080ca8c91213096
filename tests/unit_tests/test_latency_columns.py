"""latency_columns: the whole-pipeline columns relax every pipeline within T. On random small
instances every pipeline (each ordered split of the units into stages, any kind per stage, each
stage at its kind's least micro-step) whose n stages keep n · (its slowest) ≤ T gives no more tok/s
than the columns give within its own groups per kind (an LP over the columns)."""

import itertools

import numpy as np
from ortools.linear_solver import pywraplp

from hetc.cluster import Cluster, Node, load_profile, resolve_link
from hetc.partitioner.bounds.latency_bound import _FloorLP, _Seats
from hetc.partitioner.bounds.latency_columns import Block, Columns, columns
from hetc.partitioner.estimate.tables import kinds_of


def _splits(u: int):
    """Every ordered split of u units into stage sizes."""
    for cuts in itertools.product((False, True), repeat=u - 1):
        sizes, size = [], 1
        for cut in cuts:
            if cut:
                sizes.append(size)
                size = 0
            size += 1
        yield sizes + [size]


def _most_within(cols: Columns, groups: np.ndarray) -> float:
    """The columns' most tok/s using at most `groups`[g] groups of each kind."""
    solver = pywraplp.Solver.CreateSolver("GLOP")
    rows = [solver.Constraint(0, float(n)) for n in groups]
    objective = solver.Objective()
    objective.SetMaximization()
    for g, tok in enumerate(cols.single):
        if tok > 0:
            z = solver.NumVar(0, solver.infinity(), "")
            objective.SetCoefficient(z, float(tok))
            rows[g].SetCoefficient(z, 1.0)
    for g, h, of_g, of_h, tok in cols.pairs:
        z = solver.NumVar(0, solver.infinity(), "")
        objective.SetCoefficient(z, float(tok))
        rows[int(g)].SetCoefficient(z, float(of_g))
        rows[int(h)].SetCoefficient(z, float(of_h))
    assert solver.Solve() == pywraplp.Solver.OPTIMAL
    return solver.Objective().Value()


def _check(least: list[np.ndarray], rate: float, t: float) -> int:
    """Asserts every pipeline within t is relaxed; returns how many there were."""
    u = len(least[0]) - 1
    cols = columns([Block.of(least, rate)], u, t)
    seen = 0
    for sizes in _splits(u):
        for kinds in itertools.product(range(len(least)), repeat=len(sizes)):
            a = max(least[g][k] for g, k in zip(kinds, sizes))
            if not np.isfinite(a) or len(sizes) * a > t:
                continue
            seen += 1
            groups = np.bincount(kinds, minlength=len(least))
            assert _most_within(cols, groups) >= rate / a * (1 - 1e-9), (sizes, kinds, t)
    return seen


def test_a_pipeline_of_a_small_and_a_large_stage_takes_both_groups():
    """Two kinds, 3 units: kind 0 holds 1 unit in 1.0 s, kind 1 holds 1 in 0.5 s, 2 in 1.0 s and
    3 in 3.0 s. At T = 2 the pipeline (0: 1 unit, 1: 2 units) gives 1 tok/s on a group of each;
    one group of kind 1 alone is at best a third of three one-unit stages at 0.5 s (2 tok/s)."""
    inf = np.inf
    least = [np.array([inf, 1.0, inf, inf]), np.array([inf, 0.5, 1.0, 3.0])]
    cols = columns([Block.of(least, 1.0)], 3, 2.0)
    assert abs(_most_within(cols, np.array([1, 1])) - 1.0) < 1e-2
    assert abs(_most_within(cols, np.array([0, 1])) - 2 / 3) < 1e-9
    assert _check(least, 1.0, 2.0) > 0


def test_every_pipeline_within_t_is_relaxed_on_random_instances():
    rng = np.random.default_rng(1)
    seen = 0
    for _ in range(150):
        u, kinds = int(rng.integers(2, 7)), int(rng.integers(1, 4))
        least = []
        for _ in range(kinds):  # nondecreasing in k, some ranges fit no device
            a = np.concatenate([[np.inf], np.cumsum(rng.uniform(0.2, 2.0, u)) + rng.uniform(0, 2)])
            a[1 + int(rng.integers(1, u + 1)) if rng.random() < 0.3 else u + 1 :] = np.inf
            least.append(a)
        finite = np.concatenate([x[np.isfinite(x)] for x in least])
        if not len(finite):
            continue
        for t in rng.uniform(finite.min(), 3 * finite.max(), 3):
            seen += _check(least, float(rng.uniform(0.5, 50)), float(t))
    assert seen > 1000


def test_a_pair_of_two_kinds_of_one_type_takes_both_kinds_devices():
    """_FloorLP: a pair column's devices are its two kinds' together. Two H100s, kinds tp1 and tp2;
    tp1 holds 1 of 3 units in 1 s, tp2 holds 2 in 1 s: no fleet holds the model (three stages or
    tp1 + tp2 need 3 devices), and the columns within 2 devices give at most the tp2 group's 2/3
    tok/s and the pair's; counting only the pair's second kind's devices gave 1."""
    inf = np.inf
    cluster = Cluster(name="c", nodes=[Node("a", load_profile("h100-sxm"), 2, resolve_link("nvlink4", "t", "l"))], network=None)
    kinds = kinds_of(cluster, (1, 2))
    assert [g.tp for g in kinds] == [1, 2]
    least = [np.array([inf, 1.0, inf, inf]), np.array([inf, 0.5, 1.0, inf])]
    none = _Seats(1.0, 1.02, 1.0, [np.full(4, inf)] * 2, [np.full(4, inf)] * 2)
    most = _FloorLP([none], [Block.of(least, 1.0)], kinds, cluster, 3).most(2.0)
    assert 0.66 < most < 0.7
