"""Profiles as the bound costs them: efficiencies that never fall as a step grows.

The bound covers the batches of an interval [b, top] with the costs at `top` (batches.py).
That is valid when, on every kind, a round's busy seconds per sequence do not grow with the
batch — which the analytic model guarantees when every efficiency it reads at a
batch-dependent size is nondecreasing in that size: matmul efficiency in GEMM rows M (each
weight size N·K), memory efficiency in bytes moved, gather efficiency in rows, decode
attention efficiency in the step's sequences (each context). The scalar
`efficiency` form is constant, so every hand-written profile qualifies; curves fitted by
`hetc profile` need not (a CPU's GEMM at M=2 can run slower than at M=1, and small
element-wise ops that stay in cache beat large ones).

For such a profile the bound uses its envelope: each curve replaced by its running maximum
along the batch-dependent axis (piecewise linear in the logs between knots, so the running
maximum of the knot values, interpolated, lies above the curve everywhere). Every op then
costs no more than the profile says, and costs per sequence are nonincreasing again: a valid,
looser bound, which the solver's notes state. Plans are always predicted with the profile itself.
"""

from __future__ import annotations

import itertools
from dataclasses import replace

from hetc.cluster import Node, Profile
from hetc.efficiency import AttentionCurve, Curve1D, Curve2D, DecodeAttentionCurve, GatherCurve

__all__ = ["falling_curves", "bound_node", "flat_node"]


def _rising(values: list[float]) -> list[float]:
    return list(itertools.accumulate(values, max))


def _top(values: list[float]) -> list[float]:
    return [max(values)] * len(values)


def _columns_rising(eff: list[list[float]], along=_rising) -> list[list[float]]:
    """The running maximum down each column (along the rows axis; `_top`: the column's maximum)."""
    return [list(r) for r in zip(*(along(list(col)) for col in zip(*eff)))]


def falling_curves(profile: Profile) -> list[str]:
    """The curves of `profile` whose efficiency falls somewhere as a step grows (none: the bound
    costs the profile as it is)."""
    c = profile.efficiency_curves
    if c is None:
        return []
    out = [f"matmul[{d}]" for d, t in c.matmul.items() if _columns_rising(t.eff) != t.eff]
    out += [
        name
        for name, curve in (
            ("memory", c.memory),
            *((f"memory_kinds[{k}]", v) for k, v in c.memory_kinds.items()),
            *((f"memory_ops[{k}]", v) for k, v in c.memory_ops.items()),
        )
        if curve is not None and _rising(curve.eff) != curve.eff
    ]
    if c.gather is not None and _columns_rising(c.gather.eff) != c.gather.eff:
        out.append("gather")
    out += [f"attention_decode[{d}]" for d, t in c.attention_decode.items() if _columns_rising(t.eff) != t.eff]
    return out


def _envelope(profile: Profile, flat: bool = False) -> Profile:
    c = profile.efficiency_curves
    assert c is not None
    along = _top if flat else _rising

    def one(curve: Curve1D) -> Curve1D:
        return curve.model_copy(update={"eff": along(curve.eff)})

    def table(t: Curve2D | GatherCurve | AttentionCurve | DecodeAttentionCurve):
        return t.model_copy(update={"eff": _columns_rising(t.eff, along)})

    update = {
        "matmul": {d: table(t) for d, t in c.matmul.items()},
        "memory": one(c.memory) if c.memory is not None else None,
        "memory_kinds": {k: one(v) for k, v in c.memory_kinds.items()},
        "memory_ops": {k: one(v) for k, v in c.memory_ops.items()},
        "gather": table(c.gather) if c.gather is not None else None,
        "attention_decode": {d: table(t) for d, t in c.attention_decode.items()},
    }
    if flat:  # prefill attention too, along its query tokens per sequence
        update["attention"] = {d: table(t) for d, t in c.attention.items()}
    return profile.model_copy(update={"efficiency_curves": c.model_copy(update=update)})


_NODES: dict[int, tuple[Node, Node]] = {}


def bound_node(node: Node) -> Node:
    """`node` with its profile's envelope (the node itself when no curve falls); cached, so the
    cost model's per-profile caches are reused."""
    got = _NODES.get(id(node))
    if got is None or got[0] is not node:
        if len(_NODES) > 256:
            _NODES.clear()
        got = _NODES[id(node)] = (node, replace(node, profile=_envelope(node.profile)) if falling_curves(node.profile) else node)
    return got[1]


_FLAT: dict[int, tuple[Node, Node]] = {}


def flat_node(node: Node) -> Node:
    """`node` with every efficiency curve at its maximum along the step's size (rows, bytes,
    query tokens, sequences): no op costs more than the profile says at any size, and an op's
    time grows with its size (latency_bound.py); cached like `bound_node`."""
    got = _FLAT.get(id(node))
    if got is None or got[0] is not node:
        if len(_FLAT) > 256:
            _FLAT.clear()
        flat = replace(node, profile=_envelope(node.profile, flat=True)) if node.profile.efficiency_curves else node
        got = _FLAT[id(node)] = (node, flat)
    return got[1]
