"""The OpenAI-compatible HTTP API (FastAPI), in the frontend process.

Routes: /v1/completions, /v1/chat/completions (generation.py: SSE streaming with
stream_options.include_usage), /v1/models, /tokenize, /detokenize and /version (vLLM's shapes),
/health, /metrics, and /openapi.json (openapi.py: the requests and responses as JSON Schema). Every error is OpenAI's error JSON with its
status; a bad request never stops the server.
"""

from __future__ import annotations

import hmac
import json
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.exceptions import HTTPException as StarletteHTTPException

from hetc import __version__
from hetc.runtime.engine import Engine
from hetc.runtime.generation import Prompt, respond
from hetc.runtime.openapi import OpenAPILimits, openapi_document
from hetc.runtime.protocol import ROLES, APIError, GenOptions, bad, detokenize_body, parse_chat, parse_completion, tokenize_body
from hetc.runtime.tokenizer import apply_chat, token_text
from hetc.runtime.tool_parsers import ToolParser

__all__ = ["ServerState", "create_app"]


@dataclass
class ServerState:
    engine: Engine
    tokenizer: Any  # runtime.tokenizer's HFTokenizer or ByteTokenizer
    model_name: str
    max_model_len: int  # prompt + completion tokens one request may reach
    eos_token_ids: frozenset[int]
    metrics: Any  # runtime.metrics.Metrics
    api_key: str | None = None
    model_info: dict = field(default_factory=dict)  # extra fields of /v1/models
    health_info: Callable[[], dict] = dict  # workers and their state
    max_body_bytes: int = 1 << 20  # a larger request body gets 413
    tool_parser: ToolParser | None = None  # tool_choice "auto" finds calls in free text with it (--tool-call-parser)


def _err(e: APIError) -> JSONResponse:
    return JSONResponse(e.body(), status_code=e.status, headers=e.headers)


def create_app(st: ServerState) -> FastAPI:
    """The FastAPI app serving `st`."""
    app = FastAPI(title="hetc", docs_url=None, redoc_url=None, openapi_url=None)

    @app.exception_handler(APIError)
    async def _api_error(request: Request, e: APIError):
        return _err(e)

    @app.exception_handler(RequestValidationError)
    async def _validation(request: Request, e: RequestValidationError):
        return _err(bad(f"invalid request: {e.errors()[0].get('msg', 'bad field')}."))

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, e: StarletteHTTPException):
        kind = {404: "not_found_error", 405: "invalid_request_error"}.get(e.status_code, "invalid_request_error")
        # e.headers: a 405's Allow
        return _err(APIError(e.status_code, f"{request.method} {request.url.path}: {e.detail}.", type=kind, headers=dict(e.headers or {})))

    @app.exception_handler(Exception)
    async def _internal(request: Request, e: Exception):
        return _err(APIError(500, f"internal error: {type(e).__name__}: {e}", type="server_error"))

    def _auth(request: Request) -> None:
        if st.api_key is None:
            return
        got = request.headers.get("authorization", "")
        # constant time: the comparison does not reveal how much of a guessed key is right
        if not hmac.compare_digest(got.encode(), f"Bearer {st.api_key}".encode()):
            raise APIError(401, "invalid or missing API key: send 'Authorization: Bearer <key>'.", code="invalid_api_key")

    async def _body(request: Request):
        _auth(request)
        too_big = APIError(413, f"the request body is over this server's limit of {st.max_body_bytes} bytes.", code="request_too_large")
        declared = request.headers.get("content-length", "")
        if declared.isdigit() and int(declared) > st.max_body_bytes:
            raise too_big
        raw = bytearray()
        async for chunk in request.stream():  # chunked bodies declare no length: count what arrives
            raw += chunk
            if len(raw) > st.max_body_bytes:
                raise too_big
        try:
            return json.loads(raw)
        except (ValueError, RecursionError) as e:  # JSONDecodeError, bad UTF-8, an int over 4300 digits, deep nesting
            raise bad(f"the request body is not valid JSON ({type(e).__name__}: {str(e)[:200]}).") from None

    def _check_model(opts: GenOptions) -> None:
        if opts.model != st.model_name:
            raise APIError(
                404,
                f"the model '{opts.model}' does not exist; this server serves '{st.model_name}'.",
                type="not_found_error",
                param="model",
                code="model_not_found",
            )

    def _fit(opts: GenOptions, prompt_ids: list[int], param: str) -> int:
        """The prompt's completion budget (max_tokens, or what the context leaves); refuses what does not fit."""
        if not prompt_ids:
            raise bad("the prompt is empty.", param)
        n = len(prompt_ids)
        if n >= st.max_model_len:
            raise bad(f"this model's maximum context length is {st.max_model_len} tokens; the prompt has {n}.", param)
        room = st.max_model_len - n
        if opts.max_tokens is not None and opts.max_tokens > room:
            raise bad(
                f"this model's maximum context length is {st.max_model_len} tokens; you requested "
                f"{n + opts.max_tokens} ({n} in the prompt, {opts.max_tokens} in the completion).",
                "max_tokens",
            )
        vocab = st.model_info.get("vocab_size")
        if vocab and any(t >= vocab for t in prompt_ids):
            raise bad(f"the prompt has token ids outside the vocabulary (size {vocab}).", param)
        return room if opts.max_tokens is None else opts.max_tokens

    def _check_tokens(opts: GenOptions) -> None:
        """Token ids the request names (logit_bias, stop_token_ids) are in the vocabulary; prompt
        log-probabilities only where every stage can return every row's logits."""
        vocab = st.model_info.get("vocab_size")
        for key, ids in (("logit_bias", opts.logit_bias), ("stop_token_ids", opts.stop_token_ids)):
            if vocab and any(t >= vocab for t in ids):
                raise bad(f"'{key}' names token ids outside the vocabulary (size {vocab}).", key)
        if opts.echo and opts.logprobs is not None and prompt_logprobs_refusal:
            raise bad(f"'echo' with 'logprobs' (prompt log-probabilities) is not available on this server: {prompt_logprobs_refusal}", "echo")

    # compiled stages keep only each sequence's last row past the cut (their artifacts are built so)
    compiled = sorted({e["executor"] for e in st.model_info.get("executors", []) if e.get("executor") != "torch"})
    prompt_logprobs_refusal = (
        f"stages run compiled ({', '.join(compiled)}), which return the logits of each sequence's last position only; serve with --executor torch for them."
        if compiled
        else None
    )

    schema = openapi_document(
        OpenAPILimits(
            model_name=st.model_name,
            max_model_len=st.max_model_len,
            vocab_size=st.model_info.get("vocab_size", 1 << 30),
            chat_overhead=max(len(apply_chat(st.tokenizer, [{"role": r, "content": ""}])) for r in ROLES),
            api_key=st.api_key is not None,
            prompt_logprobs=prompt_logprobs_refusal is None,
            auto_tool_choice=st.tool_parser is not None,
        ),
        __version__,
    )

    @app.get("/openapi.json")
    async def openapi():
        return schema

    @app.get("/health")
    async def health():
        info = st.health_info()
        # every pipeline down (failed); or some restarting or given up, or draining (degraded): 503
        reason = st.engine.failed or info.pop("down", None)
        if reason:
            status = "unavailable" if st.engine.failed else "degraded"
            return JSONResponse(
                {
                    "status": status,
                    "reason": reason,
                    **info,
                    **APIError(
                        503,
                        f"a worker is down: {reason}" if st.engine.failed else reason,
                        type="server_error",
                        code="worker_failed" if st.engine.failed else "degraded",
                    ).body(),
                },
                status_code=503,
            )
        return {"status": "ok", **info}

    @app.get("/metrics")
    async def metrics():
        return Response(generate_latest(st.metrics.registry), media_type=CONTENT_TYPE_LATEST)

    @app.get("/version")
    async def version():
        return {"version": __version__}

    @app.get("/v1/models")
    async def models(request: Request):
        _auth(request)
        created = int(time.time())
        # vLLM's ModelCard (id, object, created, owned_by, root, parent, max_model_len, permission), then hetc's own fields
        permission = {
            "id": f"modelperm-{uuid.uuid4().hex}",
            "object": "model_permission",
            "created": created,
            "allow_create_engine": False,
            "allow_sampling": True,
            "allow_logprobs": True,
            "allow_search_indices": False,
            "allow_view": True,
            "allow_fine_tuning": False,
            "organization": "*",
            "group": None,
            "is_blocking": False,
        }
        card = {"id": st.model_name, "object": "model", "created": created, "owned_by": "hetc", "root": None, "parent": None, "max_model_len": st.max_model_len}
        return {"object": "list", "data": [{**card, **st.model_info, "permission": [permission]}]}

    @app.post("/tokenize")
    async def tokenize(request: Request):
        body = await _body(request)
        ids = tokenize_body(body, st.tokenizer)
        out = {"count": len(ids), "max_model_len": st.max_model_len, "tokens": ids, "token_strs": None}
        if body.get("return_token_strs"):
            out["token_strs"] = [token_text(st.tokenizer, t) for t in ids]
        return out

    @app.post("/detokenize")
    async def detokenize(request: Request):
        ids = detokenize_body(await _body(request), st.model_info.get("vocab_size"))
        return {"prompt": st.tokenizer.decode(ids)}

    @app.post("/v1/completions")
    async def completions(request: Request):
        opts, prompts = parse_completion(await _body(request))
        _check_model(opts)
        _check_tokens(opts)
        batch = []
        for p in prompts:
            ids = st.tokenizer.encode(p) if isinstance(p, str) else p
            batch.append(Prompt(ids, p if isinstance(p, str) else st.tokenizer.decode(p), _fit(opts, ids, "prompt")))
        return await respond(st, opts, batch, chat=False)

    @app.post("/v1/chat/completions")
    async def chat(request: Request):
        opts, messages = parse_chat(await _body(request), st.tool_parser)
        _check_model(opts)
        _check_tokens(opts)
        ids = apply_chat(st.tokenizer, messages, tools=opts.structured.tools)
        return await respond(st, opts, [Prompt(ids, "", _fit(opts, ids, "messages"))], chat=True)

    return app
