"""OpGraph: the exported graph with every node's cost terms.

Each compute node gets its FLOPs and bytes as polynomials in the captured program's
token symbol: with a batch of one sequence of s tokens, T = s tokens are processed at
context L = s, so `c0 + c1·s + c2·s²` reads as a constant, a part ∝ T and a part ∝ T·L
(attention). FLOPs are split into matmul-class FLOPs (what `torch.utils.flop_counter`
counts) and other FLOPs (one per output element of elementwise and reduction ops).
Nodes with a T·L part are tagged as attention, with the K/V bytes they keep per token.
Nothing here depends on module or attribute names: only on ops, shapes and data flow.
"""

from __future__ import annotations

import math
from typing import Any, cast

import sympy
import torch
from torch.export import ExportedProgram
from torch.fx import Node

from hetc.partitioner.capture.terms import ATTENTION_OPS, CONV_OPS, DTYPE_BYTES, MATMUL_OPS, VIEW_OPS, OpGraph, OpNode, Terms

__all__ = ["Terms", "OpNode", "OpGraph", "build_graph", "DTYPE_BYTES", "TORCH_DTYPES"]

# a plan dtype as torch runs it (fp8 plans run bf16 math on the host)
TORCH_DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16, "fp8": torch.bfloat16}


def _short(target) -> str:
    name = getattr(target, "__name__", None) or str(target)
    if hasattr(target, "_opname"):
        name = target._opname
    return name.split(".")[0]


def _expr(x) -> sympy.Expr:
    if isinstance(x, torch.SymInt):
        return x.node.expr
    return sympy.Integer(int(x))


def _numel(t) -> sympy.Expr:
    if not isinstance(t, torch.Tensor):
        return sympy.Integer(0)
    return sympy.Mul(*[_expr(d) for d in t.shape]) if t.dim() else sympy.Integer(1)


def _vals(v) -> list[torch.Tensor]:
    if isinstance(v, torch.Tensor):
        return [v]
    if isinstance(v, (list, tuple)):
        return [x for x in v if isinstance(x, torch.Tensor)]
    return []


class _Poly:
    """Turns size expressions into Terms in the token symbol; other symbols take fixed values."""

    def __init__(self, token: sympy.Symbol | None, fixed: dict[sympy.Symbol, int]):
        self.token, self.fixed = token, fixed

    def terms(self, e: sympy.Expr, scale: float = 1.0) -> Terms:
        e = sympy.sympify(e).subs(self.fixed) if self.fixed else sympy.sympify(e)
        if self.token is None or not e.has(self.token):
            return Terms(float(e) * scale)
        p = sympy.Poly(sympy.expand(e), self.token)
        c = {m[0]: float(v) for m, v in zip(p.monoms(), p.coeffs())}
        if max(c) > 2:
            raise ValueError(f"cost of degree {max(c)} in tokens: {e}")
        return Terms(c.get(0, 0.0) * scale, c.get(1, 0.0) * scale, c.get(2, 0.0) * scale)


def _matmul_flops(op: str, node: Node, out: torch.Tensor) -> sympy.Expr:
    args: list[Any] = [a.meta.get("val") if isinstance(a, Node) else a for a in node.args]
    if op == "linear":
        return 2 * _numel(out) * _expr(args[1].shape[-1])
    if op in ("addmm", "baddbmm", "addbmm"):
        a = args[1]
    elif op == "einsum":
        return 2 * _numel(out) * _expr(args[1][0].shape[-1])  # best effort: contraction on the last dim
    else:
        a = args[0]
    return 2 * _numel(out) * _expr(a.shape[-1])


def _attention_flops(node: Node) -> sympy.Expr:
    args: Any = node.args  # fx Arguments: tensors here
    q, k, v = (a.meta["val"] for a in args[:3])
    # scores q·kᵀ and weights·v: 2·B·H·Sq·Skv·(dk + dv)
    b_h_sq = _numel(q) / _expr(q.shape[-1])
    return 2 * b_h_sq * _expr(k.shape[-2]) * (_expr(q.shape[-1]) + _expr(v.shape[-1]))


def _conv_flops(node: Node, out: torch.Tensor) -> sympy.Expr:
    args: Any = node.args  # fx Arguments: nodes and flags here
    w = args[1].meta["val"]  # [C_out, C_in/groups, *k] (transposed: [C_in, C_out/groups, *k]): groups built in
    transposed = bool(args[6]) if len(args) > 6 and isinstance(args[6], bool) else False
    if transposed:
        return 2 * _numel(args[0].meta["val"]) * _expr(w.shape[1]) * math.prod(w.shape[2:])
    return 2 * _numel(out) * _expr(w.shape[1]) * math.prod(int(d) for d in w.shape[2:])


def _kv_source_bytes(node: Node, poly: _Poly) -> float:
    """Per-token bytes of the K or V tensor feeding attention, before any GQA expansion."""
    best = None
    cur: Any = node  # a Node until the walk ends on None
    while True:
        val = cur.meta.get("val")
        if isinstance(val, torch.Tensor):
            t = poly.terms(_numel(val), val.element_size()).per_token
            if t > 0:
                best = t if best is None else min(best, t)
        if cur.op != "call_function" or _short(cur.target) not in VIEW_OPS | {"clone", "contiguous", "repeat_interleave", "to", "_to_copy"}:
            break
        cur = next((a for a in cur.args if isinstance(a, Node)), None)
        if cur is None:
            break
    return best or 0.0


def _weight_nk(ep: ExportedProgram, fqns: list[str], moe: dict | None) -> float:
    """N·K of the weight a matmul multiplies by (per expert when the weight stacks experts)."""
    for fqn in fqns:
        t = ep.state_dict[fqn]
        if t.dim() >= 2:
            n = float(t.numel())
            if t.dim() == 3 and moe and t.shape[0] == moe["num_experts"]:
                n /= moe["num_experts"]
            return n
    return 0.0


def _is_noop(op: str, ins: list, outs: list) -> bool:
    """Casts to the tensor's own dtype and `contiguous` of a contiguous tensor return their input."""
    if len(ins) != 1 or len(outs) != 1:
        return False
    if op in ("to", "_to_copy", "type_as"):
        return ins[0].dtype == outs[0].dtype
    if op == "contiguous":
        try:
            return bool(ins[0].is_contiguous())
        except Exception:  # symbolic strides that cannot be decided: assume a copy
            return False
    return False


def build_graph(ep: ExportedProgram, *, weight_dtype: str, moe: dict | None = None, expert_weight_bytes: float | None = None) -> OpGraph:
    """Annotate every node of `ep` with its cost terms.

    Args:
        ep: the exported program (meta tensors are fine).
        weight_dtype: dtype of the weights as they will be stored (sets parameter bytes).
        moe: `{num_experts, top_k}` from the model config, to tag expert nodes.
        expert_weight_bytes: bytes per element of the stacked expert weights where the checkpoint
            stores them in a format of their own (gpt-oss: MXFP4); None: the weight dtype's.
    """
    sig = ep.graph_signature
    param_of = cast("dict[str, str]", dict(sig.inputs_to_parameters))
    buffers = set(sig.inputs_to_buffers) | set(getattr(sig, "inputs_to_lifted_tensor_constants", {}))
    # tied weights: several names, one tensor
    by_id: dict[int, str] = {}
    aliases: dict[str, str] = {}
    for name, t in ep.state_dict.items():
        aliases[name] = by_id.setdefault(id(t), name)
    wbytes = DTYPE_BYTES[weight_dtype]

    gm = ep.graph_module
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    syms = sorted(
        {
            s
            for n in placeholders
            if n.name not in param_of and n.name not in buffers
            for d in getattr(n.meta.get("val"), "shape", ())
            if isinstance(d, torch.SymInt)
            for s in d.node.expr.free_symbols
        },
        key=str,
    )
    token = syms[0] if syms else None
    fixed = {s: max(1, int(ep.range_constraints[s].lower)) for s in syms[1:] if s in ep.range_constraints}
    poly = _Poly(token, fixed)

    param_bytes: dict[str, float] = {}
    packed: dict[str, float] = {}
    for ph, fqn in param_of.items():
        t = ep.state_dict[fqn]
        canon = aliases.get(fqn, fqn)
        elem = wbytes if t.is_floating_point() else t.element_size()
        if expert_weight_bytes is not None and moe and t.dim() == 3 and t.shape[0] == moe["num_experts"]:
            elem = packed[canon] = expert_weight_bytes  # the experts' matrices, not their 2-D biases
        param_bytes[canon] = t.numel() * elem

    index: dict[Node, int] = {}
    nodes: list[OpNode] = []
    inputs: list[list[int]] = []
    outb: list[Terms] = []
    recomputable: list[bool] = []
    uses_param: list[bool] = []
    dep_param: dict[Node, bool] = {}
    weight_views: set[Node] = set()  # views of parameters (a transposed stacked expert weight): weights, not activations
    for ph in placeholders:
        dep_param[ph] = ph.name in param_of

    def node_inputs(n: Node) -> list[Node]:
        return [a for a in n.all_input_nodes]

    for n in gm.graph.nodes:
        if n.op != "call_function":
            continue
        ins = node_inputs(n)
        # higher-order ops (wrap_with_set_grad_enabled, ...) read a submodule: look through it
        sub = [getattr(gm, cast(str, a.target)) for a in ins if a.op == "get_attr" and isinstance(getattr(gm, cast(str, a.target), None), torch.fx.GraphModule)]
        op = _short(n.target)
        val = n.meta.get("val")
        outs = _vals(val)
        my_params = tuple(dict.fromkeys(aliases.get(param_of[a.name], param_of[a.name]) for a in ins if a.name in param_of))
        dep_param[n] = any(dep_param.get(a, False) for a in ins)
        on = OpNode(name=n.name, op=op, params=my_params)
        out_numel = sum((_numel(t) for t in outs), sympy.Integer(0))
        out_bytes = sum((_numel(t) * t.element_size() for t in outs), sympy.Integer(0))
        if op in VIEW_OPS and ins and all(a.name in param_of or a in weight_views for a in ins):
            weight_views.add(n)
        act_in: list[Any] = [a.meta.get("val") for a in ins if a.name not in param_of and a not in weight_views and isinstance(a.meta.get("val"), torch.Tensor)]
        in_bytes = sum((_numel(t) * t.element_size() for t in act_in), sympy.Integer(0))
        if op in VIEW_OPS or sub and not outs:
            on.is_view = True
        elif op in ATTENTION_OPS:
            on.matmul_flops = poly.terms(_attention_flops(n))
            on.act_bytes = poly.terms(in_bytes + out_bytes)
        elif op in MATMUL_OPS or "grouped_mm" in op:
            on.matmul_flops = poly.terms(_matmul_flops(op if op in MATMUL_OPS else "mm", n, outs[0]))
            on.act_bytes = poly.terms(in_bytes + out_bytes)
            on.weight_nk = _weight_nk(ep, [param_of[a.name] for a in ins if a.name in param_of], moe)
        elif op in CONV_OPS:
            on.matmul_flops = poly.terms(_conv_flops(n, outs[0]))
            on.act_bytes = poly.terms(in_bytes + out_bytes)
        elif op in ("embedding", "index", "gather", "index_select") and my_params:
            # a gather reads only the rows it returns
            on.act_bytes = poly.terms(out_bytes * 2)
            on.gather = True
        elif sub:
            inner = sum(
                (_numel(x.meta["val"]) for g in sub for x in g.graph.nodes if x.op == "call_function" and isinstance(x.meta.get("val"), torch.Tensor)),
                sympy.Integer(0),
            )
            on.other_flops = poly.terms(inner)
            on.act_bytes = poly.terms(in_bytes + out_bytes)
        else:
            on.other_flops = poly.terms(out_numel) if any(t.is_floating_point() for t in outs) else Terms()
            on.act_bytes = poly.terms(in_bytes + out_bytes)
            on.noop = _is_noop(op, act_in, outs)
        if on.matmul_flops.per_token_ctx > 0:
            on.attention = True
            if op in ATTENTION_OPS:
                on.kv_bytes_per_token = sum(_kv_source_bytes(a, poly) for a in n.args[1:3] if isinstance(a, Node))
            else:  # eager attention: the second operand of q·kᵀ and of weights·v
                b = n.args[1] if op != "baddbmm" else n.args[2]
                if isinstance(b, Node) and b.name not in param_of:
                    on.kv_bytes_per_token = _kv_source_bytes(b, poly)
        if moe and (
            "grouped_mm" in op
            or any(
                ep.state_dict[param_of[a.name]].dim() == 3 and ep.state_dict[param_of[a.name]].shape[0] == moe["num_experts"] for a in ins if a.name in param_of
            )
        ):
            on.moe = dict(moe)
        index[n] = len(nodes)
        nodes.append(on)
        inputs.append([index[a] for a in ins if a in index])
        outb.append(poly.terms(out_bytes))
        recomputable.append(not dep_param[n])
        uses_param.append(bool(my_params) or any(a.op == "placeholder" and a.name in param_of for a in ins))

    # nodes like transpose(param) forward the parameter to the real consumer (grouped_mm), through
    # chains of views (gpt-oss's sinks: reshape → expand → cat), each passing it on in turn
    for i, on in enumerate(nodes):
        if on.is_view and on.params:
            for j in range(i + 1, len(nodes)):
                if i in inputs[j]:
                    nodes[j].params = tuple(dict.fromkeys(nodes[j].params + on.params))
                    nodes[j].moe = nodes[j].moe or on.moe
                    if not nodes[j].is_view and nodes[j].matmul_flops.per_token > 0 and not nodes[j].weight_nk:
                        nodes[j].weight_nk = _weight_nk(ep, list(on.params), nodes[j].moe)
            on.params = ()
    out_node = next(n for n in gm.graph.nodes if n.op == "output")
    graph_outputs = {index[a] for a in out_node.all_input_nodes if a in index}
    return OpGraph(nodes, inputs, outb, recomputable, uses_param, graph_outputs, param_bytes, aliases, str(token) if token is not None else None, packed)
