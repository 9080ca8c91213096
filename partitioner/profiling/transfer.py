"""Process-to-process transfer on this host: torch.distributed gloo send/recv, ping-pong.

What a pipeline of CPU stages on one machine pays to hand activations on. Two processes
(started as `python -m` this module, so nothing of the caller is re-imported) bounce a
tensor back and forth; a one-way transfer is half a round trip.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path
from hetc.host import free_port

__all__ = ["measure_p2p"]


def _worker(rank: int, port: int, sizes: list[int], reps: int, out: str) -> None:
    import torch
    import torch.distributed as dist

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=2, timeout=timedelta(seconds=60))
    try:
        results = []
        for size in sizes:
            buf = torch.zeros(max(size // 4, 1), dtype=torch.float32)
            best = float("inf")
            for _round in range(3):
                dist.barrier()
                t0 = time.perf_counter()
                for _ in range(reps):
                    if rank == 0:
                        dist.send(buf, 1)
                        dist.recv(buf, 1)
                    else:
                        dist.recv(buf, 0)
                        dist.send(buf, 0)
                best = min(best, (time.perf_counter() - t0) / (2 * reps))
            results.append((buf.numel() * 4, best))
        if rank == 0:
            Path(out).write_text(json.dumps(results))
    finally:
        dist.destroy_process_group()


def measure_p2p(sizes: list[int], reps: int = 10, timeout_s: float = 120.0) -> list[tuple[int, float]]:
    """One-way seconds per transfer of each size (bytes) between two local processes.

    Raises:
        RuntimeError: a process failed or did not finish in `timeout_s`.
    """
    port = free_port()
    with tempfile.TemporaryDirectory() as d:
        out = str(Path(d) / "p2p.json")
        args = [json.dumps(sizes), str(reps), out]
        procs = [
            subprocess.Popen(
                [sys.executable, "-m", "hetc.partitioner.profiling.transfer", str(r), str(port), *args], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
            )
            for r in (0, 1)
        ]
        try:
            for p in procs:
                p.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            raise RuntimeError("gloo transfer measurement did not finish in time") from None
        finally:
            for p in procs:
                if p.poll() is None:
                    p.kill()
        if any(p.returncode for p in procs) or not Path(out).exists():
            err = b"".join(p.stderr.read() for p in procs if p.stderr).decode(errors="replace").strip().splitlines()
            raise RuntimeError(f"gloo transfer measurement failed: {err[-1] if err else 'no output'}")
        return [(int(b), float(s)) for b, s in json.loads(Path(out).read_text())]


if __name__ == "__main__":
    _worker(int(sys.argv[1]), int(sys.argv[2]), json.loads(sys.argv[3]), int(sys.argv[4]), sys.argv[5])
