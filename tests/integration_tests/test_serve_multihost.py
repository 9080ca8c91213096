"""Two `hetc serve --nnodes 2` invocations on localhost, separate process trees, serve one
plan (the 3-vendor plan of test_serve.py: node c on node rank 1, nodes a and b on rank 0);
greedy output equals Hugging Face generate; killing node rank 1 turns /health to 503. Slow:
two more servers."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import httpx2 as httpx
import pytest
from openai import OpenAI

from tests.integration_tests.test_serve import wait_healthy, KEY, NAME, REPO, _port, built  # noqa: F401 — the module fixture

pytestmark = pytest.mark.slow


def test_two_hosts_serve_one_plan(built):  # noqa: F811
    model, plan, doc = built
    mport, port = _port(), _port()
    common = [sys.executable, "-m", "hetc.cli", "serve", str(plan), "--emulate", "--nnodes", "2", "--master-addr",
              "127.0.0.1", "--master-port", str(mport), "--served-model-name", NAME, "--api-key", KEY]
    # separate sessions: separate process trees, as on two hosts
    n0 = subprocess.Popen([*common, "--node-rank", "0", "--port", str(port)], cwd=REPO, start_new_session=True)
    n1 = subprocess.Popen([*common, "--node-rank", "1"], cwd=REPO, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(url, [n0, n1])
        workers = httpx.get(f"{url}/health").json()["workers"]
        by_node = {w["device"]: w["node_rank"] for w in workers}
        assert by_node == {"a:0": 0, "b:0": 0, "c:0": 1}
        c = OpenAI(base_url=f"{url}/v1", api_key=KEY, max_retries=0, timeout=60)
        r = c.completions.create(model=NAME, prompt=[5, 6, 7, 8, 9], max_tokens=12, temperature=0,
                                 extra_body={"return_token_ids": True})
        import torch
        from transformers import AutoModelForCausalLM

        hf = AutoModelForCausalLM.from_pretrained(model, dtype=torch.float32).eval()
        x = torch.tensor([[5, 6, 7, 8, 9]])
        want = hf.generate(x, attention_mask=torch.ones_like(x), max_new_tokens=12, do_sample=False)[0, 5:].tolist()
        assert r.choices[0].model_extra["token_ids"] == want
        os.killpg(n1.pid, signal.SIGKILL)  # the whole second "host"
        deadline = time.monotonic() + 20
        while httpx.get(f"{url}/health").status_code != 503:
            assert time.monotonic() < deadline
            time.sleep(0.2)
        assert "c:0" in httpx.get(f"{url}/health").json()["reason"]
    finally:
        for p in (n0, n1):
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGTERM)
        n0.wait(60)
