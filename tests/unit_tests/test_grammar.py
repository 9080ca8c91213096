"""Constrained decoding (runtime/grammar.py, runtime/structured.py, the last stage's SeqState):

- an output held to a JSON schema that ends with EOS parses and validates against the schema
  (jsonschema_rs, an independent validator), for a hypothesis family of schemas and seeds, sampled
  through the sampler and the sequence's sampling state from a tiny Llama's logits;
- the mask is exactly the set of tokens the grammar accepts next (brute force: each token tried
  on a copy of the matcher), for the served BPE tokenizer and the byte-level fallback;
- a preempted sequence's state, set up again from its tokens, masks as the original does;
- bad schemas and tool requests get a 400 naming the field; tool calls parse into OpenAI's shape.
"""

from __future__ import annotations

import json

import jsonschema_rs
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as hs

from hetc.runtime.grammar import GrammarError, Grammars, check_grammar, json_schema_grammar, mask_row
from hetc.runtime.protocol import APIError, parse_chat, parse_completion
from hetc.runtime.sampler import sample
from hetc.runtime.sampling_state import SeqState
from hetc.runtime.structured import ToolChoice, tool_calls
from hetc.runtime.tokenizer import ByteTokenizer, load_tokenizer
from tests.fixtures.serving import build_model

SETUP = {"pres": 0.0, "freq": 0.0, "rep": 1.0, "bias": [], "min": 0, "stops": []}
MAX_NEW = 48


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """(model, tokenizer, grammar state, eos) of the serve tests' tiny Llama (BPE of 320 tokens)."""
    from transformers import AutoModelForCausalLM

    d = tmp_path_factory.mktemp("tiny")
    build_model(d)
    model = AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32).eval()
    eos = model.config.eos_token_id
    tok = load_tokenizer(str(d), model.config.vocab_size, eos)
    return model, tok, Grammars(tok, model.config.vocab_size, [eos]), eos


def _state(grammars: Grammars, schema, eos: int, hist: list[int], n_prompt: int, bias=()) -> SeqState:
    rec = {**SETUP, "n": n_prompt, "hist": hist, "bias": [list(b) for b in bias], "grammar": json_schema_grammar(schema), "eos": [eos]}
    return SeqState.from_setup(rec, lambda e: grammars)


def _generate(tiny, schema, seed: int, temperature: float) -> tuple[list[int], bool]:
    """(generated tokens, ended with EOS): sampled from the tiny Llama held to `schema`; EOS and
    the tokens that close a string, object or array get +4 so that outputs end within budget."""
    model, tok, grammars, eos = tiny
    closers = {t for s in ('"', "}", "]") for t in tok.encode(s, add_special_tokens=False)}
    ids = tok.encode("json:", add_special_tokens=False)
    n = len(ids)
    st = _state(grammars, schema, eos, list(ids), n, bias=[(t, 4.0) for t in sorted(closers | {eos})])
    for pos in range(n, n + MAX_NEW):
        with torch.no_grad():
            row = model(torch.tensor([ids])).logits[0, -1].float().clone()  # [V]
        st.apply(row, pos)
        t = sample(row[None], [(temperature, 1.0, 0, seed)], [pos])[0]
        assert t >= 0 and st.failed is None
        if t == eos:
            return ids[n:], True
        ids.append(t)
        st.observe([t], pos)
    return ids[n:], False


NAMES = ["a", "id", "name", "x_1", "tags", "ok"]
LEAVES = hs.one_of(
    hs.just({"type": "boolean"}),
    hs.just({"type": "null"}),
    hs.just({"type": "number"}),
    hs.builds(lambda lo, span: {"type": "integer", "minimum": lo, "maximum": lo + span}, hs.integers(-50, 50), hs.integers(0, 500)),
    hs.builds(lambda k: {"type": "string", "maxLength": k}, hs.integers(0, 6)),
    hs.lists(hs.text("abz -", min_size=1, max_size=4), min_size=1, max_size=3, unique=True).map(lambda e: {"enum": e}),
)


@hs.composite
def _object(draw, children):
    props = draw(hs.dictionaries(hs.sampled_from(NAMES), children, min_size=1, max_size=3))
    required = [k for k in props if draw(hs.booleans())]
    return {"type": "object", "properties": props, "required": required, "additionalProperties": False}


def _extend(children):
    return hs.one_of(
        _object(children),
        hs.builds(lambda c, k: {"type": "array", "items": c, "maxItems": k}, children, hs.integers(0, 3)),
        hs.builds(lambda a, b: {"anyOf": [a, b]}, children, children),
    )


SCHEMAS = hs.recursive(LEAVES, _extend, max_leaves=6)


def test_outputs_that_end_with_eos_parse_and_validate_for_a_family_of_schemas_and_seeds(tiny):
    _, tok, _, _ = tiny
    ended = []

    @settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow], derandomize=True)
    @given(schema=SCHEMAS, seed=hs.integers(0, 2**31 - 1), temperature=hs.sampled_from([0.0, 0.7, 1.0]))
    def check(schema, seed, temperature):
        out, stopped = _generate(tiny, schema, seed, temperature)
        ended.append(stopped)
        if stopped:
            text = tok.decode(out)
            value = json.loads(text)
            assert jsonschema_rs.validator_for(schema).is_valid(value), (schema, text)

    check()
    assert sum(ended) >= len(ended) // 2, f"only {sum(ended)} of {len(ended)} outputs ended within {MAX_NEW} tokens: the property was barely tested"


def _brute_mask(grammars: Grammars, st: SeqState, vocab: int) -> set[int]:
    """Tokens the grammar accepts next: each tried on a copy of the matcher (EOS: once complete)."""
    ok = {t for t in range(vocab) if st.matcher.deep_copy().consume_token(t)}
    return ok | (set(grammars.tok.eos_tokens) if st.matcher.is_accepting() else set())


@pytest.mark.parametrize("kind", ["bpe", "bytes"])
def test_the_mask_is_the_set_of_tokens_the_grammar_accepts_next(tiny, kind):
    vocab = tiny[0].config.vocab_size if kind == "bpe" else 300
    grammars, eos = (tiny[2], tiny[3]) if kind == "bpe" else (Grammars(ByteTokenizer(299), 300, [299]), 299)
    tok = tiny[1] if kind == "bpe" else ByteTokenizer(299)
    schema = {"type": "object", "properties": {"n": {"type": "integer"}, "s": {"enum": ["ab", "b"]}}, "required": ["n", "s"], "additionalProperties": False}
    text = '{"n":-12,"s":"ab"}'
    ids = tok.encode(text, add_special_tokens=False)
    st = _state(grammars, schema, eos, [], 0)
    for i in range(len(ids) + 1):
        row = torch.zeros(vocab)
        st.apply(row, i)
        got = {int(t) for t in torch.nonzero(row == 0)[:, 0]}
        assert got == _brute_mask(grammars, st, vocab), f"after {tok.decode(ids[:i])!r}"
        if i < len(ids):
            assert ids[i] in got
            st.observe([ids[i]], i)
    assert got == {eos}  # the object is closed: only EOS is left


def test_a_state_set_up_again_from_its_tokens_masks_as_the_original(tiny):
    """A preempted sequence's state is rebuilt from its setup history (prompt + generated tokens)."""
    _, tok, grammars, eos = tiny
    schema = {"type": "array", "items": {"type": "string", "maxLength": 5}}
    prompt = tok.encode("list:", add_special_tokens=False)
    gen = tok.encode('["ab","', add_special_tokens=False)
    a = _state(grammars, schema, eos, prompt, len(prompt))
    a.observe(gen, len(prompt))
    b = _state(grammars, schema, eos, prompt + gen, len(prompt))
    ra, rb = torch.zeros(tiny[0].config.vocab_size), torch.zeros(tiny[0].config.vocab_size)
    a.apply(ra, len(prompt) + len(gen))
    b.apply(rb, len(prompt) + len(gen))
    assert torch.equal(ra, rb) and torch.isinf(ra).any() and (ra == 0).any()


def test_mask_row_masks_on_the_rows_device_and_keeps_allowed_logits(tiny):
    _, _, grammars, _ = tiny
    m = grammars.matcher(json_schema_grammar({"const": 7}))
    row = torch.linspace(-1, 1, tiny[0].config.vocab_size)
    before = row.clone()
    mask_row(m, row, torch.zeros((row.numel() + 31) // 32, dtype=torch.int32))
    kept = torch.isfinite(row)
    assert kept.sum() >= 1 and torch.equal(row[kept], before[kept])


def _chat(**kw) -> dict:
    return {"model": "m", "messages": [{"role": "user", "content": "hi"}], **kw}


@pytest.mark.parametrize(
    "schema",
    [{"type": "wat"}, {"$ref": "#/nope"}, {"type": "integer", "minimum": 5, "maximum": 2}],
)
def test_a_bad_schema_is_a_grammar_error_and_a_400_naming_the_field(schema):
    with pytest.raises(GrammarError):
        check_grammar(json_schema_grammar(schema))
    body = _chat(response_format={"type": "json_schema", "json_schema": {"name": "x", "schema": schema}})
    with pytest.raises(APIError) as e:
        parse_chat(body)
    assert e.value.status == 400 and e.value.param == "response_format.json_schema.schema"


CITY = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "parameters": CITY}},
    {"type": "function", "function": {"name": "now"}},
]


@pytest.mark.parametrize(
    "body, param",
    [
        (_chat(response_format={"type": "xml"}), "response_format.type"),
        (_chat(response_format={"type": "json_schema"}), "response_format.json_schema"),
        (_chat(response_format={"type": "json_schema", "json_schema": {"name": "a b", "schema": {}}}), "response_format.json_schema.name"),
        (_chat(response_format={"type": "json_schema", "json_schema": {"name": "a\n", "schema": {}}}), "response_format.json_schema.name"),
        (_chat(response_format={"type": "json_schema", "json_schema": {"name": "a", "schema": True}}), "response_format.json_schema.schema"),
        (_chat(response_format={"type": "json_schema", "json_schema": {"name": "a", "schema": {}, "extra": 1}}), "response_format.json_schema.extra"),
        (_chat(response_format={"type": "json_object"}, ignore_eos=True), "ignore_eos"),
        (_chat(tools=TOOLS), "tool_choice"),  # "auto", the default with tools
        (_chat(tools=TOOLS, tool_choice="auto"), "tool_choice"),
        (_chat(tool_choice="required"), "tool_choice"),
        (_chat(tools=TOOLS, tool_choice={"type": "function", "function": {"name": "nope"}}), "tool_choice"),
        (_chat(tools=[{"type": "function", "function": {"name": "f", "parameters": {"type": "wat"}}}], tool_choice="required"), "tools.0.function.parameters"),
        (_chat(tools=[TOOLS[0], TOOLS[0]], tool_choice="required"), "tools.1.function.name"),
        (_chat(tools=TOOLS, tool_choice="required", response_format={"type": "json_object"}), "response_format"),
        (_chat(messages=[{"role": "assistant", "content": None, "tool_calls": [{"function": {"name": "f", "arguments": 3}}]}]), "messages.0.tool_calls.0"),
        (_chat(messages=[{"role": "assistant", "tool_calls": [{"id": 5, "function": {"name": "f", "arguments": ""}}]}]), "messages.0.tool_calls.0"),
        (_chat(messages=[{"role": "user", "content": "x", "tool_call_id": "1"}]), "messages.0.tool_call_id"),
    ],
)
def test_bad_structured_requests_get_a_400_naming_the_field(body, param):
    with pytest.raises(APIError) as e:
        parse_chat(body)
    assert e.value.status == 400 and e.value.param == param, e.value.message


def test_tools_are_refused_on_completions_and_response_format_accepted():
    with pytest.raises(APIError) as e:
        parse_completion({"model": "m", "prompt": "x", "tools": TOOLS})
    assert e.value.param == "tools"
    opts, _ = parse_completion({"model": "m", "prompt": "x", "response_format": {"type": "json_object"}})
    assert opts.structured.grammar is not None


def test_tool_calls_parse_into_openais_shape():
    opts, msgs = parse_chat(_chat(tools=TOOLS, tool_choice={"type": "function", "function": {"name": "get_weather"}}))
    s = opts.structured
    assert s.choice is ToolChoice.NAMED and s.tools == TOOLS
    (call,) = tool_calls('{"city":"Paris"}', s)  # type: ignore[misc]
    assert call["type"] == "function" and call["id"].startswith("chatcmpl-tool-")
    assert call["function"] == {"name": "get_weather", "arguments": '{"city": "Paris"}'}
    opts, _ = parse_chat(_chat(tools=TOOLS, tool_choice="required"))
    calls = tool_calls('[{"name":"now","parameters":{}},{"name":"get_weather","parameters":{"city":"Oslo"}}]', opts.structured)
    assert [c["function"]["name"] for c in calls or []] == ["now", "get_weather"]
    assert tool_calls('[{"name":"now"', opts.structured) is None  # cut short: returned as text
    opts, _ = parse_chat(_chat(tools=TOOLS, tool_choice="required", parallel_tool_calls=False))
    assert '"maxItems":1' in (opts.structured.grammar or "")
    opts, _ = parse_chat(_chat(tools=TOOLS, tool_choice="none"))
    assert opts.structured.grammar is None and opts.structured.tools == TOOLS


def test_a_tool_loop_s_messages_reach_the_template_with_arguments_as_objects():
    msgs = [
        {"role": "user", "content": "weather?"},
        {"role": "assistant", "content": None, "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": '{"city":"O"}'}}]},
        {"role": "tool", "content": "4 °C", "tool_call_id": "c1", "name": "f"},
    ]
    _, out = parse_chat(_chat(messages=msgs))
    assert out[1]["tool_calls"][0]["function"]["arguments"] == {"city": "O"} and out[1]["content"] == ""
    assert out[2]["tool_call_id"] == "c1" and out[2]["name"] == "f"


def test_a_grammar_complete_before_min_tokens_fails_its_sequence_by_name(tiny):
    _, tok, grammars, eos = tiny
    rec = {**SETUP, "n": 0, "hist": [], "min": 5, "stops": [eos], "grammar": json_schema_grammar({"const": 1}), "eos": [eos]}
    st = SeqState.from_setup(rec, lambda e: grammars)
    (one,) = tok.encode("1", add_special_tokens=False)
    st.observe([one], 0)
    st.apply(torch.zeros(tiny[0].config.vocab_size), 1)
    assert st.failed is not None and "min_tokens" in st.failed


def test_a_constrained_sequence_through_the_frontend_setup_and_the_last_stage_steps(tiny):
    """LaneSampling.extras carries the grammar; SamplingStates.begin feeds the matcher each step's
    input (a looked-ahead token arrives as the next step's input, in order); sample_step masks, and
    a sequence whose grammar cannot go on gets GRAMMAR_ERROR, the stage going on."""
    from hetc.batching import GRAMMAR_ERROR, BatchItem
    from hetc.runtime.sampling_state import LaneSampling, SamplingStates, sample_step
    from hetc.runtime.transport import StepMeta
    from hetc.sequence import SamplingParams, Sequence

    _, tok, grammars, eos = tiny
    vocab = tiny[0].config.vocab_size
    target = tok.encode('{"ok":true}', add_special_tokens=False)
    grammar = json_schema_grammar({"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"], "additionalProperties": False})
    seq = Sequence(4, [5, 6], 2, SamplingParams(temperature=0, grammar=grammar), frozenset({eos}))
    states, lane = SamplingStates(lambda e: grammars), LaneSampling()
    pos, inp = 0, [5, 6]
    for want in [*target, eos]:
        ex = lane.extras([BatchItem(seq, pos, len(inp), sample=True)], [seq])
        meta = StepMeta(
            [4],
            [pos],
            [len(inp)],
            [True],
            [[1]],
            inp,
            [(0.0, 1.0, 0, 0)],
            StepMeta.decode(*StepMeta([4], [pos], [len(inp)], [True], [[1]], inp, [(0.0, 1.0, 0, 0)], ex).encode()).extras,
        )
        states.begin(meta)
        y = torch.zeros(1, vocab)
        y[0, want] = 3.0
        y[0, eos if want != eos else 0] = 5.0  # likelier, but not allowed: only the mask makes `want` win
        _, _, picked, _, _ = sample_step(y, meta, states, lambda t: t)
        assert picked == [want]
        pos, inp = pos + len(inp), [want]
        seq.token_ids.append(want)
    # a grammar the stage cannot build: that sequence fails alone
    bad = Sequence(5, [5], 1, SamplingParams(temperature=0, grammar="not a grammar"), frozenset({eos}))
    ex = lane.extras([BatchItem(bad, 0, 1, sample=True)], [bad])
    meta = StepMeta([5], [0], [1], [True], [[2]], [5], [(0.0, 1.0, 0, 0)], ex)
    states.begin(meta)
    assert sample_step(torch.zeros(1, vocab), meta, states, lambda t: t)[2] == [GRAMMAR_ERROR]


def test_tools_reach_the_chat_template_and_the_fallback_lists_them(tiny):
    import copy

    from hetc.runtime.tokenizer import HFTokenizer, apply_chat

    hf = copy.deepcopy(tiny[1].tok)
    hf.chat_template = "{% for t in tools or [] %}[{{ t['function']['name'] }}]{% endfor %}{% for m in messages %}{{ m['content'] }}{% endfor %}"
    got = hf.decode(apply_chat(HFTokenizer(hf), [{"role": "user", "content": "hi"}], tools=TOOLS))
    assert got.startswith("[get_weather][now]") and got.endswith("hi")
    msgs = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "", "tool_calls": [{"function": {"name": "now", "arguments": {}}}]}]
    text = ByteTokenizer().decode(apply_chat(ByteTokenizer(), msgs, tools=TOOLS))
    assert text.startswith("tools: " + json.dumps(TOOLS)) and 'assistant: [{"name": "now", "arguments": {}}]' in text
