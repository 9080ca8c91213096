"""Speculative rounds in the simulator: how many of a round's proposals the target accepts.

The simulator drives the runtime's own `Scheduler` with speculation on (hetc/batching.py): each
round schedules K+1 positions per sequence and its step is priced as such (capacity/lanes.py
`step_of`); what the verification would decide is drawn here, per token, from the plan's α
(seeded: the same seed gives the same run), or replayed from a trace of accepted counts (e.g. a
served run's). A draft model's proposals cost its K decode steps on the lane's first stage, where
the runtime runs it (runtime/drafter.py).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from hetc.spec_rounds import SpecConfig
from hetc.speculation import SpeculationMethod

__all__ = ["SimSpeculation", "sim_speculation"]


@dataclass(slots=True)
class SimSpeculation:
    """A simulated server's speculation and the source of its acceptance."""

    config: SpecConfig
    alpha: float = 0.0  # per-token acceptance, when no trace is given
    proposal_rate: float = 1.0  # the share of a speculating sequence's decode steps that propose (the rest decode one token)
    trace: tuple[int, ...] = ()  # accepted counts of successive rounds, replayed in order (cycled); each capped at the round's K
    seed: int = 0
    draft_s: float = 0.0  # seconds a draft model's proposals add to the first stage of a step with rounds (K of its decode steps)
    _rng: random.Random = field(init=False, repr=False)
    _next: int = field(default=0, init=False, repr=False)

    def __post_init__(self) -> None:
        if not 0.0 <= self.alpha <= 1.0:
            raise ValueError(f"acceptance α must be in [0, 1], got {self.alpha}")
        if not 0.0 < self.proposal_rate <= 1.0:
            raise ValueError(f"proposal rate must be in (0, 1], got {self.proposal_rate}")
        if any(a < 0 for a in self.trace):
            raise ValueError("an accepted count in the trace is negative")
        self._rng = random.Random(self.seed)

    def propose(self, k: int) -> list[int]:
        """A round's proposals, on a share `proposal_rate` of the steps ([] on the others: the step
        decodes one token, as n-gram lookup does where it finds no match). What is proposed does not
        matter here: how much is accepted is drawn (`accepted`)."""
        return [0] * k if self.proposal_rate >= 1.0 or self._rng.random() < self.proposal_rate else []

    def accepted(self, k: int) -> int:
        """Proposals kept of a round of `k`: the first rejection ends it (Leviathan et al.)."""
        if self.trace:
            a = self.trace[self._next % len(self.trace)]
            self._next += 1
            return min(a, k)
        n = 0
        while n < k and self._rng.random() < self.alpha:
            n += 1
        return n


def sim_speculation(plan, seed: int = 0) -> SimSpeculation | None:
    """The plan's `speculation` section as the simulator runs it (None: the plan does not speculate).

    Args:
        plan: a hetc.plan.Plan.
        seed: the acceptance draws' seed.
    """
    s = plan.speculation
    if s is None:
        return None
    k = s.num_speculative_tokens
    draft_s = k * s.drafter.predicted_ms_per_token / 1e3 if s.method is SpeculationMethod.DRAFT and s.drafter is not None else 0.0
    return SimSpeculation(SpecConfig(s.method, k), alpha=s.acceptance, proposal_rate=s.proposal_rate, seed=seed, draft_s=draft_s)
