"""Pricing held to the fleet's devices per type, for column generation (colgen.py).

Column generation's bound needs, at the master's duals, an upper bound on the reduced cost of every
pipeline a plan could run (colgen's module docstring), and every such pipeline takes at most N_t
devices of each type t: a plan's pipelines share the fleet, so each alone fits it. Pricing may
therefore leave out every chain that takes more devices of some type than exist, and the bound holds.
Without that, a 235B model's pricing returned chains such as 13 H200 where the fleet has 8: a fraction
of an impossible long pipeline is worth more per device than any whole possible one, and the master LP
ran them (gen9 of the generated clusters: 22 of 432 columns fit; the LP over fitting ones read ~15% less).

Counting every type is the cell bound's enumeration again (gen9: 87,480 count vectors), so a key's
pricer counts only the types its best chains over-use, and those first as one group: where the chain it
finds takes more devices of uncounted types than exist, they are counted together (one digit, Σ_t d_t ≤
Σ_t N_t: any chain within each N_t keeps it), and only a type the chain then still over-uses gets a
digit of its own (counted_dp.py), the key priced again each time, while the count states stay within
COUNT_STATES. Counting some of the types, or groups of them, is a relaxation of counting all of them
apart, so the key's upper estimate is valid at every step; past COUNT_STATES its chain may still
over-use a type and gives no column. A key split (colgen.py) starts from its parent's counts: its
chains over-use the same types (big7's probe: 47 of 68 keys re-priced from no counts).
"""

from __future__ import annotations

import numpy as np

from hetc.partitioner.bounds.counted_dp import Group
from hetc.partitioner.bounds.pricing import KeyPricer, Priced, Worth

__all__ = ["Fitting", "COUNT_STATES"]

# a key's count states at most (Π (N_t + 1) over its counted types): each multiplies its DP's work. 0: column
# generation never counts (the default: on gen9 a counted pass cost ~15 CPU s against the plain pass's ~2)
COUNT_STATES = 0


class Fitting:
    """A key's pricer, counting devices of the types its chains have over-used (module docstring)."""

    def __init__(self, plain: KeyPricer, like: "Fitting | None" = None) -> None:
        """Args:
        like: a pricer whose counts this one starts from (the key it was split from)."""
        self.plain = self.now = plain
        self.rate = plain.rate
        self.counted: tuple[Group, ...] = ()
        if like is not None and like.counted and plain.first is None and plain.last is None:
            self.counted, self.now = like.counted, plain.counted(like.counted)

    def certificate(self, prices: np.ndarray, worth: "float | Worth") -> float:
        """The plain pricer's certificate (it bounds every chain, fitting or not)."""
        return self.plain.certificate(prices, worth)

    def per_device(self, prices: np.ndarray, worth: "float | Worth") -> float:
        """The plain pricer's bound per device (it bounds every chain, fitting or not)."""
        return self.plain.per_device(prices, worth)

    def over(self, chain: tuple) -> tuple[int, ...]:
        """The types of which `chain` takes more devices than the fleet has."""
        costs = self.plain.costs
        return tuple(int(t) for t in np.nonzero(costs.devices_of(chain[0]) > costs.devices)[0])

    def refined(self, over: tuple[int, ...]) -> tuple[Group, ...]:
        """The counts after a chain over-used `over`: its types not counted yet as one new group, and each
        of its types counted in a group with others on a digit of its own (the rest stay a group)."""
        out: list[Group] = []
        for g in self.counted:
            alone = [t for t in g if t in over] if len(g) > 1 else []
            rest = tuple(t for t in g if t not in alone)
            out += [(t,) for t in alone] + ([rest] if rest else [])
        counted = {t for g in self.counted for t in g}
        new = tuple(t for t in over if t not in counted)
        return tuple(sorted(out + ([new] if new else [])))

    def states(self, groups: tuple[Group, ...]) -> int:
        """The count states of `groups`: Π over them of (Σ N_t + 1)."""
        N = self.plain.costs.devices
        return int(np.prod([int(sum(int(N[t]) for t in g)) + 1 for g in groups]))

    def price(self, prices: np.ndarray, worth: "float | Worth", beat: float, tol: float) -> Priced:
        """KeyPricer.price over the chains within the counted types' devices, counting more types (or
        counting them apart) while the chain found over-uses one and the count states allow.

        Args:
            prices, worth, beat, tol: as KeyPricer.price.
        """
        got = self.now.price(prices, worth, beat, tol)
        work = got.work
        while got.chain is not None and self.plain.first is None and self.plain.last is None:
            more = self.refined(self.over(got.chain))
            if more == self.counted or self.states(more) > COUNT_STATES:
                break
            self.counted, self.now = more, self.plain.counted(more)
            got = self.now.price(prices, worth, beat, tol)
            work += got.work
        if got.chain is not None and self.over(got.chain):  # past COUNT_STATES: no column a plan could run
            return Priced(got.upper, -np.inf, None, 0.0, work)
        return Priced(got.upper, got.found, got.chain, got.R, work)
