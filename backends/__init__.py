"""Device backends, one folder per family: cpu, cuda, rocm, gaudi, openvino.

`get_backend(name)` returns the backend object; its `detect()` fails with a clear message
(BackendUnavailable) when the hardware or the library is absent.
"""

from __future__ import annotations

import importlib

from hetc.backends.base import Backend, BackendUnavailable, DeviceInfo

__all__ = ["BACKENDS", "Backend", "BackendUnavailable", "DeviceInfo", "get_backend"]

BACKENDS = ("cpu", "cuda", "rocm", "gaudi", "openvino")


def get_backend(name: str) -> Backend:
    """The backend called `name` (one of BACKENDS).

    Raises:
        BackendUnavailable: an unknown name.
    """
    if name not in BACKENDS:
        raise BackendUnavailable(f"unknown backend {name!r}; known: {', '.join(BACKENDS)}.")
    return importlib.import_module(f"hetc.backends.{name}").BACKEND
