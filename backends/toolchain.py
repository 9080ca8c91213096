"""The toolchain interface: how one vendor compiler lowers an exported stage.

A toolchain takes a stage as a `torch.export.ExportedProgram` whose signature is the
compiled-stage contract (`hetc/stage.py`), writes its artifact files into a folder and,
where it has a CPU target, loads them back as a callable of plain tensors. Toolchains
import neither `hetc.partitioner` nor `hetc.runtime`.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import torch

from hetc.stage import AttentionForm

# torch dtypes by their MLIR/OpenVINO element names (IREE parameters, OpenVINO precisions)
IR_ELEMENT_TYPES = {torch.float32: "f32", torch.bfloat16: "bf16", torch.float16: "f16", torch.float64: "f64"}

__all__ = [
    "Artifact",
    "CompiledStep",
    "Toolchain",
    "ToolchainUnavailable",
    "WeightEntry",
    "WeightSource",
    "WeightTable",
    "parse_weight_table",
    "read_weight_table",
    "weight_table_text",
    "write_weight_table",
]

# a loaded artifact: plain tensors in (the signature's order), plain tensors out
CompiledStep = Callable[..., Sequence[torch.Tensor]]


class WeightSource(Protocol):
    """The model's weights by name (hetc.weights: its safetensors, or seeded random ones)."""

    def get(self, name: str, shape: torch.Size, dtype: torch.dtype) -> torch.Tensor: ...


@dataclass(frozen=True, slots=True)
class WeightEntry:
    """One weight an artifact leaves out: the model's name for it, and the shape and dtype it takes."""

    name: str
    shape: tuple[int, ...]
    dtype: torch.dtype


WeightTable = dict[str, WeightEntry]  # the program's parameter → the model weight it is


def weight_table_text(program: torch.export.ExportedProgram, weight_names: dict[str, str] | None, *, named_only: bool = False) -> str:
    """An artifact's weight table (JSON): the state of `program` (only what `weight_names` names,
    with `named_only`) as the model weights the artifact loads at start."""
    names = weight_names or {}
    return json.dumps(
        {
            fqn: {"name": names.get(fqn, fqn), "shape": list(t.shape), "dtype": str(t.dtype).removeprefix("torch.")}
            for fqn, t in program.state_dict.items()
            if fqn in names or not named_only
        },
        indent=1,
    )


def write_weight_table(path: Path, program: torch.export.ExportedProgram, weight_names: dict[str, str] | None, *, named_only: bool = False) -> None:
    """`weight_table_text` written to `path`."""
    path.write_text(weight_table_text(program, weight_names, named_only=named_only))


def parse_weight_table(text: str) -> WeightTable:
    """The weight table `weight_table_text` wrote."""
    return {fqn: WeightEntry(name=e["name"], shape=tuple(e["shape"]), dtype=getattr(torch, e["dtype"])) for fqn, e in json.loads(text).items()}


def read_weight_table(path: Path) -> WeightTable:
    """The weight table `write_weight_table` wrote."""
    return parse_weight_table(path.read_text())


class ToolchainUnavailable(RuntimeError):
    """The toolchain cannot build or run here; the message says what is missing and how to get it."""


@dataclass(kw_only=True, slots=True)
class Artifact:
    """What one toolchain built for one stage.

    Args:
        toolchain: the toolchain's name (`openvino`, `onnx`, `iree`, `inductor`, `hpu`, ...).
        version: the toolchain's version string.
        target: what it was built for (`gfx942`, `sm_80`, `CPU`, `llvm-cpu`, ...).
        files: the artifact's files, relative to the output folder.
        runnable_here: whether `Toolchain.load` can run it on this host.
        notes: what a bf16/fp8 plan becomes, flags used, and other facts worth a manifest line.
    """

    toolchain: str
    version: str
    target: str
    files: list[Path]
    runnable_here: bool
    notes: list[str] = field(default_factory=list)


class Toolchain(Protocol):
    name: str
    form: AttentionForm  # the signature form it lowers (hetc/stage.py)

    def version(self) -> str:
        """The installed version. Raises ToolchainUnavailable when it is not installed."""
        ...

    def build(self, program: torch.export.ExportedProgram, out_dir: Path, *, target: str, stem: str, weight_names: dict[str, str] | None = None) -> Artifact:
        """Lower `program` for `target`, writing files named `stem.*` under `out_dir`.

        `weight_names` maps the program's parameters to the model's weight names: a toolchain whose
        artifact leaves the weights out records it, and `load` reads them by those names.

        Raises:
            ToolchainUnavailable: the toolchain or the target is not supported here (the reason).
        """
        ...

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
        """Load a built artifact to run on this host's CPU (`kv_dtype`: the KV blocks' dtype;
        `weights`: the model's weights, for artifacts that leave them out; `lean`: for a few runs
        only, such as `hetc compile`'s check — no private repacked copy of the weights where the
        runtime has the choice, at the cost of slower steps).

        Raises:
            ToolchainUnavailable: the artifact has no CPU target here.
        """
        ...
