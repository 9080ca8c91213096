"""The backend interface: what the runtime needs of a device family.

A backend knows its devices (detect, name, memory), makes a built stage (hetc/stage.py's
RunnableStage: torch eager modules or a toolchain's compiled step) run on one of them, and
moves tensors between the host and the device.
Backends import neither `hetc.partitioner` nor `hetc.runtime`: the runtime drives them.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass

import torch
from torch import nn

from hetc.stage import RunnableStage

__all__ = ["Backend", "BackendUnavailable", "CudaApiBackend", "DeviceInfo"]


class BackendUnavailable(RuntimeError):
    """The backend's hardware or library is absent; the message says what it needs."""


@dataclass(frozen=True, slots=True)
class DeviceInfo:
    backend: str  # cpu | cuda | rocm | gaudi | openvino
    index: int  # the backend's device index
    name: str  # marketing name, e.g. "NVIDIA H100 80GB HBM3"
    total_memory: int  # bytes
    free_memory: int  # bytes, at detection time


class Backend(ABC):
    """One device family. Instances are cheap; `detect()` raises BackendUnavailable when absent."""

    name: str = ""
    # what torch.distributed uses between two devices of this backend (gloo across vendors/hosts)
    dist_backend: str = "gloo"
    # what the backend needs, said to the user when it is absent
    requires: str = ""

    @abstractmethod
    def detect(self) -> list[DeviceInfo]:
        """The devices of this family on this host.

        Raises:
            BackendUnavailable: the library or the hardware is absent (the message says which).
        """

    def device_info(self, index: int) -> DeviceInfo:
        """One device by index; BackendUnavailable when there is no such device."""
        devices = self.detect()
        if not 0 <= index < len(devices):
            raise BackendUnavailable(f"{self.name}: device {index} requested, this host has {len(devices)} ({', '.join(d.name for d in devices) or 'none'}).")
        return devices[index]

    def free_memory(self, index: int) -> int:
        """Free bytes on device `index` now."""
        return self.device_info(index).free_memory

    @abstractmethod
    def torch_device(self, index: int) -> torch.device:
        """The torch device that holds tensors of device `index`."""

    def prepare_stage(self, stage: RunnableStage, index: int, *, threads: int | None = None) -> RunnableStage:
        """Make a built stage run on device `index` and return it. Here: a torch-eager stage moves to
        the device in inference mode; a compiled step is refused (its toolchain loaded it for the host
        CPU), unless the backend overrides this for the executors its devices run.

        Args:
            stage: the built stage (eager modules with their parameters, or a loaded artifact).
            index: the device index.
            threads: host threads the stage may use (CPU backends); None leaves the default.

        Raises:
            BackendUnavailable: the device is absent, or the stage's executor does not run on it.
        """
        if stage.executor != "torch" or not isinstance(stage, nn.Module):
            raise BackendUnavailable(
                f"{self.name}: a stage compiled by {stage.executor} runs on the host CPU only in "
                f"this version, not on a {self.name} device; serve with --executor torch (eager on "
                "the device) or with --emulate."
            )
        stage.to(self.torch_device(index)).eval()
        return stage

    def to_device(self, t: torch.Tensor, index: int) -> torch.Tensor:
        """Host → device (a no-op when already there)."""
        return t.to(self.torch_device(index), non_blocking=False)

    def to_host(self, t: torch.Tensor) -> torch.Tensor:
        """Device → host (what torch.distributed's gloo sends)."""
        return t.cpu()

    def synchronize(self, index: int) -> None:
        """Wait for queued work on device `index` (for timing)."""


class CudaApiBackend(Backend):
    """A family torch reaches through its `cuda` device API: NVIDIA under a CUDA build, AMD under a
    ROCm build (HIP underneath). Subclasses say, in `check`, whether this torch build and host have it."""

    @abstractmethod
    def check(self) -> None:
        """Raise BackendUnavailable (saying what is missing) unless this torch build drives the family's GPUs."""

    def detect(self) -> list[DeviceInfo]:
        self.check()
        out = []
        for i in range(torch.cuda.device_count()):
            free, total = torch.cuda.mem_get_info(i)
            out.append(DeviceInfo(self.name, i, torch.cuda.get_device_name(i), total, free))
        return out

    def torch_device(self, index: int) -> torch.device:
        self.check()
        return torch.device("cuda", index)

    def synchronize(self, index: int) -> None:
        torch.cuda.synchronize(index)
