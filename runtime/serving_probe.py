"""The serving runtime's host work per step, measured for `hetc profile` (hetc/serving.py).

A stage worker's step is its forward (what the cost model prices) plus the worker's own work
around it, which this module times by running the runtime's functions on synthetic
micro-batches, as runtime/worker.py calls them: decode the step message (transport `_decode`,
`StepMeta.decode`), fill looked-ahead tokens (`SampledTokens.fill`), build the executor's
attention metadata (`PagedMeta.build` for OpenVINO, `AttnMeta.build` for torch eager), make the
token ids tensor, encode the result message; and, on the last stage, `sample` over the logits.
Nothing here is taken from a served run.

Micro-batches of decode rows (1 to 64 sequences) and prompt chunks (up to 256 tokens) are timed;
`step + row · sequences + token · tokens` is fitted to them, and the sampler's seconds per logit
to rows × vocabulary at two vocabulary sizes.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch

from hetc.partitioner.profiling.bench import Case
from hetc.scheduling import KV_BLOCK_TOKENS

__all__ = ["measure_serving", "serving_cases", "fit_serving"]

_DECODE = [(1, 1), (4, 1), (16, 1), (64, 1)]  # (sequences, new tokens each)
_PREFILL = [(1, 32), (1, 256), (4, 64)]
_SAMPLE = [(1, 32000), (8, 32000), (64, 32000), (8, 128000)]  # (sampled rows, vocabulary)
_CTX = 200  # tokens already cached per sequence in the decode cases


def _attention_meta(executor: str) -> Callable:
    if executor == "openvino":
        from hetc.backends.paged_attention import PagedMeta

        return PagedMeta.build
    from hetc.runtime.kv_cache import AttnMeta

    return AttnMeta.build


def _stage_case(seqs: int, new: int, build_meta: Callable) -> Case:
    """What a 1-stage worker does around one forward of `seqs` sequences × `new` tokens (worker.py)."""
    from hetc.runtime.feedback import SampledTokens
    from hetc.runtime.transport import Kind, Message, StepMeta, _decode

    decode = new == 1
    start = _CTX if decode else 0
    per = -(-(start + new) // KV_BLOCK_TOKENS)
    tables = [list(range(i * per, (i + 1) * per)) for i in range(seqs)]
    meta, samp = StepMeta(
        list(range(seqs)), [start] * seqs, [new] * seqs, [True] * seqs, tables, [-1] * seqs if decode else [7] * (seqs * new), [(0.0, 1.0, 0, 0)] * seqs
    ).encode()
    header, body = Message(Kind.STEP, 1, meta=meta, samp=samp, times=torch.zeros(1, dtype=torch.float64)).encode()
    sampled = SampledTokens()
    keys = [(i, start) for i in range(seqs)]

    def step() -> None:
        msg = _decode(header, body)
        m = StepMeta.decode(msg.meta, msg.samp)
        sampled.put([k[0] for k in keys], [k[1] for k in keys], [3] * seqs)  # what the previous step sampled
        sampled.fill(m, msg.meta, 1.0)
        build_meta(m.starts, m.n_new, m.block_tables, m.sample)
        torch.tensor(m.token_ids, dtype=torch.long)
        rows = [i for i, s in enumerate(m.sample) if s]
        tokens = torch.full((len(m.starts),), -1, dtype=torch.long)
        tokens[rows] = torch.tensor([3] * len(rows), dtype=torch.long)
        Message(Kind.RESULT, msg.step_id, payload=tokens, times=msg.times).encode()

    return Case(f"serving step b{seqs} t{new}", step, reps=50, meta={"seqs": seqs, "tokens": seqs * new})


def _sample_case(rows: int, vocab: int) -> Case:
    from hetc.runtime.sampler import sample

    logits = torch.randn(rows, vocab)
    params, positions = [(0.0, 1.0, 0, 0)] * rows, [1] * rows
    return Case(f"sampling {rows} x {vocab}", lambda: sample(logits, params, positions), reps=20, meta={"logits": rows * vocab})


def serving_cases(executor: str) -> list[Case]:
    """The cases `fit_serving` reads, for a stage run by `executor` (torch or openvino)."""
    build = _attention_meta(executor)
    return [*(_stage_case(b, t, build) for b, t in _DECODE + _PREFILL), *(_sample_case(r, v) for r, v in _SAMPLE)]


def fit_serving(cases: list[Case]) -> dict[str, float]:
    """step, row, token (least squares, each ≥ 0) and sample_logit (through the origin), in seconds."""
    steps = [c for c in cases if "seqs" in c.meta]
    a = np.array([[1.0, c.meta["seqs"], c.meta["tokens"]] for c in steps])
    y = np.array([c.seconds for c in steps])
    coef = _nonneg_lstsq(a, y)
    samples = [c for c in cases if "logits" in c.meta]
    x = np.array([c.meta["logits"] for c in samples], dtype=float)
    t = np.array([c.seconds for c in samples])
    return {"step": coef[0], "row": coef[1], "token": coef[2], "sample_logit": float(x @ t / (x @ x))}


def _nonneg_lstsq(a: np.ndarray, y: np.ndarray) -> list[float]:
    """Least squares with every coefficient ≥ 0: a negative one is dropped and the rest refitted."""
    keep = list(range(a.shape[1]))
    while True:
        coef = np.linalg.lstsq(a[:, keep], y, rcond=None)[0]
        if (coef >= 0).all():
            out = [0.0] * a.shape[1]
            for k, c in zip(keep, coef):
                out[k] = float(c)
            return out
        keep.pop(int(np.argmin(coef)))


def measure_serving(run: Callable[[list[Case]], list[Case]], executor: str, message_s: float | None) -> dict:
    """The profile's `serving` block: the fitted host work, and where it comes from.

    Args:
        run: times cases as the rest of the profile is timed (bench.run_cases with its rounds).
        executor: what serves the stages this profile describes (torch or openvino).
        message_s: one process-to-process message on this host (the profile's gloo measurement),
            None when it was not measured.
    """
    fit = fit_serving(run(serving_cases(executor)))
    doc = {k: f"{v * 1e6:.5g} us" for k, v in fit.items()}
    doc["message"] = f"{(message_s or 0.0) * 1e6:.5g} us"
    doc["source"] = (
        "measured by `hetc profile` running the runtime's own per-step functions (runtime/serving_probe.py) on "
        f"synthetic micro-batches ({executor} attention metadata): step + row × sequences + token × tokens fitted to "
        f"{len(_DECODE) + len(_PREFILL)} micro-batches, sample_logit to the sampler over {len(_SAMPLE)} logit shapes; "
        + (
            "message: the gloo process-to-process latency measured beside it"
            if message_s is not None
            else "message: not measured (run without --quick to time gloo transfers)"
        )
    )
    return doc
