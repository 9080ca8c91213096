"""Next-token choice on the last stage: greedy, or temperature / top-k / top-p sampling.

A seeded sequence is reproducible whatever it is batched with: each draw uses a generator
seeded from (seed, position), so the last stage keeps no per-sequence state.

A row that cannot be sampled does not raise (that would end the worker and every request of
its pipeline): it gets a negative code (hetc.batching's `SAMPLING_FAILURES`), and the frontend ends that one request
with the reason. The parameters are checked at the API (protocol.py), so what is left is
logits that are not finite (a NaN, or an infinite maximum).
"""

from __future__ import annotations

import sys

import torch

from hetc.batching import NOT_FINITE, SAMPLER_ERROR

__all__ = ["GREEDY_TEMPERATURE", "draw_generator", "sample", "sampling_probs"]

GREEDY_TEMPERATURE = 1e-5  # a row at or below it takes its most likely token


def sample(logits: torch.Tensor, params: list[tuple[float, float, int, int]], positions: list[int]) -> list[int]:
    """Args:
        logits: [S, V] fp32, one row per sequence that samples this step.
        params: per row (temperature, top_p, top_k, seed); temperature ≤ GREEDY_TEMPERATURE is greedy.
            Rows that sample need `logits` on the host; greedy ones may leave them on the device.
        positions: per row, the position the sampled token will take (seeds the draw).
    Returns:
        S token ids, or a `SAMPLING_FAILURES` code for a row that could not be sampled.
    """
    # max's indices are argmax's (the first maximum on ties) at a third of its time on a CPU;
    # a NaN anywhere in a row is its max, so one check on the maxima finds every row that fails
    top, idx = logits.max(-1)
    out = idx.tolist()
    finite = torch.isfinite(top).tolist()
    for i, (temp, top_p, top_k, seed) in enumerate(params):
        if not finite[i]:
            out[i] = NOT_FINITE
        elif temp > GREEDY_TEMPERATURE:
            try:
                out[i] = _draw(logits[i] - top[i], temp, top_p, top_k, seed, positions[i])
            except Exception as e:  # noqa: BLE001 — this row's request fails, not the worker
                print(f"[hetc sampler] row {i} (temperature {temp}, top_p {top_p}, top_k {top_k}): {type(e).__name__}: {e}", file=sys.stderr, flush=True)
                out[i] = SAMPLER_ERROR
    return out


def _draw(shifted: torch.Tensor, temp: float, top_p: float, top_k: int, seed: int, position: int) -> int:
    """One token from a row whose maximum is 0 (shifted before the temperature divides it, so a
    small temperature cannot overflow it: the softmax is the same)."""
    return int(torch.multinomial(sampling_probs(shifted, temp, top_p, top_k), 1, generator=draw_generator(seed, position)))


def draw_generator(seed: int, position: int, stream: int = 0) -> torch.Generator:
    """The generator of a sequence's draw at `position`: the same whatever it is batched with.
    `stream` > 0 gives independent draws at the same position (speculative verification's)."""
    return torch.Generator().manual_seed((seed * 1_000_003 + position + stream * 0x9E37_79B9_7F4A_7C15) & 0x7FFF_FFFF_FFFF_FFFF)


def sampling_probs(shifted: torch.Tensor, temp: float, top_p: float, top_k: int) -> torch.Tensor:
    """[V] the distribution a non-greedy row is drawn from: temperature, then top-k and top-p.

    Args:
        shifted: [V] fp32 logits with maximum 0 (or any finite shift: the softmax is the same).
        temp, top_p, top_k: the row's parameters (temp > GREEDY_TEMPERATURE).
    """
    row = shifted / temp  # [V]
    if 0 < top_k < row.numel():
        kth = torch.topk(row, top_k).values[-1]
        row = row.masked_fill(row < kth, float("-inf"))
    if top_p < 1.0:
        srt, idx = torch.sort(row, descending=True)
        probs = srt.softmax(-1)
        # drop tokens once the mass before them reaches top_p (the top token always stays)
        drop = probs.cumsum(-1) - probs >= top_p
        drop[0] = False  # a top_p below float32's smallest number compares as 0 and would drop it too
        row = row.scatter(0, idx[drop], float("-inf"))
    return row.softmax(-1)
