"""ONNX toolchain: an exported stage → `.onnx` (opset 20, torch's dynamo exporter), run by
ONNX Runtime. The model is provider-neutral: CPU here; CUDA, ROCm/MIGraphX or OpenVINO
execution providers where those devices are.
"""

from __future__ import annotations

import contextlib
import io
import logging
import warnings
from pathlib import Path

import torch

from hetc.stage import AttentionForm
from hetc.backends.toolchain import Artifact, CompiledStep, ToolchainUnavailable, WeightSource

__all__ = ["TOOLCHAIN", "OnnxToolchain"]


def _ort():
    try:
        import onnxruntime
    except ImportError:
        raise ToolchainUnavailable("ONNX Runtime is not installed: pip install 'hetc[compile]' (onnxruntime).") from None
    return onnxruntime


class OnnxToolchain:
    name = "onnx"
    form = AttentionForm.GATHER

    def version(self) -> str:
        try:
            import onnx  # noqa: F401
            import onnxscript  # noqa: F401
        except ImportError:
            raise ToolchainUnavailable("the ONNX exporter needs onnx and onnxscript: pip install 'hetc[compile]'.") from None
        return f"onnxruntime {_ort().__version__}, torch.onnx {torch.__version__.split('+')[0]}"

    def build(self, program: torch.export.ExportedProgram, out_dir: Path, *, target: str, stem: str, weight_names: dict[str, str] | None = None) -> Artifact:
        self.version()
        logging.getLogger("torch.onnx").setLevel(logging.ERROR)  # one line per op set it skips
        with contextlib.redirect_stdout(io.StringIO()), warnings.catch_warnings():  # and it prints its progress
            warnings.simplefilter("ignore")
            torch.onnx.export(program, (), str(out_dir / f"{stem}.onnx"), dynamo=True, external_data=True)
        files = [Path(f"{stem}.onnx")] + ([Path(f"{stem}.onnx.data")] if (out_dir / f"{stem}.onnx.data").exists() else [])
        return Artifact(
            toolchain=self.name,
            version=self.version(),
            target=target,
            files=files,
            runnable_here=True,
            notes=["provider-neutral ONNX; checked here with CPUExecutionProvider", "weights: ONNX external data beside the graph (.onnx.data): no 2 GB limit"],
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
        ort = _ort()
        opts = ort.SessionOptions()
        if threads:
            opts.intra_op_num_threads = threads
        if lean:  # the external data stays mapped; prepacking would copy every MatMul weight (2-3x faster steps)
            opts.add_session_config_entry("session.disable_prepacking", "1")
        session = ort.InferenceSession(str(out_dir / artifact.files[0]), opts, providers=["CPUExecutionProvider"])
        names = [i.name for i in session.get_inputs()]

        def step(*tensors: torch.Tensor) -> list[torch.Tensor]:
            out = session.run(None, {n: t.numpy() for n, t in zip(names, tensors)})
            return [torch.from_numpy(o) for o in out]

        return step


TOOLCHAIN = OnnxToolchain()
