"""Text ↔ token ids for the server: the model dir's tokenizer and chat template, or a
byte-level fallback (one token per UTF-8 byte; labelled as such in /v1/models)."""

from __future__ import annotations

import json
from pathlib import Path

__all__ = ["ByteTokenizer", "Detokenizer", "apply_chat", "load_tokenizer", "token_bytes", "token_text"]

_FALLBACK_TEMPLATE = "{role}: {content}\n"


class ByteTokenizer:
    """Token id = byte value (0..255); needs a vocabulary of at least 256."""

    kind = "byte-level fallback"
    chat_template = None

    def __init__(self, eos_token_id: int | None = None):
        self.eos_token_id = eos_token_id

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        return list(text.encode("utf-8"))

    def decode(self, ids: list[int]) -> str:
        return bytes(i for i in ids if 0 <= i < 256).decode("utf-8", errors="replace")


class HFTokenizer:
    kind = "hf"

    def __init__(self, tok):
        self.tok = tok
        self.eos_token_id = tok.eos_token_id
        self.chat_template = getattr(tok, "chat_template", None)

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        return self.tok.encode(text, add_special_tokens=add_special_tokens)

    def decode(self, ids: list[int]) -> str:
        return self.tok.decode(ids, skip_special_tokens=True)


def load_tokenizer(model_dir: str | None, vocab_size: int, eos_token_id: int | None):
    """The model dir's tokenizer when it has one, else the byte-level fallback.

    Args:
        model_dir: the served model's directory (None with random weights from a catalog name).
        vocab_size: the model's vocabulary (the fallback needs ≥ 256).
        eos_token_id: from the model config, for the fallback.
    """
    if model_dir and any((Path(model_dir) / f).is_file() for f in ("tokenizer.json", "tokenizer.model", "tokenizer_config.json")):
        from transformers import AutoTokenizer

        return HFTokenizer(AutoTokenizer.from_pretrained(model_dir, local_files_only=True))
    if vocab_size < 256:
        raise ValueError(f"the model has no tokenizer and a vocabulary of {vocab_size} < 256 byte tokens")
    return ByteTokenizer(eos_token_id if eos_token_id is not None and eos_token_id >= 256 else None)


def apply_chat(tokenizer, messages: list[dict], add_generation_prompt: bool = True, tools: list[dict] | None = None) -> list[int]:
    """Prompt ids for a chat: the tokenizer's template (given `tools` as transformers passes them),
    or `role: content` lines ending in `assistant:` (the generation prompt), after a `tools:` line
    of their JSON when tools are given, and with each assistant message's tool calls as JSON."""
    if getattr(tokenizer, "chat_template", None):
        out = tokenizer.tok.apply_chat_template(messages, tools=tools, add_generation_prompt=add_generation_prompt, tokenize=True)
        if isinstance(out, dict) or hasattr(out, "keys"):  # some versions return a BatchEncoding
            out = out["input_ids"]
        return list(out)
    lines = [f"tools: {json.dumps(tools, ensure_ascii=False)}\n"] if tools else []
    for m in messages:
        calls = [c["function"] for c in m.get("tool_calls", ())]
        lines.append(_FALLBACK_TEMPLATE.format(role=m["role"], content=m["content"] + (json.dumps(calls, ensure_ascii=False) if calls else "")))
    return tokenizer.encode("".join(lines) + ("assistant:" if add_generation_prompt else ""))


def _byte_level_decoder() -> dict[str, int]:
    """GPT-2's byte-level alphabet inverted: the character a byte-level BPE piece uses → its byte."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    chars, n = {b: b for b in printable}, 0
    for b in range(256):
        if b not in chars:
            chars[b] = 256 + n
            n += 1
    return {chr(c): b for b, c in chars.items()}


_BYTE_LEVEL = _byte_level_decoder()


def token_bytes(tokenizer, token: int) -> bytes:
    """One token's own bytes (a piece of a multi-byte character included), as chat log-probabilities'
    `bytes` give them: byte-level BPE pieces and SentencePiece's <0xNN> byte tokens byte for byte,
    other tokens as their text's UTF-8."""
    if not isinstance(tokenizer, HFTokenizer):
        return bytes([token]) if 0 <= token < 256 else b""
    piece = tokenizer.tok.convert_ids_to_tokens(token)
    if piece is None:
        return b""
    if piece.startswith("<0x") and piece.endswith(">") and len(piece) == 6:
        return bytes([int(piece[3:5], 16)])
    decoder = getattr(getattr(tokenizer.tok, "backend_tokenizer", None), "decoder", None)
    if type(decoder).__name__ == "ByteLevel" and all(c in _BYTE_LEVEL for c in piece):
        return bytes(_BYTE_LEVEL[c] for c in piece)
    return token_text(tokenizer, token).encode("utf-8")


def token_text(tokenizer, token: int) -> str:
    """One token's own text (special tokens included), as log-probabilities and /tokenize show it."""
    if isinstance(tokenizer, HFTokenizer):
        return tokenizer.tok.decode([token], skip_special_tokens=False)
    return tokenizer.decode([token])


class Detokenizer:
    """Incremental text of a growing list of ids: each call returns only the new text,
    holding back a trailing partial UTF-8 character (shown as U+FFFD) until it completes."""

    def __init__(self, tokenizer):
        self.tok, self.ids, self.text = tokenizer, [], ""

    def add(self, token: int) -> str:
        self.ids.append(token)
        full = self.tok.decode(self.ids)
        if full.endswith("\ufffd"):
            return ""
        delta = full[len(self.text) :] if full.startswith(self.text) else ""
        self.text = full if full.startswith(self.text) else self.text
        return delta

    def flush(self) -> str:
        full = self.tok.decode(self.ids)
        delta = full[len(self.text) :] if full.startswith(self.text) else ""
        self.text = full if full.startswith(self.text) else self.text
        return delta
