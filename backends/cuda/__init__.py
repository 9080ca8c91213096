"""CUDA backend (NVIDIA): torch's CUDA device API, NCCL between devices of one node.

Needs: an NVIDIA GPU, its driver, and a CUDA build of torch (`torch.version.cuda` set).
Device placement and transfers are plain torch; the eager stage's decode steps replay from CUDA
graphs (runtime/cuda_graphs.py) with attention over the paged KV in a Triton kernel
(paged_decode.py); tensor-parallel stages run their collectives on NCCL (runtime/groups.py).
"""

from __future__ import annotations

import torch

from hetc.backends.base import BackendUnavailable, CudaApiBackend

__all__ = ["BACKEND", "CudaBackend"]


class CudaBackend(CudaApiBackend):
    name = "cuda"
    dist_backend = "nccl"
    requires = "an NVIDIA GPU with its driver and a CUDA build of torch (pip install torch from the CUDA index)"

    def check(self) -> None:
        if torch.version.cuda is None or getattr(torch.version, "hip", None):
            build = "a ROCm" if getattr(torch.version, "hip", None) else "a CPU-only"
            raise BackendUnavailable(f"cuda: this torch ({torch.__version__}) is {build} build; the cuda backend needs {self.requires}.")
        if not torch.cuda.is_available():
            raise BackendUnavailable(
                f"cuda: torch {torch.__version__} sees no NVIDIA GPU (driver missing, or "
                f"CUDA_VISIBLE_DEVICES hides them); the cuda backend needs {self.requires}."
            )


BACKEND = CudaBackend()
