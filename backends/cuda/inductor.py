"""Inductor toolchain (NVIDIA): an exported stage → an AOTInductor package. The GPU package needs
a CUDA device and torch's CUDA build where `hetc compile` runs; on any host the same program is
packaged for the CPU (C++ kernels), which runs here for the numerical check and under
`--emulate`. TensorRT (torch-tensorrt) likewise needs a CUDA GPU even to import.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import torch

from hetc.stage import AttentionForm
from hetc.backends.toolchain import Artifact, CompiledStep, ToolchainUnavailable

__all__ = ["TOOLCHAIN", "InductorToolchain"]


class InductorToolchain:
    name = "inductor"
    form = AttentionForm.GATHER

    def version(self) -> str:
        return f"torch {torch.__version__} AOTInductor"

    def build(self, program: torch.export.ExportedProgram, out_dir: Path, *, target: str, stem: str) -> Artifact:
        notes = []
        if torch.cuda.is_available():
            notes.append(f"a CUDA device is present: export the stage on it to package for {target}")
        else:
            notes.append(f"the {target} package needs a CUDA device and torch's CUDA build: run `hetc compile` on "
                         "the GPU host; TensorRT needs the same")
        pkg = out_dir / f"{stem}.inductor-cpu.pt2"
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                torch._inductor.aoti_compile_and_package(program, package_path=str(pkg))
            except Exception as e:  # C++ toolchain or Inductor lowering failures: say which
                raise ToolchainUnavailable(f"AOTInductor (CPU) failed: {type(e).__name__}: "
                                           f"{str(e).splitlines()[0][:300]}") from None
        return Artifact(toolchain=self.name, version=self.version(), target=f"cpu (twin of {target})",
                        files=[Path(pkg.name)], runnable_here=True, notes=notes)

    def load(self, artifact: Artifact, out_dir: Path, *, threads: int | None = None,
             kv_dtype: torch.dtype = torch.float32) -> CompiledStep:
        if threads:
            torch.set_num_threads(threads)
        runner = torch._inductor.aoti_load_package(str(out_dir / artifact.files[0]))

        def step(*tensors: torch.Tensor) -> list[torch.Tensor]:
            return list(runner(*tensors))

        return step


TOOLCHAIN = InductorToolchain()
