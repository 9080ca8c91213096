"""What a command asks of the library: request dataclasses, checked on construction, whose
defaults are the CLI's (hetc/cli.py reads them from here, so the two cannot drift).

Light on purpose: the CLI imports this module to build its parser."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, TypeVar

from hetc.errors import BadInput
from hetc.scheduling import Disaggregate, Objective

__all__ = ["PlanRequest", "default"]

E = TypeVar("E", bound=StrEnum)


def _member(enum: type[E], value: str, flag: str) -> E:
    try:
        return enum(value)
    except ValueError:
        raise BadInput(f"unknown value {value!r}.", field=flag, fix=f"use one of {', '.join(e.value for e in enum)}.") from None


def default(request: type, name: str) -> Any:
    """The default of field `name` of a request dataclass (what the CLI shows and uses)."""
    for f in dataclasses.fields(request):
        if f.name == name:
            if f.default is dataclasses.MISSING:
                raise KeyError(f"{request.__name__}.{name} has no default")
            return f.default
    raise KeyError(f"{request.__name__} has no field {name}")


@dataclass(kw_only=True, slots=True)
class PlanRequest:
    model: str
    profiles: str
    dtype: str = "bf16"
    kv_dtype: str | None = None
    input_len: int = 1024
    output_len: int = 256
    objective: Objective = Objective.THROUGHPUT
    min_tok_s: float = 0.0
    ttft_slo_ms: float | None = None
    tpot_slo_ms: float | None = None
    disaggregate: Disaggregate = Disaggregate.AUTO
    tp: str = "auto"
    time_limit: float = 30.0
    power_budget_w: float | None = None
    placement: str | None = None  # evaluate this placement (hetc/placement.py) instead of searching
    batch: int | None = None  # with placement: sequences in flight per pipeline (default: the best)
    max_num_seqs: int | None = None  # most sequences in flight per pipeline, as engines cap it (default: what memory admits)

    def __post_init__(self) -> None:
        for name in ("input_len", "output_len"):
            if getattr(self, name) < 1:
                raise BadInput(f"must be ≥ 1, got {getattr(self, name)}.", field=f"--{name.replace('_', '-')}",
                               fix="give a positive number of tokens.")
        self.objective = _member(Objective, self.objective, "--objective")
        self.disaggregate = _member(Disaggregate, self.disaggregate, "--disaggregate")
        if self.batch is not None and (self.batch < 1 or not self.placement):
            raise BadInput(f"--batch {self.batch} needs --placement and must be ≥ 1.", field="--batch",
                           fix="give --placement SPEC with it (the solver chooses batches itself otherwise).")
        if self.max_num_seqs is not None and self.max_num_seqs < 1:
            raise BadInput(f"must be ≥ 1, got {self.max_num_seqs}.", field="--max-num-seqs",
                           fix="give the most sequences one pipeline (engine) runs at once, e.g. vLLM's max_num_seqs 256.")
        if self.batch is not None and self.max_num_seqs is not None and self.batch > self.max_num_seqs:
            raise BadInput(f"--batch {self.batch} is above --max-num-seqs {self.max_num_seqs}.", field="--batch",
                           fix="give a batch at most the cap, or raise the cap.")
        if self.power_budget_w is not None and not self.power_budget_w > 0:
            raise BadInput(f"must be > 0 W, got {self.power_budget_w}.", field="--power-budget",
                           fix="give the watts the plan's devices may draw together.")
        for name in ("min_tok_s", "ttft_slo_ms", "tpot_slo_ms", "time_limit"):
            v = getattr(self, name)
            if v is not None and v < 0:
                raise BadInput(f"must be ≥ 0, got {v}.", field=f"--{name.replace('_', '-')}", fix="give a non-negative value.")
        if self.disaggregate == Disaggregate.ON and self.objective != Objective.THROUGHPUT:
            raise BadInput(f"prefill/decode pools are planned for the throughput objective only, not {self.objective}.",
                           field="--disaggregate", fix="use --objective throughput, or --disaggregate off.")
        if self.tp not in ("auto", "1"):
            raise BadInput(f"unknown value {self.tp!r}.", field="--tp", fix="use auto or 1.")
