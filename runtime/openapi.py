"""The OpenAPI document of the OpenAI subset `hetc serve` implements (GET /openapi.json).

protocol.py parses requests (its own messages, and the body-size limit before any parsing);
this document describes the same requests and responses as JSON Schema, for clients and for
schema fuzzing (tests/integration_tests/test_serve_schema.py). Every bound that protocol.py
checks structurally (types, ranges, stop strings, n) is stated as it is checked. A prompt's
real limit is in tokens — prompt + max_tokens within the context — which JSON Schema cannot
state, so the document's lengths for prompts and messages are ones whose tokens always fit
(each character is at most 4 UTF-8 bytes and a token covers at least one byte); longer ones
are accepted while their tokens fit, as each description says.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from hetc.runtime.protocol import (
    MAX_BIAS,
    MAX_LOGPROBS,
    MAX_N,
    MAX_PROMPTS,
    MAX_STOP,
    MAX_REPETITION,
    MAX_STOP_CHARS,
    MAX_STOP_TOKEN_IDS,
    MIN_REPETITION,
    ROLES,
)
from hetc.runtime.structured import MAX_TOOLS, NAME_PATTERN

__all__ = ["FITS", "OpenAPILimits", "openapi_document"]

DESCRIPTION = (
    "The OpenAI API subset hetc serves. Errors are OpenAI's error JSON. Prompt and message lengths here "
    "are ones whose tokens always fit the context; longer ones are accepted while prompt + max_tokens fit."
)
BYTES_PER_CHAR = 4  # UTF-8's widest character
MAX_MESSAGES = 4  # messages the document describes a fitting chat of (the server takes more while they fit)


@dataclass(kw_only=True, slots=True)
class OpenAPILimits:
    """What the document's bounds come from (the serving process's own figures)."""

    model_name: str
    max_model_len: int  # prompt + completion tokens
    vocab_size: int
    chat_overhead: int  # tokens the chat template adds for one empty message, generation prompt included
    api_key: bool  # requests need `Authorization: Bearer <key>`
    prompt_logprobs: bool = True  # echo with logprobs is served (eager stages)
    auto_tool_choice: bool = False  # tool_choice "auto" is served (--enable-auto-tool-choice)

    def __post_init__(self) -> None:
        if self.max_model_len < 8:
            raise ValueError(f"max_model_len must be at least 8 tokens, got {self.max_model_len}")

    @property
    def max_tokens(self) -> int:
        """The largest max_tokens the document describes: a quarter of the context leaves the rest
        to prompts."""
        return max(1, self.max_model_len // 4)

    @property
    def prompt_tokens(self) -> int:
        """Prompt tokens that always fit beside max_tokens (one spare for a tokenizer's BOS)."""
        return self.max_model_len - self.max_tokens - 1


def _nullable(schema: dict) -> dict:
    return {"anyOf": [schema, {"type": "null"}]}


def _ref(name: str) -> dict:
    return {"$ref": f"#/components/schemas/{name}"}


FITS = "a bound that always holds"  # what every description of such a bound starts with


def _fits(schema: dict, larger: str = "larger ones are accepted while prompt + max_tokens fit the context") -> dict:
    """`schema`'s maxLength, maxItems or maximum only promises a fit (FITS); the real limit (in
    tokens, or against another field) is `larger`."""
    return {**schema, "description": f"{FITS}; {larger}"}


def _int_below(n: int) -> str:
    """A regex of the decimal integers 0 .. n-1 (no leading zeros): token ids as JSON object keys."""
    m = str(n - 1)
    if len(m) == 1:
        return f"^[0-{m}]$"
    alts = ["0", f"[1-9][0-9]{{0,{len(m) - 2}}}"]  # fewer digits
    for i, c in enumerate(m):  # as many digits: the first i as n-1's, the next smaller
        lo, hi = (1 if i == 0 else 0), int(c) - 1
        if hi >= lo:
            alts.append(f"{m[:i]}[{lo}-{hi}][0-9]{{{len(m) - i - 1}}}")
    alts.append(m)
    return "^(" + "|".join(alts) + ")$"


def _token_id(lim: OpenAPILimits) -> dict:
    return {"type": "integer", "minimum": 0, "maximum": lim.vocab_size - 1}


def _sampling(lim: OpenAPILimits) -> dict:
    """The fields completions and chat share (protocol._common)."""
    stop_one = {"type": "string", "minLength": 1, "maxLength": MAX_STOP_CHARS}
    return {
        "model": {"type": "string", "enum": [lim.model_name], "description": "the served model's name"},
        "max_tokens": _nullable(_fits({"type": "integer", "minimum": 1, "maximum": lim.max_tokens})),
        "temperature": _nullable({"type": "number", "minimum": 0, "maximum": 2}),
        "top_p": _nullable({"type": "number", "exclusiveMinimum": 0, "maximum": 1}),
        "top_k": {**_nullable({"type": "integer", "minimum": -1, "maximum": 2**31 - 1}), "description": "-1 or 0: off"},
        "seed": _nullable({"type": "integer", "minimum": -(2**63), "maximum": 2**63 - 1}),
        "stop": _nullable({"anyOf": [stop_one, {"type": "array", "items": stop_one, "maxItems": MAX_STOP}]}),
        "stream": _nullable({"type": "boolean"}),
        "stream_options": {**_nullable(_ref("StreamOptions")), "description": "only with stream: true"},
        "n": _nullable({"type": "integer", "minimum": 1, "maximum": MAX_N}),
        "presence_penalty": _nullable({"type": "number", "minimum": -2, "maximum": 2}),
        "frequency_penalty": _nullable({"type": "number", "minimum": -2, "maximum": 2}),
        "repetition_penalty": {**_nullable({"type": "number", "minimum": MIN_REPETITION, "maximum": MAX_REPETITION}), "description": "vLLM's; 1: off"},
        "logit_bias": _nullable(
            {
                "type": "object",
                "maxProperties": MAX_BIAS,
                "propertyNames": {"pattern": _int_below(lim.vocab_size)},
                "additionalProperties": {"type": "number", "minimum": -100, "maximum": 100},
            }
        ),
        "min_tokens": _nullable(_fits({"type": "integer", "minimum": 0, "maximum": 0}, "larger ones are accepted up to max_tokens")),
        "stop_token_ids": _nullable({"type": "array", "maxItems": MAX_STOP_TOKEN_IDS, "items": _token_id(lim)}),
        "user": _nullable({"type": "string"}),
        "ignore_eos": _nullable({"type": "boolean"}),
        "return_token_ids": _nullable({"type": "boolean"}),
    }


def _json_schema() -> dict:
    """A JSON Schema an output is held to: the document describes one of a `type`, which always
    compiles; the server takes any JSON Schema llguidance supports."""
    kinds = ["object", "array", "string", "integer", "number", "boolean", "null"]
    return _fits(
        {"type": "object", "additionalProperties": False, "properties": {"type": {"enum": kinds}}},
        "any JSON Schema object llguidance supports is accepted (an unsupported one gets a 400 naming it)",
    )


def _response_format() -> dict:
    """`response_format` (structured.py): text, json_object, or json_schema."""
    plain = {"type": "object", "additionalProperties": False, "required": ["type"], "properties": {"type": {"enum": ["text", "json_object"]}}}
    spec = {
        "type": "object",
        "additionalProperties": False,
        "required": ["name"],
        "properties": {
            "name": {"type": "string", "pattern": NAME_PATTERN},
            "schema": _json_schema(),
            "strict": _nullable({"type": "boolean"}),
            "description": _nullable({"type": "string"}),
        },
    }
    schema = {
        "type": "object",
        "additionalProperties": False,
        "required": ["type", "json_schema"],
        "properties": {"type": {"const": "json_schema"}, "json_schema": spec},
    }
    return _nullable({"oneOf": [plain, schema]})


_FREE = {"anyOf": [{"type": "null"}, {"properties": {"type": {"const": "text"}}}]}  # a response_format that constrains nothing


def _tools() -> dict:
    function = {
        "type": "object",
        "additionalProperties": False,
        "required": ["name"],
        "properties": {
            "name": {"type": "string", "pattern": NAME_PATTERN},
            "description": _nullable({"type": "string"}),
            "parameters": _nullable(_json_schema()),
            "strict": _nullable({"type": "boolean"}),
        },
    }
    tool = {"type": "object", "additionalProperties": False, "required": ["type", "function"]}
    tool["properties"] = {"type": {"const": "function"}, "function": function}
    return _nullable(_fits({"type": "array", "items": tool, "maxItems": 1}, f"up to {MAX_TOOLS} tools of distinct names are accepted"))


def _if_set(key: str, then: dict) -> dict:
    """JSON Schema's if/then: when `key` is present and not null, `then` holds."""
    return {"if": {"properties": {key: {"not": {"type": "null"}}}, "required": [key]}, "then": then}


def _rules(schema: dict, *rules: dict) -> dict:
    """`schema` closed to other fields, with stream_options only when stream is true, and `rules`."""
    stream = _if_set("stream_options", {"properties": {"stream": {"const": True}}, "required": ["stream"]})
    return {**schema, "additionalProperties": False, "allOf": [stream, *rules]}


def _requests(lim: OpenAPILimits) -> dict[str, dict]:
    chars = max(1, (lim.prompt_tokens - 1) // BYTES_PER_CHAR)
    per_message = max(2, (lim.prompt_tokens // MAX_MESSAGES - lim.chat_overhead) // BYTES_PER_CHAR)
    text = _fits({"type": "string", "minLength": 1, "maxLength": chars})
    ids = _fits({"type": "array", "minItems": 1, "maxItems": lim.prompt_tokens, "items": {"type": "integer", "minimum": 0, "maximum": lim.vocab_size - 1}})
    part = {
        "type": "object",
        "additionalProperties": False,
        "required": ["type", "text"],
        "properties": {"type": {"type": "string", "enum": ["text"]}, "text": _fits({"type": "string", "maxLength": per_message // 2})},
    }
    call = {
        "type": "object",
        "additionalProperties": False,
        "required": ["function"],
        "properties": {
            "id": _nullable({"type": "string"}),
            "type": {"const": "function"},
            "function": {
                "type": "object",
                "additionalProperties": False,
                "required": ["name", "arguments"],
                "properties": {"name": {"type": "string"}, "arguments": _fits({"type": "string", "maxLength": per_message})},
            },
        },
    }
    message = {
        "type": "object",
        "additionalProperties": False,
        "required": ["role"],
        "properties": {
            "role": {"type": "string", "enum": list(ROLES)},
            "content": _nullable({"anyOf": [_fits({"type": "string", "maxLength": per_message}), _fits({"type": "array", "items": part, "maxItems": 2})]}),
            "name": _nullable({"type": "string"}),
            "tool_calls": _nullable(_fits({"type": "array", "items": call, "maxItems": 1})),
            "tool_call_id": _nullable({"type": "string"}),
        },
        "allOf": [  # tool calls on assistant messages, a call's id on tool messages
            {"if": {"properties": {"role": {"const": "assistant"}}}, "else": {"properties": {"tool_calls": False}}},
            {"if": {"properties": {"role": {"const": "tool"}}}, "else": {"properties": {"tool_call_id": False}}},
        ],
    }
    completion = {
        "type": "object",
        "required": ["model", "prompt"],
        "properties": {
            **_sampling(lim),
            "prompt": {
                "anyOf": [text, ids, {"type": "array", "minItems": 1, "maxItems": MAX_PROMPTS, "items": {"anyOf": [text, ids]}}],
                "description": "a prompt (text or token ids) or a list of them: each its own sequence, answered in order",
            },
            "max_tokens": _nullable(_fits({"type": "integer", "minimum": 0, "maximum": lim.max_tokens})),
            "echo": _nullable({"type": "boolean"}),
            "logprobs": {**_nullable({"type": "integer", "minimum": 0, "maximum": MAX_LOGPROBS}), "description": "top log-probabilities per token"},
            "response_format": _response_format(),
        },
    }
    echo_rules = [  # max_tokens 0 only with echo; prompt log-probabilities only where the stages return every row
        {"if": {"properties": {"echo": {"const": True}}, "required": ["echo"]}, "else": {"properties": {"max_tokens": {"minimum": 1}}}},
    ]
    if not lim.prompt_logprobs:
        echo_rules.append(_if_set("logprobs", {"properties": {"echo": {"not": {"const": True}}}}))
    chat: dict[str, Any] = {
        "type": "object",
        "required": ["model", "messages"],
        "properties": {
            **_sampling(lim),
            "max_completion_tokens": _sampling(lim)["max_tokens"],
            "messages": _fits({"type": "array", "minItems": 1, "maxItems": MAX_MESSAGES, "items": _ref("ChatMessage")}),
            "logprobs": _nullable({"type": "boolean"}),
            "top_logprobs": _nullable({"type": "integer", "minimum": 0, "maximum": MAX_LOGPROBS}),
            "parallel_tool_calls": _nullable({"type": "boolean"}),
            "metadata": _nullable({"type": "object"}),
            "store": _nullable({"type": "boolean", "const": False}),
            "modalities": _nullable({"type": "array", "minItems": 1, "maxItems": 1, "items": {"const": "text"}}),
            "response_format": _response_format(),
            "tools": _tools(),
            "tool_choice": {
                **_nullable({"type": "string", "enum": ["none", "required", *(["auto"] if lim.auto_tool_choice else [])]}),
                "description": f"{FITS}; a named function of 'tools' ({{'type': 'function', 'function': {{'name'}}}}) is accepted too; "
                + ("'auto' finds calls in the free text" if lim.auto_tool_choice else "'auto', the default with tools, is refused (no tool-call parser)"),
            },
        },
    }
    # structured output (structured.py): tools need a tool_choice; "required" needs tools and no other
    # response_format; ignore_eos goes with no grammar (the grammar ends the output with EOS)
    tools_need_choice = {  # without a parser, "auto" (the default with tools) is refused
        "if": {"properties": {"tools": {"type": "array", "minItems": 1}}, "required": ["tools"]},
        "then": {"required": ["tool_choice"], "properties": {"tool_choice": {"type": "string"}}},
    }
    tool_rules = [
        *([] if lim.auto_tool_choice else [tools_need_choice]),
        {
            "if": {"properties": {"tool_choice": {"const": "required"}}, "required": ["tool_choice"]},
            "then": {"required": ["tools"], "properties": {"tools": {"type": "array", "minItems": 1}, "response_format": _FREE}},
        },
    ]
    eos_rule = {
        "if": {"properties": {"ignore_eos": {"const": True}}, "required": ["ignore_eos"]},
        "then": {"properties": {"response_format": _FREE, "tool_choice": {"not": {"const": "required"}}}},
    }
    top_needs_logprobs = _if_set("top_logprobs", {"properties": {"logprobs": {"const": True}}, "required": ["logprobs"]})
    tokenize = {
        "type": "object",
        "additionalProperties": False,
        "required": ["prompt"],
        "properties": {
            "model": _nullable({"type": "string"}),
            "prompt": {"type": "string"},
            "add_special_tokens": _nullable({"type": "boolean"}),
            "return_token_strs": _nullable({"type": "boolean"}),
        },
    }
    tokenize_chat = {
        "type": "object",
        "additionalProperties": False,
        "required": ["messages"],
        "properties": {
            "model": _nullable({"type": "string"}),
            "messages": chat["properties"]["messages"],
            "add_generation_prompt": _nullable({"type": "boolean"}),
            "return_token_strs": _nullable({"type": "boolean"}),
        },
    }
    detokenize = {
        "type": "object",
        "additionalProperties": False,
        "required": ["tokens"],
        "properties": {"model": _nullable({"type": "string"}), "tokens": {"type": "array", "items": _token_id(lim)}},
    }
    return {
        "CompletionRequest": _rules(completion, *echo_rules, eos_rule),
        "ChatCompletionRequest": _rules(chat, top_needs_logprobs, *tool_rules, eos_rule),
        "TokenizeRequest": {"oneOf": [tokenize, tokenize_chat]},
        "DetokenizeRequest": detokenize,
        "ChatMessage": message,
        "StreamOptions": {
            "type": "object",
            "additionalProperties": False,
            "properties": {"include_usage": _nullable({"type": "boolean"}), "continuous_usage_stats": _nullable({"type": "boolean", "const": False})},
        },
    }


def _responses() -> dict[str, dict]:
    usage = {
        "type": "object",
        "required": ["prompt_tokens", "completion_tokens", "total_tokens"],
        "properties": {k: {"type": "integer", "minimum": 0} for k in ("prompt_tokens", "completion_tokens", "total_tokens")},
    }
    finish = {"type": "string", "enum": ["stop", "length", "tool_calls"]}

    def answer(obj: str, choice: dict) -> dict:
        return {
            "type": "object",
            "required": ["id", "object", "created", "model", "choices", "usage"],
            "properties": {
                "id": {"type": "string"},
                "object": {"type": "string", "enum": [obj]},
                "created": {"type": "integer"},
                "model": {"type": "string"},
                "choices": {
                    "type": "array",
                    "minItems": 1,
                    "items": {
                        "type": "object",
                        "required": ["index", "finish_reason", *choice],
                        "properties": {"index": {"type": "integer"}, "finish_reason": finish, **choice},
                    },
                },
                "usage": usage,
            },
        }

    number = {"type": "number"}
    completion_logprobs = _nullable(
        {
            "type": "object",
            "required": ["tokens", "token_logprobs", "top_logprobs", "text_offset"],
            "properties": {
                "tokens": {"type": "array", "items": {"type": "string"}},
                "token_logprobs": {"type": "array", "items": _nullable(number)},
                "top_logprobs": {"type": "array", "items": _nullable({"type": "object", "additionalProperties": number})},
                "text_offset": {"type": "array", "items": {"type": "integer", "minimum": 0}},
            },
        }
    )
    token: dict[str, Any] = {
        "type": "object",
        "required": ["token", "logprob", "bytes"],
        "properties": {"token": {"type": "string"}, "logprob": number, "bytes": {"type": "array", "items": {"type": "integer", "minimum": 0, "maximum": 255}}},
    }
    chat_logprobs = _nullable(
        {
            "type": "object",
            "required": ["content"],
            "properties": {
                "content": {
                    "type": "array",
                    "items": {
                        **token,
                        "required": [*token["required"], "top_logprobs"],
                        "properties": {**token["properties"], "top_logprobs": {"type": "array", "items": token}},
                    },
                }
            },
        }
    )
    call = {
        "type": "object",
        "required": ["id", "type", "function"],
        "properties": {
            "id": {"type": "string"},
            "type": {"const": "function"},
            "function": {"type": "object", "required": ["name", "arguments"], "properties": {"name": {"type": "string"}, "arguments": {"type": "string"}}},
        },
    }
    message = {
        "type": "object",
        "required": ["role", "content"],
        "properties": {
            "role": {"type": "string", "enum": ["assistant"]},
            "content": {**_nullable({"type": "string"}), "description": "null when the answer is tool_calls"},
            "tool_calls": {"type": "array", "items": call},
        },
    }
    error = {
        "type": "object",
        "required": ["error"],
        "properties": {
            "error": {
                "type": "object",
                "required": ["message", "type", "param", "code"],
                "properties": {
                    "message": {"type": "string"},
                    "type": {"type": "string"},
                    "param": _nullable({"type": "string"}),
                    "code": _nullable({"type": "string"}),
                },
            }
        },
    }
    health = {"type": "object", "required": ["status"], "properties": {"status": {"type": "string", "enum": ["ok", "degraded", "unavailable"]}}}
    models = {
        "type": "object",
        "required": ["object", "data"],
        "properties": {
            "object": {"type": "string", "enum": ["list"]},
            "data": {
                "type": "array",
                "items": {
                    "type": "object",
                    "required": ["id", "object", "max_model_len"],
                    "properties": {"id": {"type": "string"}, "object": {"type": "string"}, "max_model_len": {"type": "integer"}},
                },
            },
        },
    }
    return {
        "Completion": answer("text_completion", {"text": {"type": "string"}, "logprobs": completion_logprobs}),
        "ChatCompletion": answer("chat.completion", {"message": message, "logprobs": chat_logprobs}),
        "Tokens": {
            "type": "object",
            "required": ["count", "max_model_len", "tokens", "token_strs"],
            "properties": {
                "count": {"type": "integer", "minimum": 0},
                "max_model_len": {"type": "integer"},
                "tokens": {"type": "array", "items": {"type": "integer", "minimum": 0}},
                "token_strs": _nullable({"type": "array", "items": {"type": "string"}}),
            },
        },
        "Text": {"type": "object", "required": ["prompt"], "properties": {"prompt": {"type": "string"}}},
        "Version": {"type": "object", "required": ["version"], "properties": {"version": {"type": "string"}}},
        "Error": error,
        "Health": health,
        "HealthDown": {"allOf": [health, error]},
        "ModelList": models,
    }


def _json(name: str, description: str) -> dict:
    return {"description": description, "content": {"application/json": {"schema": _ref(name)}}}


_ERRORS = {
    "400": "invalid request (OpenAI error JSON, the field in `param`)",
    "401": "missing or wrong API key",
    "404": "unknown model",
    "413": "request body over --max-body-bytes",
    "429": "the queue is full or the predicted wait too long (Retry-After says when to retry)",
    "503": "no pipeline can take the request (workers down, restarting, or the server draining)",
}


def _generate(request: str, answer: str, summary: str, auth: bool) -> dict:
    ok = {
        "description": "the completion; with stream: true, server-sent events ending in `data: [DONE]` (an error "
        "after the stream started is an event with OpenAI's error JSON)",
        "content": {
            "application/json": {"schema": _ref(answer)},
            "text/event-stream": {
                "schema": {
                    "type": "object",
                    "required": ["data"],  # one event
                    "properties": {"data": {"type": "string"}},
                }
            },
        },
    }
    errors = {code: _json("Error", text) for code, text in _ERRORS.items() if auth or code != "401"}
    errors["429"]["headers"] = {"Retry-After": {"schema": {"type": "integer", "minimum": 1}}}
    return {
        "post": {
            "summary": summary,
            "requestBody": {"required": True, "content": {"application/json": {"schema": _ref(request)}}},
            "responses": {"200": ok, **errors},
        }
    }


def _post(request: str, answer: str, summary: str, auth: bool) -> dict:
    errors = {code: _json("Error", _ERRORS[code]) for code in ("400", "413", *(("401",) if auth else ()))}
    return {
        "post": {
            "summary": summary,
            "requestBody": {"required": True, "content": {"application/json": {"schema": _ref(request)}}},
            "responses": {"200": _json(answer, summary), **errors},
        }
    }


def openapi_document(lim: OpenAPILimits, version: str) -> dict:
    """The OpenAPI 3.1 document of this server.

    Args:
        lim: the serving process's model name, context, vocabulary and chat template overhead.
        version: hetc's version (info.version).
    """
    security: list[dict[str, list[str]]] = [{"bearer": []}] if lim.api_key else []
    paths = {
        "/v1/completions": _generate("CompletionRequest", "Completion", "text completion", lim.api_key),
        "/v1/chat/completions": _generate("ChatCompletionRequest", "ChatCompletion", "chat completion", lim.api_key),
        "/tokenize": _post("TokenizeRequest", "Tokens", "vLLM's /tokenize: a prompt's or chat's token ids", lim.api_key),
        "/detokenize": _post("DetokenizeRequest", "Text", "vLLM's /detokenize: token ids' text", lim.api_key),
        "/version": {"get": {"summary": "hetc's version", "security": [], "responses": {"200": _json("Version", "the version")}}},
        "/v1/models": {
            "get": {
                "summary": "the served model",
                "responses": {"200": _json("ModelList", "the served model"), **({"401": _json("Error", _ERRORS["401"])} if lim.api_key else {})},
            }
        },
        "/health": {
            "get": {
                "summary": "whether every pipeline serves",
                "security": [],
                "responses": {
                    "200": _json("Health", "every pipeline serves"),
                    "503": _json("HealthDown", "a pipeline is down, restarting or draining (reason, units, workers)"),
                },
            }
        },
        "/metrics": {
            "get": {
                "summary": "Prometheus metrics",
                "security": [],
                "responses": {"200": {"description": "text exposition format", "content": {"text/plain": {"schema": {"type": "string"}}}}},
            }
        },
    }
    doc: dict[str, Any] = {
        "openapi": "3.1.0",
        "info": {"title": "hetc serve", "version": version, "description": DESCRIPTION},
        "paths": paths,
        "components": {"schemas": {**_requests(lim), **_responses()}},
    }
    if lim.api_key:
        doc["components"]["securitySchemes"] = {"bearer": {"type": "http", "scheme": "bearer"}}
        doc["security"] = security
    return doc
