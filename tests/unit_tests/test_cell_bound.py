"""The cell bound against brute force on a tiny model: the chain DP finds the best chain
exactly, the first pass bounds every chain on exactly a cell's devices, and the whole bound
lies above the best plan of pipelines, tensor-parallel groups and prefill/decode pools."""

import itertools

import numpy as np
import pytest

from hetc.partitioner.bounds import aggregate
from hetc.partitioner.bounds.aggregate import CELL_PER_OCTAVE, PER_OCTAVE, cell_per_octave, first_pass
from hetc.partitioner.bounds.cell_bound import _Cells
from hetc.partitioner.estimate.batches import Regimes
from hetc.partitioner.bounds.cells import CountSpace
from hetc.partitioner.bounds import loop_dp
from hetc.partitioner.bounds.refine import best_chain
from hetc.partitioner.estimate.simulate import Workload
from hetc.partitioner.search.solver import solve
from hetc.partitioner.bounds.stage_costs import StageCosts
from hetc.partitioner.estimate.tables import Tables, kinds_of
from hetc.scheduling import Phase
from tests.brute_force import best_per_set, best_with_pools, options
from hetc.partitioner.estimate import tables as tables_module
from tests.conftest import falling_cluster, two_type_cluster

WL = Workload(32, 16, "fp32", "fp32", prefill_chunk=32)


@pytest.fixture
def costs(tmp_path, tiny):
    cluster = two_type_cluster(tmp_path, "0.8 MB", "2 MB", a_count=3)
    return StageCosts(Tables(tiny.units, WL), kinds_of(cluster), cluster)


def _chains(costs: StageCosts, phase: str, batch: int, n: int, fit: int | None = None, loop: bool = False):
    """Every n-stage chain of kinds and cuts that fits memory (at `fit` sequences, default the
    batch), with its device counts and its bottleneck at `batch` as the relaxation counts it
    (busiest stage, or a link at its cheapest cut; with `loop`, also its m micro-batches' loop:
    Σ stages + Σ links, each at its own cut, over m)."""
    b, m = (n, 1) if phase == "prefill" else (batch, min(n, batch))
    case = costs.case(phase, b, m, fit=n if phase == "prefill" else fit)
    if case is None:
        return
    U = costs.u
    cheap = case.link[:, :, 1:-1].min(axis=2)
    kinds = [g for g in range(len(costs.kinds)) if np.isfinite(case.P[g, -1])]
    for ks in itertools.product(kinds, repeat=n):
        counts = np.bincount(costs.type_of[list(ks)], weights=costs.tp[list(ks)], minlength=len(costs.types))
        if (counts > costs.devices).any():
            continue
        for cuts in itertools.combinations(range(1, U), n - 1):
            bd = (0, *cuts, U)
            if any(bd[s + 1] > case.jfit[g, bd[s]] for s, g in enumerate(ks)):
                continue
            R = max(case.P[g, bd[s + 1]] - case.P[g, bd[s]] + case.over[g] for s, g in enumerate(ks))
            R = max([R] + [cheap[costs.type_of[x], costs.type_of[y]] for x, y in zip(ks, ks[1:])])
            if loop:
                busy = sum(case.P[g, bd[s + 1]] - case.P[g, bd[s]] + case.over[g] for s, g in enumerate(ks))
                links = sum(case.link[costs.type_of[x], costs.type_of[y], bd[s + 1]] for s, (x, y) in enumerate(zip(ks, ks[1:])))
                R = max(R, (busy + links) / m)
            yield ks, bd, counts.astype(int), R


@pytest.mark.parametrize("phase,batch,fit", [("both", 4, 4), ("both", 64, 64), ("both", 64, 20), ("decode", 16, 16), ("decode", 40, 9), ("prefill", 1, 1)])
def test_chain_dp_finds_the_best_chain(costs, phase, batch, fit):
    """Costed at `batch`, holding `fit` sequences: the least bottleneck over every chain and cut."""
    tp_groups = phase == "both"
    for n in (1, 2, 3):
        chains = [c for c in _chains(costs, phase, batch, n, fit) if tp_groups or all(costs.tp[g] == 1 for g in c[0])]
        for counts in itertools.product(*(range(int(d) + 1) for d in costs.devices)):
            counts = np.array(counts)
            want = min((R for _, _, c, R in chains if (c <= counts).all()), default=None)
            got, _ = best_chain(costs, phase, batch, n, counts, tp_groups, fit=fit)
            if want is None:
                assert got is None, (n, counts)
                continue
            R, (ks, cuts) = got
            assert R == pytest.approx(want, rel=1e-9), (n, counts)
            mine = next(r for k, bd, _, r in chains if k == ks and bd == cuts)  # the chain it returns attains R
            assert mine == pytest.approx(R, rel=1e-9)


@pytest.mark.parametrize(
    "phase,batch,fit,binds", [("both", 2, 2, True), ("both", 4, 4, True), ("both", 64, 20, False), ("decode", 4, 4, True), ("decode", 40, 9, False)]
)
def test_chain_dp_with_the_loop_term_finds_the_least_round(costs, phase, batch, fit, binds, monkeypatch):
    """With the loop term: the least max(bottleneck, (Σ stages + Σ links at their cuts) / m) over
    every chain and cut, m = min(n, batch) (batch 2: fewer micro-batches than stages); at small
    batches the loop binds on some cells (else this would test the DP without it). Rows of the
    min-plus step one at a time (loop_dp.CHUNK), as a large cell's go in parts."""
    monkeypatch.setattr(loop_dp, "CHUNK", 1)
    tp_groups = phase == "both"
    raised = 0
    for n in (1, 2, 3):
        chains = [c for c in _chains(costs, phase, batch, n, fit, loop=True) if tp_groups or all(costs.tp[g] == 1 for g in c[0])]
        for counts in itertools.product(*(range(int(d) + 1) for d in costs.devices)):
            counts = np.array(counts)
            want = min((R for _, _, c, R in chains if (c <= counts).all()), default=None)
            got, _ = best_chain(costs, phase, batch, n, counts, tp_groups, fit=fit, loop=True)
            if want is None:
                assert got is None, (n, counts)
                continue
            assert got[0] == pytest.approx(want, rel=1e-9), (n, counts)
            raised += got[0] > best_chain(costs, phase, batch, n, counts, tp_groups, fit=fit)[0][0] * (1 + 1e-9)
    assert (raised > 0) == binds


@pytest.mark.parametrize("per_octave", [PER_OCTAVE, CELL_PER_OCTAVE[0]])
@pytest.mark.parametrize("phase", ["both", "decode", "prefill"])
def test_first_pass_bounds_every_chain_on_exactly_its_cell(costs, phase, per_octave):
    """At every batch a key covers (its ends and a batch between; costs and tokens at the key's
    top, memory at its first batch), every chain on exactly a cell's devices: column generation's
    octaves and the cell bound's narrower intervals alike."""
    space = CountSpace(costs.devices)
    keys, V = first_pass(costs, space, phase, max_stages=4, ceiling=300, per_octave=per_octave)
    checked = 0
    for ki, key in enumerate(keys):
        if phase != "prefill" and key.batch not in (1, 4, 32, 256):
            continue
        for b in sorted({key.batch, (key.batch + key.top) // 2, key.top}):
            for n in range(key.lo, key.hi + 1):
                for ks, _, counts, R in _chains(costs, phase, b, n):
                    if phase != "both" and any(costs.tp[g] > 1 for g in ks):
                        continue
                    c = int(counts @ space.strides)
                    rate = WL.output_len if phase == "prefill" else b
                    assert V[ki, c] >= rate / R * (1 - 1e-9), (ks, b, n)
                    checked += 1
    assert checked > 100


def test_cell_bound_first_pass_narrows_the_batch_intervals(costs):
    """Where the budget affords it, the cell bound's first pass cuts each octave of batches below the floor
    into CELL_PER_OCTAVE[0] intervals (memory at the first batch, tokens at the top: at one per octave a cell
    of small cards was costed at 1.75× the sequences its chains held), tighter than one per octave; where it
    does not, one per octave as column generation keeps."""
    space = CountSpace(costs.devices)
    per = cell_per_octave(costs, space, (Phase.BOTH,), 4, 300, budget=4e8)
    assert per == CELL_PER_OCTAVE[0]
    assert cell_per_octave(costs, space, (Phase.BOTH,), 4, 300, budget=1.0) == PER_OCTAVE
    cells = _Cells(costs, space, Phase.BOTH, 4, 300, loop=True, per_octave=per)
    floor = Regimes(costs.tables.wl, Phase.BOTH, 300)  # past its floor_from one key runs to the ceiling (budget_floor.py)
    narrow = [k for k in cells.keys if k.batch < floor.floor_from(k.lo) and k.top > k.batch]
    assert narrow
    assert all(k.top + 1 <= k.batch * 2 ** (1 / per) + 1.5 for k in narrow), narrow
    _, wide = first_pass(costs, space, Phase.BOTH, max_stages=4, ceiling=300)
    _, fine = first_pass(costs, space, Phase.BOTH, max_stages=4, ceiling=300, per_octave=per)
    assert (fine.max(axis=0) <= wide.max(axis=0) * (1 + 1e-9)).all()
    assert (fine.max(axis=0) < wide.max(axis=0) * (1 - 1e-3)).any()


@pytest.mark.parametrize("a_memory,b_memory", [("0.8 MB", "2 MB"), ("2 MB", "1 MB")])
def test_bound_is_above_the_best_plan_with_tp_groups_and_pools(tmp_path, tiny, a_memory, b_memory):
    cluster = two_type_cluster(tmp_path, a_memory, b_memory, a_count=2)
    want = best_with_pools(best_per_set(options(tiny.units, cluster, WL, tp=True, phases=tuple(Phase))))
    assert want > 0
    sol = solve(tiny.units, cluster, WL, tp="auto", disaggregate="auto")
    assert sol.bound >= want * (1 - 1e-9)
    assert sol.output_tok_s <= want * (1 + 1e-9)  # the plan is one of those enumerated (KV links may cap pools)


@pytest.mark.parametrize("memory", ["2 MB", "1 MB"])
def test_bound_holds_where_a_profiles_efficiency_falls_with_the_batch(tmp_path, tiny, memory, monkeypatch):
    """A fitted profile on which a pipeline runs slower at 5 sequences than at 4: the bound
    (through the profile's envelope) stays above the best plan at every integer batch, and says
    so; costed with the profile itself it would not."""
    cluster = falling_cluster(tmp_path, memory)
    want = best_with_pools(best_per_set(options(tiny.units, cluster, WL, tp=True, phases=tuple(Phase))))
    sol = solve(tiny.units, cluster, WL, tp="auto", disaggregate="auto")
    assert sol.bound >= want * (1 - 1e-9)
    assert sol.output_tok_s <= want * (1 + 1e-9)
    assert any("profile fitted: efficiency falls" in n for n in sol.notes)
    if memory == "1 MB":
        return  # there the best plan's pipelines never hold the batches where the profile falls
    monkeypatch.setattr(tables_module, "bound_node", lambda node: node)
    # at one batch interval per octave (the cell bound's where a finer first pass is past its budget): four per octave
    # cost these pipelines near the batches they hold, and the profile itself happened to stay above the plan
    monkeypatch.setattr(aggregate, "CELL_PER_OCTAVE", ())
    assert solve(tiny.units, cluster, WL, tp="auto", disaggregate="auto").bound < want * (1 - 1e-3)


def test_a_floors_cell_bound_keeps_one_interval_per_octave(tmp_path, tiny, monkeypatch):
    """With a floor (cost or energy) the least spend comes from refining the cheapest cells, each refinement dearer
    by the keys' number: the first pass keeps one interval per octave there (finer ones loosened
    70b-24dev-cost-10k's least spend within its work budget), and narrows them only without one."""
    from hetc.partitioner.bounds import cell_bound as C

    seen = []
    real = C._Cells

    def cells(*args, per_octave, **kwargs):
        seen.append(per_octave)
        return real(*args, per_octave=per_octave, **kwargs)

    monkeypatch.setattr(C, "_Cells", cells)
    cluster = two_type_cluster(tmp_path, "0.8 MB", "2 MB", a_count=3)
    args = (Tables(tiny.units, WL), kinds_of(cluster), cluster, 4, 300)
    spend = {tables_module.type_key(n): 1.0 + i for i, n in enumerate(cluster.nodes)}
    C.cell_bound(*args, demand=C.Demand(spend, 1.0))
    assert seen == [PER_OCTAVE]
    C.cell_bound(*args)
    assert seen[-1] == CELL_PER_OCTAVE[0]
