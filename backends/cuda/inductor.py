"""Inductor toolchain (NVIDIA): an exported stage → an AOTInductor package. The GPU package needs
a CUDA device and torch's CUDA build where `hetc compile` runs; on any host the same program is
packaged for the CPU (C++ kernels), which runs here for the numerical check and under
`--emulate`. TensorRT (torch-tensorrt) likewise needs a CUDA GPU even to import.

The package holds no weights (`package_constants_in_so=False`): `{stem}.weights.json` maps its
constants to the model's weight names, shapes and dtypes, and `load` hands it those weights from
the model's safetensors (by reference, not copied: `user_managed`); the program's other constants
(the rotary tables, where the package did not fold them) are in `{stem}.constants.safetensors`.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from hetc.stage import AttentionForm
from hetc.backends.toolchain import Artifact, CompiledStep, ToolchainUnavailable, WeightSource, read_weight_table, write_weight_table

__all__ = ["TOOLCHAIN", "InductorToolchain"]


class InductorToolchain:
    name = "inductor"
    form = AttentionForm.GATHER

    def version(self) -> str:
        return f"torch {torch.__version__} AOTInductor"

    def build(self, program: torch.export.ExportedProgram, out_dir: Path, *, target: str, stem: str, weight_names: dict[str, str] | None = None) -> Artifact:
        notes = []
        if torch.cuda.is_available():
            notes.append(f"a CUDA device is present: export the stage on it to package for {target}")
        else:
            notes.append(f"the {target} package needs a CUDA device and torch's CUDA build: run `hetc compile` on the GPU host; TensorRT needs the same")
        pkg, table = out_dir / f"{stem}.inductor-cpu.pt2", out_dir / f"{stem}.weights.json"
        write_weight_table(table, program, weight_names, named_only=True)
        # the program's other state (rotary tables: small, not the model's weights) goes beside it:
        # the package may keep them as constants to load, and the model has no tensor of that name
        extra = out_dir / f"{stem}.constants.safetensors"
        save_file({fqn: t.detach().contiguous() for fqn, t in program.state_dict.items() if fqn not in (weight_names or {})}, str(extra))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                torch._inductor.aoti_compile_and_package(program, package_path=str(pkg), inductor_configs={"aot_inductor.package_constants_in_so": False})
            except Exception as e:  # C++ toolchain or Inductor lowering failures: say which
                raise ToolchainUnavailable(f"AOTInductor (CPU) failed: {type(e).__name__}: {str(e).splitlines()[0][:300]}") from None
        notes.append(f"weights: none in the package; {table.name} names the model weights it loads at start")
        return Artifact(
            toolchain=self.name,
            version=self.version(),
            target=f"cpu (twin of {target})",
            files=[Path(pkg.name), Path(table.name), Path(extra.name)],
            runnable_here=True,
            notes=notes,
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
        if threads:
            torch.set_num_threads(threads)
        if weights is None:
            raise ToolchainUnavailable("an AOTInductor stage loads the model's weights at start: none were given.")
        runner = torch._inductor.aoti_load_package(str(out_dir / artifact.files[0]))
        table = read_weight_table(out_dir / artifact.files[1])
        wanted = set(runner.get_constant_fqns())  # the rest were folded into the code (rotary tables)
        constants = {fqn: weights.get(e.name, torch.Size(e.shape), e.dtype) for fqn, e in table.items() if fqn in wanted}
        if len(artifact.files) > 2:
            constants |= {fqn: t for fqn, t in load_file(str(out_dir / artifact.files[2])).items() if fqn in wanted}
        runner.load_constants(constants, check_full_update=True, user_managed=True)  # kept alive by `step`

        def step(*tensors: torch.Tensor, _weights=constants) -> list[torch.Tensor]:
            return list(runner(*tensors))

        return step


TOOLCHAIN = InductorToolchain()
