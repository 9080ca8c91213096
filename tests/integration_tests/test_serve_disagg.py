"""A disaggregated plan — a prefill pool of two stages, a decode pool of one device, cut
differently — serves the greedy tokens of Hugging Face `generate`; each prompt's KV moves
layer by layer from the prefill workers to the decode worker holding the same layers, and the
KV bytes sent equal the plan's prediction (kv_transfer.bytes_per_token × prompt tokens).

The planner does not make disaggregated plans yet, so the plan is test_serve.py's, re-cut
by hand into the two pools (its unit table and graph_hash unchanged). Slow: another server."""

from __future__ import annotations

import concurrent.futures as cf
import copy
import json
import signal
import subprocess
import sys

import httpx2 as httpx
import pytest
import torch
from openai import OpenAI

from tests.integration_tests.test_serve import wait_healthy, KEY, NAME, REPO, _port, built, metric  # noqa: F401 — fixture

pytestmark = pytest.mark.slow


def disaggregate(plan: dict) -> dict:
    units, pipe = plan["units"], plan["pipelines"][0]
    n = len(units)
    a, b, d = (copy.deepcopy(s) for s in pipe["stages"])
    a["units"], a["layers"] = [0, 5], [0, 2]  # prefill: embed … attention 2 | mlp 2 … head
    b["units"], b["layers"] = [6, n - 1], [2, units[-1]["layer"]]
    d["units"], d["layers"] = [0, n - 1], [0, units[-1]["layer"]]  # decode: the whole model on one device
    for s in (a, b, d):
        s["memory_bytes"]["kv"] = 393216.0
    out = {**plan, "pipelines": [{**pipe, "id": 0, "phase": "prefill", "stages": [a, b]},
                                 {**pipe, "id": 1, "phase": "decode", "stages": [d]}]}
    out["kv_transfer"] = [{"from_pipeline": 0, "to_pipeline": 1, "link": "ethernet-10g", "predicted_ms_per_seq": 0.1,
                           "bytes_per_token": sum(u["kv_bytes_per_token"] for u in units)}]
    return out


def test_disaggregated_plan_serves_hf_greedy_tokens(built, tmp_path):  # noqa: F811
    from transformers import AutoModelForCausalLM

    model, _, plan = built
    doc = disaggregate(plan)
    (tmp_path / "dis.json").write_text(json.dumps(doc))
    port = _port()
    proc = subprocess.Popen([sys.executable, "-m", "hetc.cli", "serve", str(tmp_path / "dis.json"), "--emulate",
                             "--model-dir", str(model), "--port", str(port), "--served-model-name", NAME,
                             "--api-key", KEY, "--max-batched-tokens", "16"], cwd=REPO)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(url, [proc])
        c = OpenAI(base_url=f"{url}/v1", api_key=KEY, max_retries=0, timeout=60)
        g = torch.Generator().manual_seed(5)
        prompts = [torch.randint(2, 300, (k,), generator=g).tolist() for k in (1, 9, 17, 33, 50)]

        def run(ids):
            r = c.completions.create(model=NAME, prompt=ids, max_tokens=12, temperature=0,
                                     extra_body={"return_token_ids": True})
            return r.choices[0].model_extra["token_ids"]

        with cf.ThreadPoolExecutor(len(prompts)) as ex:
            got = list(ex.map(run, prompts))
        hf = AutoModelForCausalLM.from_pretrained(model, dtype=torch.float32).eval()
        for ids, toks in zip(prompts, got):
            x = torch.tensor([ids])
            want = hf.generate(x, attention_mask=torch.ones_like(x), max_new_tokens=12, do_sample=False)[0, len(ids):]
            assert toks == want.tolist(), f"prompt of {len(ids)} tokens"
        sent = metric(url, "hetc_kv_transfer_bytes_total")[0][1]
        tokens = metric(url, "hetc_kv_transfer_tokens_total")[0][1]
        per_token = doc["kv_transfer"][0]["bytes_per_token"]
        assert tokens == sum(len(p) for p in prompts)  # every prompt's KV moved once (no preemption here)
        assert sent == per_token * tokens  # the plan's prediction, byte for byte
        workers = httpx.get(f"{url}/health").json()["workers"]
        assert [(w["stage"], w["device"]) for w in workers] == [("0.0", "c:0"), ("0.1", "b:0"), ("1.0", "a:0")]
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 0
