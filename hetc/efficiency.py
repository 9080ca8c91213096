"""Achievable efficiency in a hardware profile: the scalar form and the optional curves.

A hand-written profile gives `efficiency: {matmul, memory}` (fractions of peak, each with
its source); `hetc profile` adds `efficiency_curves` beside it, fitted on the device. The
cost model (partitioner/cost_models/analytic.py) reads a curve where one is given and the
scalar otherwise.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, model_validator

from hetc.quantity import Kind, parse_quantity

__all__ = ["Efficiency", "EfficiencyCurves", "Curve1D", "Curve2D", "AttentionCurve", "DecodeAttentionCurve", "GatherCurve"]

Fraction = Annotated[float, Field(gt=0, le=1)]
Positive = Annotated[float, Field(gt=0)]
Seconds = Annotated[float, BeforeValidator(lambda v: parse_quantity(v, Kind.TIME))]
DType = Literal["fp32", "tf32", "bf16", "fp16", "fp8", "int8"]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=False)


class Efficiency(BaseModel):
    """Achievable fractions of peak. `matmul` and `memory` are required; more may be added.

    `overlap` is the share of the shorter of an op's compute and memory time hidden under
    the longer (1: a pure roofline, max(compute, memory); 0: they add up). `matmul_by_dtype`
    gives the matmul fraction for a compute dtype that reaches a different share of its own
    peak (FP8 GEMMs on H100 reach 70.9% of FP8 peak where BF16 reaches 80.3%); `matmul`
    applies to the others. `experts` is the share of that (or the curve's) efficiency a step's
    routed-expert GEMMs reach as the serving engine runs its MoE layer (its grouped GEMMs with the
    permute and finalize around them): 1 unless an engine's figures set it (hetc/engine.py).
    """

    model_config = ConfigDict(extra="allow", frozen=True)
    matmul: Fraction
    memory: Fraction
    overlap: Annotated[float, Field(ge=0, le=1)] = 1.0
    matmul_by_dtype: dict[DType, Fraction] = {}
    experts: Fraction = 1.0

    def matmul_for(self, dtype: str) -> float:
        """The achievable matmul fraction of peak for compute dtype `dtype`."""
        return self.matmul_by_dtype.get(dtype, self.matmul)  # type: ignore[call-overload]


class Curve1D(_Strict):
    """Efficiency at ascending points `x`, linear in log x between them, flat beyond the ends."""

    x: list[Positive] = Field(min_length=1)
    eff: list[Positive] = Field(min_length=1)

    @model_validator(mode="after")
    def _shape(self) -> "Curve1D":
        if len(self.x) != len(self.eff):
            raise ValueError(f"x has {len(self.x)} points but eff has {len(self.eff)}")
        if any(b <= a for a, b in zip(self.x, self.x[1:])):
            raise ValueError("x must be strictly ascending")
        return self


def _check_grid(eff: list[list[float]], rows: tuple[str, list[float]], cols: tuple[str, list[float]]) -> None:
    """A 2-D curve's table: one row of `eff` per row point, one value per column point, both axes ascending."""
    (rn, rv), (cn, cv) = rows, cols
    if len(eff) != len(rv) or any(len(r) != len(cv) for r in eff):
        raise ValueError(f"eff must be {len(rv)} rows ({rn}) of {len(cv)} values ({cn})")
    for name, xs in (rows, cols):
        if any(b <= a for a, b in zip(xs, xs[1:])):
            raise ValueError(f"{name} must be strictly ascending")


class Curve2D(_Strict):
    """Matmul efficiency `eff[i][j]` at rows `m[i]` and weight size `nk[j]` (N·K elements),
    bilinear in (log m, log nk), flat beyond the grid."""

    m: list[Positive] = Field(min_length=1)
    nk: list[Positive] = Field(min_length=1)
    eff: list[list[Positive]]

    @model_validator(mode="after")
    def _shape(self) -> "Curve2D":
        _check_grid(self.eff, ("m", self.m), ("nk", self.nk))
        return self


class AttentionCurve(_Strict):
    """Attention efficiency `eff[i][j]` at `q[i]` query tokens per sequence (1 = decode) and a
    mean context of `ctx[j]` keys per query, bilinear in (log q, log ctx), flat beyond the grid."""

    q: list[Positive] = Field(min_length=1)
    ctx: list[Positive] = Field(min_length=1)
    eff: list[list[Positive]]

    @model_validator(mode="after")
    def _shape(self) -> "AttentionCurve":
        _check_grid(self.eff, ("q", self.q), ("ctx", self.ctx))
        return self


class DecodeAttentionCurve(_Strict):
    """Decode attention efficiency `eff[i][j]` (one query token per sequence) at `seqs[i]` sequences in
    the step and a context of `ctx[j]` keys, bilinear in the logs, flat beyond the grid. A paged-attention
    kernel spreads its fixed work over the step's sequences: OpenVINO's CPU kernel reaches a third of
    its 8-sequence efficiency at one sequence of 64 keys.

    `basis`: what `eff` is a share of. `kv_bytes` (what `hetc profile` fits): the K/V read (and the
    step's activations) per second ÷ memory_bandwidth — decode attention reads each key once for
    every query head of its group, so its time follows the K/V bytes across head shapes (OpenVINO's
    kernel on 1 thread: 3.3–4.5 GB/s of K/V at 4/2, 8/2, 16/8 and 12/4 heads, where its FLOP/s moved
    1.8× between them). `flops` (profiles fitted before 2026-11-28): FLOP/s ÷ peak, like `attention`."""

    seqs: list[Positive] = Field(min_length=1)
    ctx: list[Positive] = Field(min_length=1)
    eff: list[list[Positive]]
    basis: Literal["flops", "kv_bytes"] = "flops"

    @model_validator(mode="after")
    def _shape(self) -> "DecodeAttentionCurve":
        _check_grid(self.eff, ("seqs", self.seqs), ("ctx", self.ctx))
        return self


class GatherCurve(_Strict):
    """Gather efficiency `eff[i][j]` (bytes/s ÷ memory_bandwidth) at `rows[i]` rows read and
    `row_bytes[j]` bytes moved per row, bilinear in the logs, flat beyond the grid."""

    rows: list[Positive] = Field(min_length=1)
    row_bytes: list[Positive] = Field(min_length=1)
    eff: list[list[Positive]]

    @model_validator(mode="after")
    def _shape(self) -> "GatherCurve":
        _check_grid(self.eff, ("rows", self.rows), ("row_bytes", self.row_bytes))
        return self


class EfficiencyCurves(_Strict):
    """Shape-dependent efficiencies (optional; `hetc profile` fits them on a CPU; the NVIDIA
    profiles' matmul curves come from public per-shape GEMM timings, benchmarks/public_gemm.py).
    Where a curve is missing the scalar `efficiency` applies.

    matmul[dtype]: achieved FLOP/s ÷ peak_flops[dtype] by GEMM rows M and weight size N·K.
    attention[dtype]: achieved FLOP/s ÷ peak by query tokens per sequence (1 = decode) and
        mean context.
    attention_decode[dtype]: for decode (one query token per sequence), by sequences in the step
        and context, where measured; it replaces `attention`'s decode row (its `basis` says whether
        a share of peak FLOP/s or of memory bandwidth over the K/V read).
    memory: achieved bytes/s ÷ memory_bandwidth by the bytes one op moves (above 1 where
        the working set stays in cache).
    memory_kinds: like `memory`, for one kind of op (elementwise, norm: reductions, copy),
        where measured.
    memory_ops: like `memory`, for one op by its name in the exported graph (silu, exp on
        a CPU are bound by arithmetic; cat has a high fixed cost), where measured. An op
        takes its own curve, else its kind's, else `memory`.
    gather: gathers (embedding lookups: random rows of a table far larger than the cache):
        bytes/s ÷ memory_bandwidth by rows read and bytes moved per row (a row's size sets
        how well its read streams; few rows leave the op's own fixed cost).
    dispatch_overhead: one op alone in a loop; `launch_overhead` is the per-op cost inside
        a model step (dispatch plus the framework's own code between ops).
    executor: what ran the matmuls, attention and probe steps (torch eager, or the OpenVINO
        kernels that serve cpu stages): a plan predicts the stage steps of that executor.
    """

    matmul: dict[DType, Curve2D] = {}
    attention: dict[DType, AttentionCurve] = {}
    attention_decode: dict[DType, DecodeAttentionCurve] = {}
    memory: Curve1D | None = None
    memory_kinds: dict[Literal["elementwise", "norm", "copy", "gather"], Curve1D] = {}
    memory_ops: dict[str, Curve1D] = {}
    gather: GatherCurve | None = None
    dispatch_overhead: Seconds | None = None
    threads: int | None = Field(default=None, gt=0)
    executor: Literal["torch", "openvino"] | None = None
    source: str | None = None
