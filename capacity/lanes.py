"""A plan as the serving simulator runs it: lanes (pipeline replicas, as the runtime builds them),
their stages' step times from the planner's cost model, link and KV-transfer times, KV blocks.

Every time here comes from the profiles and the cost model, never from a measurement of a run:
a stage's step is `stage_time` (its units on its device, the tensor-parallel all-reduce) plus the
profile's `step_overhead` and its measured serving host work (`Profile.serving`, hetc/serving.py);
the units from the first norm/head on run over the sampled rows only, as the runtime cuts them
(hetc/stage.py `select`); activations cross `hops` between stages at the links' bandwidth and
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
from hetc.partitioner.estimate.simulate import Workload, stage_time
from hetc.partitioner.capture.terms import DTYPE_BYTES
from hetc.partitioner.capture.units import Unit
from hetc.plan import Plan
from hetc.scheduling import KV_BLOCK_TOKENS, Phase
from hetc.kv_blocks import lane_blocks, stage_blocks
from hetc.stage import select_at

__all__ = ["Overheads", "SimLane", "SimStage", "StepShape", "lanes_of", "step_of"]


@dataclass(frozen=True, slots=True)
class Overheads:
    """The serving work around the pipeline's steps, modelled explicitly (all in seconds).

    - message_in, message_out: the frontend's step message to the first stage and the result
      back: one process-to-process message each (the profile's `serving.message`, measured by
      `hetc profile` as gloo's latency between two processes) plus a hop over the stage device's
      `host_link`;
    - sample_per_row: the last stage picks each sampled row's token from its logits: the
      profile's `serving.sample_logit` × the vocabulary (the runtime's sampler, timed), or, for a
      profile without that measurement, one fp32 pass over the vocabulary at its memory bandwidth;
    - each stage's host work per step around its forward (the step message, the attention
      metadata, what it sends on): the profile's `serving` step + row × sequences + token ×
      tokens (the runtime's functions, timed by `hetc profile`), in the stage's step time, as is
      the profile's `step_overhead` (the executor's own per-call cost) and the kernel launches;
    - the frontend's scheduling and result handling are not charged: they run while the pipeline
      works (a lane keeps a micro-batch queued behind each stage's), so they delay nothing until
      the frontend itself saturates, which this model does not see.
    """

    message_in: float
    message_out: float
    sample_per_row: float
    stage_host: tuple[str, ...]  # per stage: its host work per step, as text

    def listed(self) -> dict[str, str]:
        return {
            "frontend → first stage, per step": f"{self.message_in * 1e6:.1f} us (serving.message + host_link)",
            "last stage → frontend, per step": f"{self.message_out * 1e6:.1f} us (serving.message + host_link)",
            "sampling, per sampled row": f"{self.sample_per_row * 1e6:.2f} us (serving.sample_logit × vocabulary)",
            "stage host work, per step": "; ".join(self.stage_host) + " (profile serving, in the step time)",
            "executor per call": "profile step_overhead (in the step time)",
            "kernel launches": "profile launch_overhead × kernels (in the step time)",
            "frontend scheduling and results": "not charged (overlapped with the pipeline's work)",
        }


@dataclass(frozen=True, slots=True)
class StepShape:
    """One micro-batch as the stages see it: the cost model's step over its new tokens, the rows
    that go on past the cut before norm/head (the sampled ones), and its size for the host work."""

    step: Step
    sampled: int
    seqs: int
    tokens: int

    @property
    def after_cut(self) -> Step:
        """The step of the units from the first norm/head on: one row per sampled token, no attention
        (a mixed step's head then counts as a decode step's)."""
        return Step(self.sampled, self.sampled, 0.0)


@dataclass(slots=True)
class SimStage:
    node: Node
    tp: int
    units: list[Unit]
    devices: list[str]
    out_bytes_per_token: float  # the activation it sends on
    kv_bytes_per_token: float  # all of its units' K+V per token (all heads)
    cut: int  # units[:cut] run over every new token, units[cut:] over the sampled rows only
    vocab: int  # logits per row it samples from (the last stage), else 0
    memo: dict[StepShape, float] = field(default_factory=dict, repr=False)


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

    @property
    def budget_ranks(self) -> int:
        """The ranks a micro-step's token budget spans: its narrowest stage's, where each data-parallel
        rank schedules its own (Workload.ranked), else 1."""
        return self.wl.ranked(min(s.tp for s in self.stages)).dp_ranks

    def step_time(self, i: int, shape: StepShape) -> float:
        """Seconds stage i is busy with a micro-batch: the cost model's time for its units (those
        after the cut over the sampled rows), the profile's per-step overhead, the runtime's host
        work around the forward, and on the last stage the sampling (memoized per stage and shape)."""
        st = self.stages[i]
        t = st.memo.get(shape)
        if t is None:
            if len(st.memo) > 200_000:
                st.memo.clear()
            p = st.node.profile
            t = p.step_overhead + p.serving.stage_step(shape.seqs, shape.tokens)
            if st.cut:
                t += stage_time(st.units[: st.cut], st.node, st.tp, shape.step, self.wl)
            if st.cut < len(st.units) and shape.sampled:
                t += stage_time(st.units[st.cut :], st.node, st.tp, shape.after_cut, self.wl)
            if st.vocab:
                t += shape.sampled * self.overheads.sample_per_row
            st.memo[shape] = t
        return t


def step_of(batch: MicroBatch) -> StepShape:
    """A micro-batch as the cost model's Step — its decode rows (one new token after a context) and
    its prompt chunks (their tokens, sequences and token-weighted mean context) mixed — with its
    sampled rows, sequences and new tokens."""
    d_seqs, d_ctx, p_tok, p_seqs, p_ctx = 0, 0.0, 0, 0, 0.0
    for it in batch.items:
        if it.n_new == 1 and it.start > 0 and it.sample:
            d_seqs += 1
            d_ctx += it.start + 1
        else:
            p_tok += it.n_new
            p_seqs += 1
            p_ctx += it.n_new * (it.start + (it.n_new + 1) / 2)
    step = Step.mixed(d_seqs, _q(d_ctx / d_seqs) if d_seqs else 0.0, p_tok, p_seqs, _q(p_ctx / p_tok) if p_tok else 0.0)
    # a speculative round (K+1 positions, priced above as a chunk) keeps every row past the cut: each is verified
    sampled = sum(it.n_new if it.draft else int(it.sample) for it in batch.items)
    return StepShape(step, sampled, len(batch.items), batch.num_tokens)


def _q(ctx: float) -> float:
    """A context rounded to 1/64 of its power of two (< 1.6% off): equal steps are costed once."""
    if ctx < 64:
        return round(ctx * 2) / 2
    g = 2.0 ** (math.floor(math.log2(ctx)) - 6)
    return round(ctx / g) * g


def _overheads(stages: list[SimStage], vocab: int) -> Overheads:
    first, last = stages[0].node.profile, stages[-1].node.profile
    host_in = resolve_link(first.host_link, first.name, "host_link")
    host_out = resolve_link(last.host_link, last.name, "host_link")
    sv = last.serving
    per_row = sv.sample_logit * vocab if sv.sample_logit else vocab * 4 / (last.memory_bandwidth * last.efficiency.memory)
    text = []
    for s in stages:
        h = s.node.profile.serving
        text.append(f"{s.node.name}: {h.step * 1e6:.0f} us + {h.row * 1e6:.1f} us/seq + {h.token * 1e6:.2f} us/token")
    return Overheads(
        message_in=first.serving.message + transfer_time(0.0, [host_in]),
        message_out=last.serving.message + transfer_time(0.0, [host_out]),
        sample_per_row=per_row,
        stage_host=tuple(text),
    )


def lanes_of(plan: Plan, units: list[Unit], cluster: Cluster, wl: Workload, *, num_kv_blocks: int | None = None, file: str = "plan.json") -> list[SimLane]:
    """The plan's lanes with their costs.

    Args:
        units: the captured model's units (the plan's `units` index into them).
        cluster: the plan's cluster (`Cluster.from_json(plan.cluster)`).
        wl: dtypes for the cost model (lengths come from each request).
        num_kv_blocks: cap on each lane's KV blocks (as `hetc serve --num-kv-blocks`).
    """
    cut = select_at([u.kind for u in units])
    vocab = int(units[-1].out_bytes_per_token / DTYPE_BYTES[wl.dtype])
    lanes: list[SimLane] = []
    for p in plan.pipelines:
        for r in range(p.replicas):
            stages = []
            for s in p.stages:
                us = units[s.units[0] : s.units[1] + 1]
                node, first = s.devices[0].rsplit(":", 1)
                stages.append(
                    SimStage(
                        node=cluster.node(node),
                        tp=s.tp,
                        units=us,
                        devices=[f"{node}:{int(first) + r * s.tp + j}" for j in range(s.tp)],
                        out_bytes_per_token=us[-1].out_bytes_per_token,
                        # a sliding layer's window, where kept so, as bytes per token at the plan's context
                        kv_bytes_per_token=wl.kv_bytes(us, wl.kv_tokens()) / wl.kv_tokens(),
                        cut=min(max(cut - s.units[0], 0), len(us)),
                        vocab=vocab if s.units[1] == len(units) - 1 else 0,
                    )
                )
            n = lane_blocks(
                [stage_blocks(s.memory_bytes.kv, min(u.kv_ways(s.tp, wl.experts) for u in st.units), st.kv_bytes_per_token) for s, st in zip(p.stages, stages)]
            )  # the padding block on top, as the runtime
            if n < 1:
                raise BadInput(
                    f"pipeline {p.id}'s KV budget holds less than one block of {KV_BLOCK_TOKENS} tokens.",
                    file=file,
                    field=f"pipelines.{p.id}.stages.memory_bytes.kv",
                    fix="re-plan it with `hetc plan` (the budget follows the batch and lengths).",
                )
            lane = SimLane(
                id=len(lanes),
                pipeline=p.id,
                replica=r,
                phase=p.phase,
                batch=p.batch,
                stages=stages,
                links=[hops(cluster, a.node, b.node) for a, b in zip(stages, stages[1:])],
                feedback=hops(cluster, stages[-1].node, stages[0].node) if len(stages) > 1 else [],
                num_blocks=min(n, num_kv_blocks or n),
                overheads=_overheads(stages, vocab),
                wl=wl,
            )
            lanes.append(lane)
    decode = [l for l in lanes if l.phase == Phase.DECODE]
    for l in lanes:
        if l.phase == Phase.PREFILL:
            named = {t.to_pipeline for t in plan.kv_transfer if t.from_pipeline == l.pipeline}
            l.targets = [d.id for d in decode if not named or d.pipeline in named]
    return lanes


def link_time(lane: SimLane, i: int, shape: StepShape) -> float:
    """Seconds the activations of a micro-batch take from stage i to stage i + 1: a row per new
    token, or per sampled row once stage i has passed the cut."""
    st = lane.stages[i]
    rows = shape.tokens if st.cut == len(st.units) else shape.sampled
    return transfer_time(rows * st.out_bytes_per_token, lane.links[i])


def kv_legs(src: SimLane, dst: SimLane, cluster: Cluster, tokens: int) -> tuple[list[float], list[float]]:
    """Seconds each prefill stage and each decode stage is busy moving a prompt's KV (`tokens`
    tokens) between the stages holding the same layers, as runtime/worker.py `move_kv` does: the
    prefill stage reads each layer's rows out of its pool (a copy at its memory bandwidth) and
    sends them without waiting (isend: the wire time is not its own); the decode stage receives
    each layer as one message over the links between them and writes it into its pool."""
    out = [0.0] * len(src.stages)
    into = [0.0] * len(dst.stages)
    for i, a in enumerate(src.stages):
        layers = {u.layer: u.kv_bytes_per_token for u in a.units if u.kv_bytes_per_token}
        for j, b in enumerate(dst.stages):
            for u in b.units:
                if u.kv_bytes_per_token and u.layer in layers:
                    nbytes = tokens * layers[u.layer]
                    out[i] += nbytes / _copy_rate(a.node)
                    into[j] += transfer_time(nbytes, hops(cluster, a.node, b.node)) + nbytes / _copy_rate(b.node)
    return out, into


def _copy_rate(node: Node) -> float:
    """Bytes/s a copy of KV rows reaches on the node's device (read + write: half its bandwidth)."""
    p = node.profile
    return p.memory_bandwidth * p.efficiency.memory / 2
