"""ROCm backend (AMD Instinct): torch's ROCm build exposes the GPUs through the `cuda`
device API (HIP underneath); RCCL (as "nccl") between devices of one node.

Needs: an AMD GPU with the amdgpu driver and a ROCm build of torch (`torch.version.hip` set).
"""

from __future__ import annotations

import torch

from hetc.backends.base import Backend, BackendUnavailable, DeviceInfo

__all__ = ["BACKEND", "RocmBackend"]


class RocmBackend(Backend):
    name = "rocm"
    dist_backend = "nccl"  # RCCL answers to the name nccl in ROCm builds of torch
    requires = "an AMD GPU with the amdgpu driver and a ROCm build of torch (pip install torch from the ROCm index)"

    def _check(self) -> None:
        if not getattr(torch.version, "hip", None):
            raise BackendUnavailable(f"rocm: this torch ({torch.__version__}) is not a ROCm build; the rocm backend "
                                     f"needs {self.requires}.")
        if not torch.cuda.is_available():
            raise BackendUnavailable(f"rocm: torch {torch.__version__} sees no AMD GPU (driver missing, or "
                                     f"HIP_VISIBLE_DEVICES hides them); the rocm backend needs {self.requires}.")

    def detect(self) -> list[DeviceInfo]:
        self._check()
        out = []
        for i in range(torch.cuda.device_count()):
            free, total = torch.cuda.mem_get_info(i)
            out.append(DeviceInfo(self.name, i, torch.cuda.get_device_name(i), total, free))
        return out

    def torch_device(self, index: int) -> torch.device:
        self._check()
        return torch.device("cuda", index)

    def synchronize(self, index: int) -> None:
        torch.cuda.synchronize(index)


BACKEND = RocmBackend()
