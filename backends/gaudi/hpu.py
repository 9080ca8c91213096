"""Intel Gaudi: the exported stage (`.pt2`) for the HPU bridge, compiled on the device by
`torch.compile(backend="hpu_backend")` (shape buckets avoid recompiles, as vllm-gaudi does).
The program is saved without its weights (backends/exported.py).
`habana_frameworks.torch` ships with Intel's Gaudi software stack, not on the package
registries: without it the program is written and cannot run here.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import torch

from hetc.backends.exported import save_without_weights
from hetc.stage import AttentionForm
from hetc.backends.toolchain import Artifact, CompiledStep, ToolchainUnavailable, WeightSource

__all__ = ["TOOLCHAIN", "HpuToolchain"]

_MISSING = (
    "habana_frameworks.torch is not installed (it ships with Intel's Gaudi software stack, not on PyPI): the HPU bridge runs this program on a Gaudi host"
)


class HpuToolchain:
    name = "hpu"
    form = AttentionForm.GATHER

    def version(self) -> str:
        if importlib.util.find_spec("habana_frameworks") is None:
            return "exported program only (no habana_frameworks here)"
        from importlib.metadata import version

        return f"habana-torch-plugin {version('habana-torch-plugin')}"

    def build(self, program: torch.export.ExportedProgram, out_dir: Path, *, target: str, stem: str, weight_names: dict[str, str] | None = None) -> Artifact:
        path = out_dir / f"{stem}.hpu.pt2"
        save_without_weights(program, path, weight_names or {})
        here = importlib.util.find_spec("habana_frameworks") is not None
        notes = ["weights: none in the program (meta tensors); hetc.backends.exported.load_with_weights fills them from the model at start"]
        return Artifact(
            toolchain=self.name,
            version=self.version(),
            target=target,
            files=[Path(path.name)],
            runnable_here=False,
            notes=notes if here else [*notes, _MISSING],
        )

    def load(
        self,
        artifact: Artifact,
        out_dir: Path,
        *,
        threads: int | None = None,
        kv_dtype: torch.dtype = torch.float32,
        weights: WeightSource | None = None,
        lean: bool = False,
    ) -> CompiledStep:
        raise ToolchainUnavailable(f"an HPU stage runs on a Gaudi device through the HPU bridge; {_MISSING}.")


TOOLCHAIN = HpuToolchain()
