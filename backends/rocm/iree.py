"""IREE toolchain (AMD GPUs through HIP; NVIDIA sm_80 through CUDA): an exported stage →
torch-mlir import → `iree-compile` → a `.vmfb` for the profile's GPU architecture, plus an
llvm-cpu `.vmfb` from the same import that runs here for the numerical check. The modules hold no
weights: they read them at start as IREE parameters (backends/rocm/iree_params.py).

IREE 3.13 has no sm_90 / sm_100 target (iree-org/iree#22147): such a target is refused with
that reason rather than built for something else.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import torch

from hetc.stage import AttentionForm
from hetc.backends.rocm.iree_params import PARAMETER_SCOPE
from hetc.backends.toolchain import Artifact, CompiledStep, ToolchainUnavailable, WeightSource, read_weight_table, write_weight_table

__all__ = ["TOOLCHAIN", "IreeToolchain"]

_CPU = ["--iree-hal-target-device=local", "--iree-hal-local-target-device-backends=llvm-cpu", "--iree-llvmcpu-target-cpu=host"]


def _device_flags(target: str) -> list[str]:
    if re.fullmatch(r"gfx\d+[a-z]?", target):
        return ["--iree-hal-target-device=hip", f"--iree-rocm-target={target}"]
    m = re.fullmatch(r"sm_(\d+)", target)
    if m and int(m.group(1)) < 90:
        return ["--iree-hal-target-device=cuda", f"--iree-cuda-target={target}"]
    if m:
        raise ToolchainUnavailable(
            f"IREE 3.13 has no CUDA target {target} (iree-org/iree#22147: sm_90 and newer are missing); use the Inductor toolchain for this device."
        )
    raise ToolchainUnavailable(f"IREE builds for AMD gfx targets (gfx942, gfx90a) and NVIDIA sm_80; {target!r} is neither.")


class IreeToolchain:
    name = "iree"
    form = AttentionForm.GATHER

    def version(self) -> str:
        try:
            import iree.compiler  # noqa: F401
            import torch_mlir  # noqa: F401
            from importlib.metadata import version
        except ImportError:
            raise ToolchainUnavailable(
                "IREE needs iree-base-compiler, iree-base-runtime and torch-mlir: `make setup` installs them (torch-mlir with --no-deps)."
            ) from None
        return f"iree {version('iree-base-compiler')}, torch-mlir {version('torch-mlir')}"

    def build(self, program: torch.export.ExportedProgram, out_dir: Path, *, target: str, stem: str, weight_names: dict[str, str] | None = None) -> Artifact:
        ver = self.version()
        flags = _device_flags(target)
        import iree.compiler as ic

        from hetc.backends.rocm.iree_params import import_without_weights

        # decomposed first: torch 2.13's default export is not fully functional for iree-compile
        mlir, table = out_dir / f"{stem}.mlir", out_dir / f"{stem}.iree-weights.json"
        mlir.write_text(import_without_weights(program.run_decompositions(), weight_names or {}))
        write_weight_table(table, program, weight_names, named_only=True)
        files = [Path(mlir.name), Path(table.name)]
        for name, extra in ((target, flags), ("llvm-cpu", _CPU)):
            out = out_dir / f"{stem}.{name}.vmfb"
            try:
                ic.compile_file(str(mlir), input_type="torch", extra_args=extra, output_file=str(out))
            except ic.CompilerToolError as e:
                why = next((ln for ln in str(e).splitlines() if "error:" in ln), str(e).splitlines()[0])
                raise ToolchainUnavailable(f"iree-compile failed for {name}: {why.strip()[:300]}") from None
            files.append(Path(out.name))
        return Artifact(
            toolchain=self.name,
            version=ver,
            target=target,
            files=files,
            runnable_here=True,
            notes=[
                f"{files[2]} for {target} ({' '.join(flags)}); {files[3]} from the same import runs here (llvm-cpu) for the check",
                f"weights: none in the modules (IREE parameters, scope {PARAMETER_SCOPE!r}); {table.name} names the model weights they load at start",
            ],
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
        import iree.runtime as rt

        from hetc.backends.rocm.iree_params import parameters_module

        if weights is None:
            raise ToolchainUnavailable("an IREE stage loads the model's weights at start: none were given.")
        cpu = next(f for f in artifact.files if f.name.endswith(".llvm-cpu.vmfb"))
        table = next(f for f in artifact.files if f.name.endswith(".iree-weights.json"))
        config = rt.Config("local-task" if threads != 1 else "local-sync")
        params, arrays = parameters_module(config.vm_instance, read_weight_table(out_dir / table), weights)
        ctx = rt.SystemContext(
            vm_modules=[params, rt.create_hal_module(config.vm_instance, config.device), rt.VmModule.mmap(config.vm_instance, str(out_dir / cpu))],
            config=config,
        )
        main = ctx.modules.module["main"]

        def step(*tensors: torch.Tensor, _weights=arrays) -> list[torch.Tensor]:
            out = main(*[t.numpy() for t in tensors])
            out = out if isinstance(out, (list, tuple)) else [out]
            return [torch.from_numpy(np.asarray(o.to_host())) for o in out]

        return step


TOOLCHAIN = IreeToolchain()
