"""A plan as the serving simulator runs it: lanes (pipeline replicas, as the runtime builds them),
their stages' step times from the planner's cost model, link and KV-transfer times, KV blocks.

Every time here comes from the profiles and the cost model, never from a measurement of a run:
a stage's step is `stage_time` (its units on its device, the tensor-parallel all-reduce) plus the
profile's `step_overhead`; activations cross `hops` between stages at the links' bandwidth and
latency. The serving overheads around the pipeline are listed in `Overheads`, each with where its
value comes from.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from hetc.batching import MicroBatch
from hetc.cluster import Cluster, Link, Node
from hetc.errors import BadInput
from hetc.partitioner.cost_models.analytic import Step
from hetc.partitioner.cost_models.links import hops, resolve_link, transfer_time
from hetc.partitioner.simulate import Workload, stage_time
from hetc.partitioner.terms import DTYPE_BYTES
from hetc.partitioner.units import Unit
from hetc.plan import Plan
from hetc.scheduling import KV_BLOCK_TOKENS, Phase

__all__ = ["Overheads", "SimLane", "SimStage", "lanes_of", "step_of"]


@dataclass(frozen=True, slots=True)
class Overheads:
    """The serving work around the pipeline's steps, modelled explicitly (all in seconds).

    - message: the frontend's step message to the first stage and the result back, each one hop
      over the stage device's `host_link` (the profile's latency: the messages are token ids);
    - sample_per_row: the last stage picks each sampled row's token from its logits (one fp32
      pass over the vocabulary at the profile's memory bandwidth × `efficiency.memory`);
    - the stage's own per-step host work is in its step time (profile `step_overhead`), its
      kernel launches in the cost model (`launch_overhead`);
    - the frontend's scheduling and result handling are not charged: they run while the pipeline
      works (a lane keeps a micro-batch queued behind each stage's), so they delay nothing until
      the frontend itself saturates, which this model does not see.
    """

    message_in: float
    message_out: float
    sample_per_row: float

    def listed(self) -> dict[str, str]:
        return {"frontend → first stage, per step": f"{self.message_in * 1e6:.1f} us (host_link)",
                "last stage → frontend, per step": f"{self.message_out * 1e6:.1f} us (host_link)",
                "sampling, per sampled row": f"{self.sample_per_row * 1e6:.2f} us (vocabulary at memory bandwidth)",
                "stage host work, per step": "profile step_overhead (in the step time)",
                "kernel launches": "profile launch_overhead × kernels (in the step time)",
                "frontend scheduling and results": "not charged (overlapped with the pipeline's work)"}


@dataclass(slots=True)
class SimStage:
    node: Node
    tp: int
    units: list[Unit]
    devices: list[str]
    out_bytes_per_token: float  # the activation it sends on
    kv_bytes_per_token: float  # all of its units' K+V per token (all heads)
    memo: dict[Step, float] = field(default_factory=dict, repr=False)


@dataclass(slots=True)
class SimLane:
    """One pipeline replica, as runtime/topology.py numbers them (pipeline, then replica)."""

    id: int
    pipeline: int
    replica: int
    phase: Phase
    batch: int
    stages: list[SimStage]
    links: list[list[Link]]  # hops from stage i to stage i + 1
    feedback: list[Link]  # last stage → first (lookahead tokens)
    num_blocks: int
    overheads: Overheads
    wl: Workload  # the dtypes the cost model prices steps at
    targets: list[int] = field(default_factory=list)  # a prefill lane: the decode lanes it feeds

    @property
    def devices(self) -> int:
        return sum(s.tp for s in self.stages)

    def step_time(self, i: int, step: Step) -> float:
        """Seconds stage i is busy with `step`: the cost model's time plus the profile's per-step host
        overhead (memoized per stage and step)."""
        st = self.stages[i]
        t = st.memo.get(step)
        if t is None:
            if len(st.memo) > 200_000:
                st.memo.clear()
            t = st.memo[step] = stage_time(st.units, st.node, st.tp, step, self.wl) + st.node.profile.step_overhead
        return t


def step_of(batch: MicroBatch) -> Step:
    """A micro-batch as the cost model's Step: its decode rows (one new token after a context) and
    its prompt chunks (their tokens, sequences and token-weighted mean context) mixed."""
    d_seqs, d_ctx, p_tok, p_seqs, p_ctx = 0, 0.0, 0, 0, 0.0
    for it in batch.items:
        if it.n_new == 1 and it.start > 0 and it.sample:
            d_seqs += 1
            d_ctx += it.start + 1
        else:
            p_tok += it.n_new
            p_seqs += 1
            p_ctx += it.n_new * (it.start + (it.n_new + 1) / 2)
    return Step.mixed(d_seqs, _q(d_ctx / d_seqs) if d_seqs else 0.0, p_tok, p_seqs, _q(p_ctx / p_tok) if p_tok else 0.0)


def _q(ctx: float) -> float:
    """A context rounded to 1/64 of its power of two (< 1.6% off): equal steps are costed once."""
    if ctx < 64:
        return round(ctx * 2) / 2
    g = 2.0 ** (math.floor(math.log2(ctx)) - 6)
    return round(ctx / g) * g


def _overheads(first: Node, last: Node, units: list[Unit], dtype: str) -> Overheads:
    host_in = resolve_link(first.profile.host_link, first.profile.name, "host_link")
    host_out = resolve_link(last.profile.host_link, last.profile.name, "host_link")
    vocab = units[-1].out_bytes_per_token / DTYPE_BYTES[dtype]
    p = last.profile
    return Overheads(message_in=transfer_time(0.0, [host_in]), message_out=transfer_time(0.0, [host_out]),
                     sample_per_row=vocab * 4 / (p.memory_bandwidth * p.efficiency.memory))


def lanes_of(plan: Plan, units: list[Unit], cluster: Cluster, wl: Workload, *, num_kv_blocks: int | None = None,
             file: str = "plan.json") -> list[SimLane]:
    """The plan's lanes with their costs.

    Args:
        units: the captured model's units (the plan's `units` index into them).
        cluster: the plan's cluster (`Cluster.from_json(plan.cluster)`).
        wl: dtypes for the cost model (lengths come from each request).
        num_kv_blocks: cap on each lane's KV blocks (as `hetc serve --num-kv-blocks`).
    """
    lanes: list[SimLane] = []
    for p in plan.pipelines:
        for r in range(p.replicas):
            stages = []
            for s in p.stages:
                us = units[s.units[0]: s.units[1] + 1]
                node, first = s.devices[0].rsplit(":", 1)
                stages.append(SimStage(node=cluster.node(node), tp=s.tp, units=us,
                                       devices=[f"{node}:{int(first) + r * s.tp + j}" for j in range(s.tp)],
                                       out_bytes_per_token=us[-1].out_bytes_per_token,
                                       kv_bytes_per_token=sum(u.kv_bytes_per_token for u in us)))
            blocks = [int(s.memory_bytes.kv * s.tp // (KV_BLOCK_TOKENS * st.kv_bytes_per_token))
                      for s, st in zip(p.stages, stages) if st.kv_bytes_per_token > 0]
            n = min(blocks) if blocks else 0
            if n < 1:
                raise BadInput(f"pipeline {p.id}'s KV budget holds less than one block of {KV_BLOCK_TOKENS} tokens.",
                               file=file, field=f"pipelines.{p.id}.stages.memory_bytes.kv",
                               fix="re-plan it with `hetc plan` (the budget follows the batch and lengths).")
            lane = SimLane(id=len(lanes), pipeline=p.id, replica=r, phase=p.phase, batch=p.batch, stages=stages,
                           links=[hops(cluster, a.node, b.node) for a, b in zip(stages, stages[1:])],
                           feedback=hops(cluster, stages[-1].node, stages[0].node) if len(stages) > 1 else [],
                           num_blocks=min(n, num_kv_blocks or n), overheads=_overheads(
                               stages[0].node, stages[-1].node, units, wl.dtype), wl=wl)
            lanes.append(lane)
    decode = [l for l in lanes if l.phase == Phase.DECODE]
    for l in lanes:
        if l.phase == Phase.PREFILL:
            named = {t.to_pipeline for t in plan.kv_transfer if t.from_pipeline == l.pipeline}
            l.targets = [d.id for d in decode if not named or d.pipeline in named]
    return lanes


def link_time(lane: SimLane, i: int, tokens: int) -> float:
    """Seconds the activations of `tokens` tokens take from stage i to stage i + 1."""
    return transfer_time(tokens * lane.stages[i].out_bytes_per_token, lane.links[i])


def kv_legs(src: SimLane, dst: SimLane, cluster: Cluster, tokens: int) -> tuple[list[float], list[float]]:
    """Seconds each prefill stage spends sending a prompt's KV (`tokens` tokens) to the decode stages
    holding the same layers, and each decode stage receiving it."""
    out = [0.0] * len(src.stages)
    into = [0.0] * len(dst.stages)
    for i, a in enumerate(src.stages):
        layers = {u.layer: u.kv_bytes_per_token for u in a.units if u.kv_bytes_per_token}
        for j, b in enumerate(dst.stages):
            nbytes = tokens * sum(v for u in b.units if (v := layers.get(u.layer)) and u.kv_bytes_per_token)
            if nbytes:
                t = transfer_time(nbytes, hops(cluster, a.node, b.node))
                out[i] += t
                into[j] += t
    return out, into
