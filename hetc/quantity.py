"""Strict parsing of quantities with units ("80 GB", "400 Gbit/s", "5 us").

Every quantity in a cluster or profile file is a string with a unit. A bare number, an
unknown unit or a unit of the wrong kind (a bandwidth where a size is expected) is an
error: silently reading "80" as bytes or "400 Gb/s" as bytes/s is how plans go wrong.
Values are returned in base units: bytes, bytes/s, FLOP/s, seconds, watts, USD/hour.
"""

from __future__ import annotations

import math
import re
from enum import Enum

__all__ = ["Kind", "QuantityError", "parse_quantity", "format_quantity"]


class Kind(str, Enum):
    BYTES = "bytes"
    BANDWIDTH = "bandwidth"
    FLOPS = "flops"
    TIME = "time"
    POWER = "power"
    PRICE = "price"


class QuantityError(ValueError):
    """A quantity string that does not parse; the message says what is accepted."""


_SI = {"": 1.0, "k": 1e3, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15}
_BIN = {"Ki": 2.0**10, "Mi": 2.0**20, "Gi": 2.0**30, "Ti": 2.0**40, "Pi": 2.0**50}


def _units() -> dict[str, tuple[Kind, float]]:
    table: dict[str, tuple[Kind, float]] = {}
    for p, f in _SI.items():
        if p == "K":
            continue
        table[f"{p}B"] = (Kind.BYTES, f)
        table[f"{p}B/s"] = (Kind.BANDWIDTH, f)
        table[f"{p}bit/s"] = (Kind.BANDWIDTH, f / 8)
        table[f"{p}FLOP/s"] = (Kind.FLOPS, f)
    for p, f in _BIN.items():
        table[f"{p}B"] = (Kind.BYTES, f)
        table[f"{p}B/s"] = (Kind.BANDWIDTH, f)
    table.update(
        {
            "ns": (Kind.TIME, 1e-9),
            "us": (Kind.TIME, 1e-6),
            "µs": (Kind.TIME, 1e-6),
            "ms": (Kind.TIME, 1e-3),
            "s": (Kind.TIME, 1.0),
            "W": (Kind.POWER, 1.0),
            "kW": (Kind.POWER, 1e3),
            "USD/h": (Kind.PRICE, 1.0),
        }
    )
    return table


UNITS = _units()
_RE = re.compile(r"^\s*([+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?)\s*([^\s\d].*?)\s*$")


def _examples(kind: Kind) -> str:
    return {
        Kind.BYTES: '"80 GB" or "96 GiB"',
        Kind.BANDWIDTH: '"3.35 TB/s" or "400 Gbit/s"',
        Kind.FLOPS: '"989 TFLOP/s"',
        Kind.TIME: '"5 us" or "2 ms"',
        Kind.POWER: '"700 W"',
        Kind.PRICE: '"2.95 USD/h"',
    }[kind]


def parse_quantity(value: object, kind: Kind) -> float:
    """Parse `value` (a string with a unit) as a quantity of `kind`, in base units.

    Args:
        value: the text from the file, e.g. "400 Gbit/s".
        kind: what the field holds; the unit must be of that kind.

    Raises:
        QuantityError: bare numbers, unknown units, units of another kind, negatives.
    """
    if isinstance(value, bool) or not isinstance(value, str):
        raise QuantityError(f"expected a {kind.value} with a unit, like {_examples(kind)}; got the bare value {value!r}")
    m = _RE.match(value)
    if not m:
        raise QuantityError(f"expected a {kind.value} like {_examples(kind)}; got {value!r}")
    number, unit = float(m.group(1)), m.group(2)
    if unit not in UNITS:
        if unit.endswith("b/s") and f"{unit[:-3]}bit/s" in UNITS:  # "Gb/s" is gigabits, never gigabytes
            near = [f"{unit[:-3]}bit/s"]
        else:
            near = [u for u, (k, _) in UNITS.items() if k == kind and u.lower() == unit.lower()]
        hint = f" (did you mean {near[0]!r}?)" if near else ""
        raise QuantityError(f"unknown unit {unit!r} in {value!r}{hint}; write it like {_examples(kind)}")
    got_kind, factor = UNITS[unit]
    if got_kind != kind:
        raise QuantityError(f"{value!r} is a {got_kind.value}, but this field needs a {kind.value}, like {_examples(kind)}")
    if number < 0:
        raise QuantityError(f"{value!r} is negative; a {kind.value} must be ≥ 0, like {_examples(kind)}")
    if not math.isfinite(number * factor):  # "1e400 GB" parses as inf
        raise QuantityError(f"{value!r} is too large to be a {kind.value}; write it like {_examples(kind)}")
    return number * factor


def format_quantity(x: float, kind: Kind) -> str:
    """Human-readable form of a base-unit value (decimal prefixes), e.g. 8e10 -> '80 GB'."""
    if kind == Kind.TIME:
        for unit, f in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6)):
            if x >= f:
                return f"{x / f:.3g} {unit}"
        return f"{x / 1e-9:.3g} ns"
    base = {Kind.BYTES: "B", Kind.BANDWIDTH: "B/s", Kind.FLOPS: "FLOP/s", Kind.POWER: "W", Kind.PRICE: "USD/h"}[kind]
    if kind == Kind.PRICE:
        return f"{x:.3g} {base}"
    for p in ("P", "T", "G", "M", "k"):
        if x >= _SI[p]:
            return f"{x / _SI[p]:.3g} {p}{base}"
    return f"{x:.3g} {base}"
