"""The acceptance model every part of hetc reads (hetc/speculation.py), against enumeration."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hetc.speculation import expected_tokens_per_round


def _enumerated(alpha: float, k: int) -> float:
    # a round accepts exactly j < K proposals with probability α^j (1 − α), all K with α^K; it gains j + 1
    return sum(alpha**j * (1 - alpha) * (j + 1) for j in range(k)) + alpha**k * (k + 1)


@given(st.floats(0, 1), st.integers(0, 16))
def test_expected_tokens_per_round_is_the_mean_of_the_accepted_prefix_plus_one(alpha, k):
    assert expected_tokens_per_round(alpha, k) == pytest.approx(_enumerated(alpha, k), rel=1e-9, abs=1e-12)


def test_its_ends_and_a_value():
    assert expected_tokens_per_round(0.0, 5) == 1.0
    assert expected_tokens_per_round(1.0, 5) == 6.0
    assert expected_tokens_per_round(0.5, 2) == pytest.approx(1.75)


@pytest.mark.parametrize(("alpha", "k"), [(-0.1, 2), (1.5, 2), (0.5, -1)])
def test_out_of_range_inputs_are_refused(alpha, k):
    with pytest.raises(ValueError):
        expected_tokens_per_round(alpha, k)
