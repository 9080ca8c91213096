"""Single OpenVINO kernels on the host CPU, for `hetc profile` to measure the executor that serves
cpu stages: FullyConnected (a linear layer with its weight packed at compile time, as in a compiled
stage) and the paged-attention op. Each returns a callable running one inference."""

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
    compiled = ov.Core().compile_model(ov.Model(outs, [xp]), "CPU",
                                       cpu_config(threads=threads, kv_dtype=torch.float32))
    request = compiled.create_infer_request()
    return lambda x: request.infer([x.numpy()], share_inputs=True, share_outputs=True)


def paged_attention_step(*, heads: int, kv_heads: int, head_dim: int, scale: float, k_cache: torch.Tensor,
                         v_cache: torch.Tensor, threads: int | None) -> Callable[..., object]:
    """OpenVINO's paged attention alone: `step(q, k, v, past_lens, subsequence_begins, block_indices,
    block_indices_begins, max_context_len)` over the given caches [NB, KVH, BS, D] (written in place)."""
    ov = _ov()
    import openvino.opset13 as ops

    from hetc.backends.openvino.toolchain import _hetc_op

    f32, i32 = ov.Type.f32, ov.Type.i32
    params = [ops.parameter([-1, heads * head_dim], f32), ops.parameter([-1, kv_heads * head_dim], f32),
              ops.parameter([-1, kv_heads * head_dim], f32),
              ops.parameter([-1, kv_heads, k_cache.shape[2], head_dim], f32),
              ops.parameter([-1, kv_heads, k_cache.shape[2], head_dim], f32),
              *(ops.parameter([-1], i32) for _ in range(4)), ops.parameter([], i32)]
    node = _hetc_op()([p.output(0) for p in params], {"scale": scale, "kv_heads": kv_heads, "head_size": head_dim})
    model = ov.Model(node.outputs(), params)
    _to_openvino_op(next(op for op in model.get_ordered_ops() if op.get_type_name() == "HetcPagedAttention"))
    model.validate_nodes_and_infer_types()
    compiled = ov.Core().compile_model(model, "CPU", cpu_config(threads=threads, kv_dtype=k_cache.dtype))
    request = compiled.create_infer_request()
    caches = [k_cache.numpy(), v_cache.numpy()]

    def step(q, k, v, *meta: torch.Tensor) -> object:
        args = [q.numpy(), k.numpy(), v.numpy(), *caches, *(np.asarray(m) for m in meta)]
        return request.infer(args, share_inputs=True, share_outputs=True)

    return step
