"""Timing on the local device, robust to a shared machine, and what the device is.

A case is timed in several rounds spread over the whole run (round 1 of every case, then
round 2, ...); each round keeps its median repetition and the case keeps its fastest round.
A burst of load from another process then spoils one round of a few cases, not the result,
while the median inside a round keeps one lucky repetition from setting it either.
"""

from __future__ import annotations

import os
import platform
import re
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import torch

__all__ = ["Case", "run_cases", "CpuInfo", "cpu_info", "cpu_peak_flops", "set_threads", "sync_for", "evict_bytes", "warm_allocator", "ForeignLoad"]


@dataclass
class Case:
    """One thing to time.

    Args:
        name: label for reports.
        fn: the work; called `reps` times per round.
        reset: run before every call, outside the timed region (e.g. rewind a KV cache).
        reps: repetitions per round.
        meta: anything the caller wants back with the result.
        per_call: operations one call of `fn` performs; `seconds` is per operation.
    """

    name: str
    fn: Callable[[], object]
    reset: Callable[[], object] | None = None
    reps: int = 5
    meta: dict = field(default_factory=dict)
    seconds: float = float("inf")
    per_call: int = 1


def sync_for(device: str) -> Callable[[], None]:
    """A function that waits for the device's queued work (a no-op on the CPU)."""
    if device.startswith("cuda"):
        return torch.cuda.synchronize
    if device.startswith("xpu"):
        return torch.xpu.synchronize  # type: ignore[attr-defined]
    if device.startswith("hpu"):
        import habana_frameworks.torch.core as htcore  # type: ignore[import-not-found]

        return htcore.mark_step
    return lambda: None


def run_cases(
    cases: list[Case], *, rounds: int = 3, sync: Callable[[], None] = lambda: None, budget_s: float | None = None, progress: Callable[[str], None] | None = None
) -> list[Case]:
    """Time every case (see the module docstring); sets and returns `case.seconds`.

    Args:
        cases: what to time; each is warmed up once first.
        rounds: rounds per case, interleaved across cases.
        sync: waits for the device after each call.
        budget_s: stop adding rounds once this much wall time has passed (each case keeps ≥ 1 round).
        progress: called with a short status line.
    """
    start = time.perf_counter()
    for c in cases:  # warm-up: kernel selection, allocator, first-touch of memory
        if c.reset:
            c.reset()
        c.fn()
        sync()
    for r in range(rounds):
        if r > 0 and budget_s is not None and time.perf_counter() - start > budget_s:
            break
        for i, c in enumerate(cases):
            if progress and i % 8 == 0:
                progress(f"timing round {r + 1}/{rounds}: {c.name}")
            ts = []
            for _ in range(c.reps):
                if c.reset:
                    c.reset()
                sync()
                t0 = time.perf_counter()
                c.fn()
                sync()
                ts.append(time.perf_counter() - t0)
            c.seconds = min(c.seconds, statistics.median(ts) / c.per_call)
    return cases


class ForeignLoad:
    """Share of the machine's CPU time that other processes used over an interval.

    Timings on a shared machine are only as good as the quiet they had; reports carry this
    figure so a reader can tell. Our own process and the children it waited for are not
    counted (`os.times`).
    """

    def __init__(self) -> None:
        self._t0 = time.perf_counter()
        self._busy0 = self._busy()
        self._own0 = self._own()

    @staticmethod
    def _busy() -> float | None:
        try:
            f = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
        except OSError:
            return None
        ticks = [float(x) for x in f]
        idle = ticks[3] + (ticks[4] if len(ticks) > 4 else 0.0)  # idle + iowait
        return (sum(ticks[:8]) - idle) / os.sysconf("SC_CLK_TCK")

    @staticmethod
    def _own() -> float:
        t = os.times()
        return t.user + t.system + t.children_user + t.children_system

    def share(self) -> float | None:
        """Other processes' CPU seconds ÷ (wall seconds × CPUs) since construction, or None."""
        busy = self._busy()
        if busy is None or self._busy0 is None:
            return None
        wall = time.perf_counter() - self._t0
        others = (busy - self._busy0) - (self._own() - self._own0)
        return max(0.0, others) / max(wall * (os.cpu_count() or 1), 1e-9)


def warm_allocator() -> None:
    """Put the C allocator in the state a running engine reaches.

    glibc serves allocations above a threshold with fresh pages (mmap, a page fault per
    4 KiB on first touch) and raises that threshold to the size of the largest such block
    freed, up to 32 MiB. An engine freeing activations every step gets there within its
    first steps; a fresh measuring process would otherwise time page faults on some ops
    and not others depending on what it happened to free before.
    """
    block = torch.empty((31 << 20,), dtype=torch.uint8)  # just under glibc's 32 MiB ceiling
    block.fill_(0)
    del block


def set_threads(threads: int | None) -> int:
    """Use `threads` intra-op threads (default: as many as cores); returns the number used."""
    if threads:
        torch.set_num_threads(threads)
    return torch.get_num_threads()


@dataclass(frozen=True)
class CpuInfo:
    model: str
    cores: int
    mhz: float
    flags: frozenset[str]
    l3_bytes: float


def cpu_info() -> CpuInfo:
    """Model name, online cores, clock, ISA flags and last-level cache of this machine's CPU."""
    text = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    model = re.search(r"^model name\s*:\s*(.+)$", text, re.M)
    mhz = re.search(r"^cpu MHz\s*:\s*([\d.]+)$", text, re.M)
    flags = re.search(r"^flags\s*:\s*(.+)$", text, re.M)
    l3 = 0.0
    for idx in sorted(Path("/sys/devices/system/cpu/cpu0/cache").glob("index*")):
        try:
            size = (idx / "size").read_text().strip()
        except OSError:
            continue
        m = re.fullmatch(r"(\d+)([KMG]?)", size)
        if m:
            l3 = max(l3, int(m.group(1)) * {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}[m.group(2)])
    return CpuInfo(
        model=model.group(1).strip() if model else platform.processor() or "unknown CPU",
        cores=len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1),
        mhz=float(mhz.group(1)) if mhz else 0.0,
        flags=frozenset(flags.group(1).split()) if flags else frozenset(),
        l3_bytes=l3 or 32 * (1 << 20),
    )


def cpu_peak_flops(info: CpuInfo, threads: int) -> tuple[dict[str, float], str]:
    """Nominal peak FLOP/s per dtype for `threads` cores, and how it was derived.

    fp32: 2 FMA pipes × SIMD lanes × 2 FLOP per cycle at the reported clock. bf16 counts
    AMX or AVX512-BF16 where the CPU has them, else runs at the fp32 rate (PyTorch converts
    to fp32 on such CPUs). The fitted efficiency curves are relative to these same figures,
    so predictions do not depend on how exact they are.
    """
    f = info.flags
    lanes = 16 if "avx512f" in f else 8 if "avx2" in f and "fma" in f else 4
    per_cycle = 2 * lanes * 2
    ghz = (info.mhz or 2000.0) / 1e3
    fp32 = threads * per_cycle * ghz * 1e9
    bf16 = threads * 1024 * ghz * 1e9 if "amx_bf16" in f else fp32 * 2 if "avx512_bf16" in f else fp32
    how = (
        f"nominal: {threads} core(s) × {per_cycle} fp32 FLOP/cycle ({'AVX-512' if lanes == 16 else 'AVX2+FMA' if lanes == 8 else 'SSE'}, "
        f"2 FMA pipes assumed) × {ghz:.3f} GHz (/proc/cpuinfo); bf16 "
        + ("AMX 1024 FLOP/cycle" if "amx_bf16" in f else "AVX512-BF16 2× fp32" if "avx512_bf16" in f else "has no native unit here: fp32 rate")
    )
    return {"fp32": fp32, "bf16": bf16}, how


def evict_bytes(info: CpuInfo) -> float:
    """Bytes a rotating pool of operands needs so each call finds its operands out of cache."""
    return 2.0 * info.l3_bytes
