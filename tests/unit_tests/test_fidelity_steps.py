"""The fidelity report predicts a whole step as the executors run it: the final norm and the LM head
over one sampled row per sequence, not over every prompt token."""

from __future__ import annotations

from pathlib import Path

import pytest

from hetc.cluster import load_profile
from hetc.partitioner.capture.capture import capture
from hetc.partitioner.cost_models.analytic import Step, units_time
from hetc.partitioner.profiling.fidelity import sampled_step_time
from hetc.partitioner.profiling.hf_steps import decode_step, prefill_step
from hetc.stage import select_at

TINY = str(Path(__file__).resolve().parents[1] / "fixtures" / "configs" / "tiny-llama")


@pytest.fixture(scope="module")
def units():
    return capture(TINY, dtype="fp32").units


def _layers(units, step: Step) -> float:
    return units_time(units[: select_at([u.kind for u in units])], load_profile("cpu"), step, dtype="fp32", kv_dtype="fp32")


def test_a_decode_step_samples_every_row(units):
    p = load_profile("cpu")
    step = decode_step(6, 300)
    whole = units_time(units, p, step, dtype="fp32", kv_dtype="fp32")
    assert sampled_step_time(units, p, step) == pytest.approx(whole + p.step_overhead)


@pytest.mark.parametrize("batch", [1, 3])
def test_a_prompt_pays_its_head_for_its_last_token_only(units, batch):
    """The norm + head part of a prefill of any length equals a decode step's of as many sequences,
    and is less than the same units over every prompt token."""
    p = load_profile("cpu")
    head = {t: sampled_step_time(units, p, prefill_step(batch, t)) - _layers(units, prefill_step(batch, t)) for t in (16, 256)}
    decode_head = sampled_step_time(units, p, decode_step(batch, 10)) - _layers(units, decode_step(batch, 10))
    assert head[16] == pytest.approx(decode_head, rel=1e-9) and head[256] == pytest.approx(decode_head, rel=1e-9)
    every_row = units_time(units, p, prefill_step(batch, 256), dtype="fp32", kv_dtype="fp32") + p.step_overhead
    assert sampled_step_time(units, p, prefill_step(batch, 256)) < every_row
