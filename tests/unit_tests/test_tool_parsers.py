"""tool_choice "auto": tool calls found in a model's free text (runtime/tool_parsers.py), answered in
OpenAI's shape through the HTTP layer, read back by the `openai` client, streamed and not."""

from __future__ import annotations

import json

import openai
import pytest
from fastapi.testclient import TestClient
from hypothesis import given
from hypothesis import strategies as st

from hetc.errors import BadInput
from hetc.runtime.launch import ServeOptions
from hetc.runtime.metrics import Metrics
from hetc.runtime.server import ServerState, create_app
from hetc.runtime.tokenizer import ByteTokenizer
from hetc.runtime.tool_parsers import ToolParser, ToolStream, parse_tool_calls
from tests.fixtures.scripted_engine import ScriptedEngine

CALL = '{"name": "get_weather", "arguments": {"city": "Paris"}}'
HERMES = f"Let me check.\n<tool_call>\n{CALL}\n</tool_call>"
TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}]


def _calls(found) -> list[tuple[str, dict]]:
    return [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in found]


def test_hermes_calls_and_the_content_before_them():
    content, calls = parse_tool_calls(HERMES, ToolParser.HERMES)
    assert content == "Let me check." and _calls(calls) == [("get_weather", {"city": "Paris"})]
    two = f'<tool_call>{CALL}</tool_call>\n<tool_call>{{"name": "f", "arguments": {{}}}}</tool_call>'
    content, calls = parse_tool_calls(two, ToolParser.HERMES)
    assert content is None and _calls(calls) == [("get_weather", {"city": "Paris"}), ("f", {})]
    assert len({c["id"] for c in calls}) == 2
    bad = ("no call here", "<tool_call>{not json}</tool_call>", f"<tool_call>{CALL}", f"<tool_call>{CALL}</tool_call> and more", '<tool_call>["x"]</tool_call>')
    for text in bad:
        assert parse_tool_calls(text, ToolParser.HERMES) is None, text


def test_llama3_json_calls():
    one = '{"name": "get_weather", "parameters": {"city": "Paris"}}'
    assert _calls(parse_tool_calls(one, ToolParser.LLAMA3_JSON)[1]) == [("get_weather", {"city": "Paris"})]
    many = '<|python_tag|>{"name": "a", "parameters": {"x": 1}}; {"name": "b", "arguments": {}}'
    assert _calls(parse_tool_calls(many, ToolParser.LLAMA3_JSON)[1]) == [("a", {"x": 1}), ("b", {})]
    for text in ("Paris is sunny.", '{"name": "a", "parameters": {}} trailing', '{"city": "Paris"}', "{broken"):
        assert parse_tool_calls(text, ToolParser.LLAMA3_JSON) is None, text


@given(text=st.text(alphabet="ab<>_tolc{}/ \n", max_size=40), cuts=st.lists(st.integers(0, 40), max_size=8))
def test_streamed_text_that_is_no_call_comes_out_whole(text, cuts):
    """However the text is split into deltas, what is sent plus what finish() returns is the text."""
    for parser in ToolParser:
        s, out, last = ToolStream(parser), "", 0
        for c in sorted(set(min(c, len(text)) for c in cuts)) + [len(text)]:
            out += s.feed(text[last:c])
            last = c
        rest, calls = s.finish(parse=True)
        if calls is None:
            assert out + rest == text


def test_hermes_stream_sends_the_content_and_holds_the_call():
    s = ToolStream(ToolParser.HERMES)
    out = "".join(s.feed(ch) for ch in HERMES)
    assert out == "Let me check.\n"
    rest, calls = s.finish(parse=True)
    assert rest == "" and _calls(calls) == [("get_weather", {"city": "Paris"})]
    s = ToolStream(ToolParser.HERMES)  # cut by max_tokens: the held text goes out as content
    out = "".join(s.feed(ch) for ch in HERMES[:30])
    rest, calls = s.finish(parse=False)
    assert calls is None and out + rest == HERMES[:30]


@pytest.fixture
def client_for():
    def make(reply: str, parser: ToolParser | None = ToolParser.HERMES) -> openai.OpenAI:
        st_ = ServerState(
            engine=ScriptedEngine(reply),
            tokenizer=ByteTokenizer(),
            model_name="m",
            max_model_len=1024,
            eos_token_ids=frozenset({3}),
            metrics=Metrics("m"),
            model_info={"tokenizer": "byte-level fallback", "vocab_size": 256},
            tool_parser=parser,
        )
        return openai.OpenAI(base_url="http://testserver/v1", api_key="none", http_client=TestClient(create_app(st_)), max_retries=0)

    return make


def test_auto_tool_choice_through_the_openai_client(client_for):
    c = client_for(HERMES)
    msgs = [{"role": "user", "content": "weather in Paris?"}]
    r = c.chat.completions.create(model="m", messages=msgs, tools=TOOLS)  # tool_choice: OpenAI's default with tools, "auto"
    ch = r.choices[0]
    assert ch.finish_reason == "tool_calls" and ch.message.content == "Let me check."
    assert [(t.function.name, json.loads(t.function.arguments)) for t in ch.message.tool_calls] == [("get_weather", {"city": "Paris"})]

    content, calls, finish = "", {}, None
    for chunk in c.chat.completions.create(model="m", messages=msgs, tools=TOOLS, tool_choice="auto", stream=True):
        d = chunk.choices[0].delta
        content += d.content or ""
        for t in d.tool_calls or []:
            calls[t.index] = (t.function.name, json.loads(t.function.arguments))
        finish = chunk.choices[0].finish_reason or finish
    assert content == "Let me check.\n" and calls == {0: ("get_weather", {"city": "Paris"})} and finish == "tool_calls"

    plain = client_for("It is sunny.").chat.completions.create(model="m", messages=msgs, tools=TOOLS)
    assert plain.choices[0].message.content == "It is sunny." and not plain.choices[0].message.tool_calls
    assert plain.choices[0].finish_reason == "stop"

    two = client_for(f"<tool_call>{CALL}</tool_call><tool_call>{CALL}</tool_call>")
    r = two.chat.completions.create(model="m", messages=msgs, tools=TOOLS, parallel_tool_calls=False)
    assert len(r.choices[0].message.tool_calls) == 1  # vLLM keeps the first
    for parallel, n in ((True, 2), (False, 1)):
        chunks = two.chat.completions.create(model="m", messages=msgs, tools=TOOLS, stream=True, parallel_tool_calls=parallel)
        assert len([t for ch in chunks for t in ch.choices[0].delta.tool_calls or []]) == n


def test_auto_without_a_parser_is_refused_by_name(client_for):
    c = client_for(HERMES, parser=None)
    with pytest.raises(openai.BadRequestError) as e:
        c.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}], tools=TOOLS)
    assert e.value.body["param"] == "tool_choice" and "--enable-auto-tool-choice" in e.value.body["message"]


@pytest.mark.parametrize("kw", [{"enable_auto_tool_choice": True}, {"tool_call_parser": "hermes"}, {"enable_auto_tool_choice": True, "tool_call_parser": "x"}])
def test_serve_flags_for_auto_tool_choice_are_checked(kw):
    with pytest.raises(BadInput) as e:
        ServeOptions(plan="p.json", **kw)
    assert e.value.field == "--tool-call-parser"
