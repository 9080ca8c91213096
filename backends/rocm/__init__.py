"""ROCm backend (AMD Instinct): torch's ROCm build exposes the GPUs through the `cuda`
device API (HIP underneath); RCCL (as "nccl") between devices of one node.

Needs: an AMD GPU with the amdgpu driver and a ROCm build of torch (`torch.version.hip` set).
"""

from __future__ import annotations

import torch

from hetc.backends.base import BackendUnavailable, CudaApiBackend

__all__ = ["BACKEND", "RocmBackend"]


class RocmBackend(CudaApiBackend):
    name = "rocm"
    dist_backend = "nccl"  # RCCL answers to the name nccl in ROCm builds of torch
    requires = "an AMD GPU with the amdgpu driver and a ROCm build of torch (pip install torch from the ROCm index)"

    def check(self) -> None:
        if not getattr(torch.version, "hip", None):
            raise BackendUnavailable(f"rocm: this torch ({torch.__version__}) is not a ROCm build; the rocm backend needs {self.requires}.")
        if not torch.cuda.is_available():
            raise BackendUnavailable(
                f"rocm: torch {torch.__version__} sees no AMD GPU (driver missing, or HIP_VISIBLE_DEVICES hides them); the rocm backend needs {self.requires}."
            )


BACKEND = RocmBackend()
