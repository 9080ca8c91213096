"""A plan's saturation figure (`hetc plan`'s predicted output tok/s) against the steady state the
serving simulator reaches with the same plan — the runtime's scheduling policy (capacity/), which
"Capacity planning: the simulator against `hetc serve`" checks against real servers on CPU.

    python benchmarks/saturation_vs_sim.py PLAN.json [PLAN.json ...] [--clients N] [--requests N]

A closed loop of N clients (default: twice the plan's sequences; 8 requests each) sends the plan's own workload
(fixed lengths) with no queue limit, so every lane stays as full as the policy lets it; the
steady state is the middle half of all tokens delivered (no ramp, no drain). Per lane: stage
busy share, the share of it spent on micro-batch steps (the rest: KV transfer legs), and the
mean sequences per step.
"""

from __future__ import annotations

import argparse
import sys

import numpy as np

from hetc.capacity import lanes as lanes_module
from hetc.capacity.evaluate import model_of
from hetc.capacity.lanes import lanes_of
from hetc.capacity.load import LengthDist, Load
from hetc.capacity.simulator import simulate
from hetc.cluster import Cluster
from hetc.partitioner.estimate.simulate import Workload
from hetc.plan import load_plan
from hetc.requests import ServeLimits


def steady(path: str, clients: int | None, requests: int | None) -> None:
    plan = load_plan(path)
    model, cluster = model_of(plan, path), Cluster.from_json(plan.cluster)
    wl = Workload(plan.workload.input_len, plan.workload.output_len, plan.model.dtype, plan.model.kv_dtype)
    limits = ServeLimits(max_waiting=10**9, max_queue_wait=1e12)  # nobody is refused: the lanes stay full
    lanes = lanes_of(plan, model.units, cluster, wl, num_kv_blocks=limits.num_kv_blocks)
    seqs: dict[int, list[int]] = {}
    step_time = lanes_module.SimLane.step_time

    def counting(lane, i, shape):  # the first stage sees every micro-batch once
        if i == 0:
            seqs.setdefault(lane.id, []).append(shape.seqs)
        return step_time(lane, i, shape)

    n = clients or 2 * sum(p.batch * p.replicas for p in plan.pipelines)
    requests = requests or 8 * n  # each client sends several: the lanes see arrivals as they finish
    fixed = lambda k: LengthDist.parse(str(k), "length")  # noqa: E731
    lanes_module.SimLane.step_time = counting
    try:
        o = simulate(lanes, cluster, Load.closed(n, requests, fixed(wl.input_len), fixed(wl.output_len)), limits)
    finally:
        lanes_module.SimLane.step_time = step_time
    t = np.sort(np.concatenate([r.token_times for r in o.requests]))
    lo, hi = t[len(t) // 4], t[3 * len(t) // 4]
    got = (len(t) // 2) / (hi - lo)
    print(
        f"{path}: plan {plan.predicted.output_tok_s:,.0f} output tok/s, simulated steady state {got:,.0f} "
        f"(plan/sim {plan.predicted.output_tok_s / got:.2f}); {n} clients, {requests} requests, "
        f"{o.preemptions} preemptions"
    )
    span = o.end - o.start
    for lane in lanes:
        busy = [o.busy[(lane.id, k)] for k in range(len(lane.stages))]
        steps = [o.stepped[(lane.id, k)][0] for k in range(len(lane.stages))]
        per = np.mean(seqs.get(lane.id, [0]))
        print(
            f"  lane {lane.id} (pipeline {lane.pipeline}, {lane.phase.name.lower()}, batch {lane.batch}): busy "
            + ", ".join(f"{b / span:.0%}" for b in busy)
            + "; of it in steps "
            + ", ".join(f"{s / b:.0%}" if b else "-" for s, b in zip(steps, busy))
            + f"; {per:.1f} sequences per step; KV peak {o.kv_peak[lane.id]:.0%}"
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("plans", nargs="+")
    ap.add_argument("--clients", type=int, default=None)
    ap.add_argument("--requests", type=int, default=None, help="default: 8 per client")
    a = ap.parse_args()
    for p in a.plans:
        steady(p, a.clients, a.requests)


if __name__ == "__main__":
    sys.exit(main())
