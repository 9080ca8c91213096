"""The serving runtime's own host work around a step: part of the profile contract.

A served step costs more than its forward: the stage worker receives and decodes the step
message, builds the attention metadata, encodes and sends what it passes on, and the last
stage picks each sampled row's token from its logits; the frontend's messages to the first
stage and back are process-to-process messages. None of this is in the cost model's step
(the kernels, `launch_overhead`, `step_overhead`), and none of it is fitted to a served run:
`hetc profile` measures it by running the runtime's own functions (runtime/serving_probe.py)
on synthetic micro-batches, and the serving simulator (capacity/lanes.py) charges it. A
profile that was not measured this way (the catalog's) leaves it at zero and says so in
`source`.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field

from hetc.quantity import Kind, parse_quantity

__all__ = ["ServingOverheads"]

Seconds = Annotated[float, BeforeValidator(lambda v: parse_quantity(v, Kind.TIME)), Field(ge=0)]
TIME_FIELDS = ("step", "row", "token", "sample_logit", "message")


class ServingOverheads(BaseModel):
    """Seconds of host work per served step, per stage (see the module docstring).

    - step: per step, whatever its size (message decode and encode, metadata, the loop);
    - row: per sequence of the micro-batch (its block table, start, sampling parameters);
    - token: per new token of the micro-batch (positions, token ids);
    - sample_logit: the last stage, per logit it samples from (sampled rows × vocabulary);
    - message: one message between two processes of the host (frontend → first stage, last
      stage → frontend), the frontend's transport.
    """

    model_config = ConfigDict(extra="forbid", frozen=True, strict=False)
    step: Seconds = 0.0
    row: Seconds = 0.0
    token: Seconds = 0.0
    sample_logit: Seconds = 0.0
    message: Seconds = 0.0
    source: str = "not measured (a catalog or hand-written profile): the serving runtime's host work is not charged"

    def stage_step(self, rows: int, tokens: int) -> float:
        """Seconds of host work a stage spends around its forward on a step of `rows` sequences and
        `tokens` new tokens (the last stage's sampling apart: `sample_logit`)."""
        return self.step + self.row * rows + self.token * tokens

    def as_text(self) -> dict:
        """The block with explicit units (a profile's embedded copy parses strictly again)."""
        return {**{k: f"{getattr(self, k) * 1e6:.6g} us" for k in TIME_FIELDS}, "source": self.source}
