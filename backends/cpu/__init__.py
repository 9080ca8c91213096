"""CPU backend: torch on the host. One device, `cpu:0`, the whole host."""

from __future__ import annotations

import os

import torch
from torch import nn

from hetc.host import cpu_name
from hetc.backends.base import Backend, DeviceInfo
from hetc.stage import RunnableStage

__all__ = ["BACKEND", "CpuBackend"]


def _meminfo() -> tuple[int, int]:
    """(total, available) host bytes from /proc/meminfo; sysconf where there is none."""
    try:
        vals = {}
        with open("/proc/meminfo") as f:
            for line in f:
                key, rest = line.split(":", 1)
                vals[key] = int(rest.split()[0]) * 1024
        return vals["MemTotal"], vals.get("MemAvailable", vals["MemFree"])
    except (OSError, KeyError, ValueError):
        page = os.sysconf("SC_PAGE_SIZE")
        return os.sysconf("SC_PHYS_PAGES") * page, os.sysconf("SC_AVPHYS_PAGES") * page


class CpuBackend(Backend):
    name = "cpu"
    dist_backend = "gloo"
    requires = "nothing beyond torch"

    def detect(self) -> list[DeviceInfo]:
        total, free = _meminfo()
        return [DeviceInfo("cpu", 0, f"{cpu_name()} ({os.cpu_count()} cores)", total, free)]

    def torch_device(self, index: int) -> torch.device:
        return torch.device("cpu")

    def prepare_stage(self, stage: RunnableStage, index: int, *, threads: int | None = None) -> RunnableStage:
        """Eager stages and every toolchain's CPU lowering run here as built (a toolchain's own
        thread count was set when it loaded the artifact)."""
        # several stage workers may share one host: each gets its own slice of the cores
        if threads:
            torch.set_num_threads(threads)
        if isinstance(stage, nn.Module):
            stage.eval()
        return stage

    def to_device(self, t: torch.Tensor, index: int) -> torch.Tensor:
        return t

    def to_host(self, t: torch.Tensor) -> torch.Tensor:
        return t


BACKEND = CpuBackend()
