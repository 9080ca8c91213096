"""Constrained decoding: `response_format` and tool calls as grammars that mask the logits.

The grammar library is llguidance (Microsoft's; MIT; one 3 MB wheel with no dependencies; what
vLLM's `guidance` backend and llama.cpp use): chosen over xgrammar (Apache-2.0; requires triton,
unpinned, beside torch) and outlines-core for its install and its mask speed per token on this
project's CPUs — measured in benchmarks/grammar_mask.py (docs/serving.md, "Structured output").
llguidance builds no automaton ahead of time: a grammar is checked and parsed once (its JSON
schema turned into a grammar text by `json_schema_grammar`), and each token's mask is computed
from the parser's state (an Earley parser over a lazily built lexer), in tens of microseconds.

Two halves, as for the rest of the sampling state (sampling_state.py):
- the frontend turns a request's `response_format` / `tools` into a grammar text and checks it
  (`check_grammar`: a bad schema is a 400 naming the field), and parses tool calls from the text;
- the last stage holds a `Grammars` (the tokenizer's index, built once per process, and each
  grammar parsed once, cached by its text), gives each constrained sequence a matcher of its own
  (`matcher`, a copy of the cached one), advances it with every generated token that goes into
  the model and masks its row's logits (`mask_row`) where the sampler runs.

JSON is generated compact (no whitespace between tokens: `whitespace_flexible` off), so a model
cannot fill its budget with blank lines inside an object — what vLLM's `disable_any_whitespace` is for.
"""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

import llguidance
import torch

__all__ = ["Grammars", "GrammarError", "check_grammar", "json_schema_grammar", "mask_row", "stage_grammars"]

JSON_OPTIONS = {"whitespace_flexible": False}  # compact JSON (see the module docstring)
CACHED_GRAMMARS = 256  # parsed grammars kept per process (least recently used dropped)


class GrammarError(ValueError):
    """A grammar llguidance cannot build (an invalid or unsupported schema), with its reason."""


def json_schema_grammar(schema: dict | bool) -> str:
    """llguidance's grammar text for outputs that are JSON valid against `schema`.

    Raises:
        GrammarError: `schema` is not a JSON object (or boolean) llguidance takes.
    """
    try:
        return llguidance.LLMatcher.grammar_from_json_schema(json.dumps(schema), defaults=JSON_OPTIONS)  # type: ignore[arg-type]
    except (ValueError, TypeError) as e:
        raise GrammarError(str(e)) from None


_checked: OrderedDict[str, str] = OrderedDict()  # grammar text → its error ("" when valid)
_checked_lock = threading.Lock()


def check_grammar(grammar: str) -> None:
    """Raise GrammarError when llguidance cannot build `grammar` (cached by its text: a schema
    repeated by every request of a client is parsed once)."""
    with _checked_lock:
        err = _checked.get(grammar)
        if err is not None:
            _checked.move_to_end(grammar)
    if err is None:
        err = llguidance.LLMatcher.validate_grammar(grammar)
        with _checked_lock:
            _checked[grammar] = err
            while len(_checked) > CACHED_GRAMMARS:
                _checked.popitem(last=False)
    if err:
        raise GrammarError(err)


class _ByteVocab:
    """runtime.tokenizer.ByteTokenizer as llguidance's TokenizerWrapper expects it: token i < 256 is
    byte i; the model's ids above 255 are special (never text)."""

    def __init__(self, vocab_size: int, eos: list[int]):
        self.eos_token_id = eos[0] if eos else vocab_size - 1
        self.bos_token_id = None
        self.tokens = [bytes([i]) for i in range(256)] + [f"<|{i}|>".encode() for i in range(256, vocab_size)]
        self.special_token_ids = list(range(256, vocab_size))

    def __call__(self, s: bytes) -> list[int]:
        return list(s)


class Grammars:
    """One process's grammar state for the served tokenizer: its index and the parsed grammars."""

    def __init__(self, tokenizer: Any, vocab_size: int, eos: list[int]):
        """Args:
        tokenizer: runtime.tokenizer's HFTokenizer or ByteTokenizer (the served model's).
        vocab_size: the model's logits width (ids the tokenizer lacks are never allowed).
        eos: the ids that end a sequence (allowed once the grammar is complete).
        """
        if hasattr(tokenizer, "tok"):
            from llguidance.hf import from_tokenizer

            self.tok = from_tokenizer(tokenizer.tok, n_vocab=vocab_size, eos_token=list(eos) or None)
        else:
            self.tok = llguidance.LLTokenizer(llguidance.TokenizerWrapper(_ByteVocab(vocab_size, list(eos))), n_vocab=vocab_size, eos_token=list(eos) or None)
        self.vocab_size = vocab_size
        self._parsed: OrderedDict[str, llguidance.LLMatcher] = OrderedDict()

    @staticmethod
    def load(model_dir: str | None, vocab_size: int, eos: list[int]) -> "Grammars":
        """The served model's tokenizer (as the frontend loads it: runtime.tokenizer) indexed."""
        from hetc.runtime.tokenizer import load_tokenizer

        return Grammars(load_tokenizer(model_dir, vocab_size, eos[0] if eos else None), vocab_size, eos)

    def matcher(self, grammar: str) -> llguidance.LLMatcher:
        """A fresh matcher of `grammar` (parsed once per process, then copied).

        Raises:
            GrammarError: llguidance cannot build it (the frontend checked it: not expected here).
        """
        base = self._parsed.get(grammar)
        if base is None:
            base = llguidance.LLMatcher(self.tok, grammar, log_level=0)
            if base.is_error():
                raise GrammarError(base.get_error())
            self._parsed[grammar] = base
            while len(self._parsed) > CACHED_GRAMMARS:
                self._parsed.popitem(last=False)
        else:
            self._parsed.move_to_end(grammar)
        return base.deep_copy()


def stage_grammars(model_ref: str, model_dir: str | None) -> Callable[[list[int]], Grammars]:
    """A last stage's grammar state by EOS ids, built when its first constrained sequence arrives
    (indexing a tokenizer takes about a second for 100k tokens: servers that never constrain never pay it).

    Args:
        model_ref: where the model's config comes from (its vocabulary: the logits' width).
        model_dir: the served model's directory (its tokenizer; none: the byte-level fallback).
    """
    built: dict[tuple[int, ...], Grammars] = {}

    def get(eos: list[int]) -> Grammars:
        if tuple(eos) not in built:
            from hetc.partitioner.capture.capture import load_hf_config

            built[tuple(eos)] = Grammars.load(model_dir, load_hf_config(model_ref)[0].vocab_size, eos)
        return built[tuple(eos)]

    return get


_BITS = torch.arange(32, dtype=torch.int32)


def mask_row(matcher: llguidance.LLMatcher, row: torch.Tensor, words: torch.Tensor) -> None:
    """Set the logits of the tokens `matcher` does not allow next to -inf, in place.

    Args:
        matcher: the sequence's matcher, having consumed every token generated before this one.
        row: [V] fp32 logits (on any device).
        words: [ceil(V / 32)] int32 host scratch the mask is computed into (one bit per token).
    """
    matcher.unsafe_compute_mask_ptr(words.data_ptr(), words.numel() * 4)
    allowed = ((words.unsqueeze(1) >> _BITS) & 1).view(-1)[: row.numel()].bool()  # [V]
    row.masked_fill_(~allowed.to(row.device), float("-inf"))
