"""Speculative decoding in the runtime: the last stage's verification of a round, and the frontend's
half of the message formats.

A round reaches the stages as one item of K+1 tokens — the sequence's last known token, then K
proposals — through the ordinary mixed step (hetc/batching.py schedules it, hetc/spec_rounds.py
says who speculates). Every row of the item goes past the cut (`spec` in StepMeta.extras, like
prompt log-probabilities' rows), so the last stage has the target's logits after each prefix of
the proposals and `verify` keeps the longest prefix the target agrees with:

- greedy rows: a proposal is kept while it is the target's argmax; the token after the kept ones
  is the target's argmax there (the bonus token after all K) — the output is the one plain greedy
  decoding gives, token for token.
- sampled rows: the standard rejection rule (Leviathan et al. 2023; Chen et al. 2023): proposal
  d at row j is kept with probability min(1, p(d) / q(d)), p the target's sampling distribution
  (temperature, top-k, top-p: sampler.sampling_probs) and q the proposer's; on a rejection the
  token is drawn from norm(max(0, p − q)), and after K acceptances the bonus token from p. The
  output then follows p exactly. Proposals here are deterministic (n-gram lookup, a drafter's
  argmax), so q is a point mass: keep d with probability p(d), else draw from p with d removed.

The RESULT of a step with rounds carries [B, K_max + 1] token ids per item (its kept proposals,
then its own token, padded with -1) where a step without carries [B].
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from hetc.batching import NOT_FINITE, BatchItem
from hetc.runtime.sampler import GREEDY_TEMPERATURE, draw_generator, sampling_probs

__all__ = ["ACCEPT_STREAM", "RESIDUAL_STREAM", "result_payload", "result_tokens", "spec_extras", "verify", "verify_items"]

ACCEPT_STREAM, RESIDUAL_STREAM = 1, 2  # draw_generator streams: the acceptance draw and the residual draw at a position
_PAD = -1


def verify(
    logits: torch.Tensor,
    draft: list[int],
    params: tuple[float, float, int, int],
    position: int,
    bonus: int,
    q: torch.Tensor | None = None,
) -> list[int]:
    """The tokens a round yields: the kept proposals, then the target's own token.

    Args:
        logits: [K+1, V] fp32, the target's logits after the known token and after each proposal.
        draft: the K proposals.
        params: (temperature, top_p, top_k, seed) of the sequence.
        position: the position of the first proposal (the row 0 logits predict it).
        bonus: the token the sampler drew from row K (the sequence's plain draw at position + K),
            used when every proposal is kept.
        q: [K, V] the proposer's distributions; None: point masses at the proposals.
    Returns:
        1 to K+1 tokens; the last is `NOT_FINITE` when the row it comes from has no finite maximum.
    """
    temp, top_p, top_k, seed = params
    top, idx = logits.max(-1)  # [K+1]
    finite, argmax = torch.isfinite(top).tolist(), idx.tolist()
    out: list[int] = []
    for j, d in enumerate(draft):
        if not finite[j]:
            return [*out, NOT_FINITE]
        if temp <= GREEDY_TEMPERATURE:
            if argmax[j] != d:
                return [*out, argmax[j]]
            out.append(d)
            continue
        p = sampling_probs(logits[j] - top[j], temp, top_p, top_k)  # [V]
        qd = 1.0 if q is None else float(q[j, d])
        u = float(torch.rand((), generator=draw_generator(seed, position + j, ACCEPT_STREAM)))
        if u * qd < float(p[d]):  # u < p(d) / q(d)
            out.append(d)
            continue
        if q is None:
            residual = p.clone()
            residual[d] = 0.0
        else:
            residual = (p - q[j]).clamp_min(0.0)
        # p(d) < q(d) here (else the draw kept it), so the residual has mass
        out.append(int(torch.multinomial(residual / residual.sum(), 1, generator=draw_generator(seed, position + j, RESIDUAL_STREAM))))
        return out
    if not finite[len(draft)]:
        return [*out, NOT_FINITE]
    return [*out, argmax[len(draft)] if temp <= GREEDY_TEMPERATURE else bonus]


def verify_items(
    y: torch.Tensor, meta, rows: list[int], items: list[int], picked: list[int], to_host: Callable[[torch.Tensor], torch.Tensor]
) -> list[list[int]]:
    """The last stage: per sampled item, the tokens its step yields ([picked] without proposals).

    Args:
        y: [R, V] logits of the rows kept past the cut (every row of a round's item).
        meta: the step's StepMeta; `spec` in its extras lists the items with proposals.
        rows: per sampled item, the row of `y` its last position's logits are in.
        items: the sampled items' indices.
        picked: the sampler's token per sampled item (a round's: its bonus draw).
        to_host: the backend's copy to the host.
    """
    spec = set(meta.extras.get("spec", ()))
    if not spec:
        return [[t] for t in picked]
    offsets = [0]
    for n in meta.n_new:
        offsets.append(offsets[-1] + n)
    out = []
    for r, i in enumerate(items):
        if i not in spec or picked[r] < 0 and picked[r] != NOT_FINITE:
            out.append([picked[r]])
            continue
        k = meta.n_new[i] - 1
        draft = meta.token_ids[offsets[i] + 1 : offsets[i + 1]]
        block = to_host(y[rows[r] - k : rows[r] + 1].float())  # [K+1, V]
        out.append(verify(block, draft, meta.sampling[i], meta.starts[i] + 1, picked[r]))
    return out


def result_payload(emitted: list[list[int]], n_items: int, items: list[int]) -> torch.Tensor:
    """RESULT's token ids: [B] with one token per sampled item, or [B, W] when a round yielded more."""
    width = max((len(e) for e in emitted), default=1)
    tokens = torch.full((n_items, width), _PAD, dtype=torch.long)
    for i, e in zip(items, emitted):
        tokens[i, : len(e)] = torch.tensor(e, dtype=torch.long)
    return tokens if width > 1 else tokens[:, 0]


def result_tokens(payload: torch.Tensor, n_items: int) -> tuple[list[int], list[list[int]] | None]:
    """The frontend's reading of RESULT: (per item its last token, per item its kept proposals or
    None when no item had any) — `Scheduler.on_result`'s arguments."""
    rows = payload.reshape(n_items, -1).tolist()
    if payload.dim() == 1 or payload.shape[-1] == 1:
        return [r[0] for r in rows], None
    tokens, accepted = [], []
    for r in rows:
        n = next((j for j, t in enumerate(r) if t == _PAD), len(r)) if r[0] != _PAD else 1
        tokens.append(r[n - 1])
        accepted.append(r[: n - 1])
    return tokens, accepted


def spec_extras(items: list[BatchItem], drafting: bool) -> dict:
    """StepMeta.extras for a step's rounds: `spec` (items whose every row is verified) and, where the
    lane's first stage drafts, `draft` (per item [index, first position its drafter computes, the
    tokens from there to the item's start]: the drafter catches up on what its target computed
    without it)."""
    ex: dict = {}
    spec = [i for i, it in enumerate(items) if it.draft]
    if spec:
        ex["spec"] = spec
    if drafting:
        ex["draft"] = [[i, it.draft_from, it.seq.token_ids[it.draft_from : it.start]] for i, it in enumerate(items)]
    return ex
