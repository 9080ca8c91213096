"""How a decoder stage runs an MoE layer's routed experts: which kernel (transformers' experts
implementations), and a part of them (expert parallelism: `LocalExperts`).

transformers' default runs one GEMM pair per expert a step hits, finding those experts on the host
(`nonzero`): a device sync per layer and shapes that follow the routing, which no CUDA graph can
hold. `ExpertsKernel.GROUPED` and `BATCHED` keep every shape fixed by the step's tokens alone, so a
cuda stage's decode step with MoE layers is captured like a dense one (runtime/cuda_graphs.py).
"""

from __future__ import annotations

import enum
from typing import Any

import torch
from torch import nn

__all__ = ["ExpertsKernel", "LocalExperts", "experts_kernel", "set_experts_kernel"]


class ExpertsKernel(enum.StrEnum):
    """transformers' experts implementations (`config._experts_implementation`)."""

    LOOP = "eager"  # a GEMM pair per expert hit, the hits read on the host
    GROUPED = "grouped_mm"  # one grouped GEMM over the tokens sorted by expert, its offsets on the device
    BATCHED = "batched_mm"  # one batched GEMM over each token's experts' weights, gathered (memory-heavy)


def experts_kernel(weight: torch.Tensor) -> ExpertsKernel:
    """The static-shape kernel for experts stored as `weight`: the grouped GEMM where torch has a
    device kernel for it (bf16 on cuda, compute capability 8.0 and up; elsewhere transformers falls
    back to a host loop over the groups), else the batched one."""
    if weight.dtype == torch.bfloat16 and weight.device.type == "cuda" and torch.cuda.get_device_capability(weight.device) >= (8, 0):
        return ExpertsKernel.GROUPED
    return ExpertsKernel.BATCHED


def set_experts_kernel(experts: nn.Module, kernel: ExpertsKernel) -> None:
    """Run `experts` (a transformers experts module, or a LocalExperts part) with `kernel`. The
    implementation is read from the module's config at each call; a stage's experts share theirs."""
    inner: Any = experts.inner if isinstance(experts, LocalExperts) else experts
    inner.config._experts_implementation = kernel.value


class LocalExperts(nn.Module):
    """A part of an MoE layer's routed experts (experts [first, first + count) of the model's), run
    through the model's own experts module holding just those: tokens with none of them routed here
    are skipped; a token's other slots point at local expert 0 with weight 0 (exactly nothing added).
    Returns this part's sum only; the parts' sums add up to the whole layer's."""

    def __init__(self, inner: nn.Module, first: int, count: int):
        super().__init__()
        self.inner, self.first, self.count = inner, first, count

    def forward(self, h: torch.Tensor, top_k_index: torch.Tensor, top_k_weights: torch.Tensor) -> torch.Tensor:
        # h: [N, D]; top_k_index, top_k_weights: [N, K] (the model's expert ids and routing weights)
        local = top_k_index - self.first
        mine = (local >= 0) & (local < self.count)
        rows = mine.any(dim=-1).nonzero()[:, 0]
        out = torch.zeros_like(h)
        if rows.numel():
            idx = torch.where(mine, local, 0)[rows]
            w = torch.where(mine, top_k_weights, 0)[rows]
            out[rows] = self.inner(h[rows], idx, w).to(h.dtype)
        return out
