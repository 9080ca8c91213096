"""A disaggregated plan that the planner made (`hetc plan --disaggregate on`) serves the greedy
tokens of Hugging Face `generate`, and the KV bytes sent equal the plan's prediction
(kv_transfer.bytes_per_token × prompt tokens).

The cluster: two devices with test_serve.py's made-up profile (1.5 MB, too small for its tiny
Llama alone) and one with the same profile and 4 MB. The planner puts one pool on the big
device and the other as two stages on the small pair — pools cut differently (which pool goes
where is the cost model's call) — so each prompt's KV moves layer by layer between the workers
of both pools holding the same layers. Slow: another server."""

from __future__ import annotations

import concurrent.futures as cf
import signal
import subprocess
import sys

import httpx2 as httpx
import pytest
import torch
from openai import OpenAI

from tests.fixtures.sampling import hf_greedy
from tests.fixtures.serving import KEY, NAME, PATIENT, REPO, free_port, metric, plan_pools, wait_healthy

pytestmark = pytest.mark.slow


def test_planned_disaggregated_plan_serves_hf_greedy_tokens(built, tmp_path):
    from transformers import AutoModelForCausalLM

    model, _, _ = built
    doc = plan_pools(model, tmp_path)
    pre, dec = (next(p for p in doc["pipelines"] if p["phase"] == ph) for ph in ("prefill", "decode"))
    assert len(doc["pipelines"]) == 2 and pre["replicas"] == dec["replicas"] == 1
    cuts = [[s["units"][0] for s in p["stages"]] for p in (pre, dec)]
    assert max(len(pre["stages"]), len(dec["stages"])) >= 2 and cuts[0] != cuts[1]  # cut differently: KV changes hands
    assert [t["from_pipeline"] for t in doc["kv_transfer"]] == [pre["id"]]
    assert [t["to_pipeline"] for t in doc["kv_transfer"]] == [dec["id"]]
    port = free_port()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "hetc.cli",
            "serve",
            str(tmp_path / "dis.json"),
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
            "--max-batched-tokens",
            "16",
        ],
        cwd=REPO,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(url, [proc])
        c = OpenAI(base_url=f"{url}/v1", api_key=KEY, max_retries=0, timeout=60)
        g = torch.Generator().manual_seed(5)
        prompts = [torch.randint(2, 300, (k,), generator=g).tolist() for k in (1, 9, 17, 33, 50)]

        def run(ids):
            r = c.completions.create(model=NAME, prompt=ids, max_tokens=12, temperature=0, extra_body={"return_token_ids": True})
            return r.choices[0].model_extra["token_ids"]

        with cf.ThreadPoolExecutor(len(prompts)) as ex:
            got = list(ex.map(run, prompts))
        hf = AutoModelForCausalLM.from_pretrained(model, dtype=torch.float32).eval()
        for ids, toks in zip(prompts, got):
            x = torch.tensor([ids])
            want = hf.generate(x, attention_mask=torch.ones_like(x), max_new_tokens=12, do_sample=False)[0, len(ids) :]
            assert toks == want.tolist(), f"prompt of {len(ids)} tokens"
        sent = metric(url, "hetc_kv_transfer_bytes_total")[0][1]
        tokens = metric(url, "hetc_kv_transfer_tokens_total")[0][1]
        per_token = doc["kv_transfer"][0]["bytes_per_token"]
        assert tokens == sum(len(p) for p in prompts)  # every prompt's KV moved once (no preemption here)
        # the last stage's sampling state across pools: the prefill pool samples the first token, the
        # decode pool's state starts from the history it is handed; log-probabilities from both
        fields = {"frequency_penalty": 1.1, "repetition_penalty": 1.4, "logit_bias": {"20": 2.5}}
        ids = prompts[3]
        r = c.completions.create(model=NAME, prompt=ids, max_tokens=12, temperature=0, logprobs=2, extra_body={**fields, "return_token_ids": True})
        toks = r.choices[0].model_extra["token_ids"]
        assert toks == hf_greedy(hf, ids, fields, 12, hf.config.eos_token_id)
        with torch.no_grad():
            ls = torch.log_softmax(hf(torch.tensor([ids + toks])).logits[0], -1)
        assert r.choices[0].logprobs.token_logprobs == pytest.approx([ls[len(ids) + i - 1, t].item() for i, t in enumerate(toks)], abs=1e-4)
        assert sent == per_token * tokens  # the plan's prediction, byte for byte
        workers = httpx.get(f"{url}/health").json()["workers"]
        lanes = sorted(doc["pipelines"], key=lambda p: p["id"])
        assert [(w["stage"], w["device"]) for w in workers] == [
            (f"{lane}.{i}", s["devices"][0]) for lane, p in enumerate(lanes) for i, s in enumerate(p["stages"])
        ]
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 0
