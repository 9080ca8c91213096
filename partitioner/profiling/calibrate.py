"""`hetc profile`: time representative ops on the local device and fit a profile from them.

Order matters: the dispatch cost of one op is measured first (it is taken out of every
other timing), then memory bandwidth, matmuls, attention and memory-bound ops (their
efficiency curves), and last the overhead probe, whose ops' work is priced with the
curves just fitted so that only the overheads remain to fit.
"""

from __future__ import annotations

import datetime as dt
import statistics
from typing import Any
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import torch
import yaml

from hetc.cluster import Profile, load_profile
from hetc.errors import BadInput
from hetc.partitioner.profiling import bench, fit, microbench, probe
from hetc.partitioner.profiling.shapes import PROBE_MODEL, fit_shapes

__all__ = ["Calibration", "calibrate", "check_device", "check_executor", "profile_yaml"]

_GB = 1e9
# hardware_profiles/cpu.yaml models a 112-core server (power) sold as a 192-vCPU instance (price):
# a local CPU's defaults are those figures per core, labelled as such
_CATALOG_CPU_CORES, _CATALOG_CPU_VCPUS = 112, 192
_MEM_GRID = [4.0**i for i in range(5, 15)]  # 1 KiB … 256 MiB per op


@dataclass
class Calibration:
    """A fitted profile: the YAML document, the parsed profile, and what it was fitted from."""

    doc: dict
    profile: Profile
    details: dict = field(default_factory=dict)


def check_device(device: str) -> None:
    """Exit-2 errors for devices this machine does not have, or that cannot be profiled yet."""
    probes = {
        "cuda": lambda: torch.cuda.is_available(),
        "xpu": lambda: hasattr(torch, "xpu") and torch.xpu.is_available(),
        "hpu": lambda: hasattr(torch, "hpu") and torch.hpu.is_available(),
    }
    if device == "cpu":
        return
    names = {"cuda": "an NVIDIA/AMD GPU (torch.cuda)", "xpu": "an Intel GPU (torch.xpu)", "hpu": "an Intel Gaudi (torch.hpu, habana_frameworks)"}
    try:
        present = probes[device]()
    except Exception:  # a half-installed vendor stack is the same as no device
        present = False
    if not present:
        raise BadInput(
            f"no {device} device is visible to PyTorch on this machine, so it cannot be profiled.",
            field="--device",
            fix=f"run `hetc profile --device {device}` on a machine with {names[device]} "
            "and its PyTorch build, or profile this machine's CPU with `--device cpu`.",
        )
    raise BadInput(
        f"measuring {device} devices is not available in this version of hetc.",
        field="--device",
        fix=f"use the catalog profile for your {device} device (`hetc devices`; on an NVIDIA GPU, "
        "`python benchmarks/gpu_measure.py measure` then `compare` times it against that profile), "
        "or `--device cpu`.",
    )


def _q(v: float, unit: str) -> str:
    scale = {"GB": 1e9, "GB/s": 1e9, "GFLOP/s": 1e9, "us": 1e-6, "W": 1.0, "USD/h": 1.0}[unit]
    return f"{v / scale:.5g} {unit}"


def _mem_total() -> float:
    for line in Path("/proc/meminfo").read_text().splitlines() if Path("/proc/meminfo").exists() else []:
        if line.startswith("MemTotal:"):
            return float(line.split()[1]) * 1024
    return 16 * _GB


def _profile(doc: dict) -> Profile:
    return Profile.model_validate(doc)


def check_executor(executor: str) -> str:
    """The executor to measure: `auto` is what serves cpu stages (hetc.stage.CPU_EXECUTOR).

    Raises:
        BadInput: it cannot run here (its package is missing).
    """
    from hetc.stage import CPU_EXECUTOR

    executor = CPU_EXECUTOR if executor == "auto" else executor
    if executor == "openvino":
        from hetc.backends.toolchain import ToolchainUnavailable
        from hetc.backends.toolchains import toolchain

        try:
            toolchain("openvino").version()
        except ToolchainUnavailable as e:
            raise BadInput(
                f"the OpenVINO executor, which serves cpu stages, cannot run here: {e}",
                field="--executor",
                fix="install it (`make setup`), or measure torch eager with `--executor torch` and serve with `--executor torch`.",
            ) from None
    return executor


def calibrate(
    device: str = "cpu",
    *,
    quick: bool = False,
    threads: int | None = None,
    name: str | None = None,
    power: float | None = None,
    price: float | None = None,
    transfers: bool | None = None,
    executor: str = "torch",
    serving: Callable[..., dict] | None = None,
    progress: Callable[[str], None] | None = None,
) -> Calibration:
    """Measure the local device and fit a profile.

    Args:
        device: only "cpu" is measured in this version (see `check_device`).
        executor: what runs the matmuls, attention and probe steps: "torch" (eager) or "openvino"
            (the kernels that serve cpu stages); recorded in the profile.
        quick: the reduced shape set (seconds instead of minutes; coarser curves).
        threads: intra-op threads to measure with (default: all cores); recorded in the profile.
        name: the profile's name (default "local-cpu").
        power, price: W and USD/h to record (default: the catalog cpu profile's, per core).
        transfers: also time gloo transfers between two local processes (default: unless quick).
        serving: measures the serving runtime's host work per step (runtime/serving_probe.py
            `measure_serving(run, executor, message_s)`, passed in: the partitioner does not import
            the runtime); None leaves the profile's `serving` block out.
        progress: called with a short status line.
    """
    check_device(device)
    say = progress or (lambda s: None)
    load = bench.ForeignLoad()
    threads = bench.set_threads(threads)
    bench.warm_allocator()
    info = bench.cpu_info()
    sync = bench.sync_for(device)
    peaks, peak_how = bench.cpu_peak_flops(info, threads)
    shapes = fit_shapes(quick)
    evict = bench.evict_bytes(info)
    rounds = 2 if quick else 3
    run = lambda cases: bench.run_cases(cases, rounds=rounds, sync=sync, progress=say)  # noqa: E731

    say("timing op dispatch")
    dispatch = statistics.median(c.seconds for c in run(microbench.dispatch_cases(device)))
    say("timing memory bandwidth")
    copy = run([microbench.copy_case(max(4 * info.l3_bytes, 64 * 2**20) if quick else 256 * 2**20, device=device)])[0]
    bandwidth = copy.meta["bytes"] / copy.seconds

    say("timing matmuls")
    on: dict[str, Any] = dict(executor=executor, threads=threads)
    # OpenVINO serves an fp32 profile's stages at fp32; bf16 weights are widened on CPUs without bf16 math
    bf16 = [] if executor == "openvino" else shapes.matmul_bf16
    mm = run(
        microbench.matmul_cases(shapes.matmul, dtype="fp32", device=device, evict=evict, **on)
        + microbench.matmul_cases(bf16, dtype="bf16", device=device, evict=evict)
    )
    matmul = {}
    for dtype in ("fp32", "bf16"):
        cs = [c for c in mm if c.meta["dtype"] == dtype]
        if cs:
            matmul[dtype] = fit.table_2d(
                [c.meta["m"] for c in cs],
                [c.meta["n"] * c.meta["k"] for c in cs],
                [fit.efficiency(c.meta["flops"], c.seconds, peaks[dtype], dispatch) for c in cs],
            )
    for dtype, table in matmul.items():
        # a CPU that boosts above its reported clock beats the nominal peak: the best measured
        # rate becomes the peak, so efficiencies stay fractions
        best = max(max(r) for r in table["eff"])
        if best > 1.0:
            peaks[dtype] *= best
            table["eff"] = [[e / best for e in r] for r in table["eff"]]
            peak_how += f"; {dtype} raised ×{best:.3f} to the fastest measured matmul (clock above the reported one)"
    say("timing attention")
    at = run(microbench.attention_cases(shapes.attention, dtype="fp32", device=device, evict=evict, **on))
    attention = fit.table_2d(
        [c.meta["shape"].q for c in at],
        [c.meta["shape"].mean_ctx for c in at],
        [fit.efficiency(c.meta["flops"], c.seconds, peaks["fp32"], dispatch) for c in at],
    )
    attention = {"q": attention["m"], "ctx": attention["nk"], "eff": attention["eff"]}
    dec = [c for c in at if c.meta["shape"].q == 1 and not c.meta["shape"].causal]
    decode = (
        fit.table_2d(
            [c.meta["shape"].batch for c in dec],
            [c.meta["shape"].mean_ctx for c in dec],
            [fit.efficiency(_decode_bytes(c), c.seconds, bandwidth, dispatch) for c in dec],  # the K/V read sets its time
        )
        if dec
        else None
    )
    say("timing element-wise ops")
    me = run(microbench.memory_cases(shapes.memory, dtype="fp32", device=device))
    samples = [{"op": c.meta["graph_op"], "kind": c.meta["kind"], "bytes": c.meta["bytes"], "seconds": c.seconds, "rows": c.meta["step"].tokens} for c in me]
    gather = fit.fit_gather([s for s in samples if s["kind"] == "gather"], bandwidth, dispatch)
    memory, memory_kinds, memory_ops = fit.fit_memory([s for s in samples if s["kind"] != "gather"], bandwidth, dispatch, _MEM_GRID, info.l3_bytes)

    eff_matmul = min(1.0, max(max(r) for r in matmul["fp32"]["eff"]))
    curves = {
        "source": f"fitted by `hetc profile --device {device}{' --quick' if quick else ''}`: median efficiency "
        "on the measured grid (matmul: FLOP/s ÷ peak by rows M and N·K; attention: by query tokens "
        "per sequence and mean context; attention_decode: K/V bytes read per s ÷ memory_bandwidth by sequences and context; memory, "
        "memory_kinds, memory_ops: bytes/s ÷ memory_bandwidth by bytes per op, for all ops, per kind, "
        "per op; gather: by rows and bytes per row), dispatch subtracted",
        "threads": threads,
        "executor": executor,
        "dispatch_overhead": _q(dispatch, "us"),
        "matmul": matmul,
        "attention": {"fp32": attention},
        "attention_decode": {"fp32": {"seqs": decode["m"], "ctx": decode["nk"], "eff": decode["eff"], "basis": "kv_bytes"}} if decode else {},
        "memory": memory,
        "memory_kinds": memory_kinds,
        "memory_ops": memory_ops,
        "gather": gather,
    }
    now = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    mem_total = _mem_total()
    catalog = load_profile("cpu")
    doc: dict[str, Any] = {
        "name": name or "local-cpu",
        "vendor": "cpu",
        "backend": "cpu",
        "memory": _q(mem_total, "GB"),
        "reserved_memory": _q(2 * _GB + 0.1 * mem_total, "GB"),
        "memory_bandwidth": _q(bandwidth, "GB/s"),
        "peak_flops": {k: _q(v, "GFLOP/s") for k, v in peaks.items()},
        "efficiency": {"matmul": round(eff_matmul, 4), "memory": 1.0},
        "efficiency_curves": curves,
        "launch_overhead": "0 us",
        "step_overhead": "0 us",
        "host_link": {"bandwidth": _q(bandwidth / 2, "GB/s"), "latency": _q(dispatch, "us")},
        "power": _q(power if power is not None else catalog.power * threads / _CATALOG_CPU_CORES, "W"),
        "price": _q(price if price is not None else catalog.price * threads / _CATALOG_CPU_VCPUS, "USD/h"),
        "sources": ["(being measured)"],
    }

    say("timing the overhead probe")
    pc = run(probe.probe_cases(shapes.probe_depths, PROBE_MODEL, device=device, **on))
    pf = probe.fit_probe(pc, _profile(doc))
    doc["launch_overhead"] = _q(pf.launch_overhead, "us")
    doc["step_overhead"] = _q(pf.step_overhead, "us")

    link, message_s = None, None
    if transfers if transfers is not None else not quick:
        from hetc.partitioner.profiling.transfer import measure_p2p

        say("timing gloo transfers between two processes")
        try:
            pts = measure_p2p([1 << 10, 1 << 16, 1 << 20, 1 << 23, 1 << 25])
            lat, bw = fit.fit_alpha_beta([b for b, _ in pts], [s for _, s in pts])
            link = {"bandwidth": _q(bw, "GB/s"), "latency": _q(lat, "us"), "points": pts}
            message_s = lat
        except (RuntimeError, ValueError) as e:  # optional: the profile stands without it
            link = {"error": str(e)}

    if serving is not None:
        say("timing the serving runtime's host work per step")
        doc["serving"] = serving(run, executor, message_s)

    foreign = load.share()
    doc["sources"] = _sources(device, quick, now, info, threads, copy, peak_how, pf, link, power, price)
    doc["sources"].insert(
        1,
        f"executor measured: {executor} (matmuls, attention and the overhead probe run by it"
        + (": OpenVINO's FullyConnected and paged attention, what serves cpu stages)" if executor == "openvino" else ": torch eager)"),
    )
    if foreign is not None:
        doc["sources"].insert(1, f"{'⚠ ' if foreign > 0.1 else ''}other processes used {foreign:.0%} of the machine's CPU time while it was measured")
    details = {
        "foreign_load": foreign,
        "dispatch_s": dispatch,
        "bandwidth": bandwidth,
        "probe": pf.points,
        "p2p_link": link,
        "cases": {c.name: c.seconds for c in mm + at + me + pc},
    }
    return Calibration(doc, _profile(doc), details)


def _decode_bytes(case: bench.Case) -> float:
    """Bytes a decode attention case moves as the cost model counts them: every sequence's K/V
    context read, and the step's activations (analytic._attention_time)."""
    step, rec = case.meta["step"], case.meta["record"]
    return case.meta["kv_bytes_per_token"] * step.seqs * step.ctx + rec.act_bytes.at(step.tokens, step.ctx)


def _sources(device, quick, now, info, threads, copy, peak_how, pf, link, power, price) -> list[str]:
    cmd = f"hetc profile --device {device}{' --quick' if quick else ''}"
    out = [
        f"MEASURED by `{cmd}` at {now} on {info.model} ({info.cores} core(s) online, {threads} thread(s) used, "
        f"L3 {info.l3_bytes / 2**20:.0f} MiB), torch {torch.__version__}",
        "memory: /proc/meminfo MemTotal; ⚠ reserved_memory: estimate, 2 GB + 10% for the OS, Python and the runtime",
        f"memory_bandwidth: measured, copy of {copy.meta['bytes'] / 2 / 2**20:.0f} MiB (bytes read + written ÷ time), "
        "fastest of the rounds' medians; efficiency.memory 1.0 because the bandwidth is itself the achieved rate",
        f"peak_flops: {peak_how}",
        "efficiency.matmul: the largest fitted fp32 matmul efficiency; efficiency_curves: see their `source`",
        f"launch_overhead, step_overhead: fitted to an overhead probe (transformers Llama, width "
        f"{PROBE_MODEL['hidden']}, at {', '.join(str(p['kernels']) for p in pf.points[::2])} kernels; one-token "
        "prefill and decode) as step + kernels × launch after subtracting the ops' modelled work",
        "host_link: a CPU's host is its own memory: half the copy bandwidth each way, dispatch latency",
        (
            "power: given"
            if power is not None
            else f"⚠ power: not measured; hardware_profiles/cpu.yaml's figure per core ({_CATALOG_CPU_CORES} cores) × {threads}"
        )
        + "; "
        + ("price: given" if price is not None else f"⚠ price: not measured; hardware_profiles/cpu.yaml's figure per vCPU ({_CATALOG_CPU_VCPUS}) × {threads}"),
    ]
    if link and "error" in link:
        out.append(f"process-to-process transfer: not measured ({link['error']})")
    elif link:
        out.append(
            f"process-to-process (torch.distributed gloo, localhost, ping-pong): {link['bandwidth']}, "
            f"{link['latency']} per message — use `link: {{bandwidth: {link['bandwidth']}, latency: "
            f"{link['latency']}}}` for a node of several CPU stage processes"
        )
    return out


def profile_yaml(doc: dict) -> str:
    """The profile document as YAML (curves as inline lists)."""
    head = (
        "# Measured by `hetc profile`; every figure's origin is in `sources`.\n"
        "# efficiency_curves are optional: a hand-written profile needs only the scalar `efficiency`.\n"
    )
    return head + yaml.safe_dump(doc, sort_keys=False, width=140, default_flow_style=None, allow_unicode=True)
