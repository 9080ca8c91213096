"""The kernels a unit runs as after the fusion serving engines and graph compilers perform.

The exported graph has one node per torch op (a Llama layer: 39 kernels). Engines run far
fewer (vLLM: fused add + RMSNorm, one QKV GEMM, one rotary kernel, attention, o_proj, fused
add + RMSNorm, one gate+up GEMM, SiluAndMul, down_proj; Inductor and the Gaudi and OpenVINO
graph compilers fuse point-wise chains likewise). Three rules, read from data flow only:

1. Point-wise chains: element-wise ops, norms (reductions) and copies connected by data flow
   run as one kernel that reads the chain's inputs and writes its outputs once; chains that
   read a common tensor and do not depend on each other run as one kernel too (q and k
   rotary over the same cos/sin).
2. GEMMs that multiply the same activation by different weights run as one GEMM of the
   concatenated weights (q, k, v; gate, up).
3. A chain of only layout copies (`contiguous`, `clone`) of a GEMM's or attention's output is
   folded into that kernel's store.

Fusion stays inside a unit: a stage may end at any unit boundary, so a kernel never spans one.
The records keep `op_records`' form (kind, count, terms per op) so the cost model costs them
the same way; a fused chain is named `fused`.
"""

from __future__ import annotations

from dataclasses import replace

from hetc.partitioner.capture.op_records import OpRecord, op_kind, records_for
from hetc.partitioner.capture.terms import OpGraph, Terms

__all__ = ["fused_records", "POINTWISE_KINDS"]

POINTWISE_KINDS = {"elementwise", "norm", "copy", "noop"}
_LAYOUT_COPIES = {"contiguous", "clone"}
_PRODUCERS = {"matmul", "attention"}  # kernels whose store can write a layout copy's result directly


def _roots(g: OpGraph) -> list[int]:
    """The tensor each node's output lives in (views resolve to their base; -1 for parameter views)."""
    root: list[int] = []
    for i, n in enumerate(g.nodes):
        root.append((root[g.inputs[i][0]] if g.inputs[i] else -1) if n.is_view else i)
    return root


class _Sets:
    """Union-find over node indices."""

    def __init__(self) -> None:
        self.parent: dict[int, int] = {}

    def find(self, x: int) -> int:
        self.parent.setdefault(x, x)
        while self.parent[x] != x:
            self.parent[x] = self.parent[self.parent[x]]
            x = self.parent[x]
        return x

    def union(self, a: int, b: int) -> None:
        self.parent[self.find(a)] = self.find(b)


def fused_records(g: OpGraph, idx: list[int]) -> tuple[OpRecord, ...]:
    """The op records of the nodes `idx` of `g` after fusion (identical kernels grouped).

    Args:
        g: the costed graph.
        idx: the unit's nodes, in program order.
    """
    root = _roots(g)
    members = [i for i in idx if not g.nodes[i].is_view and not g.recomputable[i]]
    inside = set(members)
    kind = {i: op_kind(g.nodes[i]) for i in members}
    reads = {i: list(dict.fromkeys(r for r in (root[j] for j in g.inputs[i]) if r >= 0)) for i in members}
    users: dict[int, set[int]] = {}
    for j, ins in enumerate(g.inputs):
        if not g.nodes[j].is_view:
            for i in ins:
                users.setdefault(root[i], set()).add(j)
    outputs = {root[i] for i in g.graph_outputs}
    # ancestors within the unit, as bit sets over positions in `members`
    pos = {i: k for k, i in enumerate(members)}
    anc: dict[int, int] = {}
    for i in members:
        a = 0
        for r in reads[i]:
            if r in pos:
                a |= anc[r] | (1 << pos[r])
        anc[i] = a

    sets = _Sets()
    for i in members:
        sets.find(i)
    for i in members:  # rule 1: point-wise ops joined by data flow
        if kind[i] in POINTWISE_KINDS:
            for r in reads[i]:
                if r in inside and kind[r] in POINTWISE_KINDS:
                    sets.union(i, r)
    for i in members:  # rule 2: GEMMs of one activation with their own weights
        if kind[i] == "matmul" and g.nodes[i].params and g.nodes[i].weight_nk > 0:
            for k in members[: pos[i]]:
                if kind[k] == "matmul" and g.nodes[k].params and g.nodes[k].weight_nk > 0 and reads[k] == reads[i]:
                    sets.union(i, k)
                    break

    groups: dict[int, list[int]] = {}
    for i in members:
        groups.setdefault(sets.find(i), []).append(i)
    chains = [grp for grp in groups.values() if kind[grp[0]] in POINTWISE_KINDS]
    merged = _merge_independent(chains, reads, anc, pos)
    others = [grp for grp in groups.values() if kind[grp[0]] not in POINTWISE_KINDS]

    out: dict[OpRecord, int] = {}  # identical kernels grouped (records of count 1 as keys)
    for grp in merged:
        rec = _chain_record(g, grp, reads, users, outputs, kind)
        if rec is not None:
            out[rec] = out.get(rec, 0) + 1
    for grp in others:
        rec = _gemm_record(g, grp) if len(grp) > 1 else replace(records_for(g, grp)[0], count=1)
        out[rec] = out.get(rec, 0) + 1
    return tuple(replace(r, count=c) for r, c in out.items())


def _merge_independent(chains: list[list[int]], reads: dict, anc: dict, pos: dict) -> list[list[int]]:
    """Chains reading a common tensor from outside themselves, neither depending on the other, as one."""

    def outline(grp: list[int]) -> tuple[set, int, int]:
        """(what the chain reads from outside, its nodes as bits, its ancestors as bits)"""
        below = 0
        for i in grp:
            below |= anc[i]
        return {r for i in grp for r in reads[i]} - set(grp), sum(1 << pos[i] for i in grp), below

    out: list[list[int]] = []
    for grp in chains:
        ins, bits, below = outline(grp)
        for other in out:
            o_ins, o_bits, o_below = outline(other)
            if ins & o_ins and not (below & o_bits) and not (o_below & bits):
                other.extend(grp)
                break
        else:
            out.append(list(grp))
    return out


def _chain_record(g: OpGraph, grp: list[int], reads: dict, users: dict, outputs: set, kind: dict) -> OpRecord | None:
    """One kernel for a point-wise chain: its external inputs read once, its external outputs
    written once; None when it runs no kernel (no-ops only, or a layout copy folded into its producer)."""
    real = [i for i in grp if kind[i] != "noop"]
    if not real:
        return None
    members = set(grp)
    ins = list(dict.fromkeys(r for i in grp for r in reads[i] if r not in members))
    layout_only = all(kind[i] == "copy" and g.nodes[i].op in _LAYOUT_COPIES for i in real)
    if layout_only and ins and all(op_kind(g.nodes[r]) in _PRODUCERS for r in ins):
        return None
    outs = [i for i in grp if i in outputs or any(u not in members for u in users.get(i, ()))]
    act = sum((g.out_bytes_per_token[r] for r in ins + outs), Terms())
    other = sum((g.nodes[i].other_flops for i in real), Terms())
    weights = sum(g.param_bytes[p] for p in dict.fromkeys(p for i in real for p in g.nodes[i].params))
    k = "norm" if any(kind[i] == "norm" for i in real) else "copy" if all(kind[i] == "copy" for i in real) else "elementwise"
    return OpRecord(k, 1, Terms(), other, act, weight_bytes=weights, op="fused" if len(real) > 1 else g.nodes[real[0]].op)


def _gemm_record(g: OpGraph, grp: list[int]) -> OpRecord:
    """GEMMs of one activation as one: FLOPs, weights and N·K add up; the input is read once."""
    shared = g.inputs[grp[0]][0] if g.inputs[grp[0]] else None
    once = g.out_bytes_per_token[shared] if shared is not None else Terms()
    nodes = [g.nodes[i] for i in grp]
    flops = sum((n.matmul_flops for n in nodes), Terms())
    act = sum((n.act_bytes for n in nodes), Terms()) + once.scale(1 - len(grp))
    weights = sum(g.param_bytes[p] for p in dict.fromkeys(p for n in nodes for p in n.params))
    return OpRecord("matmul", 1, flops, Terms(), act, weight_bytes=weights, nk=sum(n.weight_nk for n in nodes))
