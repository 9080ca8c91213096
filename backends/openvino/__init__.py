"""OpenVINO backend (Intel GPUs): plan device N of an `openvino` node is OpenVINO's `GPU.N`.

Needs: the `openvino` Python package (pip install openvino) and the Intel GPUs' compute
runtime (level-zero / OpenCL). `hetc compile` builds the stage's IR for the device and checks
it on the CPU plugin; `hetc serve --emulate` runs it there. Serving on the GPU itself needs
the KV blocks as GPU remote tensors that OpenVINO's paged attention writes in place, which
this version does not do: such a stage is refused with that reason, after its device is
checked (detect() lists the CPU plugin too, so plan indices are never matched by position).
"""

from __future__ import annotations

import torch

from hetc.backends.base import Backend, BackendUnavailable, DeviceInfo
from hetc.stage import RunnableStage

__all__ = ["BACKEND", "OpenVinoBackend"]


class OpenVinoBackend(Backend):
    name = "openvino"
    dist_backend = "gloo"
    requires = "the openvino Python package (pip install openvino) and, for Intel GPUs, their compute runtime"

    def _core(self):
        try:
            import openvino as ov  # noqa: PLC0415 — optional vendor library
        except ImportError:
            raise BackendUnavailable(f"openvino: the openvino package is not installed; the openvino backend needs {self.requires}.") from None
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

    def device_name(self, index: int) -> str:
        """OpenVINO's name of plan device `index`: `GPU.<index>`, when this host has it.

        Raises:
            BackendUnavailable: no such Intel GPU (the message lists what OpenVINO sees).
        """
        seen = self._core().available_devices
        name = f"GPU.{index}"
        # one Intel GPU is listed as plain "GPU"
        if name in seen or (index == 0 and "GPU" in seen):
            return name if name in seen else "GPU"
        raise BackendUnavailable(
            f"openvino: plan device {index} is OpenVINO's {name}, and this host's OpenVINO "
            f"devices are {', '.join(seen) or 'none'}; the openvino backend needs {self.requires} "
            "(or serve with --emulate, which runs the stage on the CPU plugin)."
        )

    def prepare_stage(self, stage: RunnableStage, index: int, *, threads: int | None = None) -> RunnableStage:
        device = self.device_name(index)
        raise BackendUnavailable(
            f"openvino: serving a stage on {device} needs its KV blocks as GPU remote tensors "
            "written in place by OpenVINO's paged attention, which this version of hetc does not "
            "do; serve the plan with --emulate (the same IR on the CPU plugin)."
        )


BACKEND = OpenVinoBackend()
