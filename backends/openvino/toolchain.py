"""OpenVINO toolchain: an exported stage → OpenVINO IR (`.xml` + `.bin`), run on the host CPU.

The IR is device-independent: the same files serve an Intel GPU (`GPU.N`) and the CPU plugin,
which runs the numerical check. Traps (checked here): `save_model` compresses weights to fp16
unless told not to, and the CPU plugin runs bf16 on CPUs with AMX/AVX512-BF16 unless the
inference precision is pinned to f32.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from hetc.backends.toolchain import Artifact, CompiledStep, ToolchainUnavailable

__all__ = ["TOOLCHAIN", "OpenVinoToolchain"]


def _ov():
    try:
        import openvino
    except ImportError:
        raise ToolchainUnavailable("OpenVINO is not installed: pip install 'hetc[compile]' (openvino).") from None
    return openvino


class OpenVinoToolchain:
    name = "openvino"

    def version(self) -> str:
        return _ov().__version__.split("-")[0]

    def build(self, program: torch.export.ExportedProgram, out_dir: Path, *, target: str, stem: str) -> Artifact:
        ov = _ov()
        model = ov.convert_model(program)
        ov.save_model(model, out_dir / f"{stem}.xml", compress_to_fp16=False)  # keep the weights' own precision
        return Artifact(toolchain=self.name, version=self.version(), target=target,
                        files=[Path(f"{stem}.xml"), Path(f"{stem}.bin")], runnable_here=True,
                        notes=[f"IR for OpenVINO device {target}; checked here on the CPU plugin at f32"])

    def load(self, artifact: Artifact, out_dir: Path, *, threads: int | None = None) -> CompiledStep:
        ov = _ov()
        config = {"INFERENCE_PRECISION_HINT": "f32"}
        if threads:
            config["INFERENCE_NUM_THREADS"] = str(threads)
        compiled = ov.Core().compile_model(str(out_dir / artifact.files[0]), "CPU", config)
        request = compiled.create_infer_request()

        def step(*tensors: torch.Tensor) -> list[torch.Tensor]:
            out = request.infer([t.numpy() for t in tensors], share_inputs=True)
            return [torch.from_numpy(np.array(out[o])) for o in compiled.outputs]

        return step


TOOLCHAIN = OpenVinoToolchain()
