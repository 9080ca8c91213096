"""Issue 11's end-to-end check (slow): a 3-stage plan over NVIDIA-, AMD- and Intel-profile devices is
compiled, then served under --emulate from those artifacts; each worker is seen (in its own memory
map) running its vendor's toolchain, and greedy completions of concurrent mixed-length requests
through the openai client are token-identical to Hugging Face `generate`."""

import concurrent.futures as cf
import signal
import subprocess
import sys

import httpx2 as httpx
import pytest
import torch

from hetc.partitioner.planner import PlanRequest, make_plan
from hetc.plan import save_plan
from tests.fixtures.serving import PROFILE, REPO, build_model, client, free_port, wait_healthy

pytestmark = pytest.mark.slow

# what each toolchain's runtime leaves in a worker's memory map
SIGNS = {"inductor": "aotinductor", "iree": "iree", "openvino": "libopenvino"}


def test_three_toolchains_serve_like_hf_generate(tmp_path):
    model = tmp_path / "tiny"
    build_model(model)
    for name, vendor, backend, target in (("va", "nvidia", "cuda", "sm_90"), ("vb", "amd", "rocm", "gfx942"), ("vc", "intel", "openvino", "GPU")):
        text = PROFILE.format(name=name, vendor=vendor, backend=backend)
        (tmp_path / f"{name}.yaml").write_text(text.replace(f"backend: {backend}\n", f"backend: {backend}\ntarget: {target}\n"))
    (tmp_path / "c.yaml").write_text(
        "nodes:\n  - {name: a, device: ./va.yaml, count: 1}\n"
        "  - {name: b, device: ./vb.yaml, count: 1}\n"
        "  - {name: c, device: ./vc.yaml, count: 1}\nnetwork: {default: ethernet-10g}\n"
    )
    plan = make_plan(
        PlanRequest(model=str(model), profiles=str(tmp_path / "c.yaml"), dtype="fp32", input_len=64, output_len=32, disaggregate="off", time_limit=5)
    )
    assert {s.backend for p in plan.pipelines for s in p.stages} == {"cuda", "rocm", "openvino"}
    save_plan(plan, tmp_path / "plan.json")
    art = tmp_path / "art"
    r = subprocess.run([sys.executable, "-m", "hetc.cli", "compile", str(tmp_path / "plan.json"), "-o", str(art)], capture_output=True, text=True, cwd=REPO)
    assert r.returncode == 0, r.stderr
    port = free_port()
    log = open(tmp_path / "serve.log", "w+")
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "hetc.cli",
            "serve",
            str(tmp_path / "plan.json"),
            "--emulate",
            "--artifacts",
            str(art),
            "--port",
            str(port),
            "--api-key",
            "k",
            "--served-model-name",
            "tiny",
            "--max-batched-tokens",
            "16",
            "--timeout",
            "30",
        ],
        cwd=REPO,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(url, [proc])
        models = httpx.get(f"{url}/v1/models", headers={"Authorization": "Bearer k"}).json()["data"][0]
        by_stage = {e["backend"]: e["executor"] for e in models["executors"]}
        assert by_stage == {"cuda": "inductor", "rocm": "iree", "openvino": "openvino"}
        workers = httpx.get(f"{url}/health").json()["workers"]
        for w in workers:  # from the workers themselves: what their process has loaded
            maps = open(f"/proc/{w['pid']}/maps").read()
            mine = w["executor"]
            assert SIGNS[mine] in maps, (w, mine)
            assert not any(SIGNS[t] in maps for t in SIGNS if t != mine), w
        g = torch.Generator().manual_seed(3)
        prompts = [torch.randint(2, 320, (n,), generator=g).tolist() for n in (1, 7, 16, 23, 40)]
        c = client(url, "k")

        def complete(p):
            return c.completions.create(model="tiny", prompt=p, max_tokens=16, temperature=0, extra_body={"return_token_ids": True})

        with cf.ThreadPoolExecutor(len(prompts)) as ex:
            results = list(ex.map(complete, prompts))
        from transformers import AutoModelForCausalLM

        hf = AutoModelForCausalLM.from_pretrained(model, dtype=torch.float32).eval()
        for p, res in zip(prompts, results):
            x = torch.tensor([p])
            want = hf.generate(x, attention_mask=torch.ones_like(x), max_new_tokens=16, do_sample=False, pad_token_id=1)[0, len(p) :].tolist()
            assert res.choices[0].model_extra["token_ids"] == want, f"prompt of {len(p)} tokens"
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.seek(0)
        print(log.read()[-3000:])
        log.close()
