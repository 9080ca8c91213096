"""The last stage's sampler never raises (a raise ended the worker and every request of its
pipeline): for any parameters the API accepts and any logits, each row gets a token or, exactly
when its logits are not finite, a failure code; a failed row's KV blocks are zeroed in every
stage (scrub_kv) and a looked-ahead step behind it still embeds a valid token."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hetc.runtime.feedback import SampledTokens
from hetc.runtime.kv_cache import KVPool
from hetc.runtime.protocol import APIError, parse_completion
from hetc.batching import NOT_FINITE
from hetc.runtime.sampler import sample
from hetc.runtime.transport import StepMeta
from hetc.runtime.worker import scrub_kv

V = 12
special = st.sampled_from([math.nan, math.inf, -math.inf, 3e38, -3e38, 1e-45, 0.0])
logit = st.one_of(st.floats(-1e4, 1e4, allow_nan=False), special)
rows = st.lists(st.lists(logit, min_size=V, max_size=V), min_size=1, max_size=4)
# what the API lets through (protocol.py), drawn at and around its edges
params = st.tuples(
    st.one_of(st.floats(0.0, 2.0), st.sampled_from([0.0, 1e-5, 1.1e-5, 1e-300, 2.0])),
    st.one_of(st.floats(5e-324, 1.0, exclude_min=False), st.sampled_from([5e-324, 1e-46, 1.0])),
    st.one_of(st.integers(0, V + 2), st.sampled_from([2**31 - 1])),
    st.integers(-(2**63), 2**63 - 1),
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rows, st.data())
def test_any_logits_and_accepted_parameters_give_a_token_or_say_not_finite(values, data):
    logits = torch.tensor(values, dtype=torch.float32)
    ps = [data.draw(params) for _ in values]
    for temp, top_p, top_k, seed in ps:  # each is one the API accepts
        parse_completion({"model": "m", "prompt": "x", "temperature": temp, "top_p": top_p, "top_k": top_k, "seed": seed})
    got = sample(logits, ps, list(range(len(values))))
    for row, (temp, _, _, _), tok in zip(logits, ps, got):
        if torch.isnan(row).any() or row.max() == math.inf or row.max() == -math.inf:
            assert tok == NOT_FINITE
        else:
            assert 0 <= tok < V and row[tok] > -math.inf  # never a token of probability 0
            if temp <= 1e-5:
                assert row[tok] == row.max()


@pytest.mark.parametrize("temperature", [float("nan"), float("inf"), -1.0, 2.5])
def test_the_api_refuses_temperatures_the_sampler_cannot_use(temperature):
    with pytest.raises(APIError) as e:
        parse_completion({"model": "m", "prompt": "x", "temperature": temperature})
    assert e.value.status == 400


def test_a_tiny_temperature_on_large_logits_samples_the_maximum():
    logits = torch.tensor([[3e38, 0.0, 2.9e38, -3e38]])  # /1.1e-5 overflowed to inf before the shift: NaN probabilities
    assert sample(logits, [(1.1e-5, 1.0, 0, 7)], [0]) == [0]


def test_scrub_zeroes_only_the_given_blocks_of_every_layer():
    kv = KVPool([0, 3], num_blocks=4, kv_heads=2, head_dim=3, dtype=torch.float32)
    for t in (*kv.k.values(), *kv.v.values()):
        t.fill_(math.nan)
    scrub_kv(kv, [1, 3])
    for t in (*kv.k.values(), *kv.v.values()):
        by_block = t.view(4, kv.block_size, 2, 3)
        assert (by_block[[1, 3]] == 0).all() and by_block[[0, 2]].isnan().all()


def test_a_looked_ahead_token_after_a_failed_sample_is_a_valid_id():
    m = StepMeta([5], [9], [1], [True], [[2]], [-1], [(1.0, 1.0, 0, 1)])
    meta, _ = m.encode()
    store = SampledTokens()
    store.put([5], [9], [NOT_FINITE])  # the last stage could not sample sequence 5 at position 9
    store.fill(m, meta, timeout=0.01)
    assert m.token_ids == [0] and meta[-1] == 0  # embedded, then dropped: the frontend ended the request
