"""OpenVINO toolchain: an exported stage (`paged` form) → OpenVINO IR (`.xml` + `.bin`), run on the
host CPU.

The stage's `hetc::paged_attention` nodes become OpenVINO's own `PagedAttentionExtension` (the op
openvino-genai serves with): it reads each sequence's KV blocks where they are and writes the new
rows into them, and the CPU plugin runs it with its own kernels; the matmuls run on its packed
FullyConnected kernels. The KV caches are inputs shared with the runtime's memory, never copied.
The IR is device-independent: the same files serve an Intel GPU (`GPU.N`) and the CPU plugin.
Traps (checked here): `save_model` compresses weights to fp16 unless told not to; the CPU plugin
runs bf16 on CPUs with AMX/AVX512-BF16 and stores the KV cache as u8 unless the precisions are
pinned; it pins its threads to cores unless told not to (stage workers share a host); its
paged-attention kernel reads 32-token blocks (hetc.scheduling.KV_BLOCK_TOKENS).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch

from hetc.backends.toolchain import IR_ELEMENT_TYPES, Artifact, CompiledStep, ToolchainUnavailable, WeightSource
from hetc.stage import AttentionForm

__all__ = ["TOOLCHAIN", "OpenVinoToolchain", "cpu_config"]

# PagedAttentionExtension's inputs after the nine the stage gives and its scale (OpenVINO 2026.4:
# 28 in all); each (name, numpy dtype, shape, value): off or empty = the feature unused. The stage's
# max_context_len goes between the second and the third (see _to_openvino_op).
_PA_UNUSED: list[tuple[str, type[np.number], tuple[int, ...], int | None]] = [
    ("sliding_window", np.int32, (), 0),
    ("alibi_slopes", np.float32, (0,), None),
    ("score_aggregation_window", np.int32, (0,), None),
    ("rotated_block_indices", np.int32, (0,), None),
    ("rotation_deltas", np.int32, (0,), None),
    ("rotation_trig_lut", np.float32, (0,), None),
    ("xattention_threshold", np.float32, (0,), None),
    ("xattention_block_size", np.int32, (), 0),
    ("xattention_stride", np.int32, (), 0),
    ("sinks", np.float32, (0,), None),
    ("adaptive_rkv_start_size", np.int32, (), 0),
    ("adaptive_rkv_evictable_sizes", np.int32, (0,), None),
    ("adaptive_rkv_diversity_block_set_indices", np.int32, (0,), None),
    ("adaptive_rkv_diversity_block_set_indices_begins", np.int32, (0,), None),
    ("token_type_ids", np.int32, (0,), None),
    ("qq_bias", np.uint8, (0,), None),
    ("qq_bias_begins", np.int32, (0,), None),
]


def _ov() -> Any:
    try:
        import openvino
    except ImportError:
        raise ToolchainUnavailable("OpenVINO is not installed: pip install 'hetc[compile]' (openvino).") from None
    return openvino


_HETC_OP: type | None = None


def _hetc_op() -> type:
    """`HetcPagedAttention`: how the IR stores a paged attention (its 10 tensor inputs, scale and
    head layout as attributes). OpenVINO's own op cannot be read back from an IR, so `load` swaps
    each of these for it; registering this class with the Core is what makes the IR readable."""
    global _HETC_OP
    if _HETC_OP is not None:
        return _HETC_OP
    op_base: Any = _ov().Op  # OpenVINO's Python custom-op base class (untyped)

    class HetcPagedAttention(op_base):
        def __init__(self, inputs=None, attrs=None):
            super().__init__(self)
            self.attrs = dict(attrs or {"scale": 1.0, "kv_heads": 1, "head_size": 1})
            if inputs:
                self.set_arguments(inputs)
                self.constructor_validate_and_infer_types()

        def validate_and_infer_types(self) -> None:
            self.set_output_type(0, self.get_input_element_type(0), self.get_input_partial_shape(0))

        def clone_with_new_inputs(self, new_inputs):
            return HetcPagedAttention(new_inputs, self.attrs)

        def visit_attributes(self, visitor) -> bool:
            self.attrs = visitor.on_attributes(self.attrs) or self.attrs
            return True

    _HETC_OP = HetcPagedAttention
    return _HETC_OP


def _paged_attention(ctx) -> list:
    """hetc::paged_attention(q, k, v, k_cache, v_cache, past_lens, subsequence_begins, block_indices,
    block_indices_begins, max_context_len, scale, kv_heads, head_size) → `HetcPagedAttention`."""
    attrs = {
        "scale": float(ctx.get_values_from_const_input(10, None, float)),
        "kv_heads": int(ctx.get_values_from_const_input(11, None, int)),
        "head_size": int(ctx.get_values_from_const_input(12, None, int)),
    }
    return _hetc_op()([ctx.get_input(i) for i in range(10)], attrs).outputs()


def _to_openvino_op(node) -> None:
    """Swap one `HetcPagedAttention` for OpenVINO's PagedAttentionExtension (28 inputs in 2026.4)."""
    import openvino.opset13 as ops
    from openvino._pyopenvino.op import _PagedAttentionExtension

    attrs = node.get_attributes()
    given = [node.input_value(i) for i in range(10)]
    const = [
        ops.constant(np.full(shape, value, dtype=dtype) if value is not None else np.zeros(shape, dtype=dtype)).output(0)
        for _, dtype, shape, value in _PA_UNUSED
    ]
    scale = ops.constant(np.float32(attrs["scale"])).output(0)
    pa = _PagedAttentionExtension([*given[:9], scale, *const[:2], given[9], *const[2:]])
    rt = pa.get_rt_info()  # the CPU plugin reads the head layout from here
    for key, value in (
        ("k_head_size", attrs["head_size"]),
        ("num_k_heads", attrs["kv_heads"]),
        ("v_head_size", attrs["head_size"]),
        ("num_v_heads", attrs["kv_heads"]),
    ):
        rt[key] = int(value)
    pa.set_friendly_name(node.get_friendly_name())
    node.output(0).replace(pa.output(0))


def cpu_config(*, threads: int | None, kv_dtype: torch.dtype) -> dict[str, str]:
    """The CPU plugin's configuration for a served stage: f32 math for an fp32 stage, the KV cache
    kept in the runtime's dtype (so it is shared, not converted), one stream, no pinning."""
    config = {
        "INFERENCE_PRECISION_HINT": "f32",
        "KV_CACHE_PRECISION": IR_ELEMENT_TYPES[kv_dtype],
        "NUM_STREAMS": "1",
        "PERFORMANCE_HINT": "LATENCY",
        "ENABLE_CPU_PINNING": "NO",
    }
    if threads:
        config["INFERENCE_NUM_THREADS"] = str(threads)
    return config


class OpenVinoToolchain:
    name = "openvino"
    form = AttentionForm.PAGED

    def version(self) -> str:
        return _ov().__version__.split("-")[0]

    def build(self, program: torch.export.ExportedProgram, out_dir: Path, *, target: str, stem: str, weight_names: dict[str, str] | None = None) -> Artifact:
        ov = _ov()
        from openvino.frontend.pytorch import ConversionExtension

        model = ov.convert_model(program, extension=[ConversionExtension("hetc.paged_attention.default", _paged_attention)])
        ov.save_model(model, out_dir / f"{stem}.xml", compress_to_fp16=False)  # keep the weights' own precision
        return Artifact(
            toolchain=self.name,
            version=self.version(),
            target=target,
            files=[Path(f"{stem}.xml"), Path(f"{stem}.bin")],
            runnable_here=True,
            notes=[
                f"IR for OpenVINO device {target} with OpenVINO's PagedAttention op; checked here on the CPU plugin at f32",
                "weights: the IR's own .bin beside the .xml",
            ],
        )

    def load(
        self,
        artifact: Artifact,
        out_dir: Path,
        *,
        threads: int | None = None,
        kv_dtype: torch.dtype = torch.float32,
        weights: WeightSource | None = None,
        lean: bool = False,
    ) -> CompiledStep:
        ov = _ov()
        core = ov.Core()
        core.add_extension(ov.OpExtension(_hetc_op()))
        model = core.read_model(str(out_dir / artifact.files[0]))
        for op in model.get_ordered_ops():
            if op.get_type_name() == "HetcPagedAttention":
                _to_openvino_op(op)
        model.validate_nodes_and_infer_types()
        compiled = core.compile_model(model, "CPU", cpu_config(threads=threads, kv_dtype=kv_dtype))
        request = compiled.create_infer_request()
        output = compiled.outputs[0]

        def step(*tensors: torch.Tensor) -> list[torch.Tensor]:
            # shared, not copied: the KV caches are written in place by the paged-attention op
            out = request.infer([t.numpy() for t in tensors], share_inputs=True, share_outputs=True)
            return [torch.from_numpy(np.array(out[output]))]

        return step


TOOLCHAIN = OpenVinoToolchain()
