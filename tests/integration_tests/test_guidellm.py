"""guidellm against `hetc serve` (slow): its concurrent and Poisson profiles, streaming through the
OpenAI completions API as it sends them (continuous usage stats, ignore_eos, the synthetic
prompts its tokenizer builds), every request answered with the tokens asked for.

The figures beside `hetc evaluate` are a benchmark (benchmarks/guidellm_vs_evaluate.py); this
checks the client works, offline (HF_HUB_OFFLINE=1, the tiny model's own tokenizer).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fixtures.serving import NAME, start_serve

pytestmark = pytest.mark.slow

PROMPT, OUTPUT, REQUESTS = 24, 6, 6


def _guidellm(url: str, tokenizer: Path, profile: str, out: Path) -> dict:
    cmd = [str(Path(sys.executable).parent / "guidellm"), "run", "--backend", f"kind=openai_http,target={url},model={NAME},request_format=/v1/completions"]
    cmd += ["--profile", profile, "--constraint", f"kind=max_requests,count={REQUESTS}", "--tokenizer", f"kind=hf_auto,model={tokenizer}"]
    cmd += ["--data", f"kind=synthetic_text,prompt_tokens={PROMPT},output_tokens={OUTPUT}", "--output", f"kind=json,path={out}"]
    cmd += ["--disable-console-interactive"]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    return json.loads(out.read_text())["benchmarks"][0]


def test_guidellm_concurrent_and_poisson_profiles_complete_every_request(built, tmp_path):
    model_dir, plan, _ = built
    served = start_serve(plan, "--emulate", "--executor", "torch", "--served-model-name", NAME, "--timeout", "30", log=tmp_path / "serve.log")
    try:
        for profile in ("kind=concurrent,streams=2", "kind=poisson,rate=4"):
            bench = _guidellm(served.url, model_dir, profile, tmp_path / f"{profile.split(',')[0][5:]}.json")
            reqs = bench["requests"]
            assert not reqs["errored"] and not reqs["incomplete"], (reqs["errored"] or reqs["incomplete"])[0].get("info", {}).get("error")
            assert len(reqs["successful"]) == REQUESTS
            for q in reqs["successful"]:
                assert q["output_tokens"] == OUTPUT  # max_tokens honoured, EOS ignored as it asks
                assert q["prompt_tokens"] > 0 and q["time_to_first_token_ms"] > 0
    except BaseException:
        print(served.output()[-4000:])
        raise
    finally:
        served.stop(30)
