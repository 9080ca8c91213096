"""Structured output requests: `response_format` and chat's `tools` / `tool_choice` → the grammar
the output is held to (grammar.py), and tool calls parsed back out of the text.

- `response_format`: `{"type": "text"}` (none), `{"type": "json_object"}` (any JSON object),
  `{"type": "json_schema", "json_schema": {"name", "schema", "strict", "description"}}` (JSON
  valid against the schema).
- `tools` are rendered by the model's chat template (`tools=`, as transformers and vLLM pass them).
  `tool_choice` as vLLM without `--enable-auto-tool-choice`: `"none"` (tools in the prompt, free
  text out), a named function (the output is its arguments, held to its `parameters` schema) or
  `"required"` (the output is a JSON array of `{"name", "parameters"}` calls, one of the tools
  each: vLLM's format; one call with `parallel_tool_calls: false`); `"auto"` — OpenAI's default
  when tools are given — leaves the output free and finds calls in it with the model's own
  parser (tool_parsers.py), where the server was started with one (`--enable-auto-tool-choice
  --tool-call-parser NAME`, as vLLM); without one it is refused by name, as vLLM refuses it.
"""

from __future__ import annotations

import enum
import json
import re
from dataclasses import dataclass
from typing import Any

from hetc.runtime.grammar import GrammarError, check_grammar, json_schema_grammar
from hetc.runtime.tool_parsers import ToolParser, openai_tool_call, parse_tool_calls

__all__ = ["MAX_TOOLS", "NAME_PATTERN", "Structured", "ToolChoice", "auto_calls", "parse_structured", "tool_calls"]

NAME_PATTERN = "^[a-zA-Z0-9_-]{1,64}$"  # OpenAI's function and schema names
_NAME = re.compile(NAME_PATTERN[1:-1])  # fullmatch: Python's `$` also matches before a final newline
MAX_TOOLS = 128  # OpenAI's limit


class ToolChoice(enum.Enum):
    NONE = "none"  # tools (if any) in the prompt, free text out
    REQUIRED = "required"  # one or more calls of any tool
    NAMED = "named"  # one call of the named function
    AUTO = "auto"  # free text; calls found in it by the server's tool-call parser


@dataclass(frozen=True, slots=True)
class Structured:
    """What a request's structured-output fields ask for."""

    grammar: str | None = None  # llguidance's grammar text the output is held to (None: free text)
    tools: list[dict] | None = None  # OpenAI's tool objects, for the chat template
    choice: ToolChoice = ToolChoice.NONE
    function: str | None = None  # the named function (ToolChoice.NAMED)
    parser: ToolParser | None = None  # the model's tool-call format (ToolChoice.AUTO)
    parallel: bool = True  # parallel_tool_calls (false: ToolChoice.AUTO keeps the first call, as vLLM)


def _bad(message: str, param: str):
    from hetc.runtime.protocol import bad

    return bad(message[:600], param)


def _grammar(schema: Any, param: str) -> str:
    """The grammar of JSON valid against `schema`, checked (a 400 naming `param` when it is not)."""
    if not isinstance(schema, dict):
        raise _bad(f"'{param}' must be a JSON Schema object, got {type(schema).__name__}.", param)
    try:
        grammar = json_schema_grammar(schema)
        check_grammar(grammar)
    except GrammarError as e:
        raise _bad(f"'{param}' is not a JSON Schema this server can hold output to: {e}", param) from None
    return grammar


def _response_format(v: Any) -> str | None:
    if v is None:
        return None
    if not isinstance(v, dict) or not isinstance(v.get("type"), str):
        raise _bad("'response_format' must be an object with a 'type': text, json_object or json_schema.", "response_format")
    kind, extra = v["type"], sorted(set(v) - {"type", "json_schema"})
    if extra or (kind != "json_schema" and "json_schema" in v):
        raise _bad(f"'response_format' has field(s) {', '.join(map(repr, extra or ['json_schema']))} its type {kind!r} does not take.", "response_format")
    if kind == "text":
        return None
    if kind == "json_object":
        return _grammar({"type": "object"}, "response_format")
    if kind != "json_schema":
        raise _bad(f"'response_format.type' {kind!r} is not one of text, json_object, json_schema.", "response_format.type")
    js = v.get("json_schema")
    if not isinstance(js, dict):
        raise _bad("'response_format.json_schema' must be an object with 'name' and 'schema'.", "response_format.json_schema")
    extra = sorted(set(js) - {"name", "schema", "strict", "description"})
    if extra:
        raise _bad(f"'response_format.json_schema' has unknown field(s) {', '.join(map(repr, extra))}.", f"response_format.json_schema.{extra[0]}")
    if not isinstance(js.get("name"), str) or not _NAME.fullmatch(js["name"]):
        raise _bad("'response_format.json_schema.name' must be 1 to 64 letters, digits, '_' or '-'.", "response_format.json_schema.name")
    if js.get("strict") is not None and not isinstance(js["strict"], bool):
        raise _bad("'response_format.json_schema.strict' must be a boolean.", "response_format.json_schema.strict")
    if js.get("description") is not None and not isinstance(js["description"], str):
        raise _bad("'response_format.json_schema.description' must be a string.", "response_format.json_schema.description")
    return _grammar(js.get("schema", {"type": "object"}), "response_format.json_schema.schema")


def _tools(v: Any) -> list[dict]:
    if not isinstance(v, list) or len(v) > MAX_TOOLS:
        raise _bad(f"'tools' must be a list of up to {MAX_TOOLS} tools.", "tools")
    names = set()
    for i, t in enumerate(v):
        p = f"tools.{i}"
        if not isinstance(t, dict) or t.get("type") != "function" or set(t) - {"type", "function"} or not isinstance(t.get("function"), dict):
            raise _bad(f"tools[{i}] must be {{'type': 'function', 'function': {{'name', 'description', 'parameters', 'strict'}}}}.", p)
        f = t["function"]
        extra = sorted(set(f) - {"name", "description", "parameters", "strict"})
        if extra:
            raise _bad(f"tools[{i}].function has unknown field(s) {', '.join(map(repr, extra))}.", f"{p}.function.{extra[0]}")
        if not isinstance(f.get("name"), str) or not _NAME.fullmatch(f["name"]):
            raise _bad(f"tools[{i}].function.name must be 1 to 64 letters, digits, '_' or '-'.", f"{p}.function.name")
        if f["name"] in names:
            raise _bad(f"tools[{i}].function.name {f['name']!r} is given twice.", f"{p}.function.name")
        names.add(f["name"])
        if f.get("description") is not None and not isinstance(f["description"], str):
            raise _bad(f"tools[{i}].function.description must be a string.", f"{p}.function.description")
        if f.get("strict") is not None and not isinstance(f["strict"], bool):
            raise _bad(f"tools[{i}].function.strict must be a boolean.", f"{p}.function.strict")
        if f.get("parameters") is not None:
            _grammar(f["parameters"], f"{p}.function.parameters")
    return v


def _params(f: dict) -> Any:
    return f.get("parameters") or {"type": "object", "properties": {}}


def parse_structured(body: dict, chat: bool, parallel: bool, auto: ToolParser | None = None) -> Structured:
    """The structured-output fields of a request body (400s name the field).

    Args:
        body: the request (a dict; its other fields are checked elsewhere).
        chat: a chat request (`tools` / `tool_choice` are chat's).
        parallel: `parallel_tool_calls` (false: at most one call).
        auto: the server's tool-call parser (`--tool-call-parser`); None: `"auto"` is refused.
    """
    grammar = _response_format(body.get("response_format"))
    if not chat:
        return Structured(grammar)
    tools = _tools(body["tools"]) if body.get("tools") is not None else []
    tc = body.get("tool_choice")
    if tc is None:
        tc = "auto" if tools else "none"
    if tc == "none":
        return Structured(grammar, tools or None)
    if not tools:
        raise _bad(f"'tool_choice' {tc!r} needs 'tools'.", "tool_choice")
    if grammar is not None:
        raise _bad("'response_format' and a 'tool_choice' that calls a tool both set the output's form: give one.", "response_format")
    if tc == "auto" and auto is not None:
        return Structured(None, tools, ToolChoice.AUTO, parser=auto, parallel=parallel)
    if tc == "auto":
        raise _bad(
            "'tool_choice' \"auto\" (the default with 'tools') needs a parser of this model's own tool-call format, which this server does not have "
            '(start it with --enable-auto-tool-choice --tool-call-parser NAME, as vLLM): send "required", a named function, or "none".',
            "tool_choice",
        )
    fs = [t["function"] for t in tools]
    if tc == "required":
        calls = [
            {
                "type": "object",
                "properties": {"name": {"const": f["name"]}, "parameters": _params(f)},
                "required": ["name", "parameters"],
                "additionalProperties": False,
            }
            for f in fs
        ]
        array = {"type": "array", "minItems": 1, "items": {"anyOf": calls}, **({} if parallel else {"maxItems": 1})}
        return Structured(_grammar(array, "tools"), tools, ToolChoice.REQUIRED)
    if not (isinstance(tc, dict) and tc.get("type") == "function" and isinstance(tc.get("function"), dict) and isinstance(tc["function"].get("name"), str)):
        raise _bad("'tool_choice' must be \"none\", \"auto\", \"required\" or {'type': 'function', 'function': {'name': ...}}.", "tool_choice")
    name = tc["function"]["name"]
    f = next((f for f in fs if f["name"] == name), None)
    if f is None:
        raise _bad(f"'tool_choice' names function {name!r}, which is not in 'tools'.", "tool_choice")
    return Structured(_grammar(_params(f), "tool_choice"), tools, ToolChoice.NAMED, name)


def auto_calls(text: str, s: Structured) -> tuple[str | None, list[dict]] | None:
    """(content, calls) of a finished free-text output (tool_choice "auto"), by the server's parser;
    `parallel_tool_calls: false` keeps the first call (as vLLM). None: no call in it."""
    assert s.parser is not None
    found = parse_tool_calls(text, s.parser)
    return None if found is None else (found[0], found[1][: None if s.parallel else 1])


def tool_calls(text: str, s: Structured) -> list[dict] | None:
    """OpenAI's `tool_calls` of a finished output held to `s`'s tool-call grammar; None when the
    text does not parse (cut by a stop string) or no tool was called."""
    if s.choice is ToolChoice.NONE:
        return None
    if s.choice is ToolChoice.AUTO:
        found = auto_calls(text, s)
        return None if found is None else found[1]
    try:
        value = json.loads(text)
    except ValueError:
        return None
    calls: list[tuple[str, Any]]
    if s.choice is ToolChoice.NAMED:
        assert s.function is not None  # parse_structured sets it with NAMED
        calls = [(s.function, value)]
    elif isinstance(value, list) and all(isinstance(c, dict) and set(c) == {"name", "parameters"} for c in value):
        calls = [(c["name"], c["parameters"]) for c in value]
    else:  # not the grammar's whole output (a stop string cut it)
        return None
    return [openai_tool_call(n, a) for n, a in calls]
