"""OpenAI request validation and error bodies.

Every problem with a request is an APIError that the server renders as
`{"error": {"message", "type", "param", "code"}}` with its HTTP status.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = ["APIError", "GenOptions", "MAX_STOP", "MAX_STOP_CHARS", "ROLES", "parse_chat", "parse_completion"]

MAX_STOP = 16  # stop strings per request
MAX_STOP_CHARS = 256  # characters per stop string: every new token's text is searched for each of them
ROLES = ("system", "developer", "user", "assistant", "tool")


class APIError(Exception):
    def __init__(
        self,
        status: int,
        message: str,
        *,
        type: str = "invalid_request_error",
        param: str | None = None,
        code: str | None = None,
        headers: dict[str, str] | None = None,
    ):
        super().__init__(message)
        self.status, self.message, self.type, self.param, self.code = status, message, type, param, code
        self.headers = headers or {}

    def body(self) -> dict:
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}


def bad(message: str, param: str | None = None) -> APIError:
    return APIError(400, message, param=param)


@dataclass(slots=True)
class GenOptions:
    """The fields completions and chat share."""

    model: str
    max_tokens: int | None
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    seed: int | None = None
    stop: list[str] = field(default_factory=list)
    stream: bool = False
    include_usage: bool = False
    ignore_eos: bool = False
    return_token_ids: bool = False


def _is_int(v: Any) -> bool:
    """An integer as JSON means it: 3 or 3.0 (JSON Schema's `integer`; some clients send floats)."""
    return (isinstance(v, int) and not isinstance(v, bool)) or (isinstance(v, float) and v.is_integer())


def _is_num(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _get(body: dict, key: str, kind: str, default: Any = None) -> Any:
    v = body.get(key, default)
    if v is None:
        return default
    ok = {"int": _is_int, "num": _is_num, "bool": lambda x: isinstance(x, bool), "str": lambda x: isinstance(x, str), "dict": lambda x: isinstance(x, dict)}[
        kind
    ](v)
    if not ok:
        name = {"int": "an integer", "num": "a number", "bool": "a boolean", "str": "a string", "dict": "an object"}[kind]
        raise bad(f"'{key}' must be {name}, got {type(v).__name__} {v!r}"[:300] + ".", key)
    return int(v) if kind == "int" else v


def _common(body: Any, max_tokens_keys: tuple[str, ...], default_max: int | None) -> GenOptions:
    if not isinstance(body, dict):
        raise bad("the request body must be a JSON object.")
    model = body.get("model")
    if model is None:
        raise bad("'model' is required.", "model")
    if not isinstance(model, str):
        raise bad("'model' must be a string.", "model")
    max_tokens = default_max
    for key in max_tokens_keys:
        if body.get(key) is not None:
            max_tokens = _get(body, key, "int")
            if max_tokens < 1:
                raise bad(f"'{key}' must be at least 1, got {max_tokens}.", key)
    temperature = float(_get(body, "temperature", "num", 1.0))
    if not 0 <= temperature <= 2:
        raise bad(f"'temperature' must be between 0 and 2, got {temperature}.", "temperature")
    top_p = float(_get(body, "top_p", "num", 1.0))
    if not 0 < top_p <= 1:
        raise bad(f"'top_p' must be in (0, 1], got {top_p}.", "top_p")
    top_k = _get(body, "top_k", "int", 0)
    if not -1 <= top_k < 2**31:
        raise bad(f"'top_k' must be -1 or 0 (off) or from 1 to 2^31 - 1, got {top_k}."[:300], "top_k")
    seed = _get(body, "seed", "int")
    if seed is not None and not -(2**63) <= seed < 2**63:
        raise bad(f"'seed' must fit in 64 bits, got {seed}."[:300], "seed")
    stop = body.get("stop")
    if stop is None:
        stop = []
    elif isinstance(stop, str):
        stop = [stop]
    if not isinstance(stop, list) or len(stop) > MAX_STOP or not all(isinstance(s, str) and 0 < len(s) <= MAX_STOP_CHARS for s in stop):
        raise bad(f"'stop' must be a string or a list of up to {MAX_STOP} strings, each of 1 to {MAX_STOP_CHARS} characters.", "stop")
    stream = _get(body, "stream", "bool", False)
    so = _get(body, "stream_options", "dict")
    if so is not None and not stream:
        raise bad("'stream_options' is only allowed when 'stream' is true.", "stream_options")
    include_usage = bool(_get(so or {}, "include_usage", "bool", False))
    n = _get(body, "n", "int", 1)
    if n != 1:
        raise bad(f"only n=1 is supported, got n={n}.", "n")
    if _get(body, "best_of", "int", 1) != 1:
        raise bad("only best_of=1 is supported.", "best_of")
    for key in ("presence_penalty", "frequency_penalty"):
        if _get(body, key, "num", 0) != 0:
            raise bad(f"'{key}' is not supported by this server (only 0).", key)
    if body.get("logprobs") is not None and body.get("logprobs") is not False:  # 0 == False: not a boolean
        raise bad("'logprobs' is not supported by this server.", "logprobs")
    return GenOptions(
        model=model,
        max_tokens=max_tokens,
        temperature=temperature,
        top_p=top_p,
        top_k=max(0, top_k),
        seed=seed,
        stop=stop,
        stream=stream,
        include_usage=include_usage,
        ignore_eos=_get(body, "ignore_eos", "bool", False),
        return_token_ids=_get(body, "return_token_ids", "bool", False),
    )


def parse_completion(body: Any) -> tuple[GenOptions, str | list[int]]:
    """(options, prompt): prompt is text or token ids."""
    opts = _common(body, ("max_tokens",), 16)
    if "prompt" not in body or body["prompt"] is None:
        raise bad("'prompt' is required.", "prompt")
    p = body["prompt"]
    if isinstance(p, list) and len(p) == 1 and isinstance(p[0], (str, list)):
        p = p[0]  # a batch of one
    if isinstance(p, str):
        prompt: str | list[int] = p
    elif isinstance(p, list) and p and all(_is_int(t) and t >= 0 for t in p):
        prompt = [int(t) for t in p]
    else:
        raise bad("'prompt' must be a string or a non-empty list of token ids (batches of several prompts are not supported).", "prompt")
    if _get(body, "echo", "bool", False):
        raise bad("'echo' is not supported by this server.", "echo")
    if body.get("suffix") is not None:
        raise bad("'suffix' is not supported by this server.", "suffix")
    return opts, prompt


def parse_chat(body: Any) -> tuple[GenOptions, list[dict]]:
    """(options, messages as [{role, content: str}])."""
    opts = _common(body, ("max_completion_tokens", "max_tokens"), None)
    msgs = body.get("messages")
    if msgs is None:
        raise bad("'messages' is required.", "messages")
    if not isinstance(msgs, list) or not msgs:
        raise bad("'messages' must be a non-empty list.", "messages")
    out = []
    for i, m in enumerate(msgs):
        if not isinstance(m, dict) or not isinstance(m.get("role"), str):
            raise bad(f"messages[{i}] must be an object with a string 'role'.", f"messages.{i}")
        if m["role"] not in ROLES:
            raise bad(f"messages[{i}].role {m['role']!r} is not one of {', '.join(ROLES)}.", f"messages.{i}.role")
        c = m.get("content")
        if isinstance(c, list):  # content parts: text only
            if not all(isinstance(p, dict) and p.get("type") == "text" and isinstance(p.get("text"), str) for p in c):
                raise bad(f"messages[{i}].content parts must be {{'type': 'text', 'text': ...}}; this model reads text only.", f"messages.{i}.content")
            c = "".join(p["text"] for p in c)
        elif c is None:
            c = ""
        elif not isinstance(c, str):
            raise bad(f"messages[{i}].content must be a string or a list of text parts.", f"messages.{i}.content")
        out.append({"role": m["role"], "content": c})
    if body.get("tools") not in (None, []):
        raise bad("'tools' are not supported by this server.", "tools")
    return opts, out
