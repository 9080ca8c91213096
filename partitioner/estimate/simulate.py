"""Saturation model: what a pipeline placement gives at a batch (plan.json's 'predicted.*', docs/plan-json.md).

Steps are formed as the runtime's scheduler forms them (hetc/batching.py, as vLLM, SGLang
and TensorRT-LLM do): a pipeline of n stages keeps m = min(n, batch) micro-batches in flight,
each holding batch/m sequences and at most `prefill_chunk` tokens (hetc/scheduling.py's
PREFILL_CHUNK, the runtime's token budget). Every sequence takes one step per round: one
decode token, or the next chunk of its prompt, packed beside the decode tokens of the same
micro-batch (chunked prefill: one step, weights streamed once). At saturation every freed seat
admits a new prompt at once, so in steady state a seat spends r rounds prefilling (r: the chunks
its prompt needs in the budget the decode tokens leave, or more where prompts queue for the
budget) and output_len − 1 rounds decoding; with every prompt of one length, sequences admitted
in one step finish in one step, so seats free and refill in bursts that fill a step's budget. `Round.of` turns that flow into the steps of a round:
decode-only steps (which backends replay as graphs) and mixed steps. Each stage is busy for its
steps, each link for their activations, and one micro-batch must also pass every stage and link
in turn; the round lasts as long as the busiest of these; output tok/s = outputs per round / round.

Disaggregated pools (phase): a decode pipeline runs the same rounds without prompts; a prefill
pipeline packs whole prompts into each step up to the token budget (longer prompts in chunks),
one micro-batch per stage in flight, and finishes prompts as fast as its busiest stage or link
does them, feeding prompts/s × output_len output tok/s to decode pipelines (what `output_tok_s`
means for it); its KV holds prompts only.

KV: every sequence reserves KV for its whole prompt + output (KV_BLOCK_TOKENS blocks), so the
runtime, given the plan's batch and KV budget, never preempts (TensorRT-LLM's default
GUARANTEED_NO_EVICT capacity policy; vLLM instead pages on demand and preempts, admitting more
sequences in the same memory).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, replace

from hetc.cluster import Cluster, Node
from hetc.partitioner.cost_models.analytic import Step, units_time
from hetc.partitioner.cost_models.links import allreduce_time, alltoall_time, hops, transfer_time
from hetc.partitioner.cost_models.memory import StageMemory, logits_per_token, stage_memory
from hetc.partitioner.capture.units import Unit
from hetc.experts import DEFAULT_IMBALANCE, ExpertLayout, StepBudget
from hetc.kv_blocks import cached_tokens
from hetc.scheduling import KV_BLOCK_TOKENS, PREFILL_CHUNK, Phase

__all__ = [
    "Workload",
    "StagePlan",
    "StageEstimate",
    "PipelineEstimate",
    "Round",
    "decode_share_floor",
    "draft_steps",
    "estimate_pipeline",
    "max_batch",
    "prompts_per_step",
    "stage_time",
    "unit_round_costs",
]


@dataclass(frozen=True, slots=True)
class Workload:
    """The requests a plan is priced for. With a shared prefix (`of`), every prompt's first
    `cached_len` tokens come from the prefix cache in steady state (each group's first request
    misses; not counted): prefill computes the rest (`prefill_len`) over the whole context, a
    sequence holds KV of its own for the rest, and a pipeline that prefills holds the groups'
    prefixes once (`shared_kv`, reserved so that the hits the price assumes stay cached). A decode
    pool holds every prompt whole (its KV arrives from the prefill pool)."""

    input_len: int
    output_len: int
    dtype: str
    kv_dtype: str
    prefill_chunk: int = PREFILL_CHUNK
    cached_len: int = 0  # prompt tokens per request the prefix cache serves (kv_blocks.cached_tokens)
    shared_kv: int = 0  # KV tokens a prefilling pipeline holds once for the shared prefixes
    spec_tokens: int = 0  # speculation: proposals per round K (0: none); a decode step verifies K + 1 tokens per sequence
    spec_yield: float = 1.0  # tokens a sequence gains per verify step (hetc.speculation.expected_tokens_per_round)
    windowed: bool = False  # the engines keep at most a sliding layer's window of K/V (Cluster.windowed_kv, Unit.kv_tokens)
    experts: ExpertLayout = ExpertLayout.TP  # how a TP group of g devices runs MoE layers (hetc/experts.py)
    imbalance: float = DEFAULT_IMBALANCE  # under expert parallelism: the busiest device's routed rows over the mean
    dp_budget: StepBudget = StepBudget.SHARED  # a data-parallel group's step budget: its one, or each rank's (hetc/experts.py)
    dp_ranks: int = 1  # the ranks a micro-step's budget spans: the narrowest stage's data-parallel ranks (`ranked`)

    def __post_init__(self) -> None:
        if self.spec_tokens < 0 or not 1.0 <= self.spec_yield <= self.spec_tokens + 1:
            raise ValueError(f"speculation: {self.spec_yield} tokens per round is outside [1, K + 1] for K = {self.spec_tokens}")
        if self.imbalance < 1.0:
            raise ValueError(f"expert imbalance {self.imbalance} is below 1 (the busiest device's load over the mean)")

    @staticmethod
    def of(
        input_len: int,
        output_len: int,
        dtype: str,
        kv_dtype: str,
        prefix_len: int = 0,
        prefix_groups: int = 1,
        windowed: bool = False,
        experts: ExpertLayout = ExpertLayout.TP,
        imbalance: float = DEFAULT_IMBALANCE,
    ) -> "Workload":
        """A workload whose prompts begin with one of `prefix_groups` shared prefixes of `prefix_len` tokens."""
        cached = cached_tokens(input_len, prefix_len)
        return Workload(
            input_len, output_len, dtype, kv_dtype, cached_len=cached, shared_kv=cached * prefix_groups, windowed=windowed, experts=experts, imbalance=imbalance
        )

    @property
    def step_budget(self) -> int:
        """The most tokens one micro-step of the pipeline takes: `prefill_chunk` per rank of its narrowest stage."""
        return self.prefill_chunk * self.dp_ranks

    def ranked(self, tp: int) -> "Workload":
        """The workload as a pipeline whose narrowest stage is a group of `tp` devices schedules it: with
        data-parallel attention and engines that give each rank its own budget, a micro-step spreads its
        sequences over the stage's `tp` ranks and takes `tp` × `prefill_chunk` tokens (memory is still sized
        per rank at `prefill_chunk`); else one budget."""
        ranks = tp if self.dp_budget == StepBudget.PER_RANK and self.layout(tp).data_parallel else 1
        return self if ranks == self.dp_ranks else _ranked(self, ranks)

    def layout(self, tp: int) -> ExpertLayout:
        """How a group of `tp` devices runs the MoE layers: the workload's layout, or `tp` for one device (every layout alike)."""
        return self.experts if tp > 1 else ExpertLayout.TP

    def kv_bytes(self, units: list[Unit], tokens: float) -> float:
        """K/V bytes `units` keep for `tokens` tokens of one sequence (a sliding layer's window at most, where kept so)."""
        return sum(u.kv_bytes(tokens, self.windowed) for u in units)

    @property
    def context(self) -> int:
        return self.input_len + self.output_len

    @property
    def prefill_len(self) -> int:
        """Prompt tokens prefill computes per request."""
        return self.input_len - self.cached_len

    @property
    def prefill_ctx(self) -> float:
        """The mean context a computed prompt token attends (the cached prefix included)."""
        return self.cached_len + self.prefill_len / 2

    def kv_tokens(self, phase: Phase = Phase.BOTH) -> int:
        """KV tokens one sequence holds of its own, in whole blocks: its prompt (a prefill pool) or
        prompt + output, less the cached prefix it shares (not in a decode pool)."""
        own = math.ceil((self.input_len if phase == Phase.PREFILL else self.context) / KV_BLOCK_TOKENS) * KV_BLOCK_TOKENS
        return own if phase == Phase.DECODE else own - self.cached_len

    def shared_tokens(self, phase: Phase = Phase.BOTH) -> int:
        """KV tokens a pipeline of `phase` holds once, for the shared prefixes."""
        return 0 if phase == Phase.DECODE else self.shared_kv

    @property
    def decode_ctx(self) -> float:
        return self.input_len + self.output_len / 2

    @property
    def decode_rows(self) -> int:
        """Tokens a decoding sequence puts in a step: 1, or K + 1 in a verify step."""
        return 1 + self.spec_tokens

    @property
    def decode_steps(self) -> float:
        """Decode steps a sequence takes after its prompt's step gave the first token (expected,
        with speculation: every verify step gains `spec_yield` tokens)."""
        return (self.output_len - 1) / self.spec_yield

    def decode_step(self, seqs: float) -> Step:
        """A decode-only step of `seqs` sequences at the mean decode context."""
        return Step(seqs * self.decode_rows, seqs, self.decode_ctx, spec=self.spec_tokens)


@functools.cache
def _ranked(wl: Workload, ranks: int) -> Workload:
    return replace(wl, dp_ranks=ranks)


@dataclass(frozen=True, slots=True)
class StagePlan:
    node: Node
    first: int  # first unit, inclusive
    last: int  # last unit, inclusive
    tp: int = 1


def stage_time(units: list[Unit], node: Node, tp: int, step: "Step", wl: Workload) -> float:
    """One step of a stage: its units on the device (1/tp of the work each) plus, for a
    tensor-parallel group, one all-reduce of the unit's output per unit holding weights (inside
    the recorded graph where the backend replays the step). A draft model's units (Unit.draft)
    do the drafter's share of the step instead (`draft_steps`); its first unit also carries the
    per-step overhead of the drafter's steps beyond one (so the bounds, additive over units, count it)."""
    target = [u for u in units if not u.draft]
    t = _step_time(target, node, tp, step, wl) if target else 0.0
    if len(target) < len(units):
        draft = [u for u in units if u.draft]
        t += sum(n * _step_time(draft, node, tp, s, wl) for n, s in draft_steps(step))
        if any(u.index == 0 for u in draft):
            t += (_engine_steps(step) - 1) * node.profile.step_overhead
    return t


def _engine_steps(step: Step) -> int:
    """Steps a drafter runs for one target step."""
    return sum(n for n, _ in draft_steps(step))


def _step_time(units: list[Unit], node: Node, tp: int, step: "Step", wl: Workload) -> float:
    """One step of `units` on a group of `tp` devices in the workload's expert layout (hetc/experts.py):
    its units' time and its collectives — one all-reduce per unit holding weights, or, data-parallel,
    an MoE unit's dispatch and combine all-to-alls (the busiest device's share of the routed tokens)."""
    lay = wl.layout(tp)
    dp = tp if lay.data_parallel else 1
    ep = tp if lay != ExpertLayout.TP else 1
    imbalance = wl.imbalance if ep > 1 else 1.0  # one cost-parameter set for every layout of no expert parallelism
    t = units_time(units, node.profile, step, dtype=wl.dtype, kv_dtype=wl.kv_dtype, tp=tp // dp, windowed=wl.windowed, ep=ep, dp=dp, imbalance=imbalance)
    if tp == 1:
        return t
    if dp > 1:
        routed = step.total_tokens / tp * wl.imbalance  # the busiest device's routed tokens
        return t + sum(2 * alltoall_time(routed * u.moe["top_k"] * u.out_bytes_per_token, tp, node.link) for u in units if u.moe)
    ex = node.profile.execution
    reduce = sum(allreduce_time(step.total_tokens * u.out_bytes_per_token, tp, node.link, ex.replays(step.decode_only)) for u in units if u.params)
    return t + (reduce * ex.collective if ex.collective != 1.0 else reduce)  # the engine's collective path (hetc/engine.py)


def draft_steps(step: Step) -> tuple[tuple[int, Step], ...]:
    """The draft model's work for one target step: for a verify step of K proposals, K draft steps
    of one token per decoding sequence, the first also prefilling the step's prompt chunks (a
    drafter keeps its own KV of every prompt); for any other step, the same step."""
    if not step.spec:
        return ((1, step),)
    one = Step(step.seqs, step.seqs, step.ctx)
    first = Step(step.seqs, step.seqs, step.ctx, step.prefill) if step.prefill is not None else one
    return ((1, first), (step.spec - 1, one)) if step.spec > 1 else ((1, first),)


@dataclass(frozen=True, slots=True)
class Round:
    """One stage's work per round as this model counts it for a phase: `steps`, each step kind
    with how many of it a round holds. A round is the time the pipeline takes to generate one
    token per sequence in flight (`batch` tokens; a prefill pool's round is one prompt, feeding
    output_len tokens), so tok/s = batch / round everywhere. Seats that spend rounds prefilling
    or waiting for the token budget make a round longer than a decoding sequence's time between
    tokens: `tpot_share` is that time as a share of the round."""

    steps: tuple[tuple[float, Step], ...]
    tpot_share: float = 1.0

    @staticmethod
    def of(wl: Workload, batch: int, m: int, phase: Phase = Phase.BOTH) -> "Round":
        """The round of a pipeline of `batch` sequences in `m` micro-batches (a prefill pool: per prompt)."""
        if phase == Phase.PREFILL:
            return _prefill_round(wl)
        k = max(m, math.ceil(batch * wl.decode_rows / wl.step_budget))  # micro-steps per pass: each within the token budget
        return Round.at(wl, k, batch / k, phase)

    @staticmethod
    def at(wl: Workload, k: int, b: float, phase: Phase = Phase.BOTH) -> "Round":
        """The round of k micro-steps per pass of `b` seats each (pipelines that prefill and decode, or
        decode pools): k times a round of one micro-step of `b` seats, so tok/s per stage depends on `b`
        alone (budget_floor.py)."""
        rows, dec_ctx = wl.decode_rows, wl.decode_ctx
        decode = wl.decode_step(b)
        if phase == Phase.DECODE:
            return Round(((k, decode),), 1 / wl.spec_yield)
        life, chunks = _seat_life(wl, b)
        q = b / life  # prompts admitted per micro-step
        d = b * wl.decode_steps / life  # decoding seats per micro-step
        # sequences admitted together finish together, so freed seats refill in bursts: a step that
        # takes prompts fills the budget the decode tokens leave (and holds every seat not decoding)
        mixed = min(1.0, max(q * wl.prefill_len / (wl.step_budget - d * rows), 1 - d / b))
        decode_seqs = (d - (1 - mixed) * b) / mixed  # the step's other seats prefill, or wait for the budget
        step = Step.mixed(decode_seqs, dec_ctx, q * wl.prefill_len / mixed, q * chunks / mixed, wl.prefill_ctx, wl.spec_tokens)
        # a pass of k micro-steps gives every seat one step, but only 1 + decode_steps of a seat's
        # `life` steps generate tokens (output_len in all): a round (batch tokens) is life / output_len
        # passes, and a decoding seat gains spec_yield tokens per pass
        passes = life / wl.output_len
        mix = ((k * (1 - mixed) * passes, decode), (k * mixed * passes, step)) if mixed < 1 else ((k * passes, step),)
        return Round(mix, 1 / passes / wl.spec_yield)

    @property
    def messages(self) -> float:
        """Steps per round: each sends its activations to the next stage once."""
        return sum(n for n, _ in self.steps)

    @property
    def tokens(self) -> float:
        """Tokens per round, every step's rows together (what the links carry per byte of a token)."""
        return sum(n * s.total_tokens for n, s in self.steps)

    def link_time(self, out_bytes_per_token: float, path: list) -> float:
        """Seconds a link is busy per round carrying the activations of `out_bytes_per_token`."""
        return sum(n * transfer_time(s.total_tokens * out_bytes_per_token, path) for n, s in self.steps)


def _seat_life(wl: Workload, b: float) -> tuple[float, int]:
    """Rounds a seat holds a sequence at `b` seats per micro-step, and the chunks its prompt is
    prefilled in: the fewest chunks r that fit the budget the decode tokens leave
    (ceil(input / (budget − decode tokens)) ≤ r, one chunk per round); the seat's life is r +
    decode_steps rounds (output − 1 without speculation), or longer where the prompts admitted per micro-step exceed that budget
    (seats then wait for it, prefilling nothing, and every step carries `prefill_chunk` tokens)."""
    inp, dec, rows, budget = wl.prefill_len, wl.decode_steps, wl.decode_rows, wl.step_budget
    r = 1
    while True:
        spare = budget - b * rows * dec / (r + dec)  # a prompt's chunk fits one rank's share of it
        if spare > 0 and math.ceil(inp * wl.dp_ranks / spare) <= r:
            break
        r += 1
    return max(r + dec, b * (inp + rows * dec) / budget), r


def decode_share_floor(wl: Workload) -> float:
    """The least share of a seat's steps in which it decodes (verifies, speculating), over every
    number of seats per micro-step a round holds (at most prefill_chunk / decode_rows): its decode
    steps over its life, which grows with the seats (`_seat_life`). Every other step of a round
    has a decode part too, or is a prompt's alone (Round.of)."""
    return wl.decode_steps / _seat_life(wl, wl.step_budget / wl.decode_rows)[0]


def _prefill_round(wl: Workload) -> Round:
    """A prefill pool's work per prompt: whole prompts packed up to the token budget per step, or
    one prompt in equal chunks where it is longer than the budget (a rank's: each data-parallel rank
    prefills its own prompts, `prompts_per_step` of them together)."""
    per_step = prompts_per_step(wl)
    chunks = math.ceil(wl.prefill_len / wl.prefill_chunk) if per_step == wl.dp_ranks else 1
    return Round(((chunks / per_step, Step(per_step * wl.prefill_len / chunks, per_step, wl.prefill_ctx)),))


def prompts_per_step(wl: Workload) -> int:
    """Whole prompts a prefill pool's step takes: as many as fit a rank's budget (at least 1), on each rank."""
    return wl.dp_ranks * max(1, wl.prefill_chunk // wl.prefill_len)


def cost_signature(u: Unit) -> tuple:
    """What stage_time reads of a unit: units with one signature cost the same."""
    return (u.cost_key, u.out_bytes_per_token, bool(u.params), True) if u.draft else (u.cost_key, u.out_bytes_per_token, bool(u.params))


def unit_round_costs(units: list[Unit], node: Node, tp: int, wl: Workload, r: Round, steps: dict | None = None) -> tuple[list[float], float]:
    """Per-unit busy seconds of one stage per round `r`, and the stage's fixed overhead per round.

    Additive over units: a stage's busy time per round is the sum over its units plus the fixed part.

    Args:
        steps: a cache of one unit's stage time per (cost signature, step), for this node and tp
            only (rounds of other batches share steps: the caller keeps it across calls).
    """
    memo: dict = {}
    steps = {} if steps is None else steps
    out = []
    for u in units:
        sig = cost_signature(u)
        if sig not in memo:
            for _, step in r.steps:
                if (sig, step) not in steps:
                    steps[(sig, step)] = stage_time([u], node, tp, step, wl)
            memo[sig] = sum(n * steps[(sig, step)] for n, step in r.steps)
        out.append(memo[sig])
    return out, node.profile.step_overhead * r.messages


@dataclass(frozen=True, slots=True)
class StageEstimate:
    decode_s: float  # one decode-only micro-step
    prefill_s: float  # one whole prompt alone (its chunks, or its packed step in a prefill pool)
    link_decode_s: float  # activations of one decode micro-step to the next stage
    link_prefill_s: float  # of one whole prompt
    busy_s: float  # busy seconds per round (a prefill pool: per prompt), fixed overheads included
    link_s: float  # the link to the next stage, busy seconds per round
    memory: StageMemory


@dataclass(frozen=True, slots=True)
class PipelineEstimate:
    batch: int
    micro_batches: int
    round_s: float
    output_tok_s: float
    ttft_s: float
    stages: list[StageEstimate]
    tpot_s: float  # a decoding sequence's time between tokens (the round less its prefill and waiting share)


def _stage_memory(units: list[Unit], sp: StagePlan, batch: int, wl: Workload, last: bool, phase: Phase = Phase.BOTH) -> StageMemory:
    logits = logits_per_token(units) if last else 0.0  # fp32 logits of the last step
    return stage_memory(
        units,
        batch=batch,
        context=wl.kv_tokens(phase),
        prefill_chunk=min(wl.prefill_chunk, wl.input_len),  # a group's first prompt misses the cache
        tp=sp.tp,
        logits_bytes_per_token=logits,
        shared_tokens=wl.shared_tokens(phase),
        windowed=wl.windowed,
        layout=wl.experts,
    )


def _busy(us: list[Unit], sp: StagePlan, steps: tuple[tuple[float, Step], ...], wl: Workload) -> float:
    """Seconds a stage is busy for `steps` (how many of each), its per-step overhead included: once
    per step, and once per further draft step where it holds draft units but not the drafter's first
    (stage_time charges those to that unit). A drafter beside a target stage proposes inside the
    engine step that verified (as vLLM runs it): one overhead for both, then one per further draft step."""
    drafts = [u for u in us if u.draft]
    first = any(u.index == 0 for u in drafts)

    def overheads(step: Step) -> int:
        return 1 + (_engine_steps(step) - 1 if drafts and not first else 0)

    return sum(k * (stage_time(us, sp.node, sp.tp, step, wl) + sp.node.profile.step_overhead * overheads(step)) for k, step in steps)


def estimate_pipeline(
    units: list[Unit], stages: list[StagePlan], cluster: Cluster, wl: Workload, batch: int, phase: Phase = Phase.BOTH
) -> PipelineEstimate | None:
    """Throughput and latency of one pipeline at `batch`; None if a stage runs out of memory.

    Args:
        phase: BOTH; DECODE (no prefills); PREFILL (batch = prompts in flight: one packed step per stage).
    """
    n = len(stages)
    wl = wl.ranked(min(sp.tp for sp in stages))  # a micro-step's budget: its narrowest stage's ranks
    if phase == Phase.PREFILL:
        batch = n * prompts_per_step(wl)
    m = max(1, min(n, batch))
    r = Round.of(wl, batch, m, phase)
    b = batch / m
    chunks = math.ceil(wl.prefill_len / wl.prefill_chunk)  # one prompt alone: on one rank
    alone = r.steps if phase == Phase.PREFILL else ((chunks, Step(wl.prefill_len / chunks, 1, wl.prefill_ctx)),)
    scale = prompts_per_step(wl) if phase == Phase.PREFILL else 1  # a packed step finishes all its prompts at once
    ests = []
    for i, sp in enumerate(stages):
        us = units[sp.first : sp.last + 1]
        mem = _stage_memory(us, sp, batch, wl, i == n - 1, phase)
        if mem.total > sp.node.profile.usable_memory:
            return None
        dec = _busy(us, sp, ((1, wl.decode_step(b)),), wl)
        pre = _busy(us, sp, alone, wl) * scale
        path = hops(cluster, sp.node, stages[i + 1].node) if i + 1 < n else []
        out = us[-1].out_bytes_per_token
        ld = transfer_time(b * wl.decode_rows * out, path) if path else 0.0
        lp = sum(k * transfer_time(step.total_tokens * out, path) for k, step in alone) * scale if path else 0.0
        ests.append(StageEstimate(dec, pre, ld, lp, _busy(us, sp, r.steps, wl), r.link_time(out, path) if path else 0.0, mem))
    if phase == Phase.PREFILL:
        per_prompt = max(max(e.busy_s for e in ests), max(e.link_s for e in ests))
        ttft = sum(e.prefill_s + e.link_prefill_s for e in ests)
        return PipelineEstimate(batch, m, per_prompt, wl.output_len / per_prompt, ttft, ests, per_prompt)
    loop = sum(e.busy_s + e.link_s for e in ests) / m  # each micro-batch passes every stage and link in turn
    round_s = max(max(e.busy_s for e in ests), max(e.link_s for e in ests), loop)
    ttft = sum(e.prefill_s + e.link_prefill_s for e in ests) if phase == Phase.BOTH else 0.0
    return PipelineEstimate(batch, m, round_s, batch / round_s, ttft, ests, round_s * r.tpot_share)


def max_batch(units: list[Unit], stages: list[StagePlan], wl: Workload, limit: int = 4096) -> int:
    """Largest batch whose KV and activations fit on every stage (0 if even one sequence does not)."""
    lo, hi = 0, limit
    while lo < hi:
        mid = (lo + hi + 1) // 2
        ok = all(
            _stage_memory(units[s.first : s.last + 1], s, mid, wl, i == len(stages) - 1).total <= s.node.profile.usable_memory for i, s in enumerate(stages)
        )
        lo, hi = (mid, hi) if ok else (lo, mid - 1)
    return lo
