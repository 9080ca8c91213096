"""`hetc serve --random-weights` of a config-only model dir on a plan with two pipeline
replicas: two lanes, the byte-level fallback tokenizer (labelled), the same deterministic
weights in every worker, so every lane gives the same greedy tokens; SIGTERM drains the
requests in flight, then exits 0. Slow: a second server."""

from __future__ import annotations

import concurrent.futures as cf
import signal
import subprocess
import sys
import time

import httpx2 as httpx
import pytest
from openai import OpenAI

from hetc.partitioner.planner import PlanRequest, make_plan
from hetc.plan import save_plan
from tests.conftest import FIXTURES
from tests.fixtures.serving import PATIENT, REPO, free_port, wait_healthy

pytestmark = pytest.mark.slow


def test_random_weights_two_replicas_byte_tokenizer(tmp_path):
    (tmp_path / "c.yaml").write_text("nodes:\n  - {name: h, device: cpu, count: 2, link: pcie4}\n")
    plan = make_plan(
        PlanRequest(model=str(FIXTURES / "tiny-llama"), profiles=str(tmp_path / "c.yaml"), dtype="fp32", input_len=32, output_len=16, time_limit=3)
    )
    assert plan.pipelines[0].replicas == 2
    save_plan(plan, tmp_path / "plan.json")
    port = free_port()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "hetc.cli",
            "serve",
            str(tmp_path / "plan.json"),
            *PATIENT,
            "--random-weights",
            "--emulate",
            "--port",
            str(port),
            "--max-num-seqs",
            "4",
        ],
        cwd=REPO,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(url, [proc])
        workers = httpx.get(f"{url}/health").json()["workers"]
        assert [w["stage"] for w in workers] == ["0.0", "1.0"] and workers[0]["units"] == [0, len(plan.units) - 1]
        c = OpenAI(base_url=f"{url}/v1", api_key="none", max_retries=0)
        info = c.models.list().data[0].model_extra
        assert info["tokenizer"] == "byte-level fallback" and info["random_weights"] and info["lanes"] == 2

        def run(_):
            r = c.completions.create(model="tiny-llama", prompt="héllo wörld", max_tokens=8, temperature=0, extra_body={"return_token_ids": True})
            return tuple(r.choices[0].model_extra["token_ids"])

        with cf.ThreadPoolExecutor(8) as ex:
            outs = set(ex.map(run, range(8)))
        assert len(outs) == 1  # both lanes, same weights, same greedy tokens
        steps = [l for l in httpx.get(f"{url}/metrics").text.splitlines() if l.startswith("hetc_stage_step_seconds_count") and not l.endswith(" 0.0")]
        assert {l.split('stage="')[1][:3] for l in steps} == {"0.0", "1.0"}  # both lanes served

        # SIGTERM drains: requests in flight finish, then the server and its workers exit 0
        def long(_):
            r = c.completions.create(model="tiny-llama", prompt="drain", max_tokens=64, temperature=0, extra_body={"ignore_eos": True})
            return r.usage.completion_tokens

        with cf.ThreadPoolExecutor(4) as ex:
            futs = [ex.submit(long, i) for i in range(4)]
            time.sleep(0.5)
            proc.send_signal(signal.SIGTERM)
            assert [f.result(timeout=60) for f in futs] == [64] * 4
        assert proc.wait(60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
