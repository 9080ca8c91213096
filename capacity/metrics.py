"""What a simulated run measured, under vLLM's benchmark names (`vllm bench serve`).

Per request: TTFT = first token − arrival; TPOT = (e2e − TTFT) / (output tokens − 1) (requests
of one token have none); ITL pools every gap between consecutive tokens; E2EL = last token −
arrival. Throughputs divide by the run's duration: first arrival to last token. A request meets
the SLOs when its TTFT and TPOT are within them; `request_goodput` counts those per second at the
offered load (vLLM's `--goodput`), `attainment` is their share of every request sent (refused
ones miss), the quantity DistServe's goodput holds at 90%.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from hetc.capacity.simulator import Outcome, RequestRecord

__all__ = ["SLO", "Latencies", "serving_metrics"]

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


def serving_metrics(o: Outcome, slo: SLO = SLO()) -> dict[str, float | None]:
    """vLLM's figures for one simulated run, plus the HTTP outcomes (429 refused, 400 too long),
    preemptions and the SLO attainment."""
    served = [r for r in o.requests if r.served]
    duration = max(o.end - o.start, 1e-12)
    lat = Latencies.of(served)
    out_tok = sum(r.output_len for r in served)
    in_tok = sum(r.input_len for r in served)
    good = sum(slo.met(t, 0.0 if np.isnan(p) else p) for t, p in zip(lat.ttft, lat.tpot))
    m = {
        "completed": len(served),
        "refused_429": sum(r.status == 429 for r in o.requests),
        "rejected_400": sum(r.status == 400 for r in o.requests),
        "failed_503": sum(r.status == 503 for r in o.requests),
        "duration_s": duration,
        "total_input_tokens": in_tok,
        "total_output_tokens": out_tok,
        "request_throughput": len(served) / duration,
        "request_goodput": good / duration if slo.given else None,
        "output_throughput": out_tok / duration,
        "total_token_throughput": (in_tok + out_tok) / duration,
        "slo_attainment": good / len(o.requests) if slo.given and o.requests else None,
        "preemptions": o.preemptions,
        # of the prompt tokens looked up on admission (recomputations included), the share found cached
        "prefix_cache_hit_rate": o.prefix_hits / o.prefix_queried if o.prefix_queried else None,
    }
    for name in ("ttft", "tpot", "itl", "e2el"):
        m.update(_stats(name, getattr(lat, name)))
    return m
