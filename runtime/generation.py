"""A completions or chat request's sequences in the engine, and its OpenAI answer.

A request starts one sequence per prompt and sample (`n`): choice `index` = prompt × n + sample,
answered in that order (streamed: each chunk names its choice). A prompt's samples go to the
engine together: they fork from its first sequence and share its KV blocks (`submit_samples`).
A chat choice held to a forced tool call (structured.py) answers `tool_calls` instead of text.
Each `Generation` turns its sequence's tokens into text deltas with stop strings applied;
`respond` builds OpenAI's response
or server-sent events, with log-probabilities in OpenAI's shapes (completions: tokens,
token_logprobs, top_logprobs with the chosen token beside the top k, text_offset; chat:
content[{token, logprob, bytes, top_logprobs}]) and, with `echo`, the prompt first.
"""

from __future__ import annotations

import asyncio
import json
import math
import random
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from fastapi.responses import StreamingResponse

from hetc.runtime.engine import Event, EngineDead, QueueFull
from hetc.runtime.protocol import APIError, GenOptions
from hetc.runtime.sampling_state import Logprob
from hetc.runtime.structured import ToolChoice, auto_calls, tool_calls
from hetc.runtime.tool_parsers import ToolStream
from hetc.runtime.tokenizer import Detokenizer, token_bytes, token_text
from hetc.sequence import SamplingParams

if TYPE_CHECKING:
    from hetc.runtime.server import ServerState

__all__ = ["Prompt", "respond"]

_MIN_LOGPROB = -9999.0  # what OpenAI sends for -inf (JSON has no infinity)
_GOLDEN = 0x9E37_79B9_7F4A_7C15  # spreads sample j's seed from the request's (n > 1)


@dataclass(frozen=True, slots=True)
class Prompt:
    ids: list[int]
    text: str  # as the client gave it, or its ids decoded (echo)
    max_tokens: int  # this prompt's completion budget (0: echo only)


def sample_seed(seed: int | None, j: int) -> int:
    """Sample j's seed: the request's for the first (n=1 is unchanged), spread for the others; a
    fresh one when the request gives none."""
    if seed is None:
        return random.getrandbits(31)
    return seed if j == 0 else (seed + j * _GOLDEN) % (1 << 63)


def sampling_params(opts: GenOptions, seed: int, max_tokens: int, prompt_logprobs: bool) -> SamplingParams:
    return SamplingParams(
        temperature=opts.temperature,
        top_p=opts.top_p,
        top_k=opts.top_k,
        seed=seed,
        max_tokens=max(1, max_tokens),  # echo with max_tokens 0: one token is sampled and dropped
        ignore_eos=opts.ignore_eos,
        presence_penalty=opts.presence_penalty,
        frequency_penalty=opts.frequency_penalty,
        repetition_penalty=opts.repetition_penalty,
        logit_bias=tuple(sorted(opts.logit_bias.items())),
        min_tokens=opts.min_tokens,
        stop_token_ids=frozenset(opts.stop_token_ids),
        logprobs=opts.logprobs,
        prompt_logprobs=opts.logprobs if prompt_logprobs else None,
        grammar=opts.structured.grammar,
    )


class Generation:
    """One sequence in the engine: tokens in, text deltas out, stop strings applied (`req`: set
    when `start` submits it)."""

    req: Any

    def __init__(self, st: ServerState, prompt: Prompt, opts: GenOptions, params: SamplingParams, index: int):
        self.st, self.opts, self.prompt, self.index, self.params = st, opts, prompt, index, params
        self.detok = Detokenizer(st.tokenizer)
        self.token_ids: list[int] = []
        self.logprobs: list[Logprob | None] = []  # per token in token_ids
        self.sent = 0  # tokens already in a streamed chunk
        self.held = ""  # text not yet sent: might be the start of a stop string
        self.finish_reason: str | None = None
        self.stops = st.eos_token_ids | params.stop_token_ids  # their text is not output
        self.queue: asyncio.Queue[Event] = asyncio.Queue()
        loop = asyncio.get_running_loop()

        def sink(ev: Event) -> None:  # called from engine threads
            loop.call_soon_threadsafe(self.queue.put_nowait, ev)

        self.sink = sink

    def abort(self) -> None:
        if self.finish_reason is None:
            self.st.engine.abort(self.req)

    async def deltas(self) -> AsyncIterator[str]:
        """Text deltas until the sequence finishes (finish_reason set at the end); with max_tokens
        0 (echo only) none: its one sampled token is dropped."""
        keep = max((len(s) for s in self.opts.stop), default=1) - 1
        try:
            while self.finish_reason is None:
                ev = await self.queue.get()
                if ev.error:
                    self.finish_reason = "error"
                    raise APIError(
                        ev.status, f"the request failed: {ev.error}", type="server_error", code="worker_failed" if ev.status == 503 else "sampling_failed"
                    )
                if self.prompt.max_tokens == 0:
                    if ev.finished:
                        self.finish_reason = "length"
                    continue
                text = ""
                if ev.token is not None:
                    self.token_ids.append(ev.token)
                    self.logprobs.append(ev.logprob)
                    if not (ev.reason == "stop" and ev.token in self.stops):
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

    def prompt_logprobs(self) -> list[Logprob | None]:
        """Per prompt token, its log-probabilities (None for the first: nothing predicts it)."""
        got = self.req.logprobs
        return [None] + [got.get(p) for p in range(1, len(self.prompt.ids))]


class _Shapes:
    """Log-probabilities in OpenAI's shapes, with the served tokenizer's token texts."""

    def __init__(self, tokenizer: Any, k: int):
        self.tok, self.k = tokenizer, k

    def text(self, t: int) -> str:
        return token_text(self.tok, t)

    def completion(self, tokens: list[int], lps: list[Logprob | None], offset: int) -> dict:
        """{tokens, token_logprobs, top_logprobs, text_offset}; top_logprobs holds the top k and the chosen token."""
        out: dict[str, list] = {"tokens": [], "token_logprobs": [], "top_logprobs": [], "text_offset": []}
        for t, lp in zip(tokens, lps):
            s = self.text(t)
            out["tokens"].append(s)
            out["text_offset"].append(offset)
            offset += len(s)
            if lp is None:
                out["token_logprobs"].append(None)
                out["top_logprobs"].append(None)
                continue
            top: dict[str, float] = {}
            for i, v in (*lp.top[: self.k], (t, lp.logprob)):  # tokens of the same text: the likelier one's
                top.setdefault(self.text(i), _finite(v))
            out["token_logprobs"].append(_finite(lp.logprob))
            out["top_logprobs"].append(top)
        return out

    def chat(self, tokens: list[int], lps: list[Logprob | None]) -> dict:
        """{content: [{token, logprob, bytes, top_logprobs: [{token, logprob, bytes}] × k}]}."""

        def entry(t: int, v: float) -> dict:
            return {"token": self.text(t), "logprob": _finite(v), "bytes": list(token_bytes(self.tok, t))}

        content = [{**entry(t, lp.logprob), "top_logprobs": [entry(i, v) for i, v in lp.top[: self.k]]} for t, lp in zip(tokens, lps) if lp is not None]
        return {"content": content}


def sse(obj: Any) -> str:
    """One server-sent event of `obj` as JSON."""
    return f"data: {json.dumps(obj, separators=(',', ':'))}\n\n"


def _finite(v: float) -> float:
    return v if math.isfinite(v) else _MIN_LOGPROB


def start(st: ServerState, opts: GenOptions, prompts: list[Prompt]) -> list[Generation]:
    """Every sequence of the request in the engine (choice order); if one cannot start, those
    started are aborted and the error raised."""
    total, cap = len(prompts) * opts.n, getattr(getattr(st.engine, "cfg", None), "max_waiting", None)
    if cap is not None and total > cap:
        raise APIError(400, f"{len(prompts)} prompt(s) × n={opts.n} = {total} sequences are more than the queue holds ({cap}, --max-waiting).", param="n")
    gens: list[Generation] = []
    try:
        for p in prompts:
            mine = []
            for j in range(opts.n):
                params = sampling_params(opts, sample_seed(opts.seed, j), p.max_tokens, opts.echo and opts.logprobs is not None)
                mine.append(Generation(st, p, opts, params, len(gens) + j))
            # the prompt's samples go together: they share its KV blocks (engine.submit_samples)
            for g, req in zip(mine, st.engine.submit_samples(p.ids, [(g.params, g.sink) for g in mine], st.eos_token_ids)):
                g.req = req
            gens += mine
    except QueueFull as e:
        _abort(gens)
        raise APIError(
            429,
            f"the server is at capacity: {e}. Retry later.",
            type="rate_limit_error",
            code="queue_full",
            headers={"Retry-After": str(max(1, math.ceil(e.retry_after)))},
        ) from None
    except EngineDead as e:
        _abort(gens)
        raise APIError(503, f"the model is unavailable: {e}.", type="server_error", code="service_unavailable") from None
    return gens


def _abort(gens: list[Generation]) -> None:
    for g in gens:
        g.abort()


async def respond(st: ServerState, opts: GenOptions, prompts: list[Prompt], chat: bool) -> dict | StreamingResponse:
    """The answer to a request of `prompts` (each started `opts.n` times)."""
    gens = start(st, opts, prompts)
    rid = f"{'chatcmpl' if chat else 'cmpl'}-{uuid.uuid4().hex[:24]}"
    created = int(time.time())
    shapes = _Shapes(st.tokenizer, opts.logprobs or 0)
    usage = lambda: {  # noqa: E731 — each prompt counted once, whatever n
        "prompt_tokens": sum(len(p.ids) for p in prompts),
        "completion_tokens": sum(len(g.token_ids) for g in gens),
        "total_tokens": sum(len(p.ids) for p in prompts) + sum(len(g.token_ids) for g in gens),
    }
    if not opts.stream:
        return await _whole(st, opts, gens, chat, shapes, rid, created, usage)
    return StreamingResponse(
        _events(st, opts, gens, chat, shapes, rid, created, usage),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )


async def _whole(st, opts: GenOptions, gens: list[Generation], chat: bool, shapes: _Shapes, rid: str, created: int, usage) -> dict:
    async def run(g: Generation) -> str:
        return "".join([d async for d in g.deltas()])

    tasks = [asyncio.ensure_future(run(g)) for g in gens]
    try:
        texts = await asyncio.gather(*tasks)
    finally:
        for t in tasks:  # one failed: the others stop too (their sequences are aborted)
            t.cancel()
    choices = []
    for g, text in zip(gens, texts):
        choice: dict[str, Any] = {"index": g.index, "finish_reason": g.finish_reason, "logprobs": None}
        if chat:
            choice["message"] = _message(opts, g, text)
            choice["finish_reason"] = g.finish_reason
            if opts.logprobs is not None:
                choice["logprobs"] = shapes.chat(g.token_ids, g.logprobs)
        else:
            tokens, lps = g.token_ids, g.logprobs
            if opts.echo:
                text = g.prompt.text + text
            choice["text"] = text
            if opts.logprobs is not None:
                if opts.echo:
                    tokens, lps = g.prompt.ids + tokens, g.prompt_logprobs() + lps
                choice["logprobs"] = shapes.completion(tokens, lps, 0)
        if opts.return_token_ids:
            choice["token_ids"] = g.token_ids
            choice["prompt_token_ids"] = g.prompt.ids
        choices.append(choice)
    out = {
        "id": rid,
        "object": "chat.completion" if chat else "text_completion",
        "created": created,
        "model": st.model_name,
        "choices": choices,
        "usage": usage(),
    }
    if opts.return_token_ids and len({tuple(g.prompt.ids) for g in gens}) == 1:
        out["prompt_token_ids"] = gens[0].prompt.ids
    return out


def _message(opts: GenOptions, g: Generation, text: str) -> dict:
    """A chat choice's message: its text, or the tool calls it holds (finish_reason tool_calls);
    with tool_choice "auto", the text before the calls is the content."""
    content, calls = None, None
    if g.finish_reason == "stop" and opts.structured.choice is ToolChoice.AUTO:
        content, calls = auto_calls(text, opts.structured) or (None, None)
    elif g.finish_reason == "stop":
        calls = tool_calls(text, opts.structured)
    if calls is None:
        return {"role": "assistant", "content": text}
    g.finish_reason = "tool_calls"
    return {"role": "assistant", "content": content, "tool_calls": calls}


def _calls_delta(calls: list[dict]) -> dict:
    """A streamed chunk's delta of whole tool calls (OpenAI's: each with its index)."""
    return {"tool_calls": [{"index": i, **c} for i, c in enumerate(calls)]}


async def _events(st, opts: GenOptions, gens: list[Generation], chat: bool, shapes: _Shapes, rid: str, created: int, usage) -> AsyncIterator[str]:
    """Server-sent events: each chunk one choice's delta, with the log-probabilities of the tokens
    it covers; each choice ends with its finish_reason; then usage (include_usage; in every chunk too
    with continuous_usage_stats) and [DONE]."""
    obj = "chat.completion.chunk" if chat else "text_completion"
    offsets = [0] * len(gens)  # completions' text_offset, across chunks

    def chunk(g: Generation, delta: str | dict | None, finish: str | None, first: bool = False, echo: bool = False) -> str:
        c: dict[str, Any] = {"index": g.index, "logprobs": None, "finish_reason": finish}
        if echo:
            tokens, lps = g.prompt.ids, (g.prompt_logprobs() if opts.logprobs is not None else [])
        else:
            tokens, lps = g.token_ids[g.sent :], g.logprobs[g.sent :]
            g.sent = len(g.token_ids)
        if chat:
            c["delta"] = {"role": "assistant", "content": ""} if first else (delta if isinstance(delta, dict) else {"content": delta} if delta else {})
            if opts.logprobs is not None and tokens and not first:
                c["logprobs"] = shapes.chat(tokens, lps)
        else:
            c["text"] = delta or ""
            if opts.logprobs is not None and tokens:
                c["logprobs"] = shapes.completion(tokens, lps, offsets[g.index])
                offsets[g.index] += sum(len(s) for s in c["logprobs"]["tokens"])
        if opts.return_token_ids and not echo:
            c["token_ids"] = tokens
        o: dict[str, Any] = {"id": rid, "object": obj, "created": created, "model": st.model_name, "choices": [c]}
        if opts.include_usage:
            o["usage"] = usage() if opts.continuous_usage else None
        return sse(o)

    q: asyncio.Queue[tuple[Generation, str | APIError | None]] = asyncio.Queue()
    # a forced tool call's text is held back and sent as tool_calls once whole (or as content if it is cut);
    # with "auto", text goes out until a call may start (ToolStream)
    s = opts.structured
    held = {g.index: "" for g in gens} if chat and s.choice not in (ToolChoice.NONE, ToolChoice.AUTO) else None
    streams = {g.index: ToolStream(s.parser) for g in gens} if chat and s.choice is ToolChoice.AUTO and s.parser is not None else None

    async def pump(g: Generation) -> None:
        try:
            async for d in g.deltas():
                q.put_nowait((g, d))
            q.put_nowait((g, None))
        except APIError as e:
            q.put_nowait((g, e))

    tasks: list[asyncio.Future] = []
    try:
        for g in gens:
            if chat:
                yield chunk(g, None, None, first=True)
        tasks = [asyncio.ensure_future(pump(g)) for g in gens]
        left = len(gens)
        echoed: set[int] = set()
        while left:
            g, d = await q.get()
            if isinstance(d, APIError):
                raise d
            if opts.echo and g.index not in echoed:  # the prompt first, once its log-probabilities are in
                echoed.add(g.index)
                yield chunk(g, g.prompt.text, None, echo=True)
            if d is None:
                left -= 1
                if held is not None:
                    text = held[g.index]
                    message = _message(opts, g, text)
                    calls = message.get("tool_calls")
                    delta = _calls_delta(calls) if calls else text
                    yield chunk(g, delta, None)
                elif streams is not None:
                    rest, found = streams[g.index].finish(g.finish_reason == "stop", s.parallel)
                    if found:
                        g.finish_reason = "tool_calls"
                        yield chunk(g, _calls_delta(found), None)
                    elif rest:
                        yield chunk(g, rest, None)
                yield chunk(g, None, g.finish_reason)
            elif held is not None:
                held[g.index] += d
            elif streams is not None:
                out = streams[g.index].feed(d)
                if out or opts.return_token_ids or opts.logprobs is not None:
                    yield chunk(g, out, None)
            elif d or opts.return_token_ids or opts.logprobs is not None:
                yield chunk(g, d, None)
        if opts.include_usage:
            yield sse({"id": rid, "object": obj, "created": created, "model": st.model_name, "choices": [], "usage": usage()})
    except APIError as e:
        yield sse(e.body())
    finally:
        for t in tasks:
            t.cancel()
        for g in gens:
            g.abort()
    yield "data: [DONE]\n\n"
