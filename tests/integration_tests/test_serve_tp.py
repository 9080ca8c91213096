"""A plan with a tp:2 stage serves the same greedy tokens as Hugging Face `generate`; each
of the stage's two workers holds half of its matrices. The plan is test_serve.py's with
its middle stage made tensor-parallel over two devices of its node (the planner chooses
tp by cost; this forces it). Slow: another server."""

from __future__ import annotations

import json
import signal
import subprocess
import sys

import httpx2 as httpx
import pytest
import torch
from openai import OpenAI

from tests.fixtures.serving import KEY, NAME, PATIENT, REPO, free_port, wait_healthy

pytestmark = pytest.mark.slow


def test_tp2_stage_serves_hf_greedy_tokens(built, tmp_path):
    from transformers import AutoModelForCausalLM

    model, plan_path, plan = built
    st = plan["pipelines"][0]["stages"][1]
    node = st["node"]
    st["tp"], st["devices"] = 2, [f"{node}:0", f"{node}:1"]
    for n in plan["cluster"]["nodes"]:
        if n["name"] == node:
            n["count"] = 2
    (tmp_path / "tp.json").write_text(json.dumps(plan))
    port = free_port()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "hetc.cli",
            "serve",
            str(tmp_path / "tp.json"),
            *PATIENT,
            "--emulate",
            "--model-dir",
            str(model),
            "--port",
            str(port),
            "--served-model-name",
            NAME,
            "--api-key",
            KEY,
        ],
        cwd=REPO,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(url, [proc])
        workers = httpx.get(f"{url}/health").json()["workers"]
        tp = [w for w in workers if w["stage"] == "0.1"]
        assert [w["tp_rank"] for w in tp] == [0, 1] and tp[0]["param_bytes"] == tp[1]["param_bytes"]
        whole = sum(u["param_bytes"] for u in plan["units"][st["units"][0] : st["units"][1] + 1])
        assert whole / 2 <= tp[0]["param_bytes"] < whole / 2 * 1.01  # half, plus the replicated norm gains
        c = OpenAI(base_url=f"{url}/v1", api_key=KEY, max_retries=0, timeout=60)
        hf = AutoModelForCausalLM.from_pretrained(model, dtype=torch.float32).eval()
        for ids in ([3, 4, 5], list(range(10, 50))):
            r = c.completions.create(model=NAME, prompt=ids, max_tokens=16, temperature=0, extra_body={"return_token_ids": True})
            x = torch.tensor([ids])
            want = hf.generate(x, attention_mask=torch.ones_like(x), max_new_tokens=16, do_sample=False)[0, len(ids) :]
            assert r.choices[0].model_extra["token_ids"] == want.tolist()
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 0
