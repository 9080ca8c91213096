"""Grammar mask cost per token: what constrained decoding (`response_format`, `tools`) adds to each
sampled token on the last stage, for the grammar libraries hetc could use.

    python benchmarks/grammar_mask.py [--vocab 32000] [--libs llguidance,xgrammar] [--repeats 5]

Tokenizer: a byte-level BPE of `--vocab` tokens trained on this Python's standard library source
(offline; the size of Llama 2's vocabulary), or `--tokenizer DIR` (a Hugging Face tokenizer dir).
Workload: a JSON schema of the shape tool calls and extraction ask for (nested object, enum,
integers with bounds, an array of objects, optional fields); a valid instance of it is tokenized
and walked token by token: at each token the library computes the allowed-token mask (timed),
the token is checked against it and consumed. Reported per library: the time to build its
tokenizer index, to compile the schema, and the mask time per token (median and p90 over all
tokens of `--repeats` walks). xgrammar is measured when importable (it is not a hetc dependency:
it requires an unpinned triton).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import sysconfig
import tempfile
import time
from pathlib import Path

import torch

SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 64},
        "age": {"type": "integer", "minimum": 0, "maximum": 150},
        "role": {"enum": ["admin", "editor", "viewer"]},
        "address": {
            "type": "object",
            "properties": {"street": {"type": "string"}, "city": {"type": "string"}, "zip": {"type": "string", "pattern": "^[0-9]{5}$"}},
            "required": ["street", "city"],
            "additionalProperties": False,
        },
        "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 8},
        "orders": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {"id": {"type": "integer"}, "total": {"type": "number"}, "paid": {"type": "boolean"}},
                "required": ["id", "total", "paid"],
                "additionalProperties": False,
            },
        },
        "note": {"type": ["string", "null"]},
    },
    "required": ["name", "age", "role", "address", "tags", "orders"],
    "additionalProperties": False,
}
INSTANCE = {
    "name": "Ada Lovelace",
    "age": 36,
    "role": "editor",
    "address": {"street": "12 St James's Square", "city": "London", "zip": "10001"},
    "tags": ["mathematics", "analytical engine", "poetry"],
    "orders": [{"id": 1843, "total": 120.5, "paid": True}, {"id": 1852, "total": 9.99, "paid": False}],
    "note": None,
}


def train_tokenizer(vocab: int, out: Path):
    """A byte-level BPE of `vocab` tokens trained on the standard library's source (offline)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    def text():
        for p in sorted(Path(sysconfig.get_paths()["stdlib"]).rglob("*.py"))[:1500]:
            yield p.read_bytes().decode("utf-8", errors="replace")

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab, special_tokens=["<s>", "</s>"], initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(text(), trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>")
    fast.save_pretrained(out)
    return fast


def walk_llguidance(hf, schema: str, ids: list[int], repeats: int) -> dict:
    import llguidance
    import llguidance.hf

    t0 = time.perf_counter()
    lt = llguidance.hf.from_tokenizer(hf, n_vocab=len(hf))
    t1 = time.perf_counter()
    grammar = llguidance.LLMatcher.grammar_from_json_schema(schema, defaults={"whitespace_flexible": False})
    base = llguidance.LLMatcher(lt, grammar, log_level=0)
    assert not base.is_error(), base.get_error()
    t2 = time.perf_counter()
    words = torch.zeros((len(hf) + 31) // 32, dtype=torch.int32)
    times = []
    for _ in range(repeats):
        m = base.deep_copy()
        for t in ids:
            s = time.perf_counter()
            m.unsafe_compute_mask_ptr(words.data_ptr(), words.numel() * 4)
            times.append(time.perf_counter() - s)
            assert (int(words[t // 32]) >> (t % 32)) & 1, f"token {t} masked"
            assert m.consume_token(t), m.get_error()
        assert m.is_accepting()
    return {"index_ms": (t1 - t0) * 1e3, "compile_ms": (t2 - t1) * 1e3, "times": times}


def walk_xgrammar(hf, schema: str, ids: list[int], repeats: int) -> dict:
    import xgrammar as xgr

    t0 = time.perf_counter()
    info = xgr.TokenizerInfo.from_huggingface(hf, vocab_size=len(hf))
    compiler = xgr.GrammarCompiler(info, max_threads=1, cache_enabled=False)
    t1 = time.perf_counter()
    compiled = compiler.compile_json_schema(schema, any_whitespace=False, separators=(",", ":"))
    t2 = time.perf_counter()
    bm = xgr.allocate_token_bitmask(1, info.vocab_size)
    times = []
    for _ in range(repeats):
        m = xgr.GrammarMatcher(compiled)
        for t in ids:
            s = time.perf_counter()
            m.fill_next_token_bitmask(bm)
            times.append(time.perf_counter() - s)
            assert (int(bm[0, t // 32]) >> (t % 32)) & 1, f"token {t} masked"
            assert m.accept_token(t)
    return {"index_ms": (t1 - t0) * 1e3, "compile_ms": (t2 - t1) * 1e3, "times": times}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--vocab", type=int, default=32000)
    ap.add_argument("--tokenizer", help="a Hugging Face tokenizer dir (default: train one)")
    ap.add_argument("--libs", default="llguidance,xgrammar")
    ap.add_argument("--repeats", type=int, default=5)
    a = ap.parse_args(argv)
    torch.set_num_threads(1)
    from transformers import AutoTokenizer

    if a.tokenizer:
        hf = AutoTokenizer.from_pretrained(a.tokenizer, local_files_only=True)
    else:
        t0 = time.perf_counter()
        hf = train_tokenizer(a.vocab, Path(tempfile.mkdtemp(prefix="hetc-bpe-")))
        print(f"tokenizer: byte-level BPE of {len(hf)} tokens trained on the standard library in {time.perf_counter() - t0:.1f} s")
    schema = json.dumps(SCHEMA)
    ids = hf.encode(json.dumps(INSTANCE, separators=(",", ":")), add_special_tokens=False)
    print(f"instance: {len(ids)} tokens; {a.repeats} walks per library")
    walks = {"llguidance": walk_llguidance, "xgrammar": walk_xgrammar}
    for lib in a.libs.split(","):
        try:
            r = walks[lib](hf, schema, ids, a.repeats)
        except ImportError as e:
            print(f"{lib}: not installed ({e})")
            continue
        us = sorted(t * 1e6 for t in r["times"])
        p90 = us[int(0.9 * (len(us) - 1))]
        print(
            f"{lib:10s}: tokenizer index {r['index_ms']:.0f} ms, schema compile {r['compile_ms']:.1f} ms, "
            f"mask per token median {statistics.median(us):.1f} µs, p90 {p90:.1f} µs, max {us[-1]:.0f} µs"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
