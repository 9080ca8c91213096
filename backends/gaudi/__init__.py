"""Gaudi backend (Intel Gaudi 2/3): the HPU bridge (`habana_frameworks.torch`), HCCL
between devices of one node.

Needs: Gaudi hardware with its driver, and the Intel Gaudi software stack's PyTorch
bridge (`habana_frameworks.torch`, installed with the SynapseAI / Intel Gaudi software).
What a later issue adds: lazy-mode graphs per stage (`htcore.mark_step`), HPU graphs for
decode, bucketing of batch and context to bound recompilation.
"""

from __future__ import annotations

import torch

from hetc.backends.base import Backend, BackendUnavailable, DeviceInfo

__all__ = ["BACKEND", "GaudiBackend"]


class GaudiBackend(Backend):
    name = "gaudi"
    dist_backend = "hccl"
    requires = "Intel Gaudi hardware with its driver and the Gaudi PyTorch bridge (habana_frameworks.torch)"

    def _hpu(self):
        try:
            import habana_frameworks.torch.hpu as hpu  # noqa: PLC0415 — optional vendor library
        except ImportError:
            raise BackendUnavailable(f"gaudi: habana_frameworks.torch is not installed; the gaudi backend needs {self.requires}.") from None
        if not hpu.is_available():
            raise BackendUnavailable(f"gaudi: the HPU bridge is installed but sees no Gaudi device; the gaudi backend needs {self.requires}.")
        return hpu

    def detect(self) -> list[DeviceInfo]:
        hpu = self._hpu()
        out = []
        for i in range(hpu.device_count()):
            total = int(hpu.get_device_properties(i).total_memory) if hasattr(hpu, "get_device_properties") else 0
            used = int(hpu.memory_allocated(i)) if hasattr(hpu, "memory_allocated") else 0
            out.append(DeviceInfo(self.name, i, hpu.get_device_name(i), total, max(0, total - used)))
        return out

    def torch_device(self, index: int) -> torch.device:
        self._hpu()
        return torch.device("hpu", index)

    def synchronize(self, index: int) -> None:
        self._hpu().synchronize()


BACKEND = GaudiBackend()
