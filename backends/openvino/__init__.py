"""OpenVINO backend (Intel CPUs and GPUs): a stage compiled with
`torch.compile(backend="openvino")`, tensors on the host.

Needs: the `openvino` Python package (pip install openvino), and for Intel GPUs their
compute runtime (level-zero / OpenCL). What a later issue adds: compiling each stage
for the plan's device ("GPU.0", "CPU"), static shapes per batch bucket, a paged-KV
layout OpenVINO's PagedAttention op accepts.
"""

from __future__ import annotations

import torch
from torch import nn

from hetc.backends.base import Backend, BackendUnavailable, DeviceInfo

__all__ = ["BACKEND", "OpenVinoBackend"]


class OpenVinoBackend(Backend):
    name = "openvino"
    dist_backend = "gloo"
    requires = "the openvino Python package (pip install openvino) and, for Intel GPUs, their compute runtime"

    def _core(self):
        try:
            import openvino as ov  # noqa: PLC0415 — optional vendor library
        except ImportError:
            raise BackendUnavailable(f"openvino: the openvino package is not installed; the openvino backend needs "
                                     f"{self.requires}.") from None
        return ov.Core()

    def detect(self) -> list[DeviceInfo]:
        core = self._core()
        out = []
        for i, dev in enumerate(core.available_devices):
            name = core.get_property(dev, "FULL_DEVICE_NAME")
            try:
                total = int(core.get_property(dev, "GPU_DEVICE_TOTAL_MEM_SIZE"))
            except Exception:  # CPU devices report no memory size: the host's
                import os

                total = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
            out.append(DeviceInfo(self.name, i, f"{dev}: {name}", total, total))
        return out

    def torch_device(self, index: int) -> torch.device:
        return torch.device("cpu")  # OpenVINO takes and returns host tensors

    def prepare_stage(self, module: nn.Module, index: int, *, threads: int | None = None) -> nn.Module:
        raise BackendUnavailable("openvino: compiling a stage with torch.compile(backend='openvino') is not in this "
                                 "version of hetc yet; serve the plan with --emulate meanwhile.")


BACKEND = OpenVinoBackend()
