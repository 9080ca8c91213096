"""The solver against a brute force on the small generated block (issue 31): which side is loose.

For each case of `generated_clusters.SMALL_SEEDS` (2-3 device types, 3-6 devices, a catalog model cut
to 1-2 layers, memory scaled with it, at most SMALL_MAX_SEQS sequences per pipeline), the true optimum
under hetc's own cost model is found by enumerating every chain of stages, split and batch
(tests/brute_force.py, pipelines that prefill and decode: `--disaggregate off`), and compared with the
solver's plan and bound: plan/opt is the plan's looseness, opt/bound the bound's. "opt, no loop" is the
optimum with every pipeline valued without its loop term (the throughput bound's relaxation), so
opt-no-loop/bound says how much of the bound's gap the loop term explains.

`--counted STATES` bounds with column generation (as past solver.MAX_CELLS) that, once converged, prices
within each over-used type's devices (partitioner/bounds/fitting.py, COUNT_STATES = STATES): its bound
must stay above the optimum too.

Usage: python benchmarks/solver_brute.py [--seeds A,B] [--time-limit S] [--counted STATES]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

from generated_clusters import SMALL_SEEDS, generate_small, small_instance
from solver_scenarios import engine_for

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests.brute_force

from hetc.errors import Infeasible  # noqa: E402
from hetc.partitioner.bounds import fitting  # noqa: E402
from hetc.partitioner.search import solver as solver_module  # noqa: E402
from hetc.partitioner.search.solver import solve  # noqa: E402
from tests.brute_force import best_fleet, best_per_usage  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", help="seeds of the small block, comma-separated (default: all)")
    ap.add_argument("--time-limit", type=float, default=30.0, help="the solver's --time-limit (CPU s)")
    ap.add_argument("--counted", type=int, default=0, help="column generation counting up to this many states per key (module docstring)")
    a = ap.parse_args()
    if a.counted:
        solver_module.MAX_CELLS, fitting.COUNT_STATES = 1, a.counted
    seeds = [int(s) for s in a.seeds.split(",")] if a.seeds else list(SMALL_SEEDS)
    if not set(seeds) <= set(SMALL_SEEDS):
        ap.error(f"--seeds {a.seeds}: not all in the small block ({SMALL_SEEDS.start}-{SMALL_SEEDS.stop - 1})")
    head = ("case", "opt tok/s", "opt, no loop", "plan", "bound", "plan/opt", "opt/bound", "no-loop/bound", "brute CPU s", "solver CPU s", "limit in notes")
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    tmp = Path(tempfile.mkdtemp())
    for seed in seeds:
        sc = generate_small(seed)
        units, cluster, wl = small_instance(sc, tmp, engine_for(sc.case).value)
        counts = [n.count for n in cluster.nodes]
        t = time.process_time()
        opt = best_fleet(best_per_usage(units, cluster, wl, sc.max_num_seqs), counts)
        loose = best_fleet(best_per_usage(units, cluster, wl, sc.max_num_seqs, relax_loop=True), counts)
        brute = time.process_time() - t
        t = time.process_time()
        try:
            sol = solve(units, cluster, wl, disaggregate="off", max_num_seqs=sc.max_num_seqs, time_limit=a.time_limit)
        except Infeasible:  # a finding only where the brute force found a plan
            print(f"| {sc.name} | {opt:,.0f} | {loose:,.0f} | infeasible | – | {'ok' if opt == 0 else 'WRONG'} | | | {brute:.1f} | | |", flush=True)
            continue
        solver = time.process_time() - t
        row = (
            sc.name,
            f"{opt:,.0f}",
            f"{loose:,.0f}",
            f"{sol.output_tok_s:,.0f}",
            f"{sol.bound:,.0f}",
            f"{sol.output_tok_s / opt:.3f}",
            f"{opt / sol.bound:.3f}",
            f"{loose / sol.bound:.3f}",
            f"{brute:.1f}",
            f"{solver:.1f}",
            "yes" if any("--time-limit" in n for n in sol.notes) else "no",
        )
        print("| " + " | ".join(row) + " |", flush=True)


if __name__ == "__main__":
    main()
