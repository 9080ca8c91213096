"""split_chain's memory reach against the saturation model's memory: the stage that holds the last unit
also keeps the step's fp32 logits (simulate._stage_memory). Without them the greedy split could hand the
last stage more units than fit beside the logits; estimate_pipeline then refused the split, and the batch
search's bisection (batches.search: fitting taken as monotone in the batch) skipped every larger batch
that fits (DeepSeek-V3 fp8, dp-ep, H200 TP8 → Gaudi 3 TP8: 14,227 sequences where 15,886 fit)."""

from __future__ import annotations

import itertools

import pytest

from hetc.cluster import Cluster, Node, load_profile, resolve_link
from hetc.partitioner.capture.capture import capture
from hetc.partitioner.estimate.simulate import StagePlan, Workload, estimate_pipeline
from hetc.partitioner.estimate import split
from hetc.partitioner.estimate.split import Slot, split_chain

WL = Workload(1024, 256, "bf16", "bf16")


@pytest.fixture(scope="module")
def llama():
    return capture("llama-3.1-8b", dtype="bf16")


def _cluster(usable: float) -> Cluster:
    """Three single-device nodes with `usable` bytes each: memory decides where each stage ends."""
    prof = load_profile("h100-sxm").model_copy(update={"memory": usable + 2e9, "reserved_memory": 2e9})
    return Cluster(name="c", nodes=[Node(x, prof, 1, None) for x in "abc"], network=resolve_link("roce-400g", "test", "network"))


def _fits_somewhere(units, cl: Cluster, batch: int) -> bool:
    """Brute force: some split of the chain a → b → c holds `batch` sequences (every stage non-empty or not)."""
    n = len(units)
    for i, j in itertools.combinations_with_replacement(range(n + 1), 2):
        stages = [StagePlan(nd, a, b - 1) for nd, a, b in zip(cl.nodes, (0, i, j), (i, j, n)) if b > a]
        if estimate_pipeline(units, stages, cl, WL, batch) is not None:
            return True
    return False


def test_every_split_returned_fits_and_one_is_returned_wherever_one_fits(llama):
    """Over batches from roomy to none fitting, on devices each with room for half the weights: where
    split_chain returns a split, the saturation model holds it in memory; where brute force finds a split
    that fits, split_chain returns one; and fitting stays monotone in the batch (what the bisection needs)."""
    units = llama.units
    weights = sum({k: v for u in units for k, v in u.params.items()}.values())
    cl = _cluster(weights * 0.5)
    chain = [Slot(nd) for nd in cl.nodes]
    fitted, overflowed = [], 0
    for batch in range(1, 60, 3):
        got = split_chain(units, chain, cl, WL, batch)
        est = estimate_pipeline(units, got, cl, WL, batch) if got else None
        overflowed += got is not None and est is None
        assert (est is not None) == _fits_somewhere(units, cl, batch), batch
        fitted.append(est is not None)
    assert overflowed == 0
    assert True in fitted and False in fitted and fitted == sorted(fitted, reverse=True)  # fits up to a batch, then never


def test_memory_reach_is_shared_across_kinds_of_one_device_and_batches(llama, monkeypatch):
    """With split_chain's memo, the per-unit memory terms are computed once per (phase, tp) and a reach once per
    (cap, batch, phase, tp): two kinds of one device over different links, and later batches, reuse them, and
    every reach equals the one computed afresh (a third of the search's CPU on a 405B generated cluster)."""
    units = llama.units
    calls = {"terms": 0}
    terms = split._unit_memory

    def counted(*args):
        calls["terms"] += 1
        return terms(*args)

    monkeypatch.setattr(split, "_unit_memory", counted)
    memo: dict = {}
    cap = 30e9
    for batch in (1, 64, 700):
        for tp in (1, 2):
            fresh = split._memory_reach(units, WL, batch, "both", tp, cap)
            assert split._memory_reach(units, WL, batch, "both", tp, cap, memo) == fresh
            assert split._memory_reach(units, WL, batch, "both", tp, cap, memo) is memo[("reach", tp, cap, batch, "both", WL.dp_ranks)]
    assert calls["terms"] == 3 * 2 + 2  # afresh each time, with the memo once per tp
