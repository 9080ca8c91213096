"""Strict quantity parsing (hetc/quantity.py; docs/cluster.md "Quantities": quantities are strings
with units, a bare number or an unknown unit is an error)."""

from __future__ import annotations

import pytest

from hetc.quantity import Kind, QuantityError, format_quantity, parse_quantity


@pytest.mark.parametrize(
    ("text", "kind", "expected"),
    [
        ("80 GB", Kind.BYTES, 80e9),
        ("96 GiB", Kind.BYTES, 96 * 2**30),
        ("512 MiB", Kind.BYTES, 512 * 2**20),
        ("1.5 kB", Kind.BYTES, 1500.0),
        ("3.35 TB/s", Kind.BANDWIDTH, 3.35e12),
        ("450 GB/s", Kind.BANDWIDTH, 450e9),
        ("400 Gbit/s", Kind.BANDWIDTH, 50e9),  # bits, not bytes: / 8
        ("100 Mbit/s", Kind.BANDWIDTH, 12.5e6),
        ("1 KiB/s", Kind.BANDWIDTH, 1024.0),
        ("5 us", Kind.TIME, 5e-6),
        ("5 µs", Kind.TIME, 5e-6),
        ("2 ms", Kind.TIME, 2e-3),
        ("30 ns", Kind.TIME, 30e-9),
        ("1.5 s", Kind.TIME, 1.5),
        ("989 TFLOP/s", Kind.FLOPS, 989e12),
        ("1.3 PFLOP/s", Kind.FLOPS, 1.3e15),
        ("700 W", Kind.POWER, 700.0),
        ("1.5 kW", Kind.POWER, 1500.0),
        ("2.95 USD/h", Kind.PRICE, 2.95),
        ("0 GB", Kind.BYTES, 0.0),
        ("1e3 GB", Kind.BYTES, 1e12),
        ("80GB", Kind.BYTES, 80e9),  # no space is fine
        ("  80 GB  ", Kind.BYTES, 80e9),  # surrounding blanks are fine
    ],
)
def test_parses_each_kind_to_base_units(text, kind, expected):
    assert parse_quantity(text, kind) == pytest.approx(expected, rel=1e-12)


def test_bits_and_bytes_differ_by_eight():
    assert parse_quantity("400 GB/s", Kind.BANDWIDTH) == pytest.approx(8 * parse_quantity("400 Gbit/s", Kind.BANDWIDTH))


def test_binary_and_decimal_prefixes_differ():
    assert parse_quantity("1 GiB", Kind.BYTES) == 2**30
    assert parse_quantity("1 GB", Kind.BYTES) == 10**9


# -------------------------------------------------------------------- rejections


@pytest.mark.parametrize("value", [80, 80.0, "80", " 80 "])
def test_bare_number_is_rejected_with_an_example(value):
    with pytest.raises(QuantityError) as ei:
        parse_quantity(value, Kind.BYTES)
    msg = str(ei.value)
    assert '"80 GB"' in msg  # shows the right form
    assert "80" in msg  # and what it got


@pytest.mark.parametrize("value", [True, False])
def test_booleans_are_rejected(value):
    # bool is an int subclass: True must not be read as 1 byte/s
    with pytest.raises(QuantityError) as ei:
        parse_quantity(value, Kind.BANDWIDTH)
    assert "Gbit/s" in str(ei.value) or "TB/s" in str(ei.value)


@pytest.mark.parametrize("value", [None, [80, "GB"], {"value": 80}])
def test_non_strings_are_rejected(value):
    with pytest.raises(QuantityError):
        parse_quantity(value, Kind.BYTES)


def test_quantity_error_is_a_value_error():
    # callers (pydantic validators, cluster.py prices) catch ValueError
    assert issubclass(QuantityError, ValueError)


@pytest.mark.parametrize("text", ["80 GBs", "80 gigabytes", "80 XB", "80 G"])
def test_unknown_unit_is_rejected_with_an_example(text):
    with pytest.raises(QuantityError) as ei:
        parse_quantity(text, Kind.BYTES)
    msg = str(ei.value)
    assert "unknown unit" in msg
    assert '"80 GB"' in msg


def test_wrong_case_unit_suggests_the_right_spelling():
    with pytest.raises(QuantityError) as ei:
        parse_quantity("80 gb", Kind.BYTES)
    assert "'GB'" in str(ei.value)


def test_gigabit_typo_does_not_suggest_gigabytes():
    # "Gb/s" is a common way to write gigabits per second. Suggesting "GB/s" would make the
    # user write a value 8x too large; the hint must point to "Gbit/s" (or give none).
    with pytest.raises(QuantityError) as ei:
        parse_quantity("400 Gb/s", Kind.BANDWIDTH)
    msg = str(ei.value)
    assert "Gbit/s" in msg
    assert "did you mean 'GB/s'" not in msg


@pytest.mark.parametrize(
    ("text", "kind", "example"),
    [
        ("80 GB", Kind.BANDWIDTH, '"3.35 TB/s"'),
        ("3.35 TB/s", Kind.BYTES, '"80 GB"'),
        ("400 Gbit/s", Kind.FLOPS, '"989 TFLOP/s"'),
        ("989 TFLOP/s", Kind.BANDWIDTH, '"400 Gbit/s"'),
        ("5 us", Kind.PRICE, '"2.95 USD/h"'),
        ("700 W", Kind.TIME, '"5 us"'),
        ("2.95 USD/h", Kind.POWER, '"700 W"'),
    ],
)
def test_unit_of_another_kind_is_rejected(text, kind, example):
    with pytest.raises(QuantityError) as ei:
        parse_quantity(text, kind)
    msg = str(ei.value)
    assert kind.value in msg  # names what the field needs
    assert example in msg  # and shows an example of it


@pytest.mark.parametrize(
    ("text", "kind"),
    [("-80 GB", Kind.BYTES), ("-1 GB/s", Kind.BANDWIDTH), ("-5 us", Kind.TIME), ("-2.95 USD/h", Kind.PRICE), ("-1e3 W", Kind.POWER)],
)
def test_negative_values_are_rejected(text, kind):
    with pytest.raises(QuantityError) as ei:
        parse_quantity(text, kind)
    assert "negative" in str(ei.value)


@pytest.mark.parametrize("text", ["", "GB", "nan GB", "inf GB", "8 0 GB", "80 GB extra", "1,5 GB"])
def test_malformed_text_is_rejected(text):
    with pytest.raises(QuantityError):
        parse_quantity(text, Kind.BYTES)


# -------------------------------------------------------------------- formatting


@pytest.mark.parametrize(
    ("value", "kind", "text"),
    [
        (80e9, Kind.BYTES, "80 GB"),
        (50e9, Kind.BANDWIDTH, "50 GB/s"),
        (989e12, Kind.FLOPS, "989 TFLOP/s"),
        (5e-6, Kind.TIME, "5 us"),
        (2e-3, Kind.TIME, "2 ms"),
        (700.0, Kind.POWER, "700 W"),
        (2.95, Kind.PRICE, "2.95 USD/h"),
    ],
)
def test_format_quantity_round_trips(value, kind, text):
    assert format_quantity(value, kind) == text
    assert parse_quantity(format_quantity(value, kind), kind) == pytest.approx(value)
