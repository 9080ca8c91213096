"""Decode steps replayed from CUDA graphs (vLLM's and SGLang's way of taking the host out of a step).

A cuda worker captures its stage's decode step once per batch size in `graph_batches` (powers of
two and a few between, up to the lane's most sequences), over static buffers: the input rows, and
a `DecodeMeta` (positions, KV slots, block tables, context lengths) whose shapes do not change
from step to step. A decode micro-batch of n sequences runs as the graph of the smallest size
≥ n: its metadata is copied into the buffers, rows past n are padding (they write and attend the
lane's padding block only, their outputs are dropped), and the graph replays every kernel of the
step without the host launching them. Steps with prompt tokens, steps of more sequences than the
largest graph and tensor-parallel stages (their collectives are not captured; their MoE experts
pick tokens on the host) run eagerly. A single-device stage's MoE experts run as one grouped GEMM
(backends/experts.py), whose shapes the routing does not change, and are captured with the rest. Graphs share one memory pool,
captured largest first.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass
from typing import Any

import torch

from hetc.runtime.kv_cache import DecodeMeta
from hetc.scheduling import KV_BLOCK_TOKENS

__all__ = ["GRAPH_BATCHES", "DecodeGraphs", "GraphedStage", "GraphStep", "graph_batches"]

# the decode batch sizes captured (those ≤ the lane's most sequences, and that most itself): a step
# pads to the next one, so at most ~1/3 of a step's rows are padding past 8
GRAPH_BATCHES = (1, 2, 4, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024)


def graph_batches(max_batch: int) -> list[int]:
    """The batch sizes to capture for a lane running up to `max_batch` sequences at once."""
    if max_batch < 1:
        raise ValueError(f"max_batch must be ≥ 1, got {max_batch}")
    return sorted({b for b in GRAPH_BATCHES if b < max_batch} | {max_batch})


@dataclass(frozen=True, slots=True)
class GraphStep:
    """A decode micro-batch bound for a graph: the host's view of it (built without the device)."""

    size: int  # the graph's batch (≥ the sequences)
    meta: DecodeMeta  # host tensors, padded to `size` rows


class DecodeGraphs:
    """One stage's decode step captured at several batch sizes, with the buffers they read and write."""

    def __init__(self, model: Any, *, max_batch: int, max_context: int, hidden: int, dtype: torch.dtype):
        """Args:
        model: the stage (runtime StageModel) on a CUDA device.
        max_batch: the most sequences a decode step of its lane holds.
        max_context: the longest context (tokens) a sequence may reach.
        hidden, dtype: the residual stream's width and dtype (the input of a stage past the first).
        """
        self.model, self.sizes = model, graph_batches(max_batch)
        self.width = min(-(-max_context // KV_BLOCK_TOKENS), max(model.kv.num_blocks, 1))
        rows, dev = self.sizes[-1], model.kv_device
        self.x = torch.zeros(rows, dtype=torch.long, device=dev) if model.first_stage else torch.zeros(rows, hidden, dtype=dtype, device=dev)
        self.meta = DecodeMeta.build([], [], rows, self.width).to(dev)
        self.graphs: dict[int, torch.cuda.CUDAGraph] = {}
        self.out: dict[int, torch.Tensor] = {}

    def view(self, n: int) -> DecodeMeta:
        """The first n rows of the static metadata (views: what graph n reads)."""
        m = self.meta
        return DecodeMeta(m.positions[:n], m.slots[:n], m.block_table[:n], m.context_lens[:n])

    def capture(self) -> None:
        """Capture every size (largest first: the smaller ones reuse its pool's memory)."""
        pool = torch.cuda.graph_pool_handle()
        side = torch.cuda.Stream(self.model.kv_device)
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):  # kernels compile, and libraries pick and allocate, outside the capture
            for n in self.sizes:
                self.model(self.x[:n], self.view(n))
        torch.cuda.current_stream().wait_stream(side)
        for n in reversed(self.sizes):
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g, pool=pool):
                self.out[n] = self.model(self.x[:n], self.view(n))
            self.graphs[n] = g
        torch.cuda.synchronize(self.model.kv_device)

    def plan_step(self, starts: list[int], n_new: list[int], block_tables: list[list[int]], sample: list[bool]) -> GraphStep | None:
        """The graph step for this micro-batch, or None when it must run eagerly (prompt tokens, a
        row not sampled, more sequences than the largest graph, a context past the buffers' width)."""
        n = len(starts)
        if n > self.sizes[-1] or any(k != 1 for k in n_new) or not all(sample):
            return None
        if max(starts) + 1 > self.width * KV_BLOCK_TOKENS:
            return None
        size = self.sizes[bisect.bisect_left(self.sizes, n)]
        return GraphStep(size, DecodeMeta.build(starts, block_tables, size, self.width))

    def replay(self, x: torch.Tensor, step: GraphStep) -> torch.Tensor:
        """Run the step: [n] token ids or [n, H] hidden states → the graph's output's first n rows."""
        n, size = x.shape[0], step.size
        self.x[:n].copy_(x, non_blocking=True)
        self.x[n:size].zero_()  # padding rows stay finite whatever an earlier step left there
        self.view(size).copy_(step.meta)
        self.graphs[size].replay()
        return self.out[size][:n]


class GraphedStage:
    """A StageModel whose decode steps replay from `DecodeGraphs` (the RunnableStage of a cuda
    worker with graphs on): the rest of the worker sees the stage it wraps."""

    def __init__(self, model: Any, graphs: DecodeGraphs):
        self.model, self.graphs = model, graphs
        self.replayed = False  # whether the last step replayed a graph (the worker reports it)

    def __getattr__(self, name: str) -> Any:  # executor, kv, param_names, param_bytes, tp_group
        return getattr(self.model, name)

    def step_meta(self, starts: list[int], n_new: list[int], block_tables: list[list[int]], sample: list[bool], keep_all: list[bool] | None = None) -> Any:
        if keep_all is not None:  # rows past the sampled ones: not a captured shape
            return self.model.step_meta(starts, n_new, block_tables, sample, keep_all)
        step = self.graphs.plan_step(starts, n_new, block_tables, sample)
        return step if step is not None else self.model.step_meta(starts, n_new, block_tables, sample)

    def __call__(self, x: torch.Tensor, meta: Any) -> torch.Tensor:
        self.replayed = isinstance(meta, GraphStep)
        return self.graphs.replay(x, meta) if self.replayed else self.model(x, meta)
