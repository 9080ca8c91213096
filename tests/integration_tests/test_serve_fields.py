"""The OpenAI request fields `hetc serve` honours (issue 32), end to end through the `openai`
client, on the tiny Llama of the serve tests (3 stages, eager, 16-token prefill chunks: prompt
log-probabilities cross chunks and stages; the lane looks ahead, so the last stage's sampling
state is fed by the first stage's filled-in tokens):

- log-probabilities (prompt with echo, and generated; top-k in order) equal log_softmax of
  Hugging Face's logits at every position within 1e-4, streamed and not;
- a list of prompts answers one choice per prompt, in order, each what that prompt alone gives;
- n samples with a seed are reproducible, each what a request of its seed gives alone, and share
  the prompt's KV blocks (forked);
- outputs held to a JSON schema (response_format) that stop parse and validate, streamed and not;
  a forced tool call comes back as `tool_calls` (finish_reason tool_calls), streamed and not;
- presence/frequency/repetition penalties, logit_bias, min_tokens and stop_token_ids give what
  Hugging Face `generate` gives with the same definitions as logits processors (greedy);
- unknown and not-yet-supported fields get a 400 naming them, and the server serves on;
- /tokenize, /detokenize, /version and /v1/models as vLLM shapes them.
"""

from __future__ import annotations

import json

import httpx2 as httpx
import jsonschema_rs
import openai
import pytest
import torch

from hetc import __version__
from tests.fixtures.sampling import hf_greedy
from hetc.runtime.generation import sample_seed
from tests.fixtures.serving import KEY, NAME, TEXTS, client, metric, start_serve

TOL = 1e-4  # fp32


@pytest.fixture(scope="module")
def server(built, tmp_path_factory):
    _, plan, _ = built
    served = start_serve(
        plan,
        "--emulate",
        "--executor",
        "torch",
        "--api-key",
        KEY,
        "--served-model-name",
        NAME,
        "--max-batched-tokens",
        "16",
        "--timeout",
        "30",
        log=tmp_path_factory.mktemp("log") / "serve.log",
    )
    yield served.url
    served.stop(30)


@pytest.fixture(scope="module")
def hf(built):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model_dir, _, _ = built
    return AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval(), AutoTokenizer.from_pretrained(model_dir)


def _log_softmax(model, ids: list[int]) -> torch.Tensor:
    with torch.no_grad():
        return torch.log_softmax(model(torch.tensor([ids])).logits[0].float(), -1)  # [T, V]


def _text(tok, t: int) -> str:
    return tok.decode([t], skip_special_tokens=False)


def _prompts() -> list[list[int]]:
    g = torch.Generator().manual_seed(5)
    return [torch.randint(2, 320, (n,), generator=g).tolist() for n in (5, 23, 40)]


def test_completion_logprobs_with_echo_equal_hf_at_every_position_for_a_list_of_prompts(server, hf):
    model, tok = hf
    prompts, k = _prompts(), 4
    r = client(server).completions.create(model=NAME, prompt=prompts, max_tokens=6, temperature=0, logprobs=k, echo=True, extra_body={"return_token_ids": True})
    assert [c.index for c in r.choices] == [0, 1, 2]
    for p, c in zip(prompts, r.choices):
        gen = c.model_extra["token_ids"]
        ids = p + gen
        ls = _log_softmax(model, ids)
        lp = c.logprobs
        assert lp.tokens == [_text(tok, t) for t in ids] and lp.token_logprobs[0] is None and lp.top_logprobs[0] is None
        for pos in range(1, len(ids)):
            row = ls[pos - 1]
            assert abs(lp.token_logprobs[pos] - row[ids[pos]].item()) < TOL, f"position {pos}"
            top = row.topk(k)
            want = {}
            for t, v in zip(top.indices.tolist(), top.values.tolist()):
                want.setdefault(_text(tok, t), v)
            want.setdefault(_text(tok, ids[pos]), row[ids[pos]].item())
            got = lp.top_logprobs[pos]
            assert list(got) == list(want) and all(abs(got[s] - want[s]) < TOL for s in want), f"position {pos}"
        offsets = [0]
        for s in lp.tokens[:-1]:
            offsets.append(offsets[-1] + len(s))
        assert lp.text_offset == offsets
        # greedy: each generated token is the model's most likely
        assert gen == [int(ls[pos - 1].argmax()) for pos in range(len(p), len(ids))]


def test_chat_logprobs_equal_hf_streamed_and_not(server, hf):
    model, tok = hf
    c = client(server)
    msgs = [{"role": "user", "content": TEXTS[2]}]
    kw = dict(model=NAME, messages=msgs, max_tokens=8, temperature=0, logprobs=True, top_logprobs=3)
    r = c.chat.completions.create(**kw, extra_body={"return_token_ids": True})
    ch = r.choices[0]
    prompt, gen = ch.model_extra["prompt_token_ids"], ch.model_extra["token_ids"]
    ls = _log_softmax(model, prompt + gen)
    assert len(ch.logprobs.content) == len(gen)
    for i, (t, e) in enumerate(zip(gen, ch.logprobs.content)):
        row = ls[len(prompt) + i - 1]
        assert e.token == _text(tok, t) and abs(e.logprob - row[t].item()) < TOL
        top = row.topk(3)
        assert [x.token for x in e.top_logprobs] == [_text(tok, j) for j in top.indices.tolist()]
        assert all(abs(x.logprob - v) < TOL for x, v in zip(e.top_logprobs, top.values.tolist()))
    # each token's own bytes (a piece of a character included): together, the answer's text
    # (the answer may end inside a character: its text then shows U+FFFD where the bytes stop)
    text = bytes(b for e, t in zip(ch.logprobs.content, gen) if t != tok.eos_token_id for b in e.bytes).decode("utf-8", "ignore")
    assert text == ch.message.content.replace("\ufffd", "")
    streamed = [x for chunk in c.chat.completions.create(**kw, stream=True) for ch2 in chunk.choices if ch2.logprobs for x in ch2.logprobs.content]
    assert [(x.token, round(x.logprob, 4)) for x in streamed] == [(x.token, round(x.logprob, 4)) for x in ch.logprobs.content]


def test_streamed_completion_logprobs_and_echo_match_the_whole_answer(server):
    c = client(server)
    kw = dict(model=NAME, prompt=[TEXTS[0], TEXTS[1]], max_tokens=5, temperature=0, logprobs=2, echo=True)
    whole = c.completions.create(**kw)
    parts: dict[int, dict] = {}
    for chunk in c.completions.create(**kw, stream=True):
        for ch in chunk.choices:
            p = parts.setdefault(ch.index, {"text": "", "tokens": [], "lp": [], "offsets": []})
            p["text"] += ch.text
            if ch.logprobs:
                p["tokens"] += ch.logprobs.tokens
                p["lp"] += ch.logprobs.token_logprobs
                p["offsets"] += ch.logprobs.text_offset
    assert sorted(parts) == [0, 1]
    for ch in whole.choices:
        p = parts[ch.index]
        assert p["text"] == ch.text and p["tokens"] == ch.logprobs.tokens and p["offsets"] == ch.logprobs.text_offset
        assert p["lp"][0] is None and p["lp"][1:] == pytest.approx(ch.logprobs.token_logprobs[1:], abs=TOL)


def test_echo_with_max_tokens_zero_scores_the_prompt_only(server, hf):
    model, tok = hf
    ids = _prompts()[1]
    r = client(server).completions.create(model=NAME, prompt=ids, max_tokens=0, echo=True, logprobs=0)
    ch = r.choices[0]
    ls = _log_softmax(model, ids)
    assert r.usage.completion_tokens == 0 and ch.text == tok.decode(ids, skip_special_tokens=True)
    assert ch.logprobs.token_logprobs[1:] == pytest.approx([ls[p - 1, ids[p]].item() for p in range(1, len(ids))], abs=TOL)


def test_a_list_of_prompts_answers_in_order_as_each_alone(server):
    c = client(server)
    prompts = [TEXTS[0], _prompts()[0], TEXTS[3]]
    r = c.completions.create(model=NAME, prompt=prompts, max_tokens=7, temperature=0)
    assert [ch.index for ch in r.choices] == [0, 1, 2]
    for p, ch in zip(prompts, r.choices):
        assert ch.text == c.completions.create(model=NAME, prompt=p, max_tokens=7, temperature=0).choices[0].text
    alone = [c.completions.create(model=NAME, prompt=p, max_tokens=7, temperature=0, extra_body={"return_token_ids": True}) for p in prompts]
    assert r.usage.completion_tokens == sum(len(a.choices[0].model_extra["token_ids"]) for a in alone)


def test_n_samples_with_a_seed_are_reproducible(server):
    c = client(server)
    kw = dict(model=NAME, prompt=TEXTS[1], max_tokens=8, temperature=1.0, n=4, seed=11)
    a, b = c.completions.create(**kw), c.completions.create(**kw)
    assert [ch.index for ch in a.choices] == [0, 1, 2, 3]
    assert [ch.text for ch in a.choices] == [ch.text for ch in b.choices]
    assert len({ch.text for ch in a.choices}) > 1  # each sample its own draw
    # the first sample is the request's own seed: n=1 with that seed gives it
    assert c.completions.create(**{**kw, "n": 1}).choices[0].text == a.choices[0].text
    streamed: dict[int, str] = {}
    for chunk in c.completions.create(**kw, stream=True):
        for ch in chunk.choices:
            streamed[ch.index] = streamed.get(ch.index, "") + ch.text
    assert [streamed[i] for i in range(4)] == [ch.text for ch in a.choices]
    # each sample is what a request of its seed gives alone (the seeding contract: generation.sample_seed)
    for j, ch in enumerate(a.choices):
        assert c.completions.create(**{**kw, "n": 1, "seed": sample_seed(11, j)}).choices[0].text == ch.text
    # the samples fork from one sequence: the prompt is looked up in the prefix cache (and computed) once, not n times
    prompt = torch.randint(2, 320, (37,), generator=torch.Generator().manual_seed(9)).tolist()
    queried = lambda: sum(v for _, v in metric(server, "hetc_prefix_cache_queries_total"))  # noqa: E731
    before = queried()
    r = c.completions.create(model=NAME, prompt=prompt, max_tokens=3, n=4, seed=3, extra_body={"ignore_eos": True})
    assert queried() - before == len(prompt) and all(ch.finish_reason == "length" for ch in r.choices)


@pytest.mark.parametrize(
    "fields",
    [
        {"frequency_penalty": 1.5},
        {"presence_penalty": 1.2},
        {"repetition_penalty": 1.8},
        {"logit_bias": {"17": 4.0, "40": -100}, "frequency_penalty": 0.7, "repetition_penalty": 1.3},
        {"logit_bias": {"1": 100}, "min_tokens": 5},  # EOS (1) first, but not before 5 tokens
    ],
)
def test_penalties_bias_and_min_tokens_give_what_hf_generate_gives(server, hf, fields):
    model, tok = hf
    prompt = _prompts()[1]
    c = client(server)
    r = c.completions.create(model=NAME, prompt=prompt, max_tokens=16, temperature=0, extra_body={**fields, "return_token_ids": True})
    got = r.choices[0].model_extra["token_ids"]
    assert got == hf_greedy(model, prompt, fields, 16, tok.eos_token_id)
    plain = c.completions.create(model=NAME, prompt=prompt, max_tokens=16, temperature=0, extra_body={"return_token_ids": True})
    assert plain.choices[0].model_extra["token_ids"] != got  # each field changed the output


def test_stop_token_ids_end_the_sequence_at_that_token(server):
    c = client(server)
    plain = c.completions.create(model=NAME, prompt=TEXTS[0], max_tokens=10, temperature=0, extra_body={"return_token_ids": True, "ignore_eos": True})
    toks = plain.choices[0].model_extra["token_ids"]
    stop = toks[4]
    extra = {"return_token_ids": True, "ignore_eos": True, "stop_token_ids": [stop]}  # ignore_eos leaves stop_token_ids on
    r = c.completions.create(model=NAME, prompt=TEXTS[0], max_tokens=10, temperature=0, extra_body=extra)
    got = r.choices[0].model_extra["token_ids"]
    assert got == toks[: toks.index(stop) + 1] and r.choices[0].finish_reason == "stop"


@pytest.mark.parametrize(
    "extra,param,says",
    [
        ({"temprature": 0.5}, "temprature", "unknown field"),
        ({"response_format": {"type": "xml"}}, "response_format.type", "not one of"),
        ({"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "wat"}}}}, "response_format.json_schema.schema", "wat"),
        ({"suffix": "end"}, "suffix", "not supported"),
        ({"best_of": 3}, "best_of", "not supported"),
        ({"logit_bias": {"100000": 1}}, "logit_bias", "vocabulary"),
    ],
)
def test_unknown_and_unsupported_fields_are_refused_by_name(server, extra, param, says):
    c = client(server)
    with pytest.raises(openai.BadRequestError) as e:
        c.completions.create(model=NAME, prompt="hi", max_tokens=2, extra_body=extra)
    err = e.value.body
    assert err["param"] == param and says in err["message"]
    with pytest.raises(openai.BadRequestError) as e:
        c.chat.completions.create(model=NAME, messages=[{"role": "user", "content": "hi"}], tools=[{"type": "function", "function": {"name": "f"}}])
    assert e.value.body["param"] == "tool_choice" and '"auto"' in e.value.body["message"]  # the default with tools
    assert c.completions.create(model=NAME, prompt="hi", max_tokens=2).choices[0].finish_reason in ("stop", "length")


def test_openai_client_sends_every_field_it_knows(server):
    c = client(server)
    r = c.completions.create(
        model=NAME,
        prompt=[TEXTS[0], TEXTS[1]],
        max_tokens=5,
        n=2,
        best_of=2,
        seed=3,
        temperature=0.8,
        top_p=0.9,
        presence_penalty=0.3,
        frequency_penalty=0.2,
        logit_bias={"17": 1.0},
        logprobs=1,
        echo=False,
        stop=["zzz"],
        user="client-test",
        suffix=None,
        extra_body={"top_k": 20, "repetition_penalty": 1.1, "min_tokens": 2, "stop_token_ids": [5]},
    )
    assert [ch.index for ch in r.choices] == [0, 1, 2, 3] and all(len(ch.logprobs.tokens) >= 2 for ch in r.choices)
    ch = c.chat.completions.create(
        model=NAME,
        messages=[{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}],
        max_completion_tokens=4,
        n=2,
        seed=1,
        logprobs=True,
        top_logprobs=2,
        presence_penalty=0.5,
        frequency_penalty=0.5,
        logit_bias={"3": -5},
        stop="zzz",
        user="u",
        parallel_tool_calls=False,
        stream_options=None,
    )
    assert len(ch.choices) == 2 and all(len(x.logprobs.content) == len(x.logprobs.content) and x.logprobs.content for x in ch.choices)


def test_tokenize_detokenize_version_and_models(server, hf):
    _, tok = hf
    h = {"Authorization": f"Bearer {KEY}"}
    r = httpx.post(f"{server}/tokenize", json={"prompt": TEXTS[0], "return_token_strs": True}, headers=h).json()
    ids = tok(TEXTS[0]).input_ids
    assert r == {"count": len(ids), "max_model_len": r["max_model_len"], "tokens": ids, "token_strs": [_text(tok, t) for t in ids]}
    chat = httpx.post(f"{server}/tokenize", json={"messages": [{"role": "user", "content": "hi"}]}, headers=h).json()
    want = tok.apply_chat_template([{"role": "user", "content": "hi"}], add_generation_prompt=True, tokenize=True)
    assert chat["tokens"] == list(want.get("input_ids", want) if hasattr(want, "get") else want) and chat["token_strs"] is None
    assert httpx.post(f"{server}/detokenize", json={"tokens": ids}, headers=h).json() == {"prompt": tok.decode(ids, skip_special_tokens=True)}
    assert httpx.post(f"{server}/detokenize", json={"tokens": [10**6]}, headers=h).status_code == 400
    assert httpx.get(f"{server}/version").json() == {"version": __version__}
    card = client(server).models.list().data[0]
    extra = card.model_extra
    assert card.id == NAME and card.object == "model" and extra["max_model_len"] == r["max_model_len"] and "root" in extra and extra["parent"] is None
    assert extra["permission"][0]["object"] == "model_permission" and extra["permission"][0]["allow_logprobs"] is True


WEATHER = {
    "type": "object",
    "properties": {"city": {"enum": ["Paris", "Oslo", "Lima"]}, "days": {"type": "integer", "minimum": 1, "maximum": 14}, "metric": {"type": "boolean"}},
    "required": ["city", "days"],
    "additionalProperties": False,
}
CLOCK = {"type": "object", "properties": {"zone": {"enum": ["UTC", "CET"]}}, "required": ["zone"], "additionalProperties": False}
TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "description": "the forecast", "parameters": WEATHER}},
    {"type": "function", "function": {"name": "get_time", "parameters": CLOCK}},
]
ASK = [{"role": "user", "content": "what is the weather like?"}]


def _streamed_text(stream) -> dict[int, tuple[str, str | None]]:
    out: dict[int, tuple[str, str | None]] = {}
    for chunk in stream:
        for ch in chunk.choices:
            text, _ = out.get(ch.index, ("", None))
            out[ch.index] = (text + (ch.delta.content or ""), ch.finish_reason or out.get(ch.index, ("", None))[1])
    return out


def test_json_schema_outputs_parse_and_validate_streamed_and_not(server):
    c = client(server)
    fmt = {"type": "json_schema", "json_schema": {"name": "weather", "schema": WEATHER}}
    kw = dict(model=NAME, messages=ASK, max_tokens=80, temperature=1.0, seed=7, n=3, response_format=fmt)
    r = c.chat.completions.create(**kw)
    check = jsonschema_rs.validator_for(WEATHER)
    assert [ch.finish_reason for ch in r.choices] == ["stop"] * 3  # the schema ends every output well within budget
    for ch in r.choices:
        assert check.is_valid(json.loads(ch.message.content)), ch.message.content
    streamed = _streamed_text(c.chat.completions.create(**kw, stream=True))
    assert [streamed[i] for i in range(3)] == [(ch.message.content, "stop") for ch in r.choices]
    # json_object: any object; greedy with a lookahead lane and a bias towards closing it
    ids = httpx.post(f"{server}/tokenize", json={"prompt": "}", "add_special_tokens": False}, headers={"Authorization": f"Bearer {KEY}"}).json()["tokens"]
    o = c.chat.completions.create(model=NAME, messages=ASK, max_tokens=60, temperature=0, response_format={"type": "json_object"}, logit_bias={str(ids[0]): 5})
    if o.choices[0].finish_reason == "stop":
        assert isinstance(json.loads(o.choices[0].message.content), dict)


def test_a_forced_tool_call_comes_back_as_tool_calls(server):
    c = client(server)
    named = {"type": "function", "function": {"name": "get_weather"}}
    r = c.chat.completions.create(model=NAME, messages=ASK, tools=TOOLS, tool_choice=named, max_tokens=80, seed=2)
    ch = r.choices[0]
    assert ch.finish_reason == "tool_calls" and ch.message.content is None
    (call,) = ch.message.tool_calls
    assert call.type == "function" and call.function.name == "get_weather" and call.id
    assert jsonschema_rs.validator_for(WEATHER).is_valid(json.loads(call.function.arguments))
    # "required": one call (parallel_tool_calls false) of either tool, its arguments valid for it
    kw = dict(model=NAME, messages=ASK, tools=TOOLS, tool_choice="required", parallel_tool_calls=False, max_tokens=120, temperature=1.0, seed=5)
    r = c.chat.completions.create(**kw)
    assert r.choices[0].finish_reason == "tool_calls"
    (call,) = r.choices[0].message.tool_calls
    schema = {"get_weather": WEATHER, "get_time": CLOCK}[call.function.name]
    assert jsonschema_rs.validator_for(schema).is_valid(json.loads(call.function.arguments))
    # streamed: the call arrives whole in one delta, then finish_reason tool_calls
    deltas, finish = [], None
    for chunk in c.chat.completions.create(**kw, stream=True):
        for d in chunk.choices:
            deltas += d.delta.tool_calls or []
            finish = d.finish_reason or finish
    assert finish == "tool_calls" and [(d.index, d.function.name, json.loads(d.function.arguments)) for d in deltas] == [
        (0, call.function.name, json.loads(call.function.arguments))
    ]
    # the tool's answer goes back in the next turn
    turn = [*ASK, {"role": "assistant", "content": None, "tool_calls": [call.model_dump()]}, {"role": "tool", "tool_call_id": call.id, "content": "sunny"}]
    assert c.chat.completions.create(model=NAME, messages=turn, tools=TOOLS, tool_choice="none", max_tokens=3).choices[0].finish_reason in ("stop", "length")
