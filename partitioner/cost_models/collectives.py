"""Measured collective times of named links: what the collective library achieves, not the wire.

The α–β all-reduce of links.py charges a link's nominal bandwidth. Where the link's vendor
publishes the collective library's own measurement on that fabric, the cost model charges
that instead (`allreduce_time` in links.py): the measured time of an all-reduce of the
message's bytes, read piecewise linear in log(bytes)–log(time) between the measured sizes
(flat below the smallest, constant bus bandwidth above the largest). A group of another size
than the measured one adds what the α–β model says its different link count adds, so the
measured inefficiency carries over and the group size still counts.

Two readings per table: `eager` (kernels launched one by one) and `graph` (the collective
replayed inside a recorded graph, as engines run decode steps); they differ only for small
messages, where launch latency dominates.

Before use each series is made monotone the way a library could always achieve: a message never
takes longer than a larger one (it could be padded), so each time is the least of its own and
every larger message's. Checked at import: time never falls and time per byte never rises with
the message size — what the solver's batch intervals rely on (a step's cost per sequence never
grows with the batch).

Sources are per table (`source`); ⚠ marks what was not measured on the device it is applied to.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from hetc.partitioner.cost_models.curves import log_weights

__all__ = ["MeasuredAllReduce", "MEASURED_ALLREDUCE"]


@dataclass(frozen=True)
class MeasuredAllReduce:
    """Measured all-reduce times of one link at `ranks` devices.

    Args:
        ranks: devices in the measured group.
        sizes: message bytes, ascending.
        eager_us: out-of-place time per all-reduce in µs, kernels launched one by one.
        graph_us: the same with the collective inside a recorded graph.
        source: where the figures come from.
    """

    ranks: int
    sizes: tuple[float, ...]
    eager_us: tuple[float, ...]
    graph_us: tuple[float, ...]
    source: str
    _series: dict = field(default_factory=dict, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not len(self.sizes) == len(self.eager_us) == len(self.graph_us):
            raise ValueError("sizes, eager_us and graph_us must have one value per size")
        if any(b <= a for a, b in zip(self.sizes, self.sizes[1:])):
            raise ValueError("sizes must be strictly ascending")
        for name, us in (("eager", self.eager_us), ("graph", self.graph_us)):
            t = [min(us[i:]) * 1e-6 for i in range(len(us))]  # never longer than a larger message
            per_byte = [x / s for x, s in zip(t, self.sizes)]
            if any(b > a * (1 + 1e-12) for a, b in zip(per_byte, per_byte[1:])):
                raise ValueError(f"{name}: time per byte rises with the message size")
            self._series[name] = ([math.log(s) for s in self.sizes], [math.log(x) for x in t])

    def time(self, nbytes: float, graphs: bool) -> float:
        """Seconds for one all-reduce of `nbytes` across `ranks` devices.

        Args:
            nbytes: message bytes.
            graphs: whether the collective is replayed inside a recorded graph.
        """
        lx, lt = self._series["graph" if graphs else "eager"]
        if nbytes > self.sizes[-1]:  # past the largest measured size: its bus bandwidth holds
            return math.exp(lt[-1]) * nbytes / self.sizes[-1]
        i, j, w = log_weights(lx, max(nbytes, 1.0))
        return math.exp(lt[i] + (lt[j] - lt[i]) * w)


_POW2 = tuple(float(2**k) for k in range(3, 35))  # 8 B … 16 GiB, factor 2

MEASURED_ALLREDUCE: dict[str, MeasuredAllReduce] = {
    "infinity-fabric": MeasuredAllReduce(
        ranks=8,
        sizes=_POW2,
        eager_us=(
            16.61,
            16.12,
            16.56,
            17.94,
            22.94,
            22.93,
            22.91,
            13.11,
            13.09,
            13.27,
            13.30,
            13.54,
            13.31,
            13.77,
            14.14,
            16.87,
            24.41,
            27.42,
            34.81,
            51.72,
            83.68,
            148.8,
            244.1,
            429.1,
            797.4,
            1537.1,
            3026.2,
            5970.6,
            11891,
            23680,
            47278,
            94254,
        ),
        graph_us=(
            16.38,
            15.75,
            6.32,
            6.00,
            6.53,
            6.77,
            7.44,
            7.47,
            7.46,
            7.61,
            7.64,
            8.71,
            9.05,
            9.14,
            9.51,
            10.26,
            14.26,
            19.40,
            35.03,
            51.83,
            83.74,
            149.1,
            243.4,
            427.9,
            795.3,
            1534.4,
            3024.0,
            5961.9,
            11880,
            23658,
            47244,
            94182,
        ),
        source=(
            "AMD, 'Understanding RCCL Bandwidth and xGMI Performance on AMD Instinct MI300X' (ROCm blog, Kolla, "
            "Alizadeh, Lee, 2025-03-02; ROCm/rocm-blogs blogs/software-tools-optimization/mi300x-rccl-xgmi/README.md "
            "@ 0e81c2ca): rccl-tests all_reduce_perf on one 8×MI300X node, one process per GPU (mpirun -np 8 "
            "--bind-to numa, -b 8 -e 16G -f 2 -g 1), float sum, RCCL 2.22.3, ROCm 6.3.0; the out-of-place 'time' "
            "column of the plain run (eager) and of the run with -G 1 (graph). Bus bandwidth rises from 0.27 GB/s "
            "at 2 KiB to 197 GB/s at 16 MiB, 274 GB/s at 64 MiB and 319 GB/s at 16 GiB, where the α–β model of the "
            "seven 64 GB/s links gives 423–448 GB/s; the blog gives the links' usable 45–48 GB/s each (CRC and "
            "protocol overhead) and the slowest link as the cap (310–330 GB/s). Azure's ND MI300X v5 RCCL "
            "all-reduce (in-place; samuel-bohman/AI-benchmarking-guide, a fork of Azure/AI-benchmarking-guide, "
            "Azure_Results/ND_MI300X_v5_results.md @ 3de0c294) is "
            "lower still at 8–32 MiB (132–230 GB/s). ⚠ Applied to MI325X nodes too (same xGMI links, not measured "
            "there); vLLM's custom all-reduce may beat RCCL below its size limit (8 MiB by default)"
        ),
    ),
}
