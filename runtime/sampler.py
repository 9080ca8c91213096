"""Next-token choice on the last stage: greedy, or temperature / top-k / top-p sampling.

A seeded sequence is reproducible whatever it is batched with: each draw uses a generator
seeded from (seed, position), so the last stage keeps no per-sequence state.
"""

from __future__ import annotations

import torch

__all__ = ["sample"]


def sample(logits: torch.Tensor, params: list[tuple[float, float, int, int]], positions: list[int]) -> list[int]:
    """Args:
        logits: [S, V] fp32, one row per sequence that samples this step.
        params: per row (temperature, top_p, top_k, seed); temperature ≤ 1e-5 is greedy.
        positions: per row, the position the sampled token will take (seeds the draw).
    Returns:
        S token ids.
    """
    # max's indices are argmax's (the first maximum on ties) at a third of its time on a CPU
    out = logits.max(-1).indices.tolist()
    for i, (temp, top_p, top_k, seed) in enumerate(params):
        if temp <= 1e-5:
            continue
        row = logits[i] / temp  # [V]
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
        g = torch.Generator().manual_seed((seed * 1_000_003 + positions[i]) & 0x7FFF_FFFF_FFFF_FFFF)
        out[i] = int(torch.multinomial(row.softmax(-1), 1, generator=g))
    return out
