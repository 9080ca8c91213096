"""The public GPU figures benchmarks/gpu_public.py predicts, data only: each group of rounds' sources and rows
(rounds_1_4.py, rounds_5_6.py, rounds_7_9.py, round_10.py, round_11.py, round_12.py, round_13.py), one figure's record (case.py) and the freezes the
rounds were gathered after (freeze.py). A new round: its module of SOURCES and CASES, added to ROUNDS in order."""

from __future__ import annotations

from public_figures import round_10, round_11, round_12, round_13, rounds_1_4, rounds_5_6, rounds_7_9
from public_figures.case import Case

ROUNDS = (rounds_1_4, rounds_5_6, rounds_7_9, round_10, round_11, round_12, round_13)  # in round order: the tables print in it
SOURCES: dict[str, str] = {k: v for m in ROUNDS for k, v in m.SOURCES.items()}
CASES: list[Case] = [c for m in ROUNDS for c in m.CASES]
