"""Tool calls in a model's own free text — chat's `tool_choice: "auto"` (`hetc serve
--enable-auto-tool-choice --tool-call-parser NAME`, vLLM's flags and parser names).

The model writes what its chat template taught it; a parser finds the calls in that text:

- `hermes` (Hermes 2/3, Qwen2.5, Qwen3 and others whose template says so): each call a JSON
  object `{"name", "arguments"}` between `<tool_call>` and `</tool_call>`; the text before the
  first one is the message's content.
- `llama3_json` (Llama 3.1–3.3's JSON tool calling): the whole output is one or more JSON objects
  `{"name", "parameters"}` (or `"arguments"`), separated by `;`, optionally after `<|python_tag|>`.

Text that does not parse as calls is returned as content, unchanged. Streaming: text is sent as
it comes until a call may start (`ToolStream`); from there it is held and sent, once whole, as
`tool_calls` (or as content, if it was not a call after all).
"""

from __future__ import annotations

import enum
import json
import re
import uuid
from dataclasses import dataclass, field
from typing import Any

__all__ = ["ToolParser", "ToolStream", "openai_tool_call", "parse_tool_calls"]


class ToolParser(enum.Enum):
    HERMES = "hermes"
    LLAMA3_JSON = "llama3_json"


_HERMES_CALL = re.compile(r"<tool_call>\s*(.*?)\s*</tool_call>", re.DOTALL)
_HERMES_START = "<tool_call>"
_PYTHON_TAG = "<|python_tag|>"


def openai_tool_call(name: str, args: Any) -> dict:
    """One call in OpenAI's `tool_calls` shape (a fresh id; the arguments as JSON text)."""
    return {"id": f"chatcmpl-tool-{uuid.uuid4().hex[:24]}", "type": "function", "function": {"name": name, "arguments": json.dumps(args, ensure_ascii=False)}}


def _call(name: object, args: object) -> dict | None:
    return openai_tool_call(name, args) if isinstance(name, str) and isinstance(args, dict) else None


def _hermes(text: str) -> tuple[str | None, list[dict]] | None:
    start = text.find(_HERMES_START)
    if start < 0:
        return None
    calls = []
    for body in _HERMES_CALL.findall(text[start:]):
        try:
            obj = json.loads(body)
        except ValueError:
            return None
        c = _call(obj.get("name"), obj.get("arguments", {})) if isinstance(obj, dict) else None
        if c is None:
            return None
        calls.append(c)
    if not calls or _HERMES_CALL.sub("", text[start:]).strip():  # an unclosed or stray block: not calls
        return None
    return text[:start].strip() or None, calls


def _llama3_json(text: str) -> tuple[str | None, list[dict]] | None:
    body = text.strip().removeprefix(_PYTHON_TAG).strip()
    if not body.startswith("{"):
        return None
    dec, calls, i = json.JSONDecoder(), [], 0
    while i < len(body):
        try:
            obj, i = dec.raw_decode(body, i)
        except ValueError:
            return None
        c = _call(obj.get("name"), obj.get("parameters", obj.get("arguments"))) if isinstance(obj, dict) else None
        if c is None:
            return None
        calls.append(c)
        rest = body[i:].lstrip()
        if rest and not rest.startswith(";"):
            return None
        i = len(body) - len(rest[1:].lstrip()) if rest else len(body)
    return None, calls


def parse_tool_calls(text: str, parser: ToolParser) -> tuple[str | None, list[dict]] | None:
    """(content, OpenAI `tool_calls`) of a finished output; None where it holds no call (all content)."""
    return _hermes(text) if parser is ToolParser.HERMES else _llama3_json(text)


@dataclass(slots=True)
class ToolStream:
    """One streamed choice's text split into what can go out now and what may be a call."""

    parser: ToolParser
    text: str = ""  # everything so far
    sent: int = 0  # characters of `text` already sent as content
    held: bool = field(default=False)  # a call may have started at `sent`: hold the rest

    def feed(self, delta: str) -> str:
        """The content that can be sent now, after `delta`."""
        self.text += delta
        if self.held:
            return ""
        if self.parser is ToolParser.LLAMA3_JSON:  # a call is the whole output: decided by its first character
            head = self.text.lstrip()
            if not head or _PYTHON_TAG.startswith(head) or head.startswith(("{", _PYTHON_TAG)):
                self.held = bool(head)
                return ""
            out, self.sent = self.text[self.sent :], len(self.text)
            return out
        start = self.text.find(_HERMES_START, self.sent)
        if start >= 0:
            self.held = True
            cut = start
        else:  # keep back a tail that may be the start of a marker
            cut = len(self.text)
            for k in range(min(len(_HERMES_START) - 1, len(self.text) - self.sent), 0, -1):
                if _HERMES_START.startswith(self.text[-k:]):
                    cut = len(self.text) - k
                    break
        out, self.sent = self.text[self.sent : cut], cut
        return out

    def finish(self, parse: bool, parallel: bool = True) -> tuple[str, list[dict] | None]:
        """(content not yet sent, the calls) at the end; `parse` false (cut by length or a stop
        string): everything held goes out as content. `parallel` false keeps the first call."""
        rest = self.text[self.sent :]
        found = parse_tool_calls(self.text, self.parser) if parse and self.held else None
        if found is None:
            return rest, None
        return "", found[1][: None if parallel else 1]
