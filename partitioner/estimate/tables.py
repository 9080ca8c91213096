"""Per-type throughput tables: what one stage of a device type can sustain.

Identical devices are grouped into kinds (profile × tensor-parallel degree, with the
node link the group reduces over). For a kind, a batch B and m micro-batches, a stage
holding units [i, i+k) is busy

    m · (decode step of B/m sequences) + (B / output_len) · (prefill of one prompt)

per round, exactly as partitioner/estimate/simulate.py counts it, and must fit its memory at B.
`busy_min[k]` is the least busy time of any memory-feasible range of k units: the
stage's best case, used for the cost objective's bound (bound.py). The cell bound reads
the per-unit costs and memory fits (stage_costs.py).
"""

from __future__ import annotations

import functools
from typing import Any
from dataclasses import dataclass, field

import numpy as np

from hetc.cluster import TP_SIZES, Cluster, Link, Node, Profile
from hetc.partitioner.cost_models.envelope import bound_node
from hetc.partitioner.cost_models.memory import logits_per_token
from hetc.partitioner.estimate.budget_floor import SHORT, floor_points, floored
from hetc.partitioner.estimate.simulate import Round, Workload, cost_signature, unit_round_costs
from hetc.partitioner.capture.units import Unit, held_weights
from hetc.scheduling import Phase

__all__ = ["Kind", "Tables", "kinds_of"]


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
    return node.profile.name, _link_key(node.link)


@functools.cache
def _link_key(link: Link) -> str:
    return repr(link)  # a pydantic repr: ~40 µs, asked for per option and per estimate


def devices_per_type(cluster: Cluster) -> dict[tuple[str, str], int]:
    """The cluster's devices of each type (type_key), in the order the types first appear."""
    out: dict[tuple[str, str], int] = {}
    for n in cluster.nodes:
        out[type_key(n)] = out.get(type_key(n), 0) + n.count
    return out


def kinds_of(cluster: Cluster, tp_options: tuple[int, ...] = TP_SIZES) -> list[Kind]:
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


MOST = 1 << 20  # sequences a stage with no KV and no activations could hold: more than any batch considered


@dataclass(slots=True)
class Tables:
    """busy_min arrays per (kind, m, batch), built lazily and cached."""

    units: list[Unit]
    wl: Workload
    _ranges: Any = None  # set in __init__: (i, k, valid, weights, amax, last, logits)
    _cost: dict = field(default_factory=dict)
    _most: dict = field(default_factory=dict)
    _busy: dict = field(default_factory=dict)
    _kind_keys: dict = field(default_factory=dict)
    signature: np.ndarray = field(init=False)  # per unit: its cost signature's index (units of one cost the same)
    reps: list[Unit] = field(init=False)  # per signature: its first unit
    _rounds: dict = field(default_factory=dict)
    _steps: dict = field(default_factory=dict)  # per kind: its bound node and one unit's cost per (signature, step)
    evaluations: int = 0  # unit_costs computed (the cost model run over the units): work done
    step_costs: int = 0  # of which, one unit's stage time at a step not met before (rounds share steps): the work

    def __post_init__(self) -> None:
        u = len(self.units)
        first: dict[tuple, Unit] = {}  # one unit per cost signature, in order of first appearance
        for x in self.units:
            first.setdefault(cost_signature(x), x)
        index = {s: k for k, s in enumerate(first)}
        self.reps = list(first.values())
        self.signature = np.array([index[cost_signature(x)] for x in self.units], dtype=np.int64)
        i, k = np.meshgrid(np.arange(u + 1), np.arange(u + 1), indexing="ij")
        valid = (k >= 1) & (i + k <= u)
        i, k = np.where(valid, i, 0), np.where(valid, k, 0)
        w = np.concatenate([[0.0], np.cumsum([x.param_bytes for x in self.units])])
        act = np.array([x.act_bytes.per_token for x in self.units])
        amax = np.zeros((u + 1, u + 1))
        for s in range(u):
            amax[s, 1 : u - s + 1] = np.maximum.accumulate(act[s:])
        weights = w[i + k] - w[i]
        full = {}  # the whole model: tied weights once
        for x in self.units:
            full.update(x.params)
        weights[0, u] = sum(full.values())
        last = (i + k == u) & valid
        logits = logits_per_token(self.units)
        self._ranges = (i, k, valid, weights, amax, last, logits)

    def _kind(self, kind: Kind) -> tuple:
        """A cache key for `kind`, kept per kind object (type_key hashes the node's pydantic link on every call)."""
        got = self._kind_keys.get(id(kind))
        if got is None or got[0] is not kind:
            got = self._kind_keys[id(kind)] = (kind, (kind.name, kind.type_key))
        return got[1]

    def unit_costs(self, kind: Kind, m: int, batch: int, phase: Phase = Phase.BOTH, floor: bool = False) -> tuple[np.ndarray, float]:
        """Per-unit busy seconds per round (prefill pools: per prompt), and the stage's fixed
        overhead per round, as simulate.estimate_pipeline counts them for `phase` — with the
        profile's envelope where its efficiency curves fall (envelope.py: never more)."""
        floor = floor and floored(self.wl.ranked(kind.tp), m, batch, phase)  # at the kind's own budget (Workload.ranked)
        key = (self._kind(kind), m, batch, phase, floor)
        if key not in self._cost:
            if floor:  # the steps full: the floor per sequence (budget_floor.py)
                cost, over = self._floor(kind, phase)
                self._cost[key] = (cost * batch, over * batch)
            else:
                self._cost[key] = self._round_costs(kind, self.round(m, batch, phase, kind.tp))
        return self._cost[key]

    def _round_costs(self, kind: Kind, r: Round) -> tuple[np.ndarray, float]:
        """Per-unit busy seconds of a stage of `kind` per round `r`, and its fixed overhead, kept per round."""
        same = (self._kind(kind), r)  # other (m, batch) with the same steps (e.g. m below the token budget's)
        if same not in self._cost:
            self.evaluations += 1
            node, steps = self._steps.setdefault(self._kind(kind), (bound_node(kind.nodes[0]), {}))
            before = len(steps)
            cost, over = unit_round_costs(self.reps, node, kind.tp, self.wl, r, steps)
            self.step_costs += len(steps) - before
            self._cost[same] = (np.array(cost)[self.signature], over)  # units of one signature cost the same
        return self._cost[same]

    def _floor(self, kind: Kind, phase: Phase) -> tuple[np.ndarray, float]:
        """Per unit and for the overhead, the least busy seconds per sequence of a stage of `kind` at any
        batch under its budget (budget_floor.py), kept."""
        key = ("floor", self._kind(kind), phase)
        if key not in self._cost:
            got = [(self._round_costs(kind, r), s) for s, r in floor_points(self.wl.ranked(kind.tp), phase)]
            cost = np.min([c / s for (c, _), s in got], axis=0) * SHORT
            self._cost[key] = (cost, min(o / s for (_, o), s in got) * SHORT)
        return self._cost[key]

    def traffic(self, m: int, batch: int, phase: Phase, tp: int, floor: bool = False) -> tuple[float, float]:
        """(messages, tokens) a stage sends per round at `batch` sequences in m micro-batches under the budget
        of `tp` ranks (Round.messages, Round.tokens): where the steps are full, their floors per sequence times the
        batch (budget_floor.py)."""
        wl = self.wl.ranked(tp)
        if not (floor and floored(wl, m, batch, phase)):
            r = self.round(m, batch, phase, tp)
            return r.messages, r.tokens
        key = ("traffic", wl.dp_ranks, phase)
        if key not in self._cost:
            got = floor_points(wl, phase)
            self._cost[key] = (min(r.messages / s for s, r in got) * SHORT, min(r.tokens / s for s, r in got) * SHORT)
        msg, tok = self._cost[key]
        return msg * batch, tok * batch

    def round(self, m: int, batch: int, phase: Phase, tp: int = 1) -> Round:
        """simulate.Round.of for a pipeline whose narrowest stage is a group of `tp` (its step budget:
        Workload.ranked), kept: every kind asks for the same rounds."""
        wl = self.wl.ranked(tp)
        key = (m, batch, phase, wl.dp_ranks)
        if key not in self._rounds:
            self._rounds[key] = Round.of(wl, batch, m, phase)
        return self._rounds[key]

    def fits(self, kind: Kind, batch: int, phase: Phase = Phase.BOTH) -> np.ndarray:
        """fits[i, k]: whether units [i, i+k) fit one device of `kind` at `batch` (prefill
        pools: prompts in flight, KV for the prompt only)."""
        return self.most(kind, phase) >= batch

    def most(self, kind: Kind, phase: Phase = Phase.BOTH) -> np.ndarray:
        """most[i, k]: the most sequences at which units [i, i+k) fit one device of `kind` (0 if
        none). A stage holds weights/tp + b·KV/tp (an MLA latent whole: Unit.kv_ways) + max(chunk, b)·activations (data-parallel
        layouts: the routed experts' weights alone split, and b/tp in a device's step: stage_memory): linear in b on
        each side of the prefill chunk, so the largest b comes in closed form (then checked)."""
        key = (self._kind(kind), phase)
        if key not in self._most:
            i, k, valid, weights, amax, last, logits = self._ranges
            wl = self.wl
            chunk = min(wl.prefill_chunk, wl.input_len)

            lay = wl.layout(kind.tp)
            dp = kind.tp if lay.data_parallel else 1  # data-parallel: a device's own 1/tp of the sequences in a step

            def cum(per_unit: list[float]) -> np.ndarray:  # each range's sum
                c = np.concatenate([[0.0], np.cumsum(per_unit)])
                return c[i + k] - c[i]

            def kv(tokens: int) -> np.ndarray:  # K/V bytes of `tokens` per sequence over each range, per device
                return cum([x.kv_bytes(tokens, wl.windowed) / x.kv_ways(kind.tp, lay) for x in self.units])

            held = held_weights(weights, cum([x.expert_bytes for x in self.units]), kind.tp, lay)
            base, per_seq, act = held + kv(wl.shared_tokens(phase)), kv(wl.kv_tokens(phase)), amax[i, k] + np.where(last, logits, 0.0)
            cap = kind.profile.usable_memory

            def mem(b: np.ndarray) -> np.ndarray:
                return base + b * per_seq + np.maximum(chunk, b / dp) * act

            with np.errstate(divide="ignore", invalid="ignore"):
                above = np.floor((cap - base) / (per_seq + act / dp))  # b ≥ chunk·dp
                below = np.floor((cap - base - chunk * act) / per_seq)  # b < chunk·dp
            b = np.where(mem(np.full_like(base, chunk * dp)) <= cap, above, np.minimum(below, chunk * dp - 1))
            b = np.nan_to_num(np.clip(b, 0, MOST), nan=MOST)
            b = np.where(mem(b + 1) <= cap, b + 1, b)  # the closed form to the last bit
            b = np.where((b > 0) & (mem(b) > cap), b - 1, b)
            self._most[key] = np.where(valid & (mem(np.ones_like(b)) <= cap), b, 0).astype(np.int64)
        return self._most[key]

    def busy_min(self, kind: Kind, m: int, batch: int, fit: int | None = None, floor: bool = False) -> np.ndarray:
        """busy_min[k] for k = 0 … U: the least busy seconds per round of a range of k units at
        `batch` sequences that fits memory at `fit` (default: `batch`); inf where none fits.
        Pipelines that prefill and decode."""
        fit = batch if fit is None else fit
        key = (self._kind(kind), m, batch, fit, floor)
        if key not in self._busy:
            cost, over = self.unit_costs(kind, m, batch, floor=floor)
            i, k, valid, *_ = self._ranges
            p = np.concatenate([[0.0], np.cumsum(cost)])
            busy = np.where(self.fits(kind, fit), p[i + k] - p[i] + over, np.inf)
            self._busy[key] = busy.min(axis=0)
        return self._busy[key]
