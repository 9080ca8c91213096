"""lm-evaluation-harness against `hetc serve` (slow), each task beside lm-eval's own `hf` model on
the same weights (tests/fixtures/lm_eval, read from local JSON files: no hub access):

- a multiple-choice task through `local-completions` (echo + logprobs with max_tokens 1): every
  choice's log-likelihood agrees within 1e-3 and so does the accuracy;
- a generation task (greedy, until a newline) through `local-completions` and, with the
  tokenizer's chat template, `local-chat-completions`: the same text for every document.

Both runs are lm-eval's command line, in subprocesses with HF_HUB_OFFLINE=1 and
HF_DATASETS_OFFLINE=1 (the datasets cache in the test's folder).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fixtures.serving import NAME, REPO, start_serve

pytestmark = pytest.mark.slow

MC, GEN = "hetc_tiny_mc", "hetc_tiny_gen"
TASKS = REPO / "tests" / "fixtures" / "lm_eval"


def _lm_eval(model: str, model_args: str, out: Path, task: str = MC, *extra: str) -> tuple[list[dict], dict]:
    """`lm-eval run` of `task`: (its samples by doc id, its results)."""
    env = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "HF_DATASETS_OFFLINE": "1",
        "HF_DATASETS_CACHE": str(out / "datasets"),
        "TOKENIZERS_PARALLELISM": "false",
    }
    cmd = [sys.executable, "-m", "lm_eval", "run", "--model", model, "--model_args", model_args, "--tasks", task, "--include_path", str(TASKS)]
    cmd += ["--log_samples", "--output_path", str(out), "--batch_size", "4", "--seed", "0", "--device", "cpu", *extra]
    r = subprocess.run(cmd, cwd=TASKS, env=env, capture_output=True, text=True, timeout=900)  # the task's data file is relative to it
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-4000:]
    samples = [json.loads(l) for f in sorted(out.rglob(f"samples_{task}_*.jsonl")) for l in f.read_text().splitlines()]
    results = json.loads(next(out.rglob("results_*.json")).read_text())["results"][task]
    return sorted(samples, key=lambda s: s["doc_id"]), results


def test_lm_eval_multiple_choice_through_hetc_matches_lm_evals_hf_model(built, tmp_path):
    model_dir, plan, _ = built
    served = start_serve(plan, "--emulate", "--executor", "torch", "--served-model-name", NAME, "--timeout", "30", log=tmp_path / "serve.log")
    try:
        args = f"model={NAME},base_url={served.url}/v1/completions,tokenizer={model_dir},tokenizer_backend=huggingface,tokenized_requests=True,max_retries=1"
        via_hetc, res_hetc = _lm_eval("local-completions", args, tmp_path / "hetc")
    except BaseException:
        print(served.output()[-4000:])
        raise
    finally:
        served.stop(30)
    via_hf, res_hf = _lm_eval("hf", f"pretrained={model_dir},dtype=float32", tmp_path / "hf")
    assert len(via_hetc) == len(via_hf) == 8
    for a, b in zip(via_hetc, via_hf):
        got = [float(r[0][0]) for r in a["resps"]]  # lm-eval logs the API model's numpy floats as strings
        want = [float(r[0][0]) for r in b["resps"]]
        assert got == pytest.approx(want, abs=1e-3), f"doc {a['doc_id']}"
        assert a["acc"] == b["acc"]
    assert res_hetc["acc,none"] == res_hf["acc,none"]


def test_lm_eval_generation_through_hetc_matches_lm_evals_hf_model(built, tmp_path):
    model_dir, plan, _ = built
    served = start_serve(plan, "--emulate", "--executor", "torch", "--served-model-name", NAME, "--timeout", "30", log=tmp_path / "serve.log")
    common = f"model={NAME},tokenizer={model_dir},tokenizer_backend=huggingface,max_retries=1"
    try:
        text, _ = _lm_eval("local-completions", f"{common},base_url={served.url}/v1/completions,tokenized_requests=True", tmp_path / "c", GEN)
        chat, _ = _lm_eval("local-chat-completions", f"{common},base_url={served.url}/v1/chat/completions", tmp_path / "chat", GEN, "--apply_chat_template")
    except BaseException:
        print(served.output()[-4000:])
        raise
    finally:
        served.stop(30)
    hf_args = f"pretrained={model_dir},dtype=float32"
    hf_text, _ = _lm_eval("hf", hf_args, tmp_path / "hf", GEN)
    hf_chat, _ = _lm_eval("hf", hf_args, tmp_path / "hf-chat", GEN, "--apply_chat_template")
    for via_hetc, via_hf in ((text, hf_text), (chat, hf_chat)):
        assert len(via_hetc) == len(via_hf) == 8
        got, want = [a["resps"][0][0] for a in via_hetc], [b["resps"][0][0] for b in via_hf]
        assert got == want
        assert any(got), got  # some document generated text before its newline
    # the chat run's prompts went through the chat template: other contexts, other continuations
    assert [a["resps"][0][0] for a in text] != [a["resps"][0][0] for a in chat]
