"""Analytic cost model: a roofline per op with the profile's achievable efficiencies.

For each op of a unit (identical ops grouped, see `op_records`), on one device of a
tensor-parallel group of `tp` (each holding 1/tp of the work):
    compute = FLOPs / (peak[dtype] · e)      e: the profile's efficiency for this op's shape
    memory  = bytes / (bandwidth · e_mem)     weights and KV stream; activations by op size
    time    = max(compute, memory) + (1 − overlap) · min(compute, memory)
and the unit pays per-kernel costs as its backend runs it (`Profile.execution`, hetc/execution.py):
its kernels are the exported ops, or the fused kernels of `Unit.fused` where the backend fuses
like the serving engines; each costs `kernel_overhead` on the device; a step the backend
replays as a recorded graph (CUDA/HPU graphs) pays no host launch, otherwise each kernel costs
`launch_overhead` on the host — beside the device time where the host runs the ops itself
(`launch: sync`, CPU eager), or overlapped with it where the host only enqueues them (`async`:
the unit costs the longer of its device time and its launches). Matmuls take e from `efficiency_curves.matmul`
by GEMM rows M and weight size N·K, attention by query tokens per sequence and context (decode: by the
step's sequences and context where the profile has `attention_decode`), element-wise ops
from `efficiency_curves.memory` by bytes moved (or the op's own curve, or its kind's: silu is
bound by arithmetic on a CPU; a gather by its bytes per row); where the profile has no
curve its scalar `efficiency` applies. Decode attention reads each sequence's K/V for its
context (GQA-aware: the K/V bytes are the cache's, before any head expansion). A MoE op streams only the experts
its tokens touch, in one grouped kernel as engines run it: a GEMM of the rows per touched expert
over all the expert weights a device holds (expert layouts: hetc/experts.py). Every
efficiency and overhead comes from the profile (with its source), none from code.

A step may be mixed (`Step.mixed`): decode sequences and prompt chunks in one batch, as the
schedulers of vLLM, SGLang, TensorRT-LLM and hetc's runtime form them (chunked prefill). Its
token-wise ops run over every row at once (a GEMM streams its weights once for both parts),
its attention costs each part at its own query length and context, and each kernel launches once.

The per-step host overhead (`step_overhead`) is added by the caller once per step, and the
all-reduce of a tensor-parallel group by the caller too (it needs the node's link).
"""

from __future__ import annotations

import math
from functools import lru_cache
from typing import Any

from dataclasses import dataclass, field

from hetc.cluster import Profile
from hetc.execution import Execution
from hetc.partitioner.cost_models.curves import LogCurve, LogTable
from hetc.partitioner.capture.op_records import OpRecord
from hetc.partitioner.capture.terms import LatentAttention, Terms
from hetc.partitioner.capture.units import Unit

__all__ = ["Step", "CostParams", "compute_dtype", "cost_params", "op_time", "unit_time", "units_time"]

SPREAD_ROWS = 64.0  # mean rows per expert from which per-expert GEMMs are priced at the mean (_spread_efficiency)
_MEMO_LIMIT = 200_000  # cached unit times per parameter set before the cache is dropped


@dataclass(frozen=True, slots=True)
class Step:
    """One engine step of a stage: `seqs` sequences of tokens/seqs new tokens each, attending
    to a mean context of `ctx`, and optionally a prefill part batched into the same step
    (chunked prefill: the scheduler mixes prompt chunks with decode tokens, so the matmuls run
    over every row with their weights streamed once, and attention runs per part).

    Args:
        tokens: new tokens processed (prefill chunk length × sequences, or decode batch).
        seqs: sequences in the step.
        ctx: mean context length each new token attends to (for prefill of a fresh prompt
            of T tokens with causal attention this is ≈ T/2).
        prefill: a mixed step's prompt chunks (their tokens, sequences and token-weighted mean
            context); None for a step of one kind.
        spec: a speculative verify step: the decode part checks `spec` proposals per sequence,
            so it holds spec + 1 tokens of each (hetc/speculation.py); 0 otherwise.
    """

    tokens: float
    seqs: float
    ctx: float
    prefill: Step | None = None
    spec: int = 0

    def __post_init__(self) -> None:
        if self.prefill is not None and self.prefill.prefill is not None:
            raise ValueError("a mixed step has one prefill part")

    @property
    def decode_only(self) -> bool:
        """One new token per sequence (spec + 1 in a verify step: the uniform query length vLLM
        captures graphs for) and no prompt part: the steps engines replay as graphs."""
        return self.prefill is None and self.tokens <= self.seqs * (1 + self.spec)

    @staticmethod
    def mixed(decode_seqs: float, decode_ctx: float, prefill_tokens: float, prefill_seqs: float, prefill_ctx: float, spec: int = 0) -> Step:
        """A step of `decode_seqs` decoding sequences (spec + 1 tokens each: a verify step's)
        plus `prefill_seqs` prompt chunks of `prefill_tokens` tokens together (either side may be empty)."""
        rows = decode_seqs * (1 + spec) if spec else decode_seqs
        if not prefill_tokens:
            return Step(rows, decode_seqs, decode_ctx, spec=spec)
        part = Step(prefill_tokens, prefill_seqs, prefill_ctx)
        return Step(rows, decode_seqs, decode_ctx, part, spec) if decode_seqs else part

    @property
    def parts(self) -> tuple[Step, ...]:
        """The step's parts of one kind each (itself when it is not mixed)."""
        if self.prefill is None:
            return (self,)
        return (Step(self.tokens, self.seqs, self.ctx), self.prefill)

    @property
    def total_tokens(self) -> float:
        """Rows every token-wise op (matmuls, element-wise, norms) processes."""
        return self.tokens + (self.prefill.tokens if self.prefill is not None else 0.0)


def _at(terms: Terms, step: Step) -> float:
    """`terms` over every part of `step` (the constant once)."""
    return terms.const + sum(terms.per_token * p.tokens + terms.per_token_ctx * p.tokens * p.ctx for p in step.parts)


def compute_dtype(profile: Profile, dtype: str) -> str:
    """The dtype whose peak applies to `dtype` on this device (itself or its substitute).

    Raises:
        KeyError: the profile names neither (`Cluster.require_flops` reports that as bad input first).
    """
    cd = profile.compute_dtype(dtype)
    if cd is None:
        raise KeyError(f"{profile.name} has no peak_flops for {dtype} or a substitute")
    return cd


@dataclass(slots=True)
class CostParams:
    """What the model reads from a profile for one compute dtype and TP degree, prepared once."""

    profile: Profile
    dtype: str
    tp: int
    ep: int  # routed experts whole over `ep` devices (1: split like the rest over tp)
    dp: int  # the token-wise work split over `dp` devices by sequence (data-parallel attention), the routed experts' excepted
    imbalance: float  # under ep > 1: the busiest device's routed rows over the mean
    peak: float
    bandwidth: float
    eff_matmul: float
    eff_memory: float
    overlap: float
    launch: float
    execution: Execution
    matmul: LogTable | None
    attention: LogTable | None
    attention_decode: LogTable | None
    decode_kv_basis: bool  # attention_decode is a share of memory bandwidth over the K/V read, not of peak FLOP/s
    memory: LogCurve | None
    memory_kinds: dict[str, LogCurve]
    memory_ops: dict[str, LogCurve]
    gather: LogTable | None
    eff_experts: float = 1.0  # the routed experts' GEMMs at this share of the dense GEMM efficiency (Efficiency.experts)
    memo: dict = field(default_factory=dict)  # Step -> {unit cost_key: seconds}


_PARAMS: dict[tuple, CostParams] = {}


def cost_params(profile: Profile, dtype: str, tp: int = 1, ep: int = 1, dp: int = 1, imbalance: float = 1.0) -> CostParams:
    """The prepared parameters of `profile` for weights of `dtype` on a TP group of `tp` (cached): with
    `ep` > 1 the routed experts lie whole over ep devices, with `dp` > 1 the rest runs per device on
    1/dp of the step's sequences (hetc/experts.py's layouts)."""
    key = (id(profile), dtype, tp, ep, dp, imbalance)
    cp = _PARAMS.get(key)
    if cp is not None and cp.profile is profile:
        return cp
    if len(_PARAMS) > 256:
        _PARAMS.clear()
    cd: Any = compute_dtype(profile, dtype)  # a dtype name: the curves and peaks key on its Literal
    curves = profile.efficiency_curves
    mm = curves.matmul.get(cd) if curves else None
    at = curves.attention.get(cd) if curves else None
    ad = curves.attention_decode.get(cd) if curves else None
    cp = CostParams(
        profile=profile,
        dtype=cd,
        tp=tp,
        ep=ep,
        dp=dp,
        imbalance=imbalance,
        peak=profile.peak_flops[cd],
        bandwidth=profile.memory_bandwidth,
        eff_matmul=profile.efficiency.matmul_for(cd),
        eff_memory=profile.efficiency.memory,
        overlap=profile.efficiency.overlap,
        launch=profile.launch_overhead,
        execution=profile.execution,
        matmul=LogTable(mm) if mm else None,
        attention=LogTable(at) if at else None,
        attention_decode=LogTable(ad) if ad else None,
        decode_kv_basis=ad is not None and ad.basis == "kv_bytes",
        memory=LogCurve(curves.memory) if curves and curves.memory else None,
        memory_kinds={k: LogCurve(c) for k, c in curves.memory_kinds.items()} if curves else {},
        memory_ops={k: LogCurve(c) for k, c in curves.memory_ops.items()} if curves else {},
        gather=LogTable(curves.gather) if curves and curves.gather else None,
        eff_experts=profile.efficiency.experts,
    )
    _PARAMS[key] = cp  # holds the profile, so its id is not reused while cached
    return cp


def _expert_fraction(experts: int, top_k: int, tokens: float) -> float:
    """Expected share of experts a step touches: 1 − (1 − k/E)^tokens."""
    return 1.0 - (1.0 - top_k / experts) ** max(tokens, 1.0)


@lru_cache(maxsize=_MEMO_LIMIT)
def _spread_efficiency(curve: LogTable, tokens: float, p: float, nk: float, rows: float) -> float:
    """The efficiency a step's per-expert GEMMs run at together: each expert's GEMM has its own count of
    the step's rows, Binomial(tokens, p = k/E) under uniform routing, and runs at that count's efficiency.
    Time is FLOPs / efficiency, so the experts' FLOPs run at the row-weighted harmonic mean
    E[m] / E[m / eff(m)]: at a few rows per expert the curve bends (a 32-token step's experts hold
    0–10 rows where the mean is 4). Past SPREAD_ROWS the spread is small beside the mean: the touched
    experts' mean `rows` stands."""
    if tokens <= 1.0 or tokens * p >= SPREAD_ROWS:
        return curve(rows, nk)
    top = min(math.floor(tokens), math.ceil(tokens * p + SPREAD_ROWS))  # the mean's sd is under √SPREAD_ROWS: 8 sd and more
    base = math.lgamma(tokens + 1.0)
    num = den = 0.0
    for m in range(1, top + 1):  # the count's pmf at real `tokens` (a mean step's), through the gamma function
        w = m * math.exp(base - math.lgamma(m + 1.0) - math.lgamma(tokens - m + 1.0) + m * math.log(p) + (tokens - m) * math.log1p(-p))
        num += w
        den += w / curve(m, nk)
    return num / den


def _combine(compute: float, memory: float, overlap: float) -> float:
    hi, lo = (compute, memory) if compute >= memory else (memory, compute)
    return hi + (1.0 - overlap) * lo


def op_time(op: OpRecord, cp: CostParams, step: Step, kv_bytes_per_token: float = 0.0) -> float:
    """Seconds for one of the `op.count` identical ops, without its launch overhead.

    Args:
        op: the op's record.
        cp: prepared profile parameters (`cost_params`).
        step: the engine step.
        kv_bytes_per_token: attention only: K+V bytes per context token at the KV-cache dtype.
    """
    tp = cp.tp
    if op.kind == "noop":
        return 0.0
    if op.kind == "attention":  # one kernel over every part, each part at its own query length and context
        return sum(_attention_time(op, cp, part, kv_bytes_per_token) for part in step.parts)
    t = step.total_tokens
    act = _at(op.act_bytes, step) / tp
    stream = cp.bandwidth * cp.eff_memory
    if op.kind in ("matmul", "conv", "moe"):
        flops = _at(op.flops, step) / tp
        weights = op.weight_bytes / tp
        rows, nk = op.rows(t), op.nk / tp
        routed = op.kind == "moe" and bool(op.experts)
        spread = 0.0  # per-expert GEMMs: each expert's rows are its own, Binomial(tokens, k/E) (_spread_efficiency)
        if routed:
            share = _expert_fraction(op.experts, op.top_k, t)
            rows = max(t * op.top_k / (op.experts * share), 1.0)  # rows per touched expert
            if cp.ep > 1:  # E/ep experts whole on each device: the busiest one's routed rows, its own touched experts
                flops, act = _at(op.flops, step) / cp.ep * cp.imbalance, _at(op.act_bytes, step) / cp.ep * cp.imbalance
                weights = op.weight_bytes / cp.ep * share
            else:
                weights *= share
            # grouped (vLLM's fused_moe, DeepGEMM's grouped GEMMs): one GEMM of the rows per expert over all the expert
            # weights this device holds, read at every expert's weights, not the touched share's, so that only the rows
            # move with the batch (envelope.py's running maximum along the rows keeps the bound's costs per sequence
            # nonincreasing); per-expert (torch's CPU grouped_mm): one GEMM per touched expert, at its own weight
            if cp.execution.experts == "grouped":
                nk = op.nk * op.experts / max(tp, cp.ep)
            else:  # one expert's weight: split over the group (tp layout) or whole (expert-parallel)
                nk, spread = op.nk / (tp if cp.ep == 1 else 1), op.top_k / op.experts
        if not (cp.matmul and nk > 0):
            e = cp.eff_matmul
        else:
            e = _spread_efficiency(cp.matmul, t, spread, nk, rows) if spread else cp.matmul(rows, nk)
        if routed and cp.ep > 1 and cp.matmul and nk > 0:
            # the busiest device's rows per expert grow by the imbalance; its GEMM runs at most that much more efficiently
            e = min(cp.matmul(rows * cp.imbalance, nk), e * cp.imbalance)
        if routed:  # the engine's MoE kernels beside its dense GEMMs at the same rows (1 unless its figures say)
            e *= cp.eff_experts
        return _combine(flops / (cp.peak * e), (weights + act) / stream, cp.overlap)
    # element-wise, norms, copies, gathers: bytes at the bandwidth an op of this size reaches
    nbytes = act + op.weight_bytes / tp
    if op.kind == "gather" and cp.gather:  # one random row per token: its size sets how well it streams
        e = cp.gather(max(t, 1.0), op.act_bytes.per_token / tp or nbytes)
    else:
        curve = cp.memory_ops.get(op.op) or cp.memory_kinds.get(op.kind) or cp.memory
        e = curve(nbytes) if curve else cp.eff_memory
    compute = _at(op.other_flops, step) / tp / (cp.peak * cp.eff_matmul)
    return _combine(compute, nbytes / (cp.bandwidth * e), cp.overlap)


def _attention_time(op: OpRecord, cp: CostParams, part: Step, kv_bytes_per_token: float) -> float:
    """Attention of one part of a step: K/V of every sequence's context streamed, at the
    efficiency of its query tokens per sequence (1 in decode) and context."""
    t, ctx, tp = part.tokens, part.ctx, cp.tp
    act = op.act_bytes.at(t, ctx) / tp
    flops = op.flops.at(t, ctx) / tp
    if op.latent is not None:
        return _latent_time(op.latent, cp, part, act, flops, kv_bytes_per_token * part.seqs * ctx)
    return _heads_time(cp, part, act, flops, kv_bytes_per_token * part.seqs * ctx / tp)


def _latent_time(mla: LatentAttention, cp: CostParams, part: Step, act: float, flops: float, latents: float) -> float:
    """Multi-head latent attention of one part as engines run it (vllm/v1/attention/backends/mla/common.py:
    SGLang's and TensorRT-LLM's MLA, hetc's runtime/kv_cache.py likewise): a decode part attends the
    latents themselves, the up-projections absorbed into its queries and output; a prompt chunk
    up-projects its cached context and runs the export's multi-head attention over the up-projected keys
    and values (the new tokens' up-projection is the export's kv_b_proj, priced as its own GEMM). Every
    rank of a TP group reads every latent (`latents` bytes) and runs its share of the heads."""
    tp, seqs = cp.tp, max(part.seqs, 1.0)
    q = part.tokens / seqs
    stream = cp.bandwidth * cp.eff_memory
    if q <= 1.0:
        e = cp.attention(q, part.ctx) if cp.attention else cp.eff_matmul
        return _combine(mla.absorbed_flops(part.tokens, part.ctx) / tp / (cp.peak * e), (latents + act) / stream, cp.overlap)
    cached = seqs * max(part.ctx - q / 2, 0.0)  # ctx is the tokens' mean: q new tokens after C cached ones see C + q/2
    nk = mla.rank * mla.heads * (mla.nope + mla.v) / tp
    e = cp.matmul(cached, nk) if cp.matmul and cached > 0 else cp.eff_matmul
    up = mla.expanded_bytes(seqs * part.ctx) / tp  # written by the up-projection, read by the attention
    expand = _combine(mla.expand_flops(cached) / tp / (cp.peak * e), (latents + up) / stream, cp.overlap) if cached else 0.0
    return expand + _heads_time(cp, part, act, flops, up)


def _heads_time(cp: CostParams, part: Step, act: float, flops: float, kv: float) -> float:
    """Attention over K/V of `kv` bytes per device, at the efficiency of the part's query tokens per
    sequence and context."""
    t, ctx = part.tokens, part.ctx
    q = t / max(part.seqs, 1.0)
    if q <= 1.0 and cp.attention_decode:  # decode: the kernel's efficiency moves with the step's sequences
        e = cp.attention_decode(part.seqs, ctx)
        if cp.decode_kv_basis:  # bound by the K/V read, at the share of bandwidth measured for it
            return (kv + act) / (cp.bandwidth * e)
    else:
        e = cp.attention(q, ctx) if cp.attention else cp.eff_matmul
    return _combine(flops / (cp.peak * e), (kv + act) / (cp.bandwidth * cp.eff_memory), cp.overlap)


def _within(step: Step, window: int) -> Step:
    """`step` with every part's context at most `window` tokens."""
    prefill = Step(step.prefill.tokens, step.prefill.seqs, min(step.prefill.ctx, window)) if step.prefill is not None else None
    return Step(step.tokens, step.seqs, min(step.ctx, window), prefill, step.spec)


def _per_device(step: Step, dp: int) -> Step:
    """The part of `step` the busiest of `dp` data-parallel devices runs: each part's sequences
    spread evenly, a sequence whole on one device (fewer sequences than devices: one each)."""

    def ways(seqs: float) -> float:
        return min(max(seqs, 1.0), dp)

    pre = step.prefill
    if pre is not None:
        pre = Step(pre.tokens / ways(pre.seqs), pre.seqs / ways(pre.seqs), pre.ctx)
    d = ways(step.seqs)
    return Step(step.tokens / d, step.seqs / d, step.ctx, pre, step.spec)


def unit_time(u: Unit, cp: CostParams, step: Step, windowed: bool = False) -> float:
    """Seconds for unit `u` in `step` on one device, its kernels as the profile's backend runs them
    (a sliding layer's attention over its window alone where `windowed`: Unit.kv_tokens)."""
    ex = cp.execution
    fused = ex.fusion == "engine"
    ops = u.fused_records if fused else u.op_records
    kernels = u.fused_kernels if fused else u.kernels
    kv_ops = sum(o.kv_bytes_per_token * o.count for o in ops if o.kind == "attention")
    device = kernels * ex.kernel_overhead
    if windowed and u.kv_window:  # every op of the layer that grows with the context (attention, its mask) sees the window's
        step = _within(step, u.kv_window)
    own = _per_device(step, cp.dp) if cp.dp > 1 else step  # data-parallel: the busiest device's sequences
    for o in ops:
        kv = u.kv_bytes_per_token * o.kv_bytes_per_token / kv_ops if o.kind == "attention" and kv_ops else 0.0
        routed = o.kind == "moe" and o.experts  # dispatched from every device's tokens
        device += o.count * op_time(o, cp, step if routed else own, kv)
    if ex.replays(step.decode_only):
        return device
    launches = kernels * cp.launch
    return max(device, launches) if ex.launch == "async" else device + launches


def units_time(
    units: list[Unit],
    profile: Profile,
    step: Step,
    *,
    dtype: str,
    kv_dtype: str,
    tp: int = 1,
    windowed: bool = False,
    ep: int = 1,
    dp: int = 1,
    imbalance: float = 1.0,
) -> float:
    """Seconds for `units` in one step on one device of `profile` (each of a TP group of `tp`
    doing 1/tp of the work; the group's collectives and the step's host overhead are the
    caller's). K/V bytes are the units' own, already at the KV-cache dtype `kv_dtype`; `windowed`:
    the engine's sliding layers read their window alone (unit_time); `ep`, `dp`, `imbalance`: an
    expert-parallel layout's (cost_params).

    Units with equal contents cost the same, so each is computed once per step and profile.
    """
    cp = cost_params(profile, dtype, tp, ep, dp, imbalance)
    memo = cp.memo.get((step, windowed))
    if memo is None:
        if len(cp.memo) > _MEMO_LIMIT // 64:
            cp.memo.clear()
        memo = cp.memo[(step, windowed)] = {}
    total = 0.0
    for u in units:
        t = memo.get(u.cost_key)
        if t is None:
            t = memo[u.cost_key] = unit_time(u, cp, step, windowed)
        total += t
    return total
