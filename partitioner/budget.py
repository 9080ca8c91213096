"""`--time-limit` as process CPU seconds: what one `hetc plan` may spend on its search and bound.

CPU time (`time.process_time`: every thread of the process) does not stretch when other processes
share the host, as wall time does. A `CpuBudget` starts after the capture; the solver moves its
deadline (`until`) phase by phase and charges each phase's CPU to a name (`search`, `bound`) for
plan.json's `solver.time`. The deterministic work budgets (bounds' DP cells, CP-SAT's
deterministic time) still stop each phase first wherever they fit within the deadline, so a plan
whose limit is not binding is the one the same inputs always give; where the deadline stops a
phase first, the plan depends on the CPU the host gave it.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from enum import IntEnum

__all__ = ["CPSAT_FLOOR", "OBJECTIVE_BOUND", "CpuBudget", "OutOfTime", "Pause"]

OBJECTIVE_BOUND = "objective bound"  # plan.json stopped_by_limit: the latency / cost / energy bound the deadline cut (a looser one kept)
STRETCH_SLACK = 0.5  # CPU seconds a wall-timed solver may run past the deadline where the host frees up meanwhile
CPSAT_FLOOR = 0.25  # seconds CP-SAT gets past the deadline, to take its warm start as a fleet


class Pause(IntEnum):
    """Why a bound's rounds (cell_bound_rounds, column_bound_rounds) yield control: a round's second
    item; `False` and `True` read as NO and DEADLINE."""

    NO = 0
    DEADLINE = 1  # the CPU deadline leaves no time for another round: resume it with a later one
    WORK = 2  # the work budget is spent, refinement not done: resumed, it goes on until a deadline (the CPU left)


class OutOfTime(Exception):
    """A bound's CPU deadline passed before it ended (`CpuBudget.check`): its caller keeps a looser
    bound that is still valid."""


class CpuBudget:
    """Process CPU seconds from its start: a limit, the current phase's deadline, and what each
    named phase spent.

    Args:
        limit: CPU seconds in all (inf: no limit).
        clock: the process's CPU seconds (a test passes its own).
    """

    def __init__(self, limit: float = math.inf, clock: Callable[[], float] = time.process_time, wall: Callable[[], float] = time.perf_counter) -> None:
        self.limit, self.clock, self.wall = limit, clock, wall
        self.start, self.wall_start = clock(), wall()
        self.until = self.start + limit  # the current phase's deadline, on `clock`
        self.spent: dict[str, float] = {}
        self.stopped: list[str] = []  # phases a deadline stopped before their work budgets did

    def part(self, limit: float) -> CpuBudget:
        """A budget of `limit` CPU seconds from now that records its phases' CPU and stops in this
        one's `spent` and `stopped` (a plan's second search gets the part the first left)."""
        sub = CpuBudget(limit, self.clock, self.wall)
        sub.spent, sub.stopped = self.spent, self.stopped
        return sub

    @property
    def used(self) -> float:
        """CPU seconds since the start."""
        return self.clock() - self.start

    def left(self) -> float:
        """CPU seconds to the current deadline (negative past it)."""
        return self.until - self.clock()

    def past(self) -> bool:
        return self.clock() >= self.until

    def check(self) -> None:
        """Raise OutOfTime past the deadline (a bound that has no valid value half-way stops here)."""
        if self.past():
            raise OutOfTime

    def deadline(self, share: float, reserve: float = 0.0) -> None:
        """Set the deadline at `share` of the limit from the start, less `reserve` seconds."""
        self.until = self.start + self.limit * share - reserve

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        """Charge the CPU spent inside to `name`."""
        t = self.clock()
        try:
            yield
        finally:
            self.charge(name, t)

    def stop(self, phase: str) -> None:
        """Record that the deadline stopped `phase` (its result then depends on the host's CPU)."""
        if phase not in self.stopped:
            self.stopped.append(phase)

    def charge(self, name: str, since: float) -> None:
        """Charge the CPU spent since `since` (on `clock`) to `name`."""
        self.spent[name] = self.spent.get(name, 0.0) + self.clock() - since

    def wall_left(self) -> float:
        """Wall seconds to give a one-thread solver (GLOP, SCIP) that stops on wall time: the CPU
        left, stretched as this process's CPU has run slower than wall time (a shared host) by at
        most STRETCH_SLACK, so that where the host frees up it still ends within the limit + that."""
        left = self.left()
        if not math.isfinite(left):
            return 1e9
        cpu, wall = self.clock() - self.start, self.wall() - self.wall_start
        stretch = wall / cpu if cpu > 0 else 1.0
        return max(0.0, left) + min(max(0.0, left) * max(0.0, stretch - 1.0), STRETCH_SLACK)

    def seconds_for_cpsat(self, workers: int = 1) -> float:
        """The wall seconds to give CP-SAT's `max_time_in_seconds` so it stays within the CPU left:
        `workers` threads spend at most `workers` CPU seconds per wall second. At least
        CPSAT_FLOOR: past the deadline it still gets to take its warm start (a fleet)."""
        left = self.left()
        return max(CPSAT_FLOOR, left / workers) if math.isfinite(left) else 1e9
