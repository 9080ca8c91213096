"""The compiled-stage contract: a stage as a function of plain tensors every toolchain can run.

The runtime owns the paged KV cache (its blocks, block tables and their lifetime); one artifact
serves every batch, new-token count and past length. A stage takes one of two attention forms,
named by its toolchain:

`gather` (ONNX Runtime, IREE, AOTInductor): sequences padded to [B, T]; the stage reads the
blocks it needs through a block table into read-only block pools and returns its output and the
new K/V rows, which the runtime writes into its blocks — the graph stays functional.

`paged` (OpenVINO): the micro-batch's tokens packed back to back with no padding, attention is
one `hetc::paged_attention` op (backends/paged_attention.py) that the toolchain maps to its own
paged-attention kernel: it reads each sequence's blocks where they are and writes the new K/V
rows into them, so nothing is gathered or copied per step.

`gather` inputs, in order:
    x            [B, T] int64 token ids (first stage) or [B, T, H] hidden states
    positions    [B, T] int64, each token's position in its sequence (padding rows: any position
                 after the sequence's real ones, so no real token attends them)
    past_lens    [B] int64, tokens already in the cache per sequence (their positions 0..n-1)
    block_table  [B, MB] int64 block ids covering the past (padding: any valid block)
    select       [B] int64, only on the stage that holds the first of norm/head: the row of
                 each sequence whose next token is sampled (rows after it are dropped)
    k_pool_L, v_pool_L  [NB, BS, KVH, D] per attention layer L of the stage, read-only
Outputs, in order:
    out          [B, T, H] hidden states; [B, H] after `select`; [B, V] fp32 logits after the head
    k_L, v_L     [B, T, KVH, D] per attention layer: the new tokens' K (after rotary) and V

`paged` inputs, in order:
    x            [T] int64 token ids (first stage) or [T, H] hidden states, sequence after sequence
    positions    [T] int64, each token's position in its sequence
    past_lens    [B] int32, tokens already cached per sequence
    subsequence_begins    [B + 1] int32, sequence b's first packed row (and the end of the last)
    block_indices         [NBT] int32, every sequence's blocks in order, covering its new tokens too
    block_indices_begins  [B + 1] int32, where sequence b's blocks start in block_indices
    max_context_len       [] int32, the longest past + new of the micro-batch
    select       [S] int64, only on the stage that holds the first of norm/head: the packed rows
                 whose next token is sampled
    k_cache_L, v_cache_L  [NB, KVH, BS, D] per attention layer: read, and written at the new tokens
Outputs: out [T, H] hidden states; [S, H] after `select`; [S, V] fp32 logits after the head.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    import torch

from hetc.scheduling import KV_BLOCK_TOKENS

__all__ = ["CPU_EXECUTOR", "DYNAMIC_DIMS", "EXECUTORS", "AttentionForm", "RunnableStage", "StageSignature", "TensorSpec", "select_at", "stage_signature"]


class AttentionForm(StrEnum):
    GATHER = "gather"  # padded [B, T], read-only pools, new K/V rows returned
    PAGED = "paged"  # packed tokens, caches read and written in place by the attention op


# what runs a served stage: torch eager, or a toolchain's CPU lowering (workers report the index)
EXECUTORS = ("torch", "openvino", "onnx", "iree", "inductor", "hpu")
# what serves cpu stages, and what `hetc profile --device cpu` measures by default: the fastest CPU
# executor measured on the reference host (BENCHMARKS.md, "Compiled stages"): OpenVINO's packed
# FullyConnected kernels and its paged attention, 1.9–2.2× torch eager at batch 8–64
CPU_EXECUTOR = "openvino"
# named dims that vary at run time (one artifact for all of them); BS = KV_BLOCK_TOKENS is fixed
DYNAMIC_DIMS = {AttentionForm.GATHER: ("B", "T", "MB", "NB"), AttentionForm.PAGED: ("B", "T", "NBT", "NB", "S")}


class RunnableStage(Protocol):
    """What a worker runs, whatever runs it: torch eager on the stage's device (runtime StageModel)
    or a toolchain's compiled step (runtime CompiledStage); `Backend.prepare_stage` returns one.
    A step is two calls: `step_meta` builds the micro-batch's attention metadata (on the stage's
    device, in the form its executor reads), then the stage maps the packed input rows to its
    output rows, writing the new tokens' K/V into its own pool `kv`."""

    executor: str  # one of EXECUTORS
    kv: Any  # its paged KV pool (runtime.kv_cache.KVPool): the blocks the lane's block tables index
    param_names: list  # one entry per parameter tensor (model names where known)
    tp_group: Any  # the tensor-parallel process group (None when tp = 1)

    @property
    def param_bytes(self) -> int: ...

    def step_meta(self, starts: list[int], n_new: list[int], block_tables: list[list[int]], sample: list[bool]) -> Any:
        """The attention metadata of one packed micro-batch: per sequence its cached tokens, new
        tokens, KV blocks, and whether its next token is sampled."""
        ...

    def __call__(self, x: torch.Tensor, meta: Any) -> torch.Tensor:
        """[T] token ids or [T, H] hidden states, packed → [T, H] hidden, or the sampled rows' [S, H] / [S, V]."""
        ...


def select_at(kinds: list[str]) -> int:
    """The unit before which a micro-batch's rows are cut to its sampled tokens (`select`): the first
    norm or head. Norms and the head work per token, so only the rows whose next token is sampled
    go on; every executor cuts there (runtime/model_runner.py, backends/stage.py).

    Args:
        kinds: the model's unit kinds, in order.
    """
    return next(i for i, k in enumerate(kinds) if k in ("norm", "head"))


@dataclass(frozen=True, slots=True)
class TensorSpec:
    name: str
    dtype: str  # int64 | fp32 | bf16 | fp16
    dims: tuple[str | int, ...]

    def to_json(self) -> dict:
        return {"name": self.name, "dtype": self.dtype, "dims": list(self.dims)}


@dataclass(frozen=True, slots=True)
class StageSignature:
    form: AttentionForm
    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]
    attention_layers: tuple[int, ...]

    def to_json(self) -> dict:
        return {
            "form": str(self.form),
            "inputs": [t.to_json() for t in self.inputs],
            "outputs": [t.to_json() for t in self.outputs],
            "dynamic_dims": list(DYNAMIC_DIMS[self.form]),
            "block_size": KV_BLOCK_TOKENS,
            "attention_layers": list(self.attention_layers),
        }


def stage_signature(
    *,
    form: AttentionForm,
    first: bool,
    selects: bool,
    head: bool,
    attention_layers: list[int],
    hidden: int,
    vocab: int,
    kv_heads: int,
    head_dim: int,
    dtype: str,
    kv_dtype: str,
) -> StageSignature:
    """The signature of one stage.

    Args:
        form: the attention form its toolchain takes.
        first: the stage holds the embedding (its input is token ids).
        selects: the stage holds the first of norm/head (it takes `select`).
        head: the stage holds the LM head (its output is fp32 logits).
        attention_layers: the model layers whose attention the stage holds, in order.
    """
    if form is AttentionForm.PAGED:
        return _paged_signature(
            first=first,
            selects=selects,
            head=head,
            attention_layers=attention_layers,
            hidden=hidden,
            vocab=vocab,
            kv_heads=kv_heads,
            head_dim=head_dim,
            dtype=dtype,
            kv_dtype=kv_dtype,
        )
    x = TensorSpec("x", "int64", ("B", "T")) if first else TensorSpec("x", dtype, ("B", "T", hidden))
    ins = [x, TensorSpec("positions", "int64", ("B", "T")), TensorSpec("past_lens", "int64", ("B",)), TensorSpec("block_table", "int64", ("B", "MB"))]
    if selects:
        ins.append(TensorSpec("select", "int64", ("B",)))
    pool = ("NB", KV_BLOCK_TOKENS, kv_heads, head_dim)
    for layer in attention_layers:
        ins += [TensorSpec(f"k_pool_{layer}", kv_dtype, pool), TensorSpec(f"v_pool_{layer}", kv_dtype, pool)]
    if head:
        out = TensorSpec("out", "fp32", ("B", vocab))
    else:
        out = TensorSpec("out", dtype, ("B", hidden) if selects else ("B", "T", hidden))
    outs = [out]
    for layer in attention_layers:
        outs += [TensorSpec(f"k_{layer}", kv_dtype, ("B", "T", kv_heads, head_dim)), TensorSpec(f"v_{layer}", kv_dtype, ("B", "T", kv_heads, head_dim))]
    return StageSignature(form, tuple(ins), tuple(outs), tuple(attention_layers))


def _paged_signature(
    *, first: bool, selects: bool, head: bool, attention_layers: list[int], hidden: int, vocab: int, kv_heads: int, head_dim: int, dtype: str, kv_dtype: str
) -> StageSignature:
    x = TensorSpec("x", "int64", ("T",)) if first else TensorSpec("x", dtype, ("T", hidden))
    ins = [
        x,
        TensorSpec("positions", "int64", ("T",)),
        TensorSpec("past_lens", "int32", ("B",)),
        TensorSpec("subsequence_begins", "int32", ("B+1",)),
        TensorSpec("block_indices", "int32", ("NBT",)),
        TensorSpec("block_indices_begins", "int32", ("B+1",)),
        TensorSpec("max_context_len", "int32", ()),
    ]
    if selects:
        ins.append(TensorSpec("select", "int64", ("S",)))
    for layer in attention_layers:
        for kv in "kv":
            ins.append(TensorSpec(f"{kv}_cache_{layer}", kv_dtype, ("NB", kv_heads, KV_BLOCK_TOKENS, head_dim)))
    rows = "S" if selects else "T"
    out = TensorSpec("out", "fp32", (rows, vocab)) if head else TensorSpec("out", dtype, (rows, hidden))
    return StageSignature(AttentionForm.PAGED, tuple(ins), (out,), tuple(attention_layers))
