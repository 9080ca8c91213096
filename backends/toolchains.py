"""Which toolchain lowers a stage for each backend, looked up by name so a toolchain whose
package is absent is a clear `ToolchainUnavailable`, never an import error or a silent skip."""

from __future__ import annotations

import importlib

from hetc.backends.toolchain import Toolchain, ToolchainUnavailable

__all__ = ["EVERY_STAGE", "TOOLCHAIN_NAMES", "device_toolchain", "toolchain"]

# backend → (toolchain name, module exposing TOOLCHAIN); a cpu stage is lowered to OpenVINO IR
# (Intel CPUs), though it serves on torch eager, measured faster here (BENCHMARKS.md).
_BY_BACKEND = {
    "openvino": ("openvino", "hetc.backends.openvino.toolchain"),
    "cpu": ("openvino", "hetc.backends.openvino.toolchain"),
    "rocm": ("iree", "hetc.backends.rocm.iree"),
    "cuda": ("inductor", "hetc.backends.cuda.inductor"),
    "gaudi": ("hpu", "hetc.backends.gaudi.hpu"),
}
_MODULES = {name: mod for name, mod in _BY_BACKEND.values()} | {"onnx": "hetc.backends.onnx.toolchain"}
TOOLCHAIN_NAMES = tuple(_MODULES)
EVERY_STAGE = ("onnx",)  # built for every stage beside its device's own toolchain


def device_toolchain(backend: str) -> str:
    """The toolchain that lowers stages of `backend`."""
    return _BY_BACKEND[backend][0]


def toolchain(name: str) -> Toolchain:
    """The toolchain `name` (openvino, onnx, iree, inductor, hpu).

    Raises:
        ToolchainUnavailable: its module is not part of this hetc build.
    """
    try:
        return importlib.import_module(_MODULES[name]).TOOLCHAIN
    except ModuleNotFoundError as e:
        if e.name and e.name.startswith("hetc."):
            raise ToolchainUnavailable(f"the {name} toolchain is not in this version of hetc ({e.name}).") from None
        raise ToolchainUnavailable(f"the {name} toolchain needs the Python package {e.name!r}, which is not installed: pip install 'hetc[compile]'.") from None
