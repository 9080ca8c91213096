"""Saturation model: what a pipeline placement gives at a batch (DESIGN 'predicted.*').

A pipeline of n stages keeps m = min(n, batch) micro-batches in flight. In one round every
sequence gets one token: each stage runs m decode micro-steps plus its share of prompt
prefills (batch/output_len prompts per round, chunked), each link carries the matching
activations, and one micro-batch must also pass every stage and link in turn. The round
lasts as long as the busiest of these; output tok/s = batch / round.

Disaggregated pools (phase): a decode pipeline runs the same rounds without prefills; a
prefill pipeline keeps one prompt per stage in flight and finishes a prompt every time
its busiest stage or link has done one, so it can feed prompts/s × output_len output
tok/s to decode pipelines (what `output_tok_s` means for it); its KV holds prompts only.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from hetc.cluster import Cluster, Node
from hetc.partitioner.cost_models.analytic import Step, units_time
from hetc.partitioner.cost_models.links import allreduce_time, hops, transfer_time
from hetc.partitioner.cost_models.memory import StageMemory, stage_memory
from hetc.partitioner.units import Unit
from hetc.scheduling import PREFILL_CHUNK, Phase

__all__ = ["Workload", "StagePlan", "StageEstimate", "PipelineEstimate", "Round", "estimate_pipeline", "max_batch",
           "stage_time", "unit_round_costs"]


@dataclass(frozen=True, slots=True)
class Workload:
    input_len: int
    output_len: int
    dtype: str
    kv_dtype: str
    prefill_chunk: int = PREFILL_CHUNK

    @property
    def context(self) -> int:
        return self.input_len + self.output_len

    @property
    def decode_ctx(self) -> float:
        return self.input_len + self.output_len / 2


@dataclass(frozen=True, slots=True)
class StagePlan:
    node: Node
    first: int  # first unit, inclusive
    last: int  # last unit, inclusive
    tp: int = 1


def stage_time(units: list[Unit], node: Node, tp: int, step: "Step", wl: Workload) -> float:
    """One step of a stage: its units on the device (1/tp of the work each) plus, for a
    tensor-parallel group, one all-reduce of the unit's output per unit holding weights."""
    t = units_time(units, node.profile, step, dtype=wl.dtype, kv_dtype=wl.kv_dtype, tp=tp)
    if tp > 1:
        t += sum(allreduce_time(step.total_tokens * u.out_bytes_per_token, tp, node.link) for u in units if u.params)
    return t


@dataclass(frozen=True, slots=True)
class Round:
    """One stage's work per round as this model counts it for a phase: `micro` decode
    micro-steps of `seqs` sequences each, and `prompts` prompts prefilled in `chunks`
    chunks of `chunk` tokens (a prefill pool's round is one prompt)."""

    micro: int
    seqs: float
    prompts: float
    chunks: int
    chunk: float

    @staticmethod
    def of(wl: Workload, batch: int, m: int, phase: Phase = Phase.BOTH) -> "Round":
        chunks = math.ceil(wl.input_len / wl.prefill_chunk)
        prompts = {Phase.BOTH: batch / wl.output_len, Phase.DECODE: 0.0, Phase.PREFILL: 1.0}[phase]
        return Round(0 if phase == Phase.PREFILL else m, batch / m, prompts, chunks, wl.input_len / chunks)

    def link_time(self, out_bytes_per_token: float, path: list) -> float:
        """Seconds a link is busy per round carrying the activations of `out_bytes_per_token`."""
        return (self.micro * transfer_time(self.seqs * out_bytes_per_token, path)
                + self.prompts * self.chunks * transfer_time(self.chunk * out_bytes_per_token, path))


def unit_round_costs(units: list[Unit], node: Node, tp: int, wl: Workload, r: Round) -> tuple[list[float], float]:
    """Per-unit busy seconds of one stage per round `r`, and the stage's fixed overhead per round."""
    memo: dict = {}
    out = []
    for u in units:
        sig = (u.cost_key, u.out_bytes_per_token, bool(u.params))  # what stage_time reads of a unit
        if sig not in memo:
            dec = stage_time([u], node, tp, Step(r.seqs, r.seqs, wl.decode_ctx), wl) if r.micro else 0.0
            pre = stage_time([u], node, tp, Step(r.chunk, 1, wl.input_len / 2), wl) if r.prompts else 0.0
            memo[sig] = r.micro * dec + r.prompts * r.chunks * pre
        out.append(memo[sig])
    return out, node.profile.step_overhead * (r.micro + r.prompts * r.chunks)


@dataclass(frozen=True, slots=True)
class StageEstimate:
    decode_s: float  # one decode micro-step
    prefill_s: float  # one whole prompt
    link_decode_s: float  # activations of one micro-step to the next stage
    link_prefill_s: float
    memory: StageMemory


@dataclass(frozen=True, slots=True)
class PipelineEstimate:
    batch: int
    micro_batches: int
    round_s: float
    output_tok_s: float
    ttft_s: float
    stages: list[StageEstimate]

    @property
    def tpot_s(self) -> float:
        return self.round_s


def _stage_memory(units: list[Unit], sp: StagePlan, batch: int, wl: Workload, last: bool,
                  phase: Phase = Phase.BOTH) -> StageMemory:
    logits = 4.0 * units[-1].out_bytes_per_token / 2 if last else 0.0  # fp32 logits of the last step
    context = wl.input_len if phase == Phase.PREFILL else wl.context
    return stage_memory(units, batch=batch, context=context, prefill_chunk=min(wl.prefill_chunk, wl.input_len),
                        tp=sp.tp, logits_bytes_per_token=logits)


def estimate_pipeline(units: list[Unit], stages: list[StagePlan], cluster: Cluster, wl: Workload,
                      batch: int, phase: Phase = Phase.BOTH) -> PipelineEstimate | None:
    """Throughput and latency of one pipeline at `batch`; None if a stage runs out of memory.

    Args:
        phase: BOTH; DECODE (no prefills); PREFILL (batch = prompts in flight, one per stage).
    """
    if phase == Phase.PREFILL:
        batch = len(stages)
    m = max(1, min(len(stages), batch))
    b = batch / m
    ests = []
    for i, sp in enumerate(stages):
        us = units[sp.first: sp.last + 1]
        prof = sp.node.profile
        mem = _stage_memory(us, sp, batch, wl, i == len(stages) - 1, phase)
        if mem.total > prof.usable_memory:
            return None
        dec = stage_time(us, sp.node, sp.tp, Step(b, b, wl.decode_ctx), wl)
        chunks = math.ceil(wl.input_len / wl.prefill_chunk)
        chunk = wl.input_len / chunks
        pre = chunks * stage_time(us, sp.node, sp.tp, Step(chunk, 1, wl.input_len / 2), wl)
        dec += prof.step_overhead
        pre += chunks * prof.step_overhead
        if i + 1 < len(stages):
            path = hops(cluster, sp.node, stages[i + 1].node)
            out = us[-1].out_bytes_per_token
            ld, lp = transfer_time(b * out, path), chunks * transfer_time(chunk * out, path)
        else:
            ld = lp = 0.0
        ests.append(StageEstimate(dec, pre, ld, lp, mem))
    ttft = sum(e.prefill_s + e.link_prefill_s for e in ests)
    if phase == Phase.PREFILL:
        per_prompt = max(max(e.prefill_s for e in ests), max(e.link_prefill_s for e in ests))
        return PipelineEstimate(batch, m, per_prompt, wl.output_len / per_prompt, ttft, ests)
    prompts_per_round = batch / wl.output_len if phase == Phase.BOTH else 0.0
    busy = max(max(m * e.decode_s + prompts_per_round * e.prefill_s for e in ests),
               max(m * e.link_decode_s + prompts_per_round * e.link_prefill_s for e in ests))
    loop = sum(e.decode_s + e.link_decode_s for e in ests)
    round_s = max(busy, loop)
    return PipelineEstimate(batch, m, round_s, batch / round_s, ttft if phase == Phase.BOTH else 0.0, ests)


def max_batch(units: list[Unit], stages: list[StagePlan], wl: Workload, limit: int = 4096) -> int:
    """Largest batch whose KV and activations fit on every stage (0 if even one sequence does not)."""
    lo, hi = 0, limit
    while lo < hi:
        mid = (lo + hi + 1) // 2
        ok = all(_stage_memory(units[s.first: s.last + 1], s, mid, wl, i == len(stages) - 1).total
                 <= s.node.profile.usable_memory for i, s in enumerate(stages))
        lo, hi = (mid, hi) if ok else (lo, mid - 1)
    return lo
