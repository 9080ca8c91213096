"""An exported stage saved as a `.pt2` without its weights, and loaded back with them.

`torch.export.save` writes every tensor of the program's state and copies each one's bytes on the
way (`_get_raw_tensor_bytes`): a stage of tens of GB would be a file of tens of GB and, for its
largest tensor, as much private memory. So the weights are saved as meta tensors (shape, dtype and
strides, no bytes) and the archive carries a weight table (`hetc-weights.json`, the format of
backends/toolchain.py) naming the model weight each one is; `load_with_weights` fills them from
the model's weights (its safetensors, mapped, or seeded random ones). The program's other state
(the rotary tables: small, not in the model's files) stays in the archive.
"""

from __future__ import annotations

import copy
from pathlib import Path

import torch
from torch import nn

from hetc.backends.toolchain import WeightSource, parse_weight_table, weight_table_text

__all__ = ["WEIGHT_TABLE", "load_with_weights", "save_without_weights"]

WEIGHT_TABLE = "hetc-weights.json"  # the archive's extra file: the program's weights → the model's


def save_without_weights(program: torch.export.ExportedProgram, path: Path, weight_names: dict[str, str]) -> None:
    """Save `program` to `path` with the weights `weight_names` names left out (meta tensors).

    Args:
        program: the exported stage (its weights untouched: a shallow copy is saved).
        path: the `.pt2` to write.
        weight_names: the program's parameters → the model's weight names.
    """
    lean = copy.copy(program)
    # a new dict on the copy (`state_dict` has no setter); the original program keeps its tensors
    lean._state_dict = {fqn: nn.Parameter(t.to("meta"), requires_grad=False) if fqn in weight_names else t for fqn, t in program.state_dict.items()}
    torch.export.save(lean, path, extra_files={WEIGHT_TABLE: weight_table_text(program, weight_names, named_only=True)})


def load_with_weights(path: Path, weights: WeightSource) -> torch.export.ExportedProgram:
    """The program `save_without_weights` wrote, its weights taken from `weights` (views of the
    mapped safetensors where they store the program's dtype: no copy)."""
    extra = {WEIGHT_TABLE: ""}
    program = torch.export.load(path, extra_files=extra)
    for fqn, e in parse_weight_table(extra[WEIGHT_TABLE]).items():
        program.state_dict[fqn] = nn.Parameter(weights.get(e.name, torch.Size(e.shape), e.dtype), requires_grad=False)
    return program
