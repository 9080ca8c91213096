"""The compiled-stage contract: a stage as a function of plain tensors every toolchain can run.

The runtime owns the paged KV cache. A compiled stage reads the blocks it needs through a
block table into read-only block pools and returns its output and the new K/V rows, which
the runtime writes into its blocks — so graphs stay functional (OpenVINO and ONNX drop
in-place writes into arguments) and one artifact serves every batch, new-token count and
past length.

Inputs, in order:
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
"""

from __future__ import annotations

from dataclasses import dataclass

from hetc.scheduling import KV_BLOCK_TOKENS

__all__ = ["DYNAMIC_DIMS", "EXECUTORS", "StageSignature", "TensorSpec", "stage_signature"]

# what runs a served stage: torch eager, or a toolchain's CPU lowering (workers report the index)
EXECUTORS = ("torch", "openvino", "onnx", "iree", "inductor", "hpu")
# named dims that vary at run time (one artifact for all of them); BS = KV_BLOCK_TOKENS is fixed
DYNAMIC_DIMS = ("B", "T", "MB", "NB")


@dataclass(frozen=True, slots=True)
class TensorSpec:
    name: str
    dtype: str  # int64 | fp32 | bf16 | fp16
    dims: tuple[str | int, ...]

    def to_json(self) -> dict:
        return {"name": self.name, "dtype": self.dtype, "dims": list(self.dims)}


@dataclass(frozen=True, slots=True)
class StageSignature:
    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]
    attention_layers: tuple[int, ...]

    def to_json(self) -> dict:
        return {"inputs": [t.to_json() for t in self.inputs], "outputs": [t.to_json() for t in self.outputs],
                "dynamic_dims": list(DYNAMIC_DIMS), "block_size": KV_BLOCK_TOKENS,
                "attention_layers": list(self.attention_layers)}


def stage_signature(*, first: bool, selects: bool, head: bool, attention_layers: list[int], hidden: int,
                    vocab: int, kv_heads: int, head_dim: int, dtype: str, kv_dtype: str) -> StageSignature:
    """The signature of one stage.

    Args:
        first: the stage holds the embedding (its input is token ids).
        selects: the stage holds the first of norm/head (it takes `select`).
        head: the stage holds the LM head (its output is fp32 logits).
        attention_layers: the model layers whose attention the stage holds, in order.
    """
    x = TensorSpec("x", "int64", ("B", "T")) if first else TensorSpec("x", dtype, ("B", "T", hidden))
    ins = [x, TensorSpec("positions", "int64", ("B", "T")), TensorSpec("past_lens", "int64", ("B",)),
           TensorSpec("block_table", "int64", ("B", "MB"))]
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
        outs += [TensorSpec(f"k_{layer}", kv_dtype, ("B", "T", kv_heads, head_dim)),
                 TensorSpec(f"v_{layer}", kv_dtype, ("B", "T", kv_heads, head_dim))]
    return StageSignature(tuple(ins), tuple(outs), tuple(attention_layers))
