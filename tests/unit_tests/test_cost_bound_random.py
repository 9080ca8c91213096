"""The cost and energy bounds against brute force on random tiny instances: every piece the
planner takes the largest of (bound.py's LP, whole_devices.py's MIP, cell_bound.Demand's and
colgen.py's least spend) is at most the least USD/h (W) of any brute-forced fleet giving the floor (tp groups,
every integer batch up to max_num_seqs: tests/brute_force.py). The instances vary what makes a
relaxation drop real stages: devices that hold a few units or few sequences (memory from 0.3× to
4× the model), KV-heavy workloads, engine batch caps, prices and powers, tp groups, and pipeline
lengths grouped into classes (aggregate.EXACT = 0; at the default, lengths up to 8 are exact)."""

import random

import pytest

import hetc.partitioner.bounds.aggregate as aggregate
from hetc.cluster import load_cluster
from hetc.partitioner.estimate.batches import batch_ceiling
from hetc.partitioner.bounds.bound import cost_bound
from hetc.partitioner.capture.capture import capture
from hetc.partitioner.bounds.cell_bound import Demand, cell_bound
from hetc.partitioner.bounds.colgen import column_bound
from hetc.partitioner.estimate.simulate import Workload
from hetc.partitioner.estimate.tables import Tables, kinds_of, type_key
from hetc.partitioner.bounds.whole_devices import whole_devices_bound
from hetc.scheduling import Phase
from tests.brute_force import best_per_set, options
from tests.conftest import FIXTURES, PROFILE
from tests.fixtures.fleets import disjoint_fleets

MODELS = ("tiny-llama", "tiny-gpt2", "tiny-mixtral", "tiny-phi3")  # untied and tied embeddings, MoE
SHARES = (0.25, 0.5, 0.75, 0.95)  # floors, of the most tok/s the cluster gives


@pytest.fixture(scope="module")
def models():
    return {m: capture(str(FIXTURES / m), dtype="fp32").units for m in MODELS}


def _instance(seed: int, tmp_path, models):
    """A random model, workload, batch cap and cluster of 2–3 types (the first a node of two
    devices, PCIe or NVLink, the one most likely to hold a plan)."""
    rng = random.Random(seed)
    units = models[rng.choice(MODELS)]
    wl = Workload(rng.choice([16, 32, 128, 384]), rng.choice([8, 16, 64]), "fp32", "fp32", prefill_chunk=rng.choice([16, 32, 64]))
    size = sum(u.param_bytes for u in units)
    names = ["p", "q", "r"][: rng.choice([2, 3])]
    lines = []
    for i, name in enumerate(names):
        share = rng.choice([1.5, 2.5, 4] if i == 0 else [0.3, 0.45, 0.6, 0.8, 1.1, 1.5, 2.5, 4])  # the first: a plan fits
        memory = f"{size * share / 1e6 + 0.01:.4f} MB"
        text = PROFILE.format(
            name=name,
            vendor="nvidia",
            backend="cuda",
            memory=memory,
            bw=rng.choice(["5 GB/s", "10 GB/s", "20 GB/s", "40 GB/s"]),
            flops=rng.choice(["0.5 TFLOP/s", "2 TFLOP/s", "4 TFLOP/s"]),
        )
        text = text.replace("price: 1 USD/h", f"price: {rng.choice([0.5, 1, 2, 3, 5])} USD/h")
        (tmp_path / f"{name}.yaml").write_text(text.replace("power: 100 W", f"power: {rng.choice([100, 250, 400])} W"))
        count = 2 if i == 0 else rng.choice([1, 1, 2]) if len(names) == 2 else 1
        link = f", link: {rng.choice(['pcie4', 'nvlink4'])}" if count > 1 else ""
        lines.append(f"  - {{name: {name}, device: ./{name}.yaml, count: {count}{link}}}")
    (tmp_path / "c.yaml").write_text("nodes:\n" + "\n".join(lines) + "\nnetwork: {default: ethernet-10g}\n")
    return units, wl, load_cluster(tmp_path / "c.yaml"), rng.choice([None, None, 1, 2, 3, 6])


@pytest.mark.parametrize("grouped", [False, True], ids=["exact-lengths", "length-classes"])
@pytest.mark.parametrize("seed", range(12))
def test_cost_bounds_never_exceed_the_brute_force_optimum(tmp_path, models, monkeypatch, seed, grouped):
    if grouped:
        monkeypatch.setattr(aggregate, "EXACT", 0)
        monkeypatch.setattr(aggregate, "GROWTH", 2.0)  # classes 1–2, 3–6, 7–8
    units, wl, cluster, seqs = _instance(seed + 100 * grouped, tmp_path, models)
    every = list(options(units, cluster, wl, tp=True, max_num_seqs=seqs))
    if not every:
        pytest.skip("nothing fits this instance")
    fleets = disjoint_fleets(best_per_set(iter(every)))
    tok = lambda fleet: sum(o.estimate.output_tok_s for o in fleet)  # noqa: E731
    most = max(map(tok, fleets))
    kinds, tables = kinds_of(cluster), Tables(units, wl)
    ceiling = batch_ceiling(units, cluster, wl, seqs)
    stages = min(len(units), sum(n.count for n in cluster.nodes))
    for of in (0, 1):  # USD/h, W
        spend = {type_key(n): (cluster.price(n.profile), n.profile.power)[of] for n in cluster.nodes}
        value = lambda o: (o.usd_h(cluster), o.watts())[of]  # noqa: E731, B023
        ratio = min(value(o) / o.estimate.output_tok_s for o in every if o.phase == Phase.BOTH)
        assert cost_bound(tables, kinds, stages, spend, ceiling) <= ratio * (1 + 1e-6)
        for share in SHARES:
            floor = share * most
            want = min(sum(map(value, f)) for f in fleets if tok(f) >= floor)
            got = {
                "LP": cost_bound(tables, kinds, stages, spend, ceiling, floor) * floor,
                "whole devices": whole_devices_bound(tables, kinds, stages, spend, ceiling, floor) * floor,
                "cell bound": cell_bound(tables, kinds, cluster, stages, ceiling, demand=Demand(spend, floor)).least_spend,
                "column generation": column_bound(tables, kinds, cluster, stages, ceiling, demand=Demand(spend, floor)).least_spend,
            }
            for name, v in got.items():
                assert v <= want * (1 + 1e-6), (name, of, share, v, want)
