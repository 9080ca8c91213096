"""`--emulate --random-weights` of a model too big for this host (llama-3.1-8b, 16 GB in bf16,
planned over two made-up 12 GB devices) runs a width-shrunk copy with the same layers and
cuts, labelled as such in /v1/models (with real weights it is refused: test_serve.py).
Slow: an 8B plan."""

from __future__ import annotations

import signal
import subprocess
import sys

import httpx2 as httpx
import pytest

from hetc.partitioner.planner import PlanRequest, make_plan
from hetc.plan import save_plan
from tests.fixtures.serving import PATIENT, REPO, free_port, wait_healthy

pytestmark = pytest.mark.slow

DEVICE = """name: bigdev
vendor: nvidia
backend: cuda
memory: 12 GB
reserved_memory: 1 GB
memory_bandwidth: 1 TB/s
peak_flops: {bf16: 100 TFLOP/s, fp32: 20 TFLOP/s}
efficiency: {matmul: 0.8, memory: 0.8}
launch_overhead: 5 us
host_link: pcie4
power: 300 W
price: 1 USD/h
sources: ["made up for a test"]
"""


def test_too_big_model_runs_width_shrunk(tmp_path):
    (tmp_path / "dev.yaml").write_text(DEVICE)
    (tmp_path / "c.yaml").write_text("nodes:\n  - {name: g, device: ./dev.yaml, count: 2, link: pcie4}\n")
    plan = make_plan(PlanRequest(model="llama-3.1-8b", profiles=str(tmp_path / "c.yaml"), tp="1", input_len=128, output_len=64, time_limit=5))
    assert len(plan.pipelines[0].stages) == 2
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
            "--emulate",
            "--random-weights",
            "--port",
            str(port),
            "--num-kv-blocks",
            "64",
            # the widths are what this test checks: eager stages (with --executor auto each
            # worker lowered a 2B-parameter stage through AOTInductor: still loading after 570 s)
            "--executor",
            "torch",
        ],
        cwd=REPO,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(url, [proc])
        info = httpx.get(f"{url}/v1/models").json()["data"][0]
        assert info["emulated_width"].startswith("1/") and info["tokenizer"] == "byte-level fallback"
        workers = httpx.get(f"{url}/health").json()["workers"]
        assert [w["units"] for w in workers] == [list(s.units) for s in plan.pipelines[0].stages]  # same cuts
        r = httpx.post(f"{url}/v1/completions", json={"model": "llama-3.1-8b", "prompt": "hi", "max_tokens": 4, "temperature": 0}, timeout=120)
        assert r.status_code == 200 and r.json()["usage"]["completion_tokens"] == 4
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(60)
