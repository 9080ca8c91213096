"""What a simulated run measured, under vLLM's benchmark names (`vllm bench serve`).

Per request: TTFT = first token − arrival; TPOT = (e2e − TTFT) / (output tokens − 1) (requests
of one token have none); ITL pools every gap between consecutive tokens; E2EL = last token −
arrival. Throughputs divide by the run's duration: first arrival to last token. A request meets
the SLOs when its TTFT and TPOT are within them; `request_goodput` counts those per second at the
offered load (vLLM's `--goodput`), `attainment` is their share of every request sent (refused
ones miss), the quantity DistServe's goodput holds at 90%.

A `Window` (capacity/window.py) leaves out the run's ends: every figure is then that of the
requests sent inside it, the throughputs over its duration (its first request's arrival to its
last one's last token), as genai-perf measures after its warm-up requests. With no window the
figures are the whole run's.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from hetc.capacity.simulator import Outcome, RequestRecord
from hetc.capacity.window import WHOLE_RUN, Span, Window

__all__ = ["SLO", "Latencies", "serving_metrics", "span_of"]

PERCENTILES = (50, 90, 99)


@dataclass(frozen=True, slots=True)
class SLO:
    ttft_ms: float | None = None
    tpot_ms: float | None = None

    @property
    def given(self) -> bool:
        return self.ttft_ms is not None or self.tpot_ms is not None

    def met(self, ttft_ms: float, tpot_ms: float) -> bool:
        return (self.ttft_ms is None or ttft_ms <= self.ttft_ms) and (self.tpot_ms is None or tpot_ms <= self.tpot_ms)


@dataclass(frozen=True, slots=True)
class Latencies:
    """Per served request (ms), and every inter-token gap."""

    ttft: np.ndarray
    tpot: np.ndarray  # NaN for a request of one token (it has none)
    itl: np.ndarray
    e2el: np.ndarray

    @staticmethod
    def of(served: list[RequestRecord]) -> Latencies:
        ttft = [(r.token_times[0] - r.arrival) * 1e3 for r in served]
        e2el = [(r.token_times[-1] - r.arrival) * 1e3 for r in served]
        tpot = [(e - t) / (r.output_len - 1) if r.output_len > 1 else np.nan for r, t, e in zip(served, ttft, e2el)]
        itl = np.concatenate([np.diff(r.token_times) * 1e3 for r in served]) if served else np.zeros(0)
        return Latencies(np.array(ttft), np.array(tpot), itl, np.array(e2el))


def _stats(name: str, xs: np.ndarray) -> dict[str, float]:
    xs = xs[~np.isnan(xs)]
    if xs.size == 0:
        return {f"{k}_{name}_ms": 0.0 for k in ("mean", "median", "std", *(f"p{p}" for p in PERCENTILES))}
    out = {f"mean_{name}_ms": float(xs.mean()), f"median_{name}_ms": float(np.median(xs)), f"std_{name}_ms": float(xs.std())}
    out.update({f"p{p}_{name}_ms": float(np.percentile(xs, p)) for p in PERCENTILES})
    return out


def span_of(o: Outcome, window: Window = WHOLE_RUN) -> Span:
    """The part of run `o` that `window` reports."""
    return window.span([r.arrival for r in o.requests], [r.token_times[-1] if r.served and r.token_times else None for r in o.requests])


def serving_metrics(o: Outcome, slo: SLO = SLO(), window: Window = WHOLE_RUN) -> dict[str, float | None]:
    """vLLM's figures for one simulated run, plus the HTTP outcomes (429 refused, 400 too long),
    preemptions and the SLO attainment, over `window`'s part of it."""
    w = span_of(o, window)
    kept = o.requests[w.first : w.stop]
    served = [r for r in kept if r.served]
    duration = w.duration
    lat = Latencies.of(served)
    good = sum(slo.met(t, 0.0 if np.isnan(p) else p) for t, p in zip(lat.ttft, lat.tpot))
    out_tok = sum(r.output_len for r in served)
    in_tok = sum(r.input_len for r in served)
    m = {
        "completed": len(served),
        "refused_429": sum(r.status == 429 for r in kept),
        "rejected_400": sum(r.status == 400 for r in kept),
        "failed_503": sum(r.status == 503 for r in kept),
        "duration_s": duration,
        "total_input_tokens": in_tok,
        "total_output_tokens": out_tok,
        "request_throughput": len(served) / duration,
        "request_goodput": good / duration if slo.given else None,
        "output_throughput": out_tok / duration,
        "total_token_throughput": (in_tok + out_tok) / duration,
        "slo_attainment": good / len(kept) if slo.given and kept else None,
        "preemptions": o.preemptions,
        # of the prompt tokens looked up on admission (recomputations included), the share found cached
        "prefix_cache_hit_rate": o.prefix_hits / o.prefix_queried if o.prefix_queried else None,
        # speculative rounds (whole run): accepted over drafted proposals, and tokens each round yielded
        "spec_acceptance": o.spec_accepted / o.spec_drafted if o.spec_drafted else None,
        "spec_tokens_per_round": (o.spec_accepted + o.spec_rounds) / o.spec_rounds if o.spec_rounds else None,
        # the per-token α those rounds show: each proposal verified is a trial, a round ends at its first failure
        "spec_alpha": o.spec_accepted / (o.spec_accepted + o.spec_rejected) if o.spec_accepted + o.spec_rejected else None,
        "spec_proposal_rate": o.spec_rounds / o.spec_steps if o.spec_steps else None,  # rounds over the decode steps that asked
    }
    for name in ("ttft", "tpot", "itl", "e2el"):
        m.update(_stats(name, getattr(lat, name)))
    return m
