"""The OpenAI-compatible HTTP API (FastAPI), in the frontend process.

Routes: /v1/completions, /v1/chat/completions (SSE streaming with
stream_options.include_usage), /v1/models, /health, /metrics, and /openapi.json (openapi.py:
the requests and responses as JSON Schema). Every error is OpenAI's error JSON with its
status; a bad request never stops the server.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import math
import random
import time
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response, StreamingResponse
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.exceptions import HTTPException as StarletteHTTPException

from hetc import __version__
from hetc.runtime.engine import Engine, EngineDead, Event, QueueFull
from hetc.runtime.openapi import OpenAPILimits, openapi_document
from hetc.runtime.protocol import ROLES, APIError, GenOptions, bad, parse_chat, parse_completion
from hetc.sequence import SamplingParams
from hetc.runtime.tokenizer import Detokenizer, apply_chat

__all__ = ["ServerState", "create_app"]


@dataclass
class ServerState:
    engine: Engine
    tokenizer: object
    model_name: str
    max_model_len: int  # prompt + completion tokens one request may reach
    eos_token_ids: frozenset[int]
    metrics: object
    api_key: str | None = None
    model_info: dict = field(default_factory=dict)  # extra fields of /v1/models
    health_info: Callable[[], dict] = dict  # workers and their state
    max_body_bytes: int = 1 << 20  # a larger request body gets 413


def _err(e: APIError) -> JSONResponse:
    return JSONResponse(e.body(), status_code=e.status, headers=e.headers)


def _sse(obj) -> str:
    return f"data: {json.dumps(obj, separators=(',', ':'))}\n\n"


class _Generation:
    """One request in the engine: tokens in, text deltas out, stop strings applied."""

    def __init__(self, st: ServerState, prompt_ids: list[int], opts: GenOptions):
        self.st, self.opts, self.prompt_ids = st, opts, prompt_ids
        self.detok = Detokenizer(st.tokenizer)
        self.token_ids: list[int] = []
        self.held = ""  # text not yet sent: might be the start of a stop string
        self.finish_reason: str | None = None
        self.queue: asyncio.Queue[Event] = asyncio.Queue()
        loop = asyncio.get_running_loop()
        params = SamplingParams(
            temperature=opts.temperature,
            top_p=opts.top_p,
            top_k=opts.top_k,
            seed=opts.seed if opts.seed is not None else random.getrandbits(31),
            max_tokens=opts.max_tokens,
            ignore_eos=opts.ignore_eos,
        )
        try:
            self.req = st.engine.submit(prompt_ids, params, st.eos_token_ids, lambda ev: loop.call_soon_threadsafe(self.queue.put_nowait, ev))
        except QueueFull as e:
            raise APIError(
                429,
                f"the server is at capacity: {e}. Retry later.",
                type="rate_limit_error",
                code="queue_full",
                headers={"Retry-After": str(max(1, math.ceil(e.retry_after)))},
            ) from None
        except EngineDead as e:
            raise APIError(503, f"the model is unavailable: {e}.", type="server_error", code="service_unavailable") from None

    async def deltas(self) -> AsyncIterator[str]:
        """Text deltas until the request finishes (finish_reason set at the end)."""
        keep = max((len(s) for s in self.opts.stop), default=1) - 1
        try:
            while self.finish_reason is None:
                ev = await self.queue.get()
                if ev.error:
                    self.finish_reason = "error"
                    raise APIError(
                        ev.status, f"the request failed: {ev.error}", type="server_error", code="worker_failed" if ev.status == 503 else "sampling_failed"
                    )
                text = ""
                if ev.token is not None:
                    self.token_ids.append(ev.token)
                    if not (ev.reason == "stop" and ev.token in self.st.eos_token_ids):
                        text = self.detok.add(ev.token)
                if ev.finished:
                    text += self.detok.flush()
                self.held += text
                if self.opts.stop:
                    hit = min(((self.held.find(s), s) for s in self.opts.stop if s in self.held), default=None)
                    if hit is not None:
                        out, self.held = self.held[: hit[0]], ""
                        self.finish_reason = "stop"
                        self.st.engine.abort(self.req)
                        if out:
                            yield out
                        return
                if ev.finished:
                    self.finish_reason = "stop" if ev.reason in ("stop", "abort") else "length"
                    out, self.held = self.held, ""
                else:  # hold back what could still become a stop string
                    cut = len(self.held) - keep if keep else len(self.held)
                    out, self.held = self.held[: max(0, cut)], self.held[max(0, cut) :]
                if out or ev.token is not None:  # one yield per token, even when its text is not complete yet
                    yield out
        finally:
            if self.finish_reason is None:  # the client went away: free the sequence
                self.st.engine.abort(self.req)

    def usage(self) -> dict:
        return {"prompt_tokens": len(self.prompt_ids), "completion_tokens": len(self.token_ids), "total_tokens": len(self.prompt_ids) + len(self.token_ids)}


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

    def _fit(opts: GenOptions, prompt_ids: list[int], param: str) -> None:
        if not prompt_ids:
            raise bad("the prompt is empty.", param)
        n = len(prompt_ids)
        if n >= st.max_model_len:
            raise bad(f"this model's maximum context length is {st.max_model_len} tokens; the prompt has {n}.", param)
        room = st.max_model_len - n
        if opts.max_tokens is None:
            opts.max_tokens = room
        elif opts.max_tokens > room:
            raise bad(
                f"this model's maximum context length is {st.max_model_len} tokens; you requested "
                f"{n + opts.max_tokens} ({n} in the prompt, {opts.max_tokens} in the completion).",
                "max_tokens",
            )
        vocab = st.model_info.get("vocab_size")
        if vocab and any(t >= vocab for t in prompt_ids):
            raise bad(f"the prompt has token ids outside the vocabulary (size {vocab}).", param)

    schema = openapi_document(
        OpenAPILimits(
            model_name=st.model_name,
            max_model_len=st.max_model_len,
            vocab_size=st.model_info.get("vocab_size", 1 << 30),
            chat_overhead=max(len(apply_chat(st.tokenizer, [{"role": r, "content": ""}])) for r in ROLES),
            api_key=st.api_key is not None,
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

    @app.get("/v1/models")
    async def models(request: Request):
        _auth(request)
        return {
            "object": "list",
            "data": [
                {"id": st.model_name, "object": "model", "created": int(time.time()), "owned_by": "hetc", "max_model_len": st.max_model_len, **st.model_info}
            ],
        }

    @app.post("/v1/completions")
    async def completions(request: Request):
        opts, prompt = parse_completion(await _body(request))
        _check_model(opts)
        ids = st.tokenizer.encode(prompt) if isinstance(prompt, str) else prompt
        _fit(opts, ids, "prompt")
        return await _respond(opts, ids, chat=False)

    @app.post("/v1/chat/completions")
    async def chat(request: Request):
        opts, messages = parse_chat(await _body(request))
        _check_model(opts)
        ids = apply_chat(st.tokenizer, messages)
        _fit(opts, ids, "messages")
        return await _respond(opts, ids, chat=True)

    async def _respond(opts: GenOptions, ids: list[int], chat: bool):
        gen = _Generation(st, ids, opts)
        rid = f"{'chatcmpl' if chat else 'cmpl'}-{uuid.uuid4().hex[:24]}"
        created = int(time.time())
        obj = "chat.completion" if chat else "text_completion"
        if not opts.stream:
            text = "".join([d async for d in gen.deltas()])
            choice = {"index": 0, "finish_reason": gen.finish_reason, "logprobs": None}
            choice.update({"message": {"role": "assistant", "content": text}} if chat else {"text": text})
            if opts.return_token_ids:
                choice["token_ids"] = gen.token_ids
            out = {"id": rid, "object": obj, "created": created, "model": st.model_name, "choices": [choice], "usage": gen.usage()}
            if opts.return_token_ids:
                out["prompt_token_ids"] = ids
            return out

        def chunk(delta: str | None, finish: str | None, first: bool = False, tokens: list[int] | None = None):
            c = {"index": 0, "logprobs": None, "finish_reason": finish}
            if chat:
                d = {"role": "assistant", "content": ""} if first else ({"content": delta} if delta else {})
                c["delta"] = d
            else:
                c["text"] = delta or ""
            if tokens is not None:
                c["token_ids"] = tokens
            o = {"id": rid, "object": "chat.completion.chunk" if chat else "text_completion", "created": created, "model": st.model_name, "choices": [c]}
            if opts.include_usage:
                o["usage"] = None
            return _sse(o)

        async def events():
            sent = 0
            try:
                if chat:
                    yield chunk(None, None, first=True)
                async for d in gen.deltas():
                    if not d and not opts.return_token_ids:
                        continue
                    new = gen.token_ids[sent:] if opts.return_token_ids else None
                    sent = len(gen.token_ids)
                    yield chunk(d, None, tokens=new)
                yield chunk(None, gen.finish_reason, tokens=gen.token_ids[sent:] if opts.return_token_ids else None)
                if opts.include_usage:
                    yield _sse(
                        {
                            "id": rid,
                            "object": "chat.completion.chunk" if chat else "text_completion",
                            "created": created,
                            "model": st.model_name,
                            "choices": [],
                            "usage": gen.usage(),
                        }
                    )
            except APIError as e:
                yield _sse(e.body())
            yield "data: [DONE]\n\n"

        return StreamingResponse(events(), media_type="text/event-stream", headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})

    return app
