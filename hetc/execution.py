"""How a device's serving backend runs an engine step: part of the profile contract.

The cost model charges per-kernel costs after the fusion the backend performs and only where
the host really launches each kernel. Three properties, each a documented fact about the
backend (sources below), never a factor solved for from measured throughput:

- `fusion`: `none` — every op of the exported graph is a kernel (torch eager); `engine` —
  the fused kernels serving engines and graph compilers run (partitioner/capture/fusion.py: GEMMs
  that read the same activation run as one GEMM, each chain of point-wise ops and norms
  between GEMMs / attention runs as one kernel reading its inputs and writing its outputs once).
- `graphs`: which steps are replayed as one recorded graph (CUDA graphs, HIP graphs, HPU
  graphs), so no kernel of them pays a host launch: `none`, `decode` (steps of one token per
  sequence), `all`.
- `launch`: `sync` — the host thread runs each op and pays `launch_overhead` beside it (CPU
  eager); `async` — the host enqueues kernels that the device runs while the host goes on, so a
  unit of a step costs the longer of its device time and its kernels' launches.
- `kernel_overhead`: device-side time per kernel (its start and drain), paid with or without
  graphs.
- `experts`: how a step's routed-expert GEMMs run: `grouped` — one grouped kernel over every expert
  the device holds, at the rows per touched expert (vLLM's fused_moe, DeepGEMM, CUTLASS grouped GEMMs,
  torch's `grouped_mm` on CUDA); `per-expert` — one GEMM per touched expert, each at its own weight's
  shape (torch's CPU `_grouped_mm` loops over the groups with `mm`).
- `collective`: the engine's tensor-parallel all-reduce time over the link model's
  (partitioner/cost_models/links.py); 1 unless an engine's figures set it (hetc/engine.py: only
  its release `fit`, fitted on public results, does).

A profile may give `execution:` (any subset of the keys); what it leaves out comes from its
backend's entry in BACKEND_EXECUTION.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field

from hetc.quantity import Kind, parse_quantity

__all__ = ["Execution", "BACKEND_EXECUTION", "BACKEND_EXECUTION_SOURCES", "execution_for"]

Seconds = Annotated[float, BeforeValidator(lambda v: parse_quantity(v, Kind.TIME)), Field(ge=0)]


class Execution(BaseModel):
    """How the backend runs a step (see the module docstring)."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=False)
    fusion: Literal["none", "engine"] = "none"
    graphs: Literal["none", "decode", "all"] = "none"
    launch: Literal["sync", "async"] = "sync"
    kernel_overhead: Seconds = 0.0
    experts: Literal["grouped", "per-expert"] = "grouped"
    collective: float = Field(default=1.0, gt=0)

    def replays(self, decode_only: bool) -> bool:
        """Whether a step (of one token per sequence when `decode_only`) runs as one recorded graph."""
        return self.graphs == "all" or (self.graphs == "decode" and decode_only)


_GPU_ENGINE = {"fusion": "engine", "graphs": "decode", "launch": "async", "kernel_overhead": "1 us"}
_RAW: dict[str, dict[str, str]] = {
    "cuda": _GPU_ENGINE,
    "rocm": _GPU_ENGINE,
    "gaudi": {**_GPU_ENGINE, "graphs": "all"},
    "openvino": {**_GPU_ENGINE, "graphs": "all"},
    "cpu": {"experts": "per-expert"},
}
BACKEND_EXECUTION: dict[str, Execution] = {k: Execution.model_validate(v) for k, v in _RAW.items()}

BACKEND_EXECUTION_SOURCES: dict[str, list[str]] = {
    "cuda": [
        "fusion engine: vLLM runs a Llama layer as fused kernels — QKVParallelLinear (q, k, v one GEMM), "
        "MergedColumnParallelLinear (gate + up one GEMM), SiluAndMul, RMSNorm fused with the residual add, one "
        "rotary kernel, one attention kernel over the paged cache (vllm/model_executor/models/llama.py, "
        "layers/activation.py, layers/layernorm.py); TensorRT-LLM fuses the same (fused QKV, gated MLP, attention "
        "plugin); SGLang likewise; Inductor (hetc's AOTInductor stages) fuses point-wise chains",
        "graphs decode: vLLM captures full CUDA graphs for uniform decode batches (docs.vllm.ai design/cuda_graphs; "
        "mixed prefill-decode batches replay piecewise graphs, attention eager); TensorRT-LLM DecodeCudaGraphConfig "
        "(graphs for generation-only batches); SGLang enables CUDA graphs for decode by default (--cuda-graph-max-bs)",
        "launch async: CUDA streams run kernels asynchronously to the host (CUDA programming guide, streams)",
        "kernel_overhead 1 us: CUDA.jl documentation 'Graphs': 80 small broadcast kernels launched as one graph "
        "run in 70 us (about 0.9 us per kernel, its own tiny work included), 260 us launched one by one",
    ],
    "rocm": [
        "fusion engine: vLLM's ROCm build runs the same fused model code (llama.py, custom ops) as on CUDA",
        "graphs decode: vLLM-ROCm captures HIP graphs, full for decode batches and piecewise otherwise "
        "(mudler/vllm.cpp#332 quotes a vLLM-ROCm run capturing 51 piecewise + 35 full hipGraphs)",
        "launch async: HIP streams, as CUDA's",
        "⚠ kernel_overhead 1 us: CUDA's figure assumed for HIP graphs; unverified on Instinct GPUs",
    ],
    "gaudi": [
        "fusion engine: the Intel Gaudi graph compiler fuses ops of the recorded graph into TPC kernels (docs.habana.ai, PyTorch lazy mode / graph compiler)",
        "graphs all: vLLM on Gaudi compiles and captures HPU graphs for every prompt and decode bucket at warm-up "
        "(docs.vllm.ai/projects/gaudi 'Warm-Up'), so prefill and decode steps replay recorded graphs",
        "launch async: the HPU runs recorded graphs asynchronously to the host",
        "⚠ kernel_overhead 1 us: CUDA's figure assumed; unverified on Gaudi",
    ],
    "openvino": [
        "fusion engine: OpenVINO's compile_model applies its graph transformations (element-wise and norm fusions) before the plugin runs the model",
        "graphs all: one infer request runs the whole compiled model",
        "launch async: the GPU plugin queues kernels; ⚠ kernel_overhead 1 us: CUDA's figure assumed",
    ],
    "cpu": [
        "fusion none, graphs none, launch sync: hetc serves CPU stages with torch eager (every exported op is one "
        "dispatched kernel run by the calling thread), which is what `hetc profile --device cpu` measures",
        "experts per-expert: MoE stages run eagerly on torch (backends/decoder.py eager_only) through transformers' "
        "grouped_mm experts, whose CPU kernel (aten::_grouped_mm) calls aten::mm once per expert group (torch.profiler: "
        "16 mm under each grouped_mm call of a 16-expert layer, torch 2.13 CPU)",
    ],
}


def execution_for(backend: str, given: dict | None = None) -> dict:
    """The execution block of a profile of `backend`: its own keys over the backend's defaults."""
    return {**_RAW[backend], **(given or {})}
