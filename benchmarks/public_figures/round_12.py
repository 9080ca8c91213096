"""Round 12 of the public GPU figures, gathered after the freeze at freeze.FROZEN_BY_ROUND[12] and held to the
target (freeze.HELD_ROUNDS). SOURCES: where its figures came from and how they were read, with the round's rule
for which figures are held; CASES: its rows."""

from __future__ import annotations

from public_figures.case import Case

SOURCES: dict[str, str] = {}

CASES: list[Case] = []
