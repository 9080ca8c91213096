"""Weights out of IREE modules: the torch-mlir import refers to each weight as an IREE parameter
(`#stream.parameter.named<"model"::"<weight name>">`) instead of inlining its bytes, and the
loaded module reads the parameters at start from an in-memory parameter index filled from the
model's weights (its safetensors, mapped, or seeded random ones).

So the `.mlir` and every `.vmfb` built from it are the size of the code, not of the weights, the
import never reads a weight's bytes, and one module serves whichever weights are handed to it.
"""

from __future__ import annotations

from typing import Any

import torch

from hetc.backends.toolchain import IR_ELEMENT_TYPES, WeightSource, WeightTable

__all__ = ["PARAMETER_SCOPE", "import_without_weights", "parameters_module"]

PARAMETER_SCOPE = "model"  # the scope the module's parameter references name


def import_without_weights(program: torch.export.ExportedProgram, weight_names: dict[str, str]) -> str:
    """`program` imported by torch-mlir as textual MLIR whose parameters in `weight_names` are IREE
    parameter globals named by the model's weight names (other constants stay inline).

    Text, not bytecode: the parameter attributes belong to IREE's `stream` dialect, which torch-mlir's
    context does not know; iree-compile parses them from text.
    """
    from torch_mlir import ir
    from torch_mlir.dialects import torch as torch_d
    from torch_mlir.extras.fx_decomp_util import get_decomposition_table
    from torch_mlir.extras.fx_importer import FxImporter, FxImporterHooks

    class Externalize(FxImporterHooks):
        def __init__(self) -> None:
            self.globals: dict[str, str] = {}  # weight name → its global's symbol

        def resolve_input(self, gni: Any, value: Any, info: Any) -> Any:
            key = weight_names.get(info.input_spec.target or "")
            if key is None or not isinstance(value, torch.Tensor):
                return None
            shape = "".join(f"{d}x" for d in value.shape)
            tensor = ir.RankedTensorType.parse(f"tensor<{shape}{IR_ELEMENT_TYPES[value.dtype]}>")
            if key not in self.globals:
                self.globals[key] = sym = f"__weight_{len(self.globals)}"
                with ir.InsertionPoint.at_block_begin(gni.fx_importer.module.body):
                    ir.Operation.create(
                        "util.global",
                        attributes={
                            "sym_name": ir.StringAttr.get(sym),
                            "sym_visibility": ir.StringAttr.get("private"),
                            "type": ir.TypeAttr.get(tensor),
                            "initial_value": ir.Attribute.parse(f'#stream.parameter.named<"{PARAMETER_SCOPE}"::"{key}"> : {tensor}'),
                        },
                    )
            load = ir.Operation.create("util.global.load", results=[tensor], attributes={"global": ir.FlatSymbolRefAttr.get(self.globals[key])}).result
            vtensor = gni._cc.get_vtensor_type(value.size(), value.dtype)
            return ir.Operation.create("torch_c.from_builtin_tensor", results=[vtensor], operands=[load]).result

    context = ir.Context()
    torch_d.register_dialect(context)
    context.allow_unregistered_dialects = True  # util / stream / torch_c: IREE's, parsed by iree-compile
    importer = FxImporter(context=context, hooks=Externalize())
    # torch-mlir's own decompositions, as its export_and_import applies them
    importer.import_program(program.run_decompositions(get_decomposition_table()), func_name="main")
    return str(importer.module)


def parameters_module(instance: Any, table: WeightTable, weights: WeightSource) -> tuple[Any, list]:
    """An IREE `io_parameters` module serving the weights `table` names, read from `weights`.

    Returns:
        The module and the host arrays it reads (kept alive by the caller: the index refers to them,
        and a weight of the stage's dtype from safetensors is a view of the mapped file, not a copy).
    """
    import iree.runtime as rt

    index = rt.ParameterIndex()
    arrays, seen = [], set()
    for entry in table.values():
        if entry.name in seen:
            continue
        seen.add(entry.name)
        t = weights.get(entry.name, torch.Size(entry.shape), entry.dtype).contiguous()
        raw = t.reshape(-1).view(torch.uint8).numpy()  # parameters are bytes (numpy has no bf16)
        index.add_buffer(entry.name, raw)
        arrays.append(raw)
    return rt.create_io_parameters_module(instance, index.create_provider(scope=PARAMETER_SCOPE)), arrays
