"""Per-type throughput tables: what one stage of a device type can sustain.

Identical devices are grouped into kinds (profile × tensor-parallel degree, with the
node link the group reduces over). For a kind, a batch B and m micro-batches, a stage
holding units [i, i+k) is busy

    m · (decode step of B/m sequences) + (B / output_len) · (prefill of one prompt)

per round, exactly as partitioner/simulate.py counts it, and must fit its memory at B.
`busy_min[k]` is the least busy time of any memory-feasible range of k units: the
stage's best case, used for the cost objective's bound (bound.py). The cell bound reads
the per-unit costs and memory fits (stage_costs.py).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from hetc.cluster import Cluster, Link, Node, Profile
from hetc.partitioner.simulate import Round, Workload, unit_round_costs
from hetc.partitioner.units import Unit
from hetc.scheduling import KV_BLOCK_TOKENS, Phase

__all__ = ["Kind", "Tables", "kinds_of", "BATCH_GRID"]

BATCH_GRID = [2**i for i in range(13)]  # 1 … 4096 sequences in flight per pipeline


@dataclass(frozen=True, slots=True)
class Kind:
    """tp identical devices on one node acting as one stage; `groups` of them exist."""

    profile: Profile
    tp: int
    link: Link | None
    nodes: tuple[Node, ...]
    groups: int

    @property
    def name(self) -> str:
        return self.profile.name + (f"×tp{self.tp}" if self.tp > 1 else "")

    @property
    def type_key(self) -> tuple[str, str]:
        return type_key(self.nodes[0])


def type_key(node: Node) -> tuple[str, str]:
    """Devices are interchangeable when profile and intra-node link are the same."""
    return node.profile.name, repr(node.link)


def kinds_of(cluster: Cluster, tp_options: tuple[int, ...] = (1, 2, 4, 8)) -> list[Kind]:
    by_type: dict[tuple[str, str], list[Node]] = {}
    for n in cluster.nodes:
        by_type.setdefault(type_key(n), []).append(n)
    out = []
    for nodes in by_type.values():
        for tp in tp_options:
            groups = sum(n.count // tp for n in nodes)
            if groups and (tp == 1 or nodes[0].link is not None):
                out.append(Kind(nodes[0].profile, tp, nodes[0].link, tuple(nodes), groups))
    return out


@dataclass(slots=True)
class Tables:
    """busy_min arrays per (kind, m, batch), built lazily and cached."""

    units: list[Unit]
    wl: Workload
    _ranges: tuple | None = None
    _cost: dict = field(default_factory=dict)
    _feasible: dict = field(default_factory=dict)
    _busy: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        u = len(self.units)
        i, k = np.meshgrid(np.arange(u + 1), np.arange(u + 1), indexing="ij")
        valid = (k >= 1) & (i + k <= u)
        i, k = np.where(valid, i, 0), np.where(valid, k, 0)
        w = np.concatenate([[0.0], np.cumsum([x.param_bytes for x in self.units])])
        kv = np.concatenate([[0.0], np.cumsum([x.kv_bytes_per_token for x in self.units])])
        act = np.array([x.act_bytes.per_token for x in self.units])
        amax = np.zeros((u + 1, u + 1))
        for s in range(u):
            amax[s, 1: u - s + 1] = np.maximum.accumulate(act[s:])
        weights = w[i + k] - w[i]
        full = {}  # the whole model: tied weights once
        for x in self.units:
            full.update(x.params)
        weights[0, u] = sum(full.values())
        last = (i + k == u) & valid
        logits = 4.0 * self.units[-1].out_bytes_per_token / 2
        self._ranges = (i, k, valid, weights, kv[i + k] - kv[i], amax, last, logits)

    def unit_costs(self, kind: Kind, m: int, batch: int, phase: Phase = Phase.BOTH) -> tuple[np.ndarray, float]:
        """Per-unit busy seconds per round (prefill pools: per prompt), and the stage's fixed
        overhead per round, as simulate.estimate_pipeline counts them for `phase`."""
        key = (kind.name, kind.type_key, m, batch, phase)
        if key not in self._cost:
            cost, over = unit_round_costs(self.units, kind.nodes[0], kind.tp, self.wl, Round.of(self.wl, batch, m, phase))
            self._cost[key] = (np.array(cost), over)
        return self._cost[key]

    def fits(self, kind: Kind, batch: int, phase: Phase = Phase.BOTH) -> np.ndarray:
        """fits[i, k]: whether units [i, i+k) fit one device of `kind` at `batch` (prefill
        pools: prompts in flight, KV for the prompt only)."""
        key = (kind.name, kind.type_key, batch, phase)
        if key not in self._feasible:
            i, k, valid, weights, kv, amax, last, logits = self._ranges
            wl = self.wl
            context = wl.input_len if phase == Phase.PREFILL else wl.context
            blocks = math.ceil(context / KV_BLOCK_TOKENS) * KV_BLOCK_TOKENS
            step_tokens = max(min(wl.prefill_chunk, wl.input_len), batch)
            amax_ik = amax[i, k]
            mem = weights / kind.tp + batch * blocks * kv / kind.tp + step_tokens * (amax_ik + np.where(last, logits, 0))
            self._feasible[key] = valid & (mem <= kind.profile.usable_memory)
        return self._feasible[key]

    def busy_min(self, kind: Kind, m: int, batch: int) -> np.ndarray:
        """busy_min[k] for k = 0 … U (inf where no range of k units fits), pipelines that prefill and decode."""
        key = (kind.name, kind.type_key, m, batch)
        if key not in self._busy:
            cost, over = self.unit_costs(kind, m, batch)
            i, k, valid, *_ = self._ranges
            p = np.concatenate([[0.0], np.cumsum(cost)])
            busy = np.where(self.fits(kind, batch), p[i + k] - p[i] + over, np.inf)
            self._busy[key] = busy.min(axis=0)
        return self._busy[key]

    def max_fitting_batch(self, kind: Kind) -> int:
        """Largest batch on the grid at which some range fits this kind (0 if none)."""
        best = 0
        for b in BATCH_GRID:
            if self.fits(kind, b).any():
                best = b
        return best
