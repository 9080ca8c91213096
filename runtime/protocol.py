"""OpenAI request validation and error bodies.

Every problem with a request is an APIError that the server renders as
`{"error": {"message", "type", "param", "code"}}` with its HTTP status.

Every field a request may carry is named here (COMPLETION_FIELDS, CHAT_FIELDS): a field outside
them is refused by name before anything else is checked, and a field OpenAI or vLLM defines that
this server does not implement yet (NOT_YET) is refused as such, unless it carries its neutral
value (null, or what leaves the output unchanged). Nothing a client sends is silently dropped.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any

from hetc.runtime.structured import Structured, parse_structured
from hetc.runtime.tool_parsers import ToolParser

__all__ = [
    "APIError",
    "CHAT_FIELDS",
    "COMPLETION_FIELDS",
    "GenOptions",
    "MAX_BIAS",
    "MAX_LOGPROBS",
    "MAX_N",
    "MAX_PROMPTS",
    "MAX_STOP",
    "MAX_STOP_CHARS",
    "MAX_REPETITION",
    "MAX_STOP_TOKEN_IDS",
    "MIN_REPETITION",
    "NOT_YET",
    "ROLES",
    "detokenize_body",
    "parse_chat",
    "parse_completion",
    "tokenize_body",
]

MAX_STOP = 16  # stop strings per request
MAX_STOP_CHARS = 256  # characters per stop string: every new token's text is searched for each of them
MAX_STOP_TOKEN_IDS = 64  # stop_token_ids per request
MAX_LOGPROBS = 20  # top log-probabilities per token (vLLM's default max_logprobs)
MAX_BIAS = 1024  # logit_bias entries per request
MIN_REPETITION, MAX_REPETITION = 0.01, 100.0  # repetition_penalty: a logit divided by 1e-300 is infinite
MAX_N = 16  # samples per prompt
MAX_PROMPTS = 16  # prompts in one completions request (each its own sequence; MAX_PROMPTS × MAX_N fits the default queue)
ROLES = ("system", "developer", "user", "assistant", "tool")

# fields both endpoints take (OpenAI's, and vLLM's sampling extensions this server implements)
_COMMON = frozenset(
    {
        "model",
        "max_tokens",
        "temperature",
        "top_p",
        "top_k",
        "seed",
        "stop",
        "stream",
        "stream_options",
        "n",
        "presence_penalty",
        "frequency_penalty",
        "repetition_penalty",
        "logit_bias",
        "min_tokens",
        "stop_token_ids",
        "ignore_eos",
        "return_token_ids",
        "user",
        "logprobs",
        "response_format",
    }
)
COMPLETION_FIELDS = _COMMON | {"prompt", "echo", "best_of"}
CHAT_FIELDS = _COMMON | {"messages", "max_completion_tokens", "top_logprobs", "parallel_tool_calls", "metadata", "store", "modalities", "tools", "tool_choice"}

# Fields OpenAI or vLLM define that this server does not implement yet → the value that changes
# nothing, which is accepted (besides null); any other value is refused by name.
NOT_YET: dict[str, Any] = {
    "tools": [],
    "tool_choice": "none",
    "functions": [],
    "function_call": "none",
    "suffix": "",
    "audio": None,
    "prediction": None,
    "reasoning_effort": None,
    "web_search_options": None,
    "service_tier": "auto",
    "min_p": 0,
    "length_penalty": 1,
    "use_beam_search": False,
    "include_stop_str_in_output": False,
    "skip_special_tokens": True,
    "spaces_between_special_tokens": True,
    "truncate_prompt_tokens": None,
    "allowed_token_ids": None,
    "bad_words": [],
    "prompt_logprobs": None,
    "guided_json": None,
    "guided_regex": None,
    "guided_choice": None,
    "guided_grammar": None,
    "guided_decoding_backend": None,
    "structured_outputs": None,
    "logits_processors": None,
    "return_tokens_as_token_ids": False,
    "priority": 0,
    "add_generation_prompt": True,
    "continue_final_message": False,
    "add_special_tokens": None,
    "chat_template": None,
    "chat_template_kwargs": None,
    "documents": None,
    "mm_processor_kwargs": None,
    "prompt_embeds": None,
    "cache_salt": None,
    "kv_transfer_params": None,
    "vllm_xargs": None,
    "request_id": None,
}


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
    """The fields completions and chat share, checked."""

    model: str
    max_tokens: int | None
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    seed: int | None = None
    stop: list[str] = field(default_factory=list)
    stream: bool = False
    include_usage: bool = False
    continuous_usage: bool = False  # vLLM's stream_options.continuous_usage_stats: usage so far in every chunk
    ignore_eos: bool = False
    return_token_ids: bool = False
    n: int = 1
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    repetition_penalty: float = 1.0
    logit_bias: dict[int, float] = field(default_factory=dict)
    min_tokens: int = 0
    stop_token_ids: list[int] = field(default_factory=list)
    logprobs: int | None = None  # top log-probabilities per generated token (None: no log-probabilities)
    echo: bool = False  # completions: the prompt first in the text (and, with logprobs, its log-probabilities)
    user: str | None = None  # the end user's id (OpenAI's abuse monitoring): accepted, not used
    structured: Structured = field(default_factory=Structured)  # response_format / tools: the output's grammar


def _is_int(v: Any) -> bool:
    """An integer as JSON means it: 3 or 3.0 (JSON Schema's `integer`; some clients send floats)."""
    return (isinstance(v, int) and not isinstance(v, bool)) or (isinstance(v, float) and v.is_integer())


def _is_num(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


_KINDS = {
    "int": (_is_int, "an integer"),
    "num": (_is_num, "a finite number"),
    "bool": (lambda x: isinstance(x, bool), "a boolean"),
    "str": (lambda x: isinstance(x, str), "a string"),
    "dict": (lambda x: isinstance(x, dict), "an object"),
}


def _get(body: dict, key: str, kind: str, default: Any = None) -> Any:
    v = body.get(key, default)
    if v is None:
        return default
    ok, name = _KINDS[kind]
    if not ok(v):
        raise bad(f"'{key}' must be {name}, got {type(v).__name__} {v!r}"[:300] + ".", key)
    return int(v) if kind == "int" else v


def _ranged(body: dict, key: str, kind: str, default: Any, lo: float, hi: float, what: str) -> Any:
    v = _get(body, key, kind, default)
    if not lo <= v <= hi:
        raise bad(f"'{key}' must be {what}, got {v}."[:300], key)
    return v


def _check_fields(body: dict, allowed: frozenset[str], endpoint: str) -> None:
    """Refuse, by name, fields this endpoint does not know and fields it does not implement yet."""
    unknown = sorted(k for k in body if k not in allowed and k not in NOT_YET)
    if unknown:
        names = ", ".join(repr(k) for k in unknown)
        raise bad(f"unknown field{'s' if len(unknown) > 1 else ''} {names} for {endpoint}; see docs/serving.md (request fields)."[:400], unknown[0])
    for key in sorted(k for k in body if k in NOT_YET and k not in allowed):
        v = body[key]
        if v is not None and v != NOT_YET[key]:
            neutral = "" if NOT_YET[key] is None else f" (only {NOT_YET[key]!r} or null is accepted)"
            raise bad(f"'{key}' is not supported by this server yet{neutral}.", key)


def _ids(v: Any, key: str, most: int) -> list[int]:
    if not isinstance(v, list) or len(v) > most or not all(_is_int(t) and 0 <= t < 2**31 for t in v):
        raise bad(f"'{key}' must be a list of up to {most} token ids (non-negative integers).", key)
    return [int(t) for t in v]


def _repetition(body: dict) -> float:
    r = float(_get(body, "repetition_penalty", "num", 1.0))
    if not MIN_REPETITION <= r <= MAX_REPETITION:
        raise bad(f"'repetition_penalty' must be from {MIN_REPETITION} to {MAX_REPETITION} (1: off), got {r}."[:300], "repetition_penalty")
    return r


def _common(
    body: Any, fields: frozenset[str], endpoint: str, max_tokens_keys: tuple[str, ...], default_max: int | None, least_max: int, auto: ToolParser | None = None
) -> GenOptions:
    if not isinstance(body, dict):
        raise bad("the request body must be a JSON object.")
    _check_fields(body, fields, endpoint)
    model = body.get("model")
    if model is None:
        raise bad("'model' is required.", "model")
    if not isinstance(model, str):
        raise bad("'model' must be a string.", "model")
    max_tokens = default_max
    for key in max_tokens_keys:
        if body.get(key) is not None:
            max_tokens = _get(body, key, "int")
            if max_tokens < least_max:
                echo = " (0 only with 'echo')" if least_max == 1 and "echo" in fields else ""
                raise bad(f"'{key}' must be at least {least_max}, got {max_tokens}{echo}.", key)
    temperature = float(_ranged(body, "temperature", "num", 1.0, 0, 2, "between 0 and 2"))
    top_p = float(_get(body, "top_p", "num", 1.0))
    if not 0 < top_p <= 1:
        raise bad(f"'top_p' must be in (0, 1], got {top_p}.", "top_p")
    top_k = _ranged(body, "top_k", "int", 0, -1, 2**31 - 1, "-1 or 0 (off) or from 1 to 2^31 - 1")
    seed = _ranged(body, "seed", "int", None, -(2**63), 2**63 - 1, "within 64 bits") if body.get("seed") is not None else None
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
    if so is not None and set(so) - {"include_usage", "continuous_usage_stats"}:
        raise bad(f"unknown field(s) {sorted(set(so) - {'include_usage', 'continuous_usage_stats'})} in 'stream_options'."[:300], "stream_options")
    include_usage = bool(_get(so or {}, "include_usage", "bool", False))
    continuous_usage = include_usage and bool(_get(so or {}, "continuous_usage_stats", "bool", False))  # vLLM: both asked
    bias = _get(body, "logit_bias", "dict", {})
    if len(bias) > MAX_BIAS:
        raise bad(f"'logit_bias' may hold up to {MAX_BIAS} tokens, got {len(bias)}.", "logit_bias")
    logit_bias: dict[int, float] = {}
    for k, v in bias.items():
        if not (isinstance(k, str) and k.isdigit() and int(k) < 2**31) or not _is_num(v) or not -100 <= v <= 100:
            raise bad(f"'logit_bias' maps token ids (as strings) to numbers from -100 to 100; got {k!r}: {v!r}."[:300], "logit_bias")
        logit_bias[int(k)] = float(v)
    min_tokens = _ranged(body, "min_tokens", "int", 0, 0, 2**31 - 1, "≥ 0")
    if max_tokens is not None and min_tokens > max_tokens:
        raise bad(f"'min_tokens' ({min_tokens}) must not exceed 'max_tokens' ({max_tokens}).", "min_tokens")
    user = _get(body, "user", "str")
    ignore_eos = _get(body, "ignore_eos", "bool", False)
    parallel = _get(body, "parallel_tool_calls", "bool", True) if "parallel_tool_calls" in fields else True
    structured = parse_structured(body, "messages" in fields, parallel, auto)
    if ignore_eos and structured.grammar is not None:
        raise bad("'ignore_eos' cannot go with a constrained output ('response_format' or a tool call): the grammar ends it with EOS.", "ignore_eos")
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
        continuous_usage=continuous_usage,
        ignore_eos=ignore_eos,
        return_token_ids=_get(body, "return_token_ids", "bool", False),
        n=_ranged(body, "n", "int", 1, 1, MAX_N, f"from 1 to {MAX_N}"),
        presence_penalty=float(_ranged(body, "presence_penalty", "num", 0.0, -2, 2, "between -2 and 2")),
        frequency_penalty=float(_ranged(body, "frequency_penalty", "num", 0.0, -2, 2, "between -2 and 2")),
        repetition_penalty=_repetition(body),
        logit_bias=logit_bias,
        min_tokens=min_tokens,
        stop_token_ids=[] if body.get("stop_token_ids") is None else _ids(body["stop_token_ids"], "stop_token_ids", MAX_STOP_TOKEN_IDS),
        user=user,
        structured=structured,
    )


def parse_completion(body: Any) -> tuple[GenOptions, list[str | list[int]]]:
    """(options, prompts): each prompt is text or token ids; a list of them is one sequence each."""
    echo = isinstance(body, dict) and _get(body, "echo", "bool", False)
    opts = _common(body, COMPLETION_FIELDS, "/v1/completions", ("max_tokens",), 16, 0 if echo else 1)
    opts.echo = echo
    lp = _get(body, "logprobs", "int")  # an integer here: a boolean is refused (0 == False)
    if lp is not None:
        if not 0 <= lp <= MAX_LOGPROBS:
            raise bad(f"'logprobs' must be from 0 to {MAX_LOGPROBS}, got {lp}.", "logprobs")
        opts.logprobs = lp
    best_of = _get(body, "best_of", "int")
    if best_of is not None and best_of != opts.n:
        raise bad(f"'best_of' other than n ({best_of} vs n={opts.n}) is not supported by this server yet.", "best_of")
    if "prompt" not in body or body["prompt"] is None:
        raise bad("'prompt' is required.", "prompt")
    p = body["prompt"]
    batch = p if isinstance(p, list) and p and all(isinstance(x, (str, list)) for x in p) else [p]
    prompts: list[str | list[int]] = []
    for x in batch:
        if isinstance(x, str):
            prompts.append(x)
        elif isinstance(x, list) and x and all(_is_int(t) and t >= 0 for t in x):
            prompts.append([int(t) for t in x])
        else:
            raise bad("'prompt' must be a string, a non-empty list of token ids, or a list of either.", "prompt")
    if len(prompts) > MAX_PROMPTS:
        raise bad(f"'prompt' may list up to {MAX_PROMPTS} prompts, got {len(prompts)}.", "prompt")
    return opts, prompts


def parse_chat(body: Any, auto: ToolParser | None = None) -> tuple[GenOptions, list[dict]]:
    """(options, messages as [{role, content: str}, and name, tool_calls (arguments as objects, as
    chat templates read them), tool_call_id where given]); `auto`: the server's tool-call parser."""
    opts = _common(body, CHAT_FIELDS, "/v1/chat/completions", ("max_completion_tokens", "max_tokens"), None, 1, auto)
    if _get(body, "logprobs", "bool", False):
        opts.logprobs = _ranged(body, "top_logprobs", "int", 0, 0, MAX_LOGPROBS, f"from 0 to {MAX_LOGPROBS}")
    elif body.get("top_logprobs") is not None:
        raise bad("'top_logprobs' needs 'logprobs': true.", "top_logprobs")
    if _get(body, "store", "bool", False):
        raise bad("'store': true is not supported by this server (it keeps no completions).", "store")
    _get(body, "metadata", "dict")  # OpenAI's tags for stored completions; stored nowhere here
    modalities = body.get("modalities")
    if modalities is not None and modalities != ["text"]:
        raise bad("'modalities' must be ['text']: this model writes text only.", "modalities")
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
        extra = sorted(set(m) - {"role", "content", *_MESSAGE_FIELDS.get(m["role"], ()), "name"})
        if extra:
            raise bad(f"messages[{i}] ({m['role']}) has field(s) {', '.join(map(repr, extra))} this server does not support."[:300], f"messages.{i}.{extra[0]}")
        c = m.get("content")
        if isinstance(c, list):  # content parts: text only
            if not all(isinstance(p, dict) and set(p) == {"type", "text"} and p["type"] == "text" and isinstance(p["text"], str) for p in c):
                raise bad(f"messages[{i}].content parts must be {{'type': 'text', 'text': ...}}; this model reads text only.", f"messages.{i}.content")
            c = "".join(p["text"] for p in c)
        elif c is None:
            c = ""
        elif not isinstance(c, str):
            raise bad(f"messages[{i}].content must be a string or a list of text parts.", f"messages.{i}.content")
        out.append({"role": m["role"], "content": c, **_message_extras(m, i)})
    return opts, out


_MESSAGE_FIELDS = {"assistant": ("tool_calls",), "tool": ("tool_call_id",)}  # beside role, content and name


def _message_extras(m: dict, i: int) -> dict:
    """A message's name, tool_calls and tool_call_id, checked; tool calls' arguments as objects."""
    out: dict[str, Any] = {}
    for key in ("name", "tool_call_id"):
        if m.get(key) is not None:
            if not isinstance(m[key], str):
                raise bad(f"messages[{i}].{key} must be a string.", f"messages.{i}.{key}")
            out[key] = m[key]
    calls = m.get("tool_calls")
    if calls is not None:
        if not isinstance(calls, list):
            raise bad(f"messages[{i}].tool_calls must be a list.", f"messages.{i}.tool_calls")
        out["tool_calls"] = [_tool_call(c, f"messages.{i}.tool_calls.{j}") for j, c in enumerate(calls)]
    return out


def _tool_call(c: Any, param: str) -> dict:
    """An assistant message's tool call as chat templates read it: arguments that are JSON as the
    object they hold (vLLM does the same), other arguments as given."""
    f = c.get("function") if isinstance(c, dict) else None
    if not (
        isinstance(c, dict)
        and isinstance(f, dict)
        and not set(c) - {"id", "type", "function"}
        and not set(f) - {"name", "arguments"}
        and isinstance(f.get("name"), str)
        and isinstance(f.get("arguments"), str)
        and c.get("type", "function") == "function"
        and isinstance(c.get("id", ""), (str, type(None)))
    ):
        raise bad(f"{param} must be {{'id', 'type': 'function', 'function': {{'name', 'arguments': a string}}}}.", param)
    try:
        args = json.loads(f["arguments"])
    except ValueError:
        args = f["arguments"]
    return {"id": c.get("id"), "type": "function", "function": {"name": f["name"], "arguments": args}}


def tokenize_body(body: Any, tokenizer: Any) -> list[int]:
    """vLLM's /tokenize: {prompt, add_special_tokens (default true)} or {messages,
    add_generation_prompt (default true)}, each with optional model and return_token_strs."""
    from hetc.runtime.tokenizer import apply_chat

    if not isinstance(body, dict):
        raise bad("the request body must be a JSON object.")
    chat = "messages" in body
    fields = {"model", "return_token_strs", *(("messages", "add_generation_prompt") if chat else ("prompt", "add_special_tokens"))}
    unknown = sorted(set(body) - fields)
    if unknown:
        raise bad(f"unknown field(s) {', '.join(map(repr, unknown))} for /tokenize (takes {', '.join(sorted(fields))})."[:400], unknown[0])
    _get(body, "return_token_strs", "bool")
    if body.get("model") is not None:
        _get(body, "model", "str")
    if chat:
        _, messages = parse_chat({"model": "", "messages": body["messages"]})
        return apply_chat(tokenizer, messages, _get(body, "add_generation_prompt", "bool", True))
    prompt = body.get("prompt")
    if not isinstance(prompt, str):
        raise bad("'prompt' (a string) or 'messages' is required.", "prompt")
    return tokenizer.encode(prompt, add_special_tokens=_get(body, "add_special_tokens", "bool", True))


def detokenize_body(body: Any, vocab: int | None) -> list[int]:
    """vLLM's /detokenize: {tokens, model (optional)} → the ids, checked."""
    if not isinstance(body, dict):
        raise bad("the request body must be a JSON object.")
    unknown = sorted(set(body) - {"model", "tokens"})
    if unknown:
        raise bad(f"unknown field(s) {', '.join(map(repr, unknown))} for /detokenize (takes model, tokens)."[:400], unknown[0])
    if body.get("model") is not None:
        _get(body, "model", "str")
    ids = _ids(body.get("tokens"), "tokens", 1 << 20)
    if vocab and any(t >= vocab for t in ids):
        raise bad(f"'tokens' holds ids outside the vocabulary (size {vocab}).", "tokens")
    return ids
