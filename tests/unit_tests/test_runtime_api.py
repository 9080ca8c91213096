"""The HTTP layer in-process, over a scripted engine: OpenAI response and SSE formats,
usage, stop strings (cut from the text, the sequence aborted), 429/503 mapping, request
validation, and the byte-level tokenizer's incremental decoding."""

import json

import pytest
from starlette.testclient import TestClient

from hetc.runtime.engine import EngineDead, QueueFull
from hetc.runtime.metrics import Metrics
from hetc.runtime.protocol import APIError, parse_chat, parse_completion
from hetc.runtime.server import ServerState, create_app
from hetc.runtime.tokenizer import ByteTokenizer, Detokenizer, apply_chat
from tests.fixtures.scripted_engine import ScriptedEngine


@pytest.fixture
def app_client():
    eng = ScriptedEngine("Hello, wörld! Bye.")
    st = ServerState(
        engine=eng,
        tokenizer=ByteTokenizer(),
        model_name="m",
        max_model_len=64,
        eos_token_ids=frozenset({3}),
        metrics=Metrics("m"),
        api_key="k",
        model_info={"tokenizer": "byte-level fallback", "vocab_size": 256},
    )
    return TestClient(create_app(st), headers={"Authorization": "Bearer k"}), eng


def test_completion_and_chat_bodies(app_client):
    c, _ = app_client
    r = c.post("/v1/completions", json={"model": "m", "prompt": "hi", "max_tokens": 40}).json()
    assert r["object"] == "text_completion" and r["choices"][0]["text"] == "Hello, wörld! Bye."
    assert r["choices"][0]["finish_reason"] == "stop"  # EOS: not in the text
    assert r["usage"] == {"prompt_tokens": 2, "completion_tokens": 20, "total_tokens": 22}  # ö is 2 bytes, + EOS
    r = c.post("/v1/completions", json={"model": "m", "prompt": [104, 105], "max_tokens": 5}).json()
    assert r["choices"][0]["text"] == "Hello" and r["choices"][0]["finish_reason"] == "length"
    r = c.post("/v1/chat/completions", json={"model": "m", "messages": [{"role": "user", "content": "hi"}]}).json()
    assert r["object"] == "chat.completion" and r["choices"][0]["message"] == {"role": "assistant", "content": "Hello, wörld! Bye."}
    models = c.get("/v1/models").json()["data"]
    assert models[0]["id"] == "m" and models[0]["tokenizer"] == "byte-level fallback"


def test_stop_strings_cut_the_text_and_abort(app_client):
    c, eng = app_client
    r = c.post("/v1/completions", json={"model": "m", "prompt": "hi", "max_tokens": 40, "stop": ["rld", "xyz"]}).json()
    assert r["choices"][0]["text"] == "Hello, wö" and r["choices"][0]["finish_reason"] == "stop"
    assert len(eng.aborted) == 1


def _events(resp) -> list:
    out = []
    for line in resp.iter_lines():
        if line.startswith("data: "):
            out.append(line[6:] if line[6:] == "[DONE]" else json.loads(line[6:]))
    return out


def test_sse_streams_with_usage(app_client):
    c, _ = app_client
    with c.stream(
        "POST",
        "/v1/chat/completions",
        json={"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": True, "stop": "Bye", "stream_options": {"include_usage": True}},
    ) as resp:
        assert resp.headers["content-type"].startswith("text/event-stream")
        ev = _events(resp)
    assert ev[-1] == "[DONE]"
    assert ev[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    text = "".join(e["choices"][0]["delta"].get("content", "") for e in ev[1:-2] if e["choices"])
    assert text == "Hello, wörld! "
    assert ev[-3]["choices"][0]["finish_reason"] == "stop"
    assert ev[-2]["choices"] == [] and ev[-2]["usage"]["completion_tokens"] > 0
    with c.stream("POST", "/v1/completions", json={"model": "m", "prompt": "x", "stream": True, "max_tokens": 3}) as r:
        ev = _events(r)
    assert "".join(e["choices"][0]["text"] for e in ev[:-1]) == "Hel" and "usage" not in ev[0]
    # vLLM's continuous usage (guidellm asks for it): every chunk carries the tokens so far
    so = {"include_usage": True, "continuous_usage_stats": True}
    with c.stream("POST", "/v1/completions", json={"model": "m", "prompt": "x", "stream": True, "max_tokens": 3, "stream_options": so}) as r:
        ev = _events(r)[:-1]
    done = [e["usage"]["completion_tokens"] for e in ev]
    assert done == sorted(done) and done[0] >= 1 and done[-1] == 3, done
    assert all(e["usage"]["total_tokens"] == e["usage"]["prompt_tokens"] + e["usage"]["completion_tokens"] for e in ev)


def test_engine_states_map_to_429_and_503(app_client):
    c, eng = app_client
    eng.raise_on_submit = QueueFull("9 requests are waiting")
    r = c.post("/v1/completions", json={"model": "m", "prompt": "hi"})
    assert r.status_code == 429 and r.headers["retry-after"] == "1" and r.json()["error"]["code"] == "queue_full"
    eng.raise_on_submit = EngineDead("worker a:1 exited")
    r = c.post("/v1/completions", json={"model": "m", "prompt": "hi"})
    assert r.status_code == 503 and "a:1" in r.json()["error"]["message"]
    eng.failed = "worker a:1 exited"
    assert c.get("/health").status_code == 503
    r = c.get("/nope")
    assert r.status_code == 404 and "error" in r.json()


@pytest.mark.parametrize(
    "body,param",
    [
        ({"model": "m", "prompt": "x", "n": 0}, "n"),
        ({"model": "m", "prompt": "x", "n": 2, "best_of": 3}, "best_of"),
        ({"model": "m", "prompt": "x", "top_p": 0}, "top_p"),
        ({"model": "m", "prompt": "x", "stop": [""]}, "stop"),
        ({"model": "m", "prompt": "x", "logprobs": 21}, "logprobs"),
        ({"model": "m", "prompt": "x", "logprobs": True}, "logprobs"),
        ({"model": "m", "prompt": "x", "stream_options": {"include_usage": True}}, "stream_options"),
        ({"model": "m", "prompt": ["a", 3]}, "prompt"),
        ({"model": "m", "prompt": [1, -2]}, "prompt"),
        ({"model": "m", "prompt": "x", "max_tokens": 0}, "max_tokens"),
        ({"model": "m", "prompt": "x", "logit_bias": {"5": 101}}, "logit_bias"),
        ({"model": "m", "prompt": "x", "logit_bias": {"a": 1}}, "logit_bias"),
        ({"model": "m", "prompt": "x", "presence_penalty": 2.5}, "presence_penalty"),
        ({"model": "m", "prompt": "x", "repetition_penalty": 0}, "repetition_penalty"),
        ({"model": "m", "prompt": "x", "max_tokens": 4, "min_tokens": 5}, "min_tokens"),
        ({"model": "m", "prompt": "x", "stop_token_ids": [-1]}, "stop_token_ids"),
        ({"model": "m", "prompt": "x", "user": 5}, "user"),
        # unknown fields first, by name, before the rest is checked (top_p 0 is also wrong)
        ({"model": "m", "prompt": "x", "top_p": 0, "temprature": 0.5}, "temprature"),
        ({"model": "m", "prompt": "x", "suffix": "tail"}, "suffix"),
        ({"model": "m", "prompt": "x", "response_format": {"type": "xml"}}, "response_format.type"),
        ({"model": "m", "prompt": [["a"]] * 2}, "prompt"),
        ({"model": "m", "prompt": "x", "max_tokens": True}, "max_tokens"),
        ({"model": 3, "prompt": "x"}, "model"),
    ],
)
def test_completion_validation(body, param):
    with pytest.raises(APIError) as e:
        parse_completion(body)
    assert e.value.status == 400 and e.value.param == param


def test_chat_validation_and_parts():
    opts, msgs = parse_chat(
        {"model": "m", "messages": [{"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}], "max_completion_tokens": 7}
    )
    assert msgs == [{"role": "user", "content": "ab"}] and opts.max_tokens == 7
    for bad in ([], [{"role": "wizard", "content": "x"}], [{"role": "user", "content": 5}], "hi"):
        with pytest.raises(APIError):
            parse_chat({"model": "m", "messages": bad})


def test_byte_tokenizer_and_incremental_decoding():
    tok = ByteTokenizer()
    ids = tok.encode("añb€")
    d = Detokenizer(tok)
    pieces = [d.add(i) for i in ids]
    assert pieces == ["a", "", "ñ", "b", "", "", "€"]  # partial UTF-8 held back until complete
    assert apply_chat(tok, [{"role": "user", "content": "hi"}]) == tok.encode("user: hi\nassistant:")


def test_prompt_log_probabilities_are_refused_by_name_on_compiled_stages():
    st = ServerState(
        engine=ScriptedEngine("hi"),
        tokenizer=ByteTokenizer(),
        model_name="m",
        max_model_len=64,
        eos_token_ids=frozenset({3}),
        metrics=Metrics("m"),
        model_info={"vocab_size": 256, "executors": [{"stage": "0.0", "executor": "torch"}, {"stage": "0.1", "executor": "openvino"}]},
    )
    c = TestClient(create_app(st))
    r = c.post("/v1/completions", json={"model": "m", "prompt": "hi", "echo": True, "logprobs": 1, "max_tokens": 2})
    assert r.status_code == 400 and r.json()["error"]["param"] == "echo" and "openvino" in r.json()["error"]["message"]
    # generated tokens' log-probabilities and echo alone need no prompt logits: served
    assert c.post("/v1/completions", json={"model": "m", "prompt": "hi", "logprobs": 1, "max_tokens": 2}).status_code == 200
    r = c.post("/v1/completions", json={"model": "m", "prompt": "hi", "echo": True, "max_tokens": 0}).json()
    assert r["choices"][0]["text"] == "hi" and r["usage"]["completion_tokens"] == 0
    rule = c.get("/openapi.json").json()["components"]["schemas"]["CompletionRequest"]["allOf"]
    assert any(x.get("then", {}).get("properties", {}).get("echo") for x in rule)  # the document says so too


def test_tokenize_detokenize_and_version():
    c = TestClient(create_app(ServerState(ScriptedEngine("hi"), ByteTokenizer(), "m", 64, frozenset({3}), Metrics("m"), model_info={"vocab_size": 256})))
    assert c.post("/tokenize", json={"prompt": "hé", "return_token_strs": True}).json() == {
        "count": 3,
        "max_model_len": 64,
        "tokens": [104, 195, 169],
        "token_strs": ["h", "\ufffd", "\ufffd"],
    }
    assert c.post("/tokenize", json={"messages": [{"role": "user", "content": "x"}]}).json()["tokens"] == list(b"user: x\nassistant:")
    assert c.post("/tokenize", json={"prompt": "x", "messages": []}).json()["error"]["param"] == "prompt"  # not both
    assert c.post("/detokenize", json={"tokens": [104, 105]}).json() == {"prompt": "hi"}
    assert c.post("/detokenize", json={"tokens": [300]}).status_code == 400
    assert c.get("/version").json()["version"]
