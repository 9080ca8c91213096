"""The part of a simulated run the figures report: `--warmup` and `--cooldown` leave out its two
ends, as guidellm's `--warmup`/`--cooldown` and genai-perf's `--warmup-request-count` do.

A closed loop starts every client at once: the first requests queue behind each other's prompts,
a burst the steady state never sees; its last requests drain with fewer clients than it has. Each
end is given as requests (`N`: the first or last N requests sent), seconds (`Ts`: those sent in
the first T seconds, or in the last T seconds before the run's last token) or a share of the
requests sent (`P%`). The default leaves nothing out, as vLLM's `bench serve`, so figures stay
comparable with runs made before these flags.

Over the window every figure is that of the requests sent inside it (genai-perf's measurement
after its warm-up requests): latencies per request, throughputs as their tokens over the window's
duration, from its first request's arrival to its last request's last token. In a closed loop of
C clients that span holds as many of each client's cycles as it keeps requests, so the rates read
the steady state; the default's window is the whole run, and its figures are unchanged.
"""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass

from hetc.errors import BadInput

__all__ = ["WHOLE_RUN", "Span", "Trim", "Window"]

_FIX = "give N (requests), Ts (seconds, e.g. 30s) or P% (a share of the requests sent, e.g. 10%)."


@dataclass(frozen=True, slots=True)
class Trim:
    """One end of a run left out: a number of requests, seconds, or a share of the requests sent
    (at most one of them non-zero)."""

    requests: int = 0
    seconds: float = 0.0
    share: float = 0.0

    @staticmethod
    def parse(text: str | None, flag: str) -> Trim:
        """`N`, `Ts` or `P%` (None or empty: nothing left out); BadInput names `flag`."""
        if not text:
            return Trim()
        t = text.strip()
        try:
            if t.endswith("%"):
                share = float(t[:-1]) / 100
                if not 0 <= share < 1:
                    raise ValueError
                return Trim(share=share)
            if t.endswith("s"):
                seconds = float(t[:-1])
                if not (seconds >= 0 and math.isfinite(seconds)):
                    raise ValueError
                return Trim(seconds=seconds)
            n = int(t)
            if n < 0:
                raise ValueError
            return Trim(requests=n)
        except ValueError:
            raise BadInput(f"cannot read {text!r}.", field=flag, fix=_FIX) from None

    @property
    def given(self) -> bool:
        return bool(self.requests or self.seconds or self.share)

    def __str__(self) -> str:
        if self.requests:
            return f"{self.requests} requests"
        if self.seconds:
            return f"{self.seconds:g} s"
        if self.share:
            return f"{self.share:.0%} of requests"
        return "none"

    def count(self, sent: int) -> int | None:
        """Requests this end leaves out of `sent`, where that does not depend on the run (None: seconds)."""
        if self.seconds:
            return None
        return self.requests or math.floor(self.share * sent)


@dataclass(frozen=True, slots=True)
class Span:
    """The requests a window keeps (indices into the run's requests in the order they were sent)
    and the time it covers."""

    first: int  # the first request kept
    stop: int  # one past the last request kept
    sent: int  # requests sent in the run
    start: float  # the first kept request's arrival (s)
    end: float  # the last kept request's last token (s)

    @property
    def duration(self) -> float:
        return max(self.end - self.start, 1e-12)


@dataclass(frozen=True, slots=True)
class Window:
    """Which part of a run the figures report: `warmup` left out at the start, `cooldown` at the end."""

    warmup: Trim = Trim()
    cooldown: Trim = Trim()

    @staticmethod
    def parse(warmup: str | None, cooldown: str | None) -> Window:
        return Window(Trim.parse(warmup, "--warmup"), Trim.parse(cooldown, "--cooldown"))

    @property
    def given(self) -> bool:
        return self.warmup.given or self.cooldown.given

    def check(self, sent: int) -> None:
        """BadInput when the counts alone leave none of `sent` requests (seconds are checked on the run)."""
        a, b = self.warmup.count(sent), self.cooldown.count(sent)
        if a is not None and b is not None and a + b >= sent:
            raise BadInput(
                f"--warmup {self.warmup} and --cooldown {self.cooldown} leave none of the {sent} requests.",
                field="--warmup",
                fix="send more requests (--requests) or leave out fewer.",
            )

    def span(self, arrivals: list[float], last_tokens: list[float | None]) -> Span:
        """The window over one run.

        Args:
            arrivals: every request's arrival, in the order they were sent (non-decreasing).
            last_tokens: each one's last token (None: it was refused or rejected).

        Raises:
            BadInput: the window holds no request.
        """
        n = len(arrivals)
        run_end = max((t for t in last_tokens if t is not None), default=arrivals[0] if arrivals else 0.0)
        first = self.warmup.count(n)
        if first is None:
            first = bisect.bisect_left(arrivals, arrivals[0] + self.warmup.seconds) if arrivals else 0
        cut = self.cooldown.count(n)
        stop = n - cut if cut is not None else bisect.bisect_right(arrivals, run_end - self.cooldown.seconds)
        if first >= stop:
            raise BadInput(
                f"--warmup {self.warmup} and --cooldown {self.cooldown} leave none of the {n} requests of the run "
                f"({arrivals[-1] - arrivals[0] if arrivals else 0.0:.3g} s of arrivals, last token at {run_end:.3g} s).",
                field="--warmup",
                fix="send more requests (--requests) or leave out fewer.",
            )
        start = arrivals[first]
        end = max((t for t in last_tokens[first:stop] if t is not None), default=start)
        return Span(first, stop, n, start, end)

    def describe(self, s: Span) -> str:
        """One line: which requests and seconds the figures cover."""
        if not self.given:
            return f"every request ({s.sent}), {s.start:.3g}–{s.end:.3g} s (no --warmup or --cooldown)"
        return f"requests {s.first + 1}–{s.stop} of {s.sent} sent, {s.start:.3g}–{s.end:.3g} s (--warmup {self.warmup}, --cooldown {self.cooldown} left out)"

    def as_dict(self, s: Span) -> dict[str, object]:
        return {
            "warmup": str(self.warmup),
            "cooldown": str(self.cooldown),
            "first_request": s.first,
            "requests": s.stop - s.first,
            "sent": s.sent,
            "start_s": s.start,
            "end_s": s.end,
        }


WHOLE_RUN = Window()  # nothing left out: vLLM's `bench serve` figures
