"""Tiny random mixture-of-experts models of transformers' own classes, served with `--emulate` as a
2-stage pipeline whose second stage is split over two workers holding half of the experts each
(expert parallelism over gloo), give exactly Hugging Face `generate`'s greedy tokens.

gpt-oss brings alternating sliding-window (window 8, so prompts and continuations run past it) and full
attention layers, attention sinks, its clamped swiglu experts with biases; Qwen3-MoE its per-head q/k
norms and softmax-top-k routing. Slow: a server per architecture."""

from __future__ import annotations

import httpx2 as httpx
import pytest

from tests.fixtures.moe_models import ARCHS, build_moe, ep_plan
from tests.fixtures.serving import KEY, NAME, client, hf_greedy, start_serve

pytestmark = pytest.mark.slow

# a prompt shorter than the window, one longer, one spanning several KV blocks (16 tokens each)
PROMPTS = [[3, 4, 5], list(range(10, 30)), list(range(40, 80))]


@pytest.mark.parametrize("arch", ARCHS)
def test_ep_stage_serves_hf_greedy_tokens(arch, tmp_path):
    model = tmp_path / arch
    build_moe(model, arch)
    plan = ep_plan(model, tmp_path)
    want = hf_greedy(model, PROMPTS, 24)
    args = ("--emulate", "--model-dir", model, "--served-model-name", NAME, "--api-key", KEY)
    served = start_serve(plan, *args, log=tmp_path / "serve.log")
    try:
        workers = httpx.get(f"{served.url}/health").json()["workers"]
        ep = sorted((w for w in workers if w["stage"] == "0.1"), key=lambda w: w["tp_rank"])
        assert [w["tp_rank"] for w in ep] == [0, 1] and ep[0]["param_bytes"] == ep[1]["param_bytes"]
        c = client(served.url)
        for ids, tokens in want:
            r = c.completions.create(model=NAME, prompt=ids, max_tokens=24, temperature=0, extra_body={"return_token_ids": True})
            assert r.choices[0].model_extra["token_ids"] == tokens, (ids, served.output()[-3000:])
    finally:
        assert served.stop() == 0
