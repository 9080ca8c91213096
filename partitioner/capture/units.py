"""Cutting an OpGraph into units, and replicating a repeated block.

A cut may go after a node where exactly one activation crosses: everything produced
before and used after is that one tensor (parameters, and tensors that depend on no
parameter — rotary tables, masks, positions — are available to every stage and do not
count). In a transformer these are the residual stream between blocks and between
attention and MLP. Units without parameters (casts, soft-caps) join their neighbour.
The rule reads only data flow, never module names.
"""

from __future__ import annotations

from typing import cast

import hashlib
from dataclasses import dataclass, field, replace

from hetc.kv_blocks import window_span
from hetc.experts import ExpertLayout
from hetc.plan import UnitKind
from hetc.partitioner.capture.fusion import fused_records
from hetc.partitioner.capture.op_records import OpRecord, aggregate_records, records_for
from hetc.partitioner.capture.terms import CONV_OPS, OpGraph, Terms

__all__ = ["Unit", "cut_units", "assign_layers", "replicate"]


_COST_KEYS: dict[tuple, int] = {}  # interned cost-relevant contents of units (few distinct per model)


def held_weights(weights, experts, tp: int, layout: ExpertLayout):
    """Weight bytes one device of a group of `tp` holds of `weights` bytes, `experts` of them routed
    experts' (floats or arrays): 1/tp, or, data-parallel, all but the routed experts whole (hetc/experts.py)."""
    return weights - experts * (1 - 1 / tp) if layout.data_parallel else weights / tp


@dataclass(frozen=True, slots=True)
class Unit:
    """A contiguous slice of the model, the solver's smallest placement."""

    index: int
    kind: UnitKind
    layer: int  # model layer (block) this unit belongs to
    matmul_flops: Terms
    other_flops: Terms
    act_bytes: Terms
    params: dict[str, float]  # parameter name -> bytes (tied weights appear in every unit that reads them)
    streamed_param_bytes: float  # weight bytes read every step (gathers read only their rows)
    kv_bytes_per_token: float  # K+V bytes kept per context token, at the export's dtype
    attention_flops_per_ctx: float  # matmul FLOPs per (token × context token)
    out_bytes_per_token: float  # the activation crossing the cut after this unit, per token
    out_bytes_const: float
    kernels: int  # non-view ops: each is a launch
    moe: dict | None = None  # {num_experts, top_k, expert_bytes}
    signature: str = ""
    ops: tuple[OpRecord, ...] = ()  # per-op records, identical ops grouped; () = only the totals above
    fused: tuple[OpRecord, ...] = ()  # the kernels after an engine's fusion (partitioner/capture/fusion.py); () = as `ops`
    draft: bool = False  # a draft model's unit in a speculative chain (capture/draft.py): it runs the round's draft steps
    kv_window: int | None = None  # a sliding-window layer's window in tokens (gpt-oss's sliding layers, mistral); None: full attention
    # small int naming everything the cost model reads: equal keys cost the same (set in __post_init__)
    cost_key: int = field(default=-1, init=False, repr=False, compare=False)
    # its attention caches one latent that every device of a TP group keeps whole (MLA; set in __post_init__)
    kv_latent: bool = field(default=False, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "kind", UnitKind(self.kind))  # a cached capture stores the kind's name
        key = (
            self.ops,
            self.fused,
            self.matmul_flops,
            self.other_flops,
            self.act_bytes,
            self.streamed_param_bytes,
            self.kv_bytes_per_token,
            self.kernels,
            tuple(sorted(self.moe.items())) if self.moe else None,
            self.kv_window,
        )
        object.__setattr__(self, "cost_key", _COST_KEYS.setdefault(key, len(_COST_KEYS)))
        object.__setattr__(self, "kv_latent", any(o.latent is not None for o in self.ops))

    @property
    def op_records(self) -> tuple[OpRecord, ...]:
        """The per-op records, or records made from the totals for a unit built without them."""
        if self.ops:
            return self.ops
        return aggregate_records(
            matmul_flops=self.matmul_flops,
            other_flops=self.other_flops,
            act_bytes=self.act_bytes,
            streamed_param_bytes=self.streamed_param_bytes,
            kv_bytes_per_token=self.kv_bytes_per_token,
            moe=self.moe,
        )

    @property
    def fused_records(self) -> tuple[OpRecord, ...]:
        """The records after the fusion serving engines perform (the unfused ones where none was computed)."""
        return self.fused or self.op_records

    @property
    def fused_kernels(self) -> int:
        """Kernels one step of the unit launches after fusion."""
        return sum(o.count for o in self.fused) if self.fused else self.kernels

    def kv_tokens(self, tokens: float, windowed: bool) -> float:
        """Tokens of a sequence's `tokens` whose K/V this unit keeps: all of them, or at most a sliding
        layer's window in whole blocks (`window_span`) under an engine that frees the blocks behind
        it (`windowed`: the engine's `sliding_windows`, Workload.windowed)."""
        return min(tokens, window_span(self.kv_window)) if windowed and self.kv_window else tokens

    def kv_ways(self, tp: int, layout: ExpertLayout = ExpertLayout.TP) -> int:
        """Devices of a group of `tp` the unit's K/V splits over: `tp` (each keeps its heads', or,
        data-parallel, its own sequences'), or 1 for a latent every device of a TP group keeps whole
        (multi-head latent attention: every head reads it)."""
        return 1 if self.kv_latent and not layout.data_parallel else tp

    @property
    def expert_bytes(self) -> float:
        """Bytes of its routed experts' weights (0 for a dense unit)."""
        return self.moe.get("expert_bytes", 0.0) if self.moe else 0.0

    def device_weights(self, tp: int, layout: ExpertLayout = ExpertLayout.TP) -> float:
        """Weight bytes one device of a group of `tp` holds for this unit (`held_weights`)."""
        return held_weights(self.param_bytes, self.expert_bytes, tp, layout)

    def kv_bytes(self, tokens: float, windowed: bool) -> float:
        """K/V bytes the unit keeps for a sequence of `tokens` tokens (`kv_tokens`)."""
        return self.kv_bytes_per_token * self.kv_tokens(tokens, windowed) if self.kv_bytes_per_token else 0.0

    @property
    def param_bytes(self) -> float:
        return sum(self.params.values())

    @property
    def flops(self) -> Terms:
        return self.matmul_flops + self.other_flops


def _roots(g: OpGraph) -> list[int | None]:
    """The tensor each node's output lives in: views resolve to their base; None for parameter views."""
    root: list[int | None] = []
    for i, n in enumerate(g.nodes):
        if n.is_view:
            root.append(root[g.inputs[i][0]] if g.inputs[i] else None)
        else:
            root.append(i)
    return root


def _cut_points(g: OpGraph) -> list[tuple[int, int]]:
    """(node, crossing tensor) for each cut: after `node`, only `crossing` is live.

    Adjacent candidates with no parameter use between them (a residual add followed by
    a cast) are one choice: the one with the smallest crossing tensor is kept, the earliest
    on ties.
    """
    n = len(g.nodes)
    last_use = list(range(n))
    for j, ins in enumerate(g.inputs):
        for i in ins:
            last_use[i] = max(last_use[i], j)
    for i in g.graph_outputs:
        last_use[i] = n
    root = _roots(g)
    first = next((i for i in range(n) if g.uses_param[i]), n)
    runs: list[list[tuple[int, int]]] = []
    prev = None
    for i in range(first, n - 1):
        live = {root[j] for j in range(i + 1) if last_use[j] > i and not g.recomputable[j] and root[j] is not None}
        if len(live) != 1:
            continue
        cand = (i, cast(int, live.pop()))
        if prev is not None and not any(g.uses_param[k] for k in range(prev + 1, i + 1)):
            runs[-1].append(cand)
        else:
            runs.append([cand])
        prev = i

    def size(c: tuple[int, int]) -> tuple[float, float, int]:  # noqa: D401
        t = g.out_bytes_per_token[c[1]]
        return t.per_token, t.const, c[0]

    return [min(run, key=size) for run in runs]


def _make_unit(g: OpGraph, idx: list[int], index: int, crossing: int) -> Unit:
    # tensors that depend on no parameter are recomputed by every stage: charged to none
    nodes = [g.nodes[i] for i in idx if not g.recomputable[i]]
    zero = Terms()
    mm = sum((x.matmul_flops for x in nodes), zero)
    other = sum((x.other_flops for x in nodes), zero)
    act = sum((x.act_bytes for x in nodes), zero)
    params: dict[str, float] = {}
    streamed = 0.0
    moe: dict | None = None
    for x in nodes:
        for p in x.params:
            if p not in params:
                params[p] = g.param_bytes[p]
                if not x.gather:
                    streamed += g.param_bytes[p]
        if x.moe:
            expert = sum(g.param_bytes[p] for p in x.params)
            moe = {**x.moe, "expert_bytes": (moe or {}).get("expert_bytes", 0.0) + expert}
    attention = any(x.attention for x in nodes)
    if attention:
        kind = UnitKind.ATTENTION
    elif moe:
        kind = UnitKind.MOE
    elif any(x.op in CONV_OPS for x in nodes):
        kind = UnitKind.CONV
    elif mm.per_token > 0 or mm.const > 0:
        kind = UnitKind.MLP
    elif any(x.gather for x in nodes):
        kind = UnitKind.EMBED
    else:
        kind = UnitKind.NORM
    out = g.out_bytes_per_token[crossing]
    sig = "|".join(f"{x.op}:{x.matmul_flops.per_token:.6g}:{x.matmul_flops.per_token_ctx:.6g}" for x in nodes if not x.is_view)
    sig += "|" + ",".join(f"{v:.6g}" for v in params.values())
    return Unit(
        index=index,
        kind=kind,
        layer=index,
        matmul_flops=mm,
        other_flops=other,
        act_bytes=act,
        params=params,
        streamed_param_bytes=streamed,
        kv_bytes_per_token=sum(x.kv_bytes_per_token for x in nodes),
        attention_flops_per_ctx=mm.per_token_ctx,
        out_bytes_per_token=out.per_token,
        out_bytes_const=out.const,
        kernels=sum(1 for x in nodes if not x.is_view),
        moe=moe,
        signature=hashlib.sha1(sig.encode()).hexdigest()[:16],
        ops=records_for(g, idx),
        fused=fused_records(g, idx),
    )


def cut_units(g: OpGraph) -> list[Unit]:
    """Cut `g` at its single-tensor points; merge parameter-free slices into a neighbour."""
    cuts = _cut_points(g)
    n = len(g.nodes)
    out_of = {i: c for i, c in cuts}
    final = max(g.graph_outputs) if g.graph_outputs else n - 1
    bounds = [-1] + [i for i, _ in cuts] + [n - 1]
    segments = [list(range(a + 1, b + 1)) for a, b in zip(bounds, bounds[1:]) if b > a]
    merged: list[list[int]] = []
    carry: list[int] = []
    for seg in segments:
        if not any(g.nodes[i].params for i in seg):
            if merged:
                merged[-1].extend(seg)
            else:
                carry.extend(seg)
            continue
        merged.append(carry + seg)
        carry = []
    if carry:  # a graph without parameters: one unit
        merged.append(carry)
    crossing = [next((out_of[i] for i in reversed(seg) if i in out_of), final) for seg in merged]
    crossing[-1] = final
    units = [_make_unit(g, seg, k, c) for k, (seg, c) in enumerate(zip(merged, crossing))]
    if len(units) > 1 and units[-1].kind in (UnitKind.MLP, UnitKind.NORM) and units[-2].kind is not UnitKind.CONV:
        units[-1] = replace(units[-1], kind=UnitKind.HEAD)
    return units


def assign_layers(units: list[Unit]) -> list[Unit] | None:
    """Number layers structurally: each unit that keeps KV (attention) opens a layer.

    Units before the first attention go with layer 0, the final norm and head with the last.
    None when the model has no attention (then each unit is its own layer).
    """
    if not any(u.kv_bytes_per_token > 0 for u in units):
        return None
    out, layer = [], -1
    for u in units:
        layer += u.kv_bytes_per_token > 0
        out.append(replace(u, layer=max(layer, 0)))
    return out


def replicate(units: list[Unit], period: int, num_layers: int, prefix: int = 0) -> list[Unit] | None:
    """Expand an export of `prefix` + 3·`period` layers to `num_layers` layers.

    The first `prefix` layers (DeepSeek's dense layers before the MoE ones) are kept as exported.
    Of the regular part, the first and last block may carry work from the model's ends (an
    embedding scale, a final cast), so the middle block is the one repeated; it must match the
    last block unit for unit. Parameters of each layer get their own names (`L{layer}/...`) so
    memory adds up. None when the export does not have that shape.
    """
    attn = [i for i, u in enumerate(units) if u.kv_bytes_per_token > 0]
    if len(attn) != prefix + 3 * period or (num_layers - prefix) % period or num_layers - prefix < 2 * period:
        return None
    reg = attn[prefix:]
    block = reg[2 * period] - reg[period]
    end = reg[2 * period] + block
    if end > len(units):
        return None
    starts = attn + [end]
    layer_units = [units[starts[j] : starts[j + 1]] for j in range(prefix + 3 * period)]
    dense, regular = layer_units[:prefix], layer_units[prefix:]
    for j in range(period):
        mid, last = regular[period + j], regular[2 * period + j]
        if len(mid) != len(last) or [u.kind for u in mid] != [u.kind for u in last]:
            return None
        if [u.signature for u in mid[:-1]] != [u.signature for u in last[:-1]]:
            return None
    out = [replace(u, layer=0) for u in units[: attn[0]]]
    n_regular = num_layers - prefix
    for layer in range(num_layers):
        r = layer - prefix
        if r < 0:
            src = dense[layer]
        elif r < period:
            src = regular[r]
        elif r >= n_regular - period:
            src = regular[2 * period + r % period]
        else:
            src = regular[period + r % period]
        for u in src:
            out.append(replace(u, index=len(out), layer=layer, params={f"L{layer}/{k}": v for k, v in u.params.items()}))
    for u in units[end:]:
        out.append(replace(u, index=len(out), layer=num_layers - 1))
    return out
