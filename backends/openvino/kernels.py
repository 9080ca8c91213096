"""OpenVINO kernels on the host CPU, for `hetc profile` to measure the executor that serves cpu stages:
FullyConnected (a linear layer with its weight packed at compile time, as in a compiled stage) and the
paged-attention op. Each builds one model holding several instances of its kernel, as a stage holds
one per layer, and returns a callable running them all in one inference: the time per kernel is then
what the kernel costs inside a served step, the inference's own fixed cost shared out."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch

from hetc.backends.openvino.toolchain import _ov, _to_openvino_op, cpu_config

__all__ = ["linear_step", "paged_attention_step"]


def linear_step(weights: list[torch.Tensor], *, threads: int | None) -> Callable[[torch.Tensor], object]:
    """`step(x)`: `x · Wᵀ` for every W in `weights`, one FullyConnected each, in one model, so a
    call runs len(weights) matmuls whose weights stream from memory in turn (pass enough of them
    to exceed the caches). x is [M, K] fp32 for any M; weights are [N, K] fp32."""
    ov = _ov()
    import openvino.opset13 as ops

    xp = ops.parameter([-1, weights[0].shape[1]], ov.Type.f32, name="x")
    outs = [ops.matmul(xp, ops.constant(w.numpy()), transpose_a=False, transpose_b=True) for w in weights]
    compiled = ov.Core().compile_model(ov.Model(outs, [xp]), "CPU", cpu_config(threads=threads, kv_dtype=torch.float32))
    request = compiled.create_infer_request()
    return lambda x: request.infer([x.numpy()], share_inputs=True, share_outputs=True)


def paged_attention_step(
    *, heads: int, kv_heads: int, head_dim: int, scale: float, caches: list[tuple[torch.Tensor, torch.Tensor]], threads: int | None
) -> Callable[..., object]:
    """OpenVINO's paged attention, one node per (K, V) cache pair [NB, KVH, BS, D] in `caches`, chained
    as a stage's layers are (each node's query is the previous node's output; each writes its new rows
    into its own cache, in place): `step(q, k, v, past_lens, subsequence_begins, block_indices,
    block_indices_begins, max_context_len)` runs them all in one inference.

    A single node per inference would time the inference's own fixed cost (about 0.19 ms on a 2.4 GHz
    EPYC core: three times the node's own time at one sequence of 64 tokens), which a served stage pays once
    per step, not once per layer."""
    ov = _ov()
    import openvino.opset13 as ops

    from hetc.backends.openvino.toolchain import _hetc_op

    f32, i32 = ov.Type.f32, ov.Type.i32
    block = caches[0][0].shape[2]
    q, k, v = (ops.parameter([-1, h * head_dim], f32) for h in (heads, kv_heads, kv_heads))
    cache_params = [ops.parameter([-1, kv_heads, block, head_dim], f32) for _ in range(2 * len(caches))]
    meta = [*(ops.parameter([-1], i32) for _ in range(4)), ops.parameter([], i32)]
    x = q
    for i in range(len(caches)):
        x = _hetc_op()(
            [x.output(0), k.output(0), v.output(0), cache_params[2 * i].output(0), cache_params[2 * i + 1].output(0), *(m.output(0) for m in meta)],
            {"scale": scale, "kv_heads": kv_heads, "head_size": head_dim},
        )
    model = ov.Model(x.outputs(), [q, k, v, *cache_params, *meta])
    for op in model.get_ordered_ops():
        if op.get_type_name() == "HetcPagedAttention":
            _to_openvino_op(op)
    model.validate_nodes_and_infer_types()
    compiled = ov.Core().compile_model(model, "CPU", cpu_config(threads=threads, kv_dtype=caches[0][0].dtype))
    request = compiled.create_infer_request()
    arrays = [t.numpy() for pair in caches for t in pair]

    def step(q, k, v, *meta: torch.Tensor) -> object:
        args = [q.numpy(), k.numpy(), v.numpy(), *arrays, *(np.asarray(m) for m in meta)]
        return request.infer(args, share_inputs=True, share_outputs=True)

    return step
