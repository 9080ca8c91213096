"""The load a serving simulation runs: when requests arrive and how long they are.

Arrivals are open-loop (Poisson, or gamma with a burstiness: vLLM's `--request-rate` and
`--burstiness`, shape = burstiness, mean interval 1/rate; burstiness 1 is Poisson), closed-loop
(a fixed number of clients, each sending its next request when the last one ends), or a JSONL
trace of `{"arrival": s, "input_len": n, "output_len": n}` lines. Lengths are drawn from a
distribution (`LengthDist.parse`: `N`, `uniform:LO-HI`, `normal:MEAN,STD`, `lognormal:MEDIAN,SIGMA`),
or come from the trace. Everything is drawn from one seeded generator: the same seed, the same load.

Shared prefixes (chat system prompts, agent histories, RAG templates): with `Prefixes(length,
groups)` the first `length` tokens of every prompt (all of it when shorter) are one of `groups`
shared prefixes, drawn uniformly; a trace line says the same with `"prefix_len"` (its shared
tokens) and `"prefix_id"` (which prefix; lines without one share a single prefix). The simulator
gives each request token ids that follow this (`Request.token_ids`), so its prefix cache hits as
the server's would.
"""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

import numpy as np

from hetc.errors import BadInput

__all__ = ["Arrivals", "LengthDist", "Load", "Prefixes", "Request", "read_trace", "write_trace"]


@dataclass(frozen=True, slots=True)
class Request:
    """One request of the load: when it arrives (s from the start; closed loop: 0), its lengths, and
    the shared prefix its prompt begins with (`prefix_len` tokens of prefix `prefix_group`)."""

    arrival: float
    input_len: int
    output_len: int
    prefix_len: int = 0
    prefix_group: int = 0

    def token_ids(self, uid: int) -> list[int]:
        """Token ids standing for its prompt: its group's prefix (−1 − group, repeated), then ids
        of its own (`uid` ≥ 0, repeated): equal exactly where prompts share a prefix (block keys
        chain, so repeats within a prompt never collide)."""
        shared = min(self.prefix_len, self.input_len)
        return [-1 - self.prefix_group] * shared + [uid] * (self.input_len - shared)


@dataclass(frozen=True, slots=True)
class Prefixes:
    """How the load's prompts share prefixes: the first `length` tokens are one of `groups` prefixes."""

    length: int
    groups: int = 1

    def __post_init__(self) -> None:
        if self.length < 0 or self.groups < 1:
            raise BadInput(
                f"--prefix-len {self.length}, --prefix-groups {self.groups}.", field="--prefix-len", fix="give a length ≥ 0 tokens and at least one group."
            )

    def assign(self, rng: np.random.Generator, requests: list[Request]) -> tuple[Request, ...]:
        """`requests` with their prefixes (groups drawn uniformly, after everything else was drawn)."""
        if self.length == 0:
            return tuple(requests)
        groups = rng.integers(0, self.groups, len(requests))
        return tuple(dataclasses.replace(r, prefix_len=self.length, prefix_group=int(g)) for r, g in zip(requests, groups))


class Shape(StrEnum):
    FIXED = "fixed"
    UNIFORM = "uniform"
    NORMAL = "normal"
    LOGNORMAL = "lognormal"


@dataclass(frozen=True, slots=True)
class LengthDist:
    """Token counts: fixed, uniform in [a, b], normal (mean a, std b) or lognormal (median a,
    sigma b), each rounded and clipped to [1, cap]."""

    shape: Shape
    a: float
    b: float = 0.0

    @staticmethod
    def parse(text: str, flag: str) -> LengthDist:
        """`N`, `uniform:LO-HI`, `normal:MEAN,STD` or `lognormal:MEDIAN,SIGMA`; BadInput names `flag`."""
        fix = "give N, uniform:LO-HI, normal:MEAN,STD or lognormal:MEDIAN,SIGMA (tokens; SIGMA is log-space)."
        kind, _, args = text.partition(":")
        try:
            if not args:
                d = LengthDist(Shape.FIXED, float(int(kind)))
            elif kind == Shape.UNIFORM:
                lo, hi = args.split("-")
                d = LengthDist(Shape.UNIFORM, float(int(lo)), float(int(hi)))
            elif kind in (Shape.NORMAL, Shape.LOGNORMAL):
                a, b = args.split(",")
                d = LengthDist(Shape(kind), float(a), float(b))
            else:
                raise BadInput(f"unknown distribution {kind!r} in {text!r}.", field=flag, fix=fix)
        except ValueError:
            raise BadInput(f"cannot read {text!r}.", field=flag, fix=fix) from None
        if d.a < 1 or d.b < 0 or (d.shape is Shape.UNIFORM and d.b < d.a):
            raise BadInput(f"{text!r} allows no length ≥ 1.", field=flag, fix=fix)
        return d

    def draw(self, rng: np.random.Generator, n: int, cap: int) -> list[int]:
        if self.shape is Shape.FIXED:
            x = np.full(n, self.a)
        elif self.shape is Shape.UNIFORM:
            x = rng.integers(int(self.a), int(self.b) + 1, n).astype(float)
        elif self.shape is Shape.NORMAL:
            x = rng.normal(self.a, self.b, n)
        else:
            x = self.a * np.exp(rng.normal(0.0, self.b, n))
        return [int(v) for v in np.clip(np.rint(x), 1, cap)]

    @property
    def mean(self) -> float:
        """The mean before rounding and clipping (what sizes a search's first guess)."""
        if self.shape is Shape.UNIFORM:
            return (self.a + self.b) / 2
        if self.shape is Shape.LOGNORMAL:
            return self.a * math.exp(self.b**2 / 2)
        return self.a


class Arrivals(StrEnum):
    POISSON = "poisson"
    GAMMA = "gamma"
    CLOSED = "closed"  # a fixed concurrency
    TRACE = "trace"


@dataclass(frozen=True, slots=True)
class Load:
    """A load: its requests in arrival order (all at 0 for a closed loop) and how they arrive.

    Args:
        requests: in arrival order.
        arrivals: the process.
        concurrency: closed loop: clients, each with one request open at a time.
        rate: open loop: the mean requests/s offered (informational for a trace).
    """

    requests: tuple[Request, ...]
    arrivals: Arrivals
    concurrency: int = 0
    rate: float = 0.0

    @staticmethod
    def open(
        rate: float,
        n: int,
        input_len: LengthDist,
        output_len: LengthDist,
        *,
        seed: int = 0,
        burstiness: float = 1.0,
        max_len: int = 1 << 20,
        prefixes: Prefixes | None = None,
    ) -> Load:
        """`n` requests at `rate` req/s: Poisson (burstiness 1) or gamma intervals, sharing `prefixes`."""
        if not rate > 0 or not burstiness > 0 or n < 1:
            raise BadInput(
                f"rate {rate}, burstiness {burstiness}, {n} requests.", field="--rate", fix="give a rate > 0, a burstiness > 0 and at least one request."
            )
        rng = np.random.default_rng(seed)
        gaps = rng.gamma(burstiness, 1.0 / (rate * burstiness), n)
        times = np.cumsum(gaps) - gaps[0]  # the first request at 0
        ins, outs = input_len.draw(rng, n, max_len), output_len.draw(rng, n, max_len)
        reqs = [Request(float(t), i, o) for t, i, o in zip(times, ins, outs)]
        shaped = prefixes.assign(rng, reqs) if prefixes else tuple(reqs)
        return Load(shaped, Arrivals.POISSON if burstiness == 1.0 else Arrivals.GAMMA, rate=rate)

    @staticmethod
    def closed(
        concurrency: int, n: int, input_len: LengthDist, output_len: LengthDist, *, seed: int = 0, max_len: int = 1 << 20, prefixes: Prefixes | None = None
    ) -> Load:
        """`n` requests from `concurrency` clients that each wait for their last answer, sharing `prefixes`."""
        if concurrency < 1 or n < 1:
            raise BadInput(f"concurrency {concurrency}, {n} requests.", field="--concurrency", fix="give at least one client and one request.")
        rng = np.random.default_rng(seed)
        ins, outs = input_len.draw(rng, n, max_len), output_len.draw(rng, n, max_len)
        reqs = [Request(0.0, i, o) for i, o in zip(ins, outs)]
        return Load(prefixes.assign(rng, reqs) if prefixes else tuple(reqs), Arrivals.CLOSED, concurrency=concurrency)

    @staticmethod
    def poisson(requests: tuple[Request, ...], rate: float, seed: int = 0) -> Load:
        """These requests' lengths arriving as a Poisson process at `rate` (the first at 0)."""
        gaps = np.random.default_rng(seed).exponential(1.0 / rate, len(requests))
        times = np.cumsum(gaps) - gaps[0]
        return Load(tuple(dataclasses.replace(r, arrival=float(t)) for t, r in zip(times, requests)), Arrivals.POISSON, rate=rate)

    @staticmethod
    def trace(path: str | Path) -> Load:
        reqs = read_trace(path)
        span = reqs[-1].arrival - reqs[0].arrival
        return Load(tuple(reqs), Arrivals.TRACE, rate=(len(reqs) - 1) / span if span > 0 else 0.0)

    def at_rate(self, rate: float, seed: int = 0) -> Load:
        """The same requests' lengths arriving at another rate (for the search of DistServe's goodput):
        the arrival times scaled, so a trace keeps its shape and a Poisson load its draws."""
        if self.arrivals is Arrivals.CLOSED or not self.rate > 0:
            raise ValueError("only an open-loop load has a rate to change")
        k = self.rate / rate
        return Load(tuple(dataclasses.replace(r, arrival=r.arrival * k) for r in self.requests), self.arrivals, rate=rate)

    @property
    def shares_prefixes(self) -> bool:
        return any(r.prefix_len for r in self.requests)


def read_trace(path: str | Path) -> list[Request]:
    """A JSONL trace: one `{"arrival": s, "input_len": n, "output_len": n}` per line, any order,
    optionally with `"prefix_len": n` (its first n prompt tokens are shared) and `"prefix_id": x`
    (which shared prefix; any JSON scalar; lines without one share one prefix)."""
    path = Path(path)
    out = []
    groups: dict[str, int] = {}  # prefix id (as JSON text) → group number
    try:
        lines = path.read_text().splitlines()
    except FileNotFoundError:
        raise BadInput("file not found.", file=str(path), field="--trace", fix="check the path.") from None
    for no, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            d = json.loads(line)
            group = groups.setdefault(json.dumps(d.get("prefix_id")), len(groups))
            r = Request(float(d["arrival"]), int(d["input_len"]), int(d["output_len"]), int(d.get("prefix_len", 0)), group)
        except (json.JSONDecodeError, KeyError, TypeError, ValueError, AttributeError) as e:
            raise BadInput(
                f"line {no} is not a request ({type(e).__name__}: {e}).",
                file=str(path),
                field=f"line {no}",
                fix='write one {"arrival": s, "input_len": n, "output_len": n} per line (optionally "prefix_len": n, "prefix_id": x).',
            ) from None
        if r.arrival < 0 or r.input_len < 1 or r.output_len < 1 or r.prefix_len < 0 or not math.isfinite(r.arrival):
            raise BadInput(
                f"line {no}: arrival {r.arrival}, input_len {r.input_len}, output_len {r.output_len}, prefix_len {r.prefix_len}.",
                file=str(path),
                field=f"line {no}",
                fix="arrival ≥ 0 s, lengths ≥ 1 token, prefix_len ≥ 0.",
            )
        out.append(r)
    if not out:
        raise BadInput("the trace has no requests.", file=str(path), field="--trace", fix="one request per line.")
    return sorted(out, key=lambda r: r.arrival)


def write_trace(requests: list[Request] | tuple[Request, ...], path: str | Path) -> None:
    def line(r: Request) -> dict:
        d: dict = {"arrival": round(r.arrival, 6), "input_len": r.input_len, "output_len": r.output_len}
        if r.prefix_len:
            d.update(prefix_len=r.prefix_len, prefix_id=r.prefix_group)
        return d

    Path(path).write_text("".join(json.dumps(line(r)) + "\n" for r in requests))
