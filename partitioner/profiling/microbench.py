"""Representative ops to time on a device, each with the op record the cost model prices.

Every benchmark returns `Case`s whose `meta` holds the shape and the `OpRecord` and `Step`
under which `analytic.op_time` predicts it, so fitting and validation read one description.
Weights and K/V caches rotate through a pool larger than the last-level cache, as they
stream from memory inside a model step. Torch matmuls run back to back over their pool, a chain of
calls timed together (a stage's layers read weight after weight, the memory streaming); elsewhere,
where a pool cannot be that large (at most 64 operands, so small operands on a host with a large
cache), the caches are evicted before each timed call (`_Evict`, outside the timed region).
Activations stay put, as they would in cache.
Matmuls and attention are timed on the executor that will serve (`executor`): torch eager, or
OpenVINO's kernels (FullyConnected with packed weights, its paged attention), which serve cpu
stages (hetc.stage.CPU_EXECUTOR).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from hetc.partitioner.cost_models.analytic import Step
from hetc.partitioner.profiling.bench import Case
from hetc.partitioner.capture.graph import TORCH_DTYPES as GRAPH_DTYPES
from hetc.partitioner.capture.graph import Terms
from hetc.partitioner.capture.op_records import OpRecord

__all__ = [
    "AttnShape",
    "matmul_cases",
    "attention_cases",
    "chunk_mask",
    "memory_cases",
    "dispatch_cases",
    "copy_case",
    "matmul_record",
    "attention_record",
    "memory_record",
    "MEMORY_OPS",
    "TORCH_DTYPES",
]

TORCH_DTYPES = {d: t for d, t in GRAPH_DTYPES.items() if d != "fp8"}  # the dtypes timed as themselves


def _rand(shape: tuple[int, ...], td: torch.dtype, device: str) -> torch.Tensor:
    return torch.empty(shape, dtype=td, device=device).uniform_(-1.0, 1.0)  # randn's speed matters at GBs


class _Arena:
    """One buffer that every operand pool of a benchmark family is carved from.

    A pool is `n` views of an operand's shape at distinct offsets, n large enough that
    cycling through them touches more than `evict` bytes, so each call finds its operand
    out of cache. All pools share the buffer: memory is the largest pool's, not the sum.
    """

    def __init__(self, needs: list[tuple[tuple[int, ...], float]], td: torch.dtype, device: str, cap: int | None = 64):
        self.td, self.es, self.cap = td, torch.tensor([], dtype=td).element_size(), cap
        total = max((self._count(shape, evict) * torch.Size(shape).numel() for shape, evict in needs), default=0)
        self.buf = _rand((max(total, 1),), td, device)

    def _count(self, shape: tuple[int, ...], evict: float) -> int:
        nbytes = torch.Size(shape).numel() * self.es
        count = int(evict // max(nbytes, 1)) + 1  # past `evict` bytes
        return max(1, count if self.cap is None else min(self.cap, count))

    def pool(self, shape: tuple[int, ...], evict: float) -> list[torch.Tensor]:
        numel = torch.Size(shape).numel()
        return [self.buf[i * numel : (i + 1) * numel].view(shape) for i in range(self._count(shape, evict))]


class _Evict:
    """Evicts the caches between timed calls: reads a buffer of `evict` bytes, made on first use.

    A pool of at most 64 small weights can sit in a last-level cache of hundreds of MiB (480 MiB
    on this project's 2-core hosts): a 512×512 fp32 FullyConnected at 8 rows then ran 1.45× faster
    than with its weights in memory, as a served stage reads them (BENCHMARKS.md, "Cost-model
    fidelity (CPU)"). Used as `Case.reset` (untimed)."""

    def __init__(self, evict: float):
        self.buf: torch.Tensor | None
        self.numel, self.buf = int(evict) // 4 + 1, None

    def __call__(self) -> None:
        if self.buf is None:
            self.buf = _rand((self.numel,), torch.float32, "cpu")
        self.buf.sum()


@functools.cache
def _evictor(evict: float) -> _Evict:
    """One evicting buffer per size for the process: the fp32 and bf16 matmul families share it."""
    return _Evict(evict)


def _cycle(items: list):
    state = {"i": 0}

    def nxt():
        state["i"] = (state["i"] + 1) % len(items)
        return items[state["i"]]

    return nxt


def _size(dtype: str) -> int:
    return torch.tensor([], dtype=TORCH_DTYPES[dtype]).element_size()


def matmul_record(m: int, n: int, k: int, dtype: str) -> tuple[OpRecord, Step]:
    """The record and step the cost model prices `y = x·Wᵀ` with x [M, K] and W [N, K] by."""
    es = _size(dtype)
    rec = OpRecord("matmul", 1, Terms(0.0, 2.0 * n * k, 0.0), Terms(), Terms(0.0, (k + n) * es, 0.0), weight_bytes=float(n * k * es), nk=float(n * k))
    return rec, Step(m, 1, 1)


def matmul_cases(
    shapes: list[tuple[int, int, int]], *, dtype: str, device: str, evict: float, executor: str = "torch", threads: int | None = None
) -> list[Case]:
    """`y = x·Wᵀ` (a linear layer) for each (M, N, K), the weight read from memory each call.

    Args:
        executor: "torch" (F.linear) or "openvino" (FullyConnected, fp32 only).
        threads: the OpenVINO executor's threads.
    """
    if executor == "openvino":
        return _openvino_matmul_cases(shapes, dtype=dtype, evict=evict, threads=threads)
    td = TORCH_DTYPES[dtype]
    cases = []
    # a pool past `evict` for every shape (no cap): small weights stream from memory back to back, as a stage's
    # layers read them, where one call timed after a cache flush ran at about half the streaming rate (the
    # prefetchers idle, the flush's lines in flight): 1×1024×768 fp32 at 0.017 of peak against 0.031 streamed
    arena = _Arena([((n, k), evict) for _, n, k in shapes], td, device, cap=None)
    for m, n, k in shapes:
        x = _rand((m, k), td, device)
        pool = arena.pool((n, k), evict)
        nxt = _cycle(pool)
        chain = max(1, min(len(pool), _CHAIN_BYTES // (n * k * arena.es)))
        rec, step = matmul_record(m, n, k, dtype)
        flops = 2.0 * m * n * k
        cases.append(
            Case(
                f"matmul {m}x{n}x{k} {dtype}",
                functools.partial(_linear_chain, x, nxt, chain),
                per_call=chain,
                reps=1 if flops * chain > 1e10 else 3 if flops * chain > 2e9 else 5,
                meta={"m": m, "n": n, "k": k, "dtype": dtype, "flops": flops, "record": rec, "step": step},
            )
        )
    return cases


def _linear_chain(x: torch.Tensor, nxt, chain: int) -> None:
    for _ in range(chain):
        F.linear(x, nxt())


_CHAIN_BYTES = 128 << 20  # weights per FullyConnected chain (a 134 MB weight alone is one kernel of ~11 ms)


def _openvino_matmul_cases(shapes: list[tuple[int, int, int]], *, dtype: str, evict: float, threads: int | None) -> list[Case]:
    """One OpenVINO model per weight shape holding up to `_CHAIN_BYTES` of weights; a call runs them
    all on one input (Case.per_call: the time is per matmul), after evicting the caches. The chain
    shares the inference's fixed cost among its kernels; its size bounds the profile's memory
    (OpenVINO keeps the constants and their packed copy: chains sized to exceed a 480 MiB cache
    took `hetc profile` to 19 GB of RSS)."""
    from hetc.backends.openvino.kernels import linear_step

    if dtype != "fp32":
        raise ValueError("the OpenVINO executor is profiled at fp32")
    steps: dict[tuple[int, int], tuple] = {}
    cases = []
    flush = _evictor(evict)
    for m, n, k in shapes:
        if (n, k) not in steps:
            count = max(1, min(64, _CHAIN_BYTES // (n * k * 4)))
            steps[(n, k)] = (linear_step([_rand((n, k), torch.float32, "cpu") for _ in range(count)], threads=threads), count)
        step, count = steps[(n, k)]
        x = _rand((m, k), torch.float32, "cpu")
        rec, st = matmul_record(m, n, k, dtype)
        cases.append(
            Case(
                f"matmul {m}x{n}x{k} {dtype} openvino",
                lambda step=step, x=x: step(x),  # type: ignore[misc]
                per_call=count,
                reset=flush,
                reps=1 if 2 * m * n * k * count > 1e10 else 3,
                meta={"m": m, "n": n, "k": k, "dtype": dtype, "flops": 2.0 * m * n * k, "record": rec, "step": st},
            )
        )
    return cases


@dataclass(frozen=True)
class AttnShape:
    """Scaled-dot-product attention of `batch` sequences: `q` new tokens each over `kv` keys.

    causal: a prompt chunk: `q` new tokens after `kv − q` cached ones, each seeing the cache
    and the chunk's tokens before it (q == kv: a fresh prompt; q < kv: a chunk after a cached
    prefix or an earlier chunk); else every query sees all `kv` keys (decode, q = 1).
    """

    batch: int
    heads: int
    kv_heads: int
    head_dim: int
    q: int
    kv: int
    causal: bool

    @property
    def mean_ctx(self) -> float:
        """Keys each query attends to on average: (T+1)/2 for a causal prompt of T, plus the cached keys before a chunk."""
        return self.past + (self.q + 1) / 2 if self.causal else float(self.kv)

    @property
    def past(self) -> int:
        """Cached keys before the new tokens."""
        return self.kv - self.q


def attention_record(s: AttnShape, dtype: str) -> tuple[OpRecord, Step, float]:
    """The record, step and K/V bytes per context token the cost model prices `s` by."""
    es = _size(dtype)
    per_tok_ctx = 2.0 * s.heads * 2 * s.head_dim  # q·kᵀ and weights·v
    kv = 2.0 * s.kv_heads * s.head_dim * es
    rec = OpRecord("attention", 1, Terms(0.0, 0.0, per_tok_ctx), Terms(), Terms(0.0, 2.0 * s.heads * s.head_dim * es, 0.0), kv_bytes_per_token=kv)
    return rec, Step(s.batch * s.q, s.batch, s.mean_ctx), kv


def chunk_mask(q: int, kv: int, device: str = "cpu") -> torch.Tensor:
    """[q, kv] bool: which keys each of a chunk's q new tokens sees, after kv − q cached ones (SDPA's
    `is_causal` aligns its mask top-left, so it cannot say this)."""
    return torch.arange(kv, device=device)[None, :] <= torch.arange(kv - q, kv, device=device)[:, None]


def attention_cases(shapes: list[AttnShape], *, dtype: str, device: str, evict: float, executor: str = "torch", threads: int | None = None) -> list[Case]:
    """SDPA (GQA without head expansion), or OpenVINO's paged attention (`executor`); K/V rotate
    out of cache for decode."""
    if executor == "openvino":
        return _openvino_attention_cases(shapes, dtype=dtype, evict=evict, threads=threads)
    td = TORCH_DTYPES[dtype]
    cases = []

    def kv_shape(s: AttnShape) -> tuple[tuple[int, ...], float]:
        # K and V as one [2, ...] tensor per pool entry; a fresh prompt's own K/V are in cache, a cached past is not
        return (2, s.batch, s.kv_heads, s.kv, s.head_dim), 0.0 if s.causal and not s.past else evict

    arena = _Arena([kv_shape(s) for s in shapes], td, device)
    for s in shapes:
        q = _rand((s.batch, s.heads, s.q, s.head_dim), td, device)
        kvs = arena.pool(*kv_shape(s))
        nxt = _cycle([(t[0], t[1]) for t in kvs])
        gqa = s.heads != s.kv_heads
        if gqa and s.q == 1 and not s.causal:
            # decode as transformers runs it: the query heads sharing a K/V head become its rows,
            # with the (all-visible) boolean mask of a static cache
            qp = q.reshape(s.batch, s.kv_heads, s.heads // s.kv_heads, s.head_dim)
            mask = torch.ones(s.batch, 1, 1, s.kv, dtype=torch.bool, device=device)

            def fn(qp=qp, nxt=nxt, mask=mask):
                k, v = nxt()
                return F.scaled_dot_product_attention(qp, k, v, attn_mask=mask)
        elif s.causal and s.past:
            seen = chunk_mask(s.q, s.kv, device)

            def fn(q=q, nxt=nxt, seen=seen, gqa=gqa):  # type: ignore[misc]
                k, v = nxt()
                return F.scaled_dot_product_attention(q, k, v, attn_mask=seen, enable_gqa=gqa)
        else:

            def fn(q=q, nxt=nxt, causal=s.causal, gqa=gqa):  # type: ignore[misc]
                k, v = nxt()
                return F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=gqa)

        rec, step, kv = attention_record(s, dtype)
        flops = rec.flops.at(step.tokens, step.ctx)
        cases.append(
            Case(
                f"attention b{s.batch} h{s.heads}/{s.kv_heads} q{s.q} kv{s.kv}{' causal' if s.causal else ''}",
                fn,
                reps=3 if flops > 2e9 else 5,
                meta={"shape": s, "dtype": dtype, "flops": flops, "record": rec, "step": step, "kv_bytes_per_token": kv},
            )
        )
    return cases


_ATTN_CHAIN_FLOPS = 1e9  # work per inference (up to 64 nodes): its fixed cost, ~0.2 ms, a few % of the time at most
_ATTN_CACHE_BYTES = 256 << 20  # the chain's caches, at most (a memory-bound node then takes ~25 ms a call)


def _openvino_attention_cases(shapes: list[AttnShape], *, dtype: str, evict: float, threads: int | None) -> list[Case]:
    """OpenVINO's paged attention over KV blocks, a chain of nodes with a cache each (a stage's layers)
    run in one inference (Case.per_call: the time is per node): a decode step's sequences hold kv − 1
    tokens and bring one, the chain's caches together larger than `evict` so each node reads its blocks
    from memory; a prompt chunk (causal) brings its q tokens to blocks holding its kv − q cached ones
    (none for a fresh prompt)."""
    from hetc.backends.openvino.kernels import paged_attention_step
    from hetc.backends.paged_attention import PagedMeta
    from hetc.scheduling import KV_BLOCK_TOKENS as BS

    cases = []
    for s in shapes:
        per = -(-s.kv // BS)
        cache_bytes = 2 * s.batch * per * s.kv_heads * BS * s.head_dim * 4
        rec, st, kvb = attention_record(s, dtype)
        flops = rec.flops.at(st.tokens, st.ctx)
        count = max(math.ceil(_ATTN_CHAIN_FLOPS / flops), 0 if s.causal and not s.past else int(evict // cache_bytes) + 1)
        count = max(1, min(64, count, _ATTN_CACHE_BYTES // cache_bytes))
        caches = [
            (_rand((s.batch * per, s.kv_heads, BS, s.head_dim), torch.float32, "cpu"), _rand((s.batch * per, s.kv_heads, BS, s.head_dim), torch.float32, "cpu"))
            for _ in range(count)
        ]
        step = paged_attention_step(heads=s.heads, kv_heads=s.kv_heads, head_dim=s.head_dim, scale=s.head_dim**-0.5, caches=caches, threads=threads)
        past, new = (s.past, s.q) if s.causal else (s.kv - 1, 1)
        meta = PagedMeta.build([past] * s.batch, [new] * s.batch, [list(range(b * per, (b + 1) * per)) for b in range(s.batch)], [True] * s.batch).inputs()[1:]
        t = s.batch * new
        q = _rand((t, s.heads * s.head_dim), torch.float32, "cpu")
        kv = [_rand((t, s.kv_heads * s.head_dim), torch.float32, "cpu") for _ in range(2)]
        cases.append(
            Case(
                f"attention b{s.batch} h{s.heads}/{s.kv_heads} q{s.q} kv{s.kv}{' causal' if s.causal else ''} openvino",
                lambda step=step, q=q, kv=kv, meta=meta: step(q, *kv, *meta),  # type: ignore[misc]
                per_call=count,
                reps=3 if flops * count > 2e9 else 5,
                meta={"shape": s, "dtype": dtype, "flops": flops, "record": rec, "step": st, "kv_bytes_per_token": kvb},
            )
        )
    return cases


# name -> (kind, fn(x, y) on [rows, width] tensors, bytes moved per element of x as the graph counts
# them, the op's name in an exported graph)
MEMORY_OPS = {
    "add": ("elementwise", lambda x, y: x + y, 3.0, "add"),
    "mul": ("elementwise", lambda x, y: x * y, 3.0, "mul"),
    "sub": ("elementwise", lambda x, y: x - y, 3.0, "sub"),
    "silu": ("elementwise", lambda x, y: F.silu(x), 2.0, "silu"),
    "neg": ("elementwise", lambda x, y: -x, 2.0, "neg"),
    "exp": ("elementwise", lambda x, y: torch.exp(x), 2.0, "exp"),
    "pow": ("elementwise", lambda x, y: x.pow(2), 2.0, "pow"),
    "mean": ("norm", lambda x, y: x.mean(-1, keepdim=True), 1.0, "mean"),
    "sum": ("norm", lambda x, y: x.sum(-1, keepdim=True), 1.0, "sum"),
    "softmax": ("norm", lambda x, y: torch.softmax(x, -1), 2.0, "softmax"),
    "cat": ("copy", lambda x, y: torch.cat((x[:, : x.shape[1] // 2], y[:, : y.shape[1] // 2]), -1), 2.0, "cat"),
    "clone": ("copy", lambda x, y: x.clone(), 2.0, "clone"),
    "transpose_copy": ("copy", lambda x, y: x.t().contiguous(), 2.0, "contiguous"),
}


def _table_rows(width: int, dtype: str) -> int:
    """Rows of a benchmark embedding table: 128 MiB or more, like a vocabulary's, out of any cache."""
    return max(8192, (128 << 20) // (width * _size(dtype)))


def memory_record(name: str, rows: int, width: int, dtype: str) -> tuple[OpRecord, Step, float]:
    """The record, step and bytes moved the cost model prices a memory-bound op by."""
    es = _size(dtype)
    kind, _, per_elem, op = ("gather", None, 2.0, "embedding") if name == "gather" else MEMORY_OPS[name]
    nbytes = per_elem * rows * width * es
    rec = OpRecord(kind, 1, Terms(), Terms(0.0, float(width), 0.0), Terms(0.0, nbytes / rows, 0.0), op=op)
    return rec, Step(rows, 1, 1), nbytes


def memory_cases(shapes: list[tuple[str, int, int]], *, dtype: str, device: str) -> list[Case]:
    """Element-wise, reduction and copy ops on [rows, width] activations (left in cache, as in a step).

    Args:
        shapes: (op name from MEMORY_OPS or "gather", rows, width). A gather reads `rows`
            random rows of a table of 128 MiB or more, like an embedding.
    """
    td = TORCH_DTYPES[dtype]
    cases = []
    acts: dict[tuple[int, int], tuple[torch.Tensor, torch.Tensor]] = {}  # shared by every op of a shape
    # embedding tables larger than any cache, every width a view of one buffer
    gathers = [(r, w) for n, r, w in shapes if n == "gather"]
    flat = _rand((max((_table_rows(w, dtype) * w for _, w in gathers), default=1),), td, device)
    for name, rows, width in shapes:
        if name == "gather":
            table = flat[: _table_rows(width, dtype) * width].view(-1, width)
            ids = torch.randint(0, table.shape[0], (rows,), device=device)
            fn = lambda ids=ids, table=table: F.embedding(ids, table)
        else:
            work = MEMORY_OPS[name][1]
            if (rows, width) not in acts:
                acts[(rows, width)] = (_rand((rows, width), td, device), _rand((rows, width), td, device))
            x, y = acts[(rows, width)]
            fn = lambda work=work, x=x, y=y: work(x, y)  # type: ignore[misc]
        rec, step, nbytes = memory_record(name, rows, width, dtype)
        cases.append(
            Case(f"{name} {rows}x{width}", fn, reps=9, meta={"op": name, "graph_op": rec.op, "kind": rec.kind, "bytes": nbytes, "record": rec, "step": step})
        )
    return cases


def dispatch_cases(device: str) -> list[Case]:
    """Ops on one-element tensors: what one op costs when it does no work (framework dispatch)."""
    a = torch.ones(1, device=device)
    b = torch.ones(1, device=device)
    return [Case(f"dispatch {n}", fn, reps=201) for n, fn in (("add", lambda: a + b), ("mul", lambda: a * b), ("neg", lambda: -a), ("silu", lambda: F.silu(a)))]


def copy_case(nbytes: float, *, device: str) -> Case:
    """Copy of a buffer far larger than cache: sustained memory bandwidth (read + write)."""
    n = int(nbytes // 4)
    src = torch.ones(n, dtype=torch.float32, device=device)
    dst = torch.empty_like(src)
    return Case(f"copy {nbytes / 2**20:.0f} MiB", lambda: dst.copy_(src), reps=5, meta={"bytes": 2.0 * n * 4})
