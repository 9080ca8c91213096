"""What one request may cost: body size (413), context and max_tokens (400), stop strings, n,
the API key compared in constant time, a disconnecting stream's sequence aborted and its KV
freed; admission by predicted queue wait (429 with Retry-After)."""

from __future__ import annotations

import http.client
import socket
import threading
import types
import time

import pytest
from starlette.testclient import TestClient

from hetc.kv_blocks import BlockManager
from hetc.runtime.engine import Engine, Event, QueueFull
from hetc.runtime.metrics import Metrics
from hetc.batching import Rates, Scheduler, SchedulerConfig
from hetc.sequence import Sequence
from hetc.runtime.server import ServerState, create_app
from hetc.runtime.tokenizer import ByteTokenizer
from tests.fixtures.scripted_engine import ScriptedEngine


def _client(engine, **kw) -> TestClient:
    st = ServerState(
        engine=engine, tokenizer=ByteTokenizer(), model_name="m", max_model_len=64, eos_token_ids=frozenset({3}), metrics=Metrics("m"), api_key="k", **kw
    )
    return TestClient(create_app(st), headers={"Authorization": "Bearer k"})


def test_body_over_the_limit_is_413_declared_or_chunked():
    c = _client(ScriptedEngine("hi"), max_body_bytes=200)
    body = '{"model": "m", "prompt": "' + "x" * 300 + '"}'
    r = c.post("/v1/completions", content=body, headers={"content-type": "application/json"})
    assert r.status_code == 413 and r.json()["error"]["code"] == "request_too_large"

    def chunks():  # no Content-Length: the server counts what arrives
        yield body[:100].encode()
        yield body[100:].encode()

    r = c.post("/v1/completions", content=chunks(), headers={"content-type": "application/json"})
    assert r.status_code == 413
    r = c.post("/v1/completions", json={"model": "m", "prompt": "x" * 20, "max_tokens": 2})
    assert r.status_code == 200  # under the limit


@pytest.mark.parametrize(
    "extra,param",
    [
        ({"max_tokens": 60}, "max_tokens"),
        ({"prompt": "y" * 64}, "prompt"),
        ({"stop": ["a"] * 17}, "stop"),
        ({"stop": "s" * 257}, "stop"),
        ({"n": 17}, "n"),
        ({"prompt": ["x"] * 17}, "prompt"),
        ({"seed": 2**63}, "seed"),
        ({"top_k": 2**31}, "top_k"),
        ({"logprobs": 21}, "logprobs"),
    ],
)
def test_request_costs_over_the_limits_are_400(extra, param):
    r = _client(ScriptedEngine("hi")).post("/v1/completions", json={"model": "m", "prompt": "x" * 10, **extra})
    assert r.status_code == 400 and r.json()["error"]["param"] == param


@pytest.mark.parametrize(
    "body",
    [
        '{"model": "m", "prompt": "x", "max_tokens": ' + "1" * 5000 + "}",  # int over 4300 digits
        "[" * 100_000 + "]" * 100_000,  # nesting deeper than the JSON decoder's recursion
        b'{"model": "m", "prompt": "\xff"}',
    ],
)
def test_bodies_the_json_decoder_chokes_on_are_400_not_500(body):
    r = _client(ScriptedEngine("hi")).post("/v1/completions", content=body, headers={"content-type": "application/json"})
    assert r.status_code == 400 and "not valid JSON" in r.json()["error"]["message"]


def test_integral_floats_are_integers_and_an_empty_tools_list_is_no_tools():
    c = _client(ScriptedEngine("hi"))
    r = c.post("/v1/completions", json={"model": "m", "prompt": [104.0, 105.0], "max_tokens": 2.0})
    assert r.status_code == 200 and r.json()["usage"] == {"prompt_tokens": 2, "completion_tokens": 2, "total_tokens": 4}
    chat = {"model": "m", "messages": [{"role": "user", "content": "x"}], "max_tokens": 1}
    assert c.post("/v1/chat/completions", json={**chat, "tools": []}).status_code == 200
    assert c.post("/v1/chat/completions", json={**chat, "tools": {}}).json()["error"]["param"] == "tools"


def test_a_wrong_method_is_405_with_allow():
    r = _client(ScriptedEngine("hi")).delete("/v1/completions")
    assert r.status_code == 405 and r.headers["allow"] == "POST" and r.json()["error"]["type"] == "invalid_request_error"


def test_api_key_compared_in_constant_time(monkeypatch):
    import hmac

    calls = []
    real = hmac.compare_digest
    monkeypatch.setattr(hmac, "compare_digest", lambda a, b: calls.append((a, b)) or real(a, b))
    c = _client(ScriptedEngine("hi"))
    assert c.post("/v1/completions", json={"model": "m", "prompt": "x", "max_tokens": 1}, headers={"Authorization": "Bearer kk"}).status_code == 401
    assert calls and calls[-1] == (b"Bearer kk", b"Bearer k")
    assert c.post("/v1/completions", json={"model": "m", "prompt": "x", "max_tokens": 1}).status_code == 200


class _SlowEngine:
    """One sequence at a time in a real Scheduler and BlockManager; a token every 20 ms."""

    def __init__(self):
        self.blocks = BlockManager(8)
        self.sched = Scheduler(self.blocks, SchedulerConfig(max_batched_tokens=64))
        self.lock, self.aborted, self.failed = threading.Lock(), [], None

    def submit_samples(self, prompt_ids, samples, eos):
        return [self.submit(prompt_ids, p, eos, sink) for p, sink in samples]

    def submit(self, prompt_ids, params, eos, sink):
        seq = Sequence(0, list(prompt_ids), len(prompt_ids), params, eos)
        with self.lock:
            self.sched.add(seq)

        def run():
            while True:
                with self.lock:
                    batch = self.sched.schedule()
                    if batch is None:
                        return
                    outs = self.sched.on_result(batch, [65] * len(batch.items))
                for o in outs:
                    sink(Event(o.token, o.finished, "length" if o.finished else None))
                    if o.finished:
                        return
                time.sleep(0.02)

        threading.Thread(target=run, daemon=True).start()
        return seq

    def abort(self, seq):
        with self.lock:
            self.aborted.append(seq)
            self.sched.abort(seq)


def test_disconnected_stream_is_aborted_and_its_kv_freed():
    import uvicorn

    eng = _SlowEngine()
    st = ServerState(engine=eng, tokenizer=ByteTokenizer(), model_name="m", max_model_len=1024, eos_token_ids=frozenset({3}), metrics=Metrics("m"))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(create_app(st), host="127.0.0.1", port=port, log_level="warning"))
    threading.Thread(target=server.run, daemon=True).start()
    try:
        for _ in range(200):
            if server.started:
                break
            time.sleep(0.02)
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
        conn.request(
            "POST", "/v1/completions", body='{"model": "m", "prompt": "hello", "max_tokens": 500, "stream": true}', headers={"content-type": "application/json"}
        )
        r = conn.getresponse()
        assert r.status == 200 and r.readline().startswith(b"data: ")
        assert eng.blocks.num_free < 8  # the sequence holds KV while it streams
        conn.sock.shutdown(socket.SHUT_RDWR)  # the client goes away mid-stream
        conn.close()
        deadline = time.monotonic() + 3
        while time.monotonic() < deadline and not (eng.aborted and eng.blocks.num_free == 8):
            time.sleep(0.02)
        assert eng.aborted and eng.aborted[0].finish_reason == "abort"
        assert eng.blocks.num_free == 8  # its KV blocks are back
    finally:
        server.should_exit = True


def test_rates_predict_the_wait_from_measured_steps():
    r = Rates()
    assert r.predict_wait(10_000, 5) == 0.0  # nothing measured yet: admit
    for i in range(1, 30):  # a result every 0.1 s carrying 50 tokens, one sequence finishing per 2 results
        r.observe(50, i % 2, sent_at=i * 0.1 - 0.3, now=i * 0.1)  # 3 micro-batches in flight
    assert r.predict_wait(1000, 0) == pytest.approx(1000 * 0.1 / 50, rel=0.05)  # 2 s of prompt tokens
    # every seat taken: 4 sequences must finish first at 5 per second
    assert r.predict_wait(10, 4) == pytest.approx(4 * 0.1 / 0.5, rel=0.15)


def test_a_seats_wait_stays_bounded_between_bursts_of_finishes():
    # a closed loop of 16 equal requests: all 16 finish on the same result, every 64 results of 0.1 s
    r = Rates()
    for i in range(1, 64 * 4):
        r.observe(16, 16 if i % 64 == 0 else 0, sent_at=i * 0.1 - 0.1, now=i * 0.1)
    # the step before a burst: 16 seats free every 6.4 s on average; a 17th request waits at most that long
    assert r.finish_rate() == pytest.approx(16 / 6.4, rel=0.1)
    assert r.predict_wait(10, 1) < 1.0  # one seat short: ~0.4 s at that rate (an average per result read hours here)


def test_admission_refuses_a_predicted_wait_over_the_limit():
    class _Lane:  # the fields Engine._admit and LaneRunner.load read
        def __init__(self, sched):
            self.sched, self.cond, self.incoming = sched, threading.Lock(), []
            self.up, self.lane = True, types.SimpleNamespace(phase="both")  # what Engine.entry_lanes reads

        def load(self) -> int:  # what the router compares (LaneRunner.load)
            return self.sched.num_running + self.sched.num_waiting

    sched = Scheduler(BlockManager(64), SchedulerConfig(max_batched_tokens=64, max_queue_wait=1.0))
    for i in range(1, 30):
        sched.rates.observe(100, 1, sent_at=i * 0.1 - 0.3, now=i * 0.1)  # 1000 tokens/s
    eng = Engine.__new__(Engine)
    eng.lanes, eng.cfg = [_Lane(sched)], sched.cfg
    eng._admit(500, [])  # 0.5 s: admitted (no prefix-cache keys)
    for i in range(3):
        sched.add(Sequence(i, [1] * 400, 400, None, frozenset()))  # 1200 tokens queued ahead
    with pytest.raises(QueueFull) as e:
        eng._admit(500, [])  # 1.7 s > 1 s
    assert e.value.retry_after == pytest.approx(0.7, rel=0.1) and "1.7 s" in str(e.value)


def test_queue_full_is_429_with_retry_after():
    eng = ScriptedEngine("hi")
    eng.raise_on_submit = QueueFull("predicted wait 37.2 s", retry_after=7.2)
    r = _client(eng).post("/v1/completions", json={"model": "m", "prompt": "x", "max_tokens": 1})
    assert r.status_code == 429 and r.headers["retry-after"] == "8" and r.json()["error"]["type"] == "rate_limit_error"


def test_rates_do_not_count_an_idle_pipeline_as_slow():
    r = Rates()
    for i in range(1, 30):  # one request at a time: each 50 ms step sent after a 1 s idle gap
        r.observe(10, 0, sent_at=i * 1.0 - 0.05, now=i * 1.0)
    assert r.predict_wait(100, 0) == pytest.approx(100 * 0.05 / 10, rel=0.05)


@pytest.mark.parametrize("top_p", [5e-324, 1e-300, 1e-46])
def test_a_top_p_below_float32s_range_keeps_the_top_token(top_p):
    import torch

    from hetc.runtime.sampler import sample

    logits = torch.randn(2, 320, generator=torch.Generator().manual_seed(0))
    got = sample(logits, [(1.0, top_p, 0, 1), (0.7, top_p, 5, 2)], [3, 4])  # raised on NaN probabilities (schemathesis)
    assert got == logits.argmax(-1).tolist()
