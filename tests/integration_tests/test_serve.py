"""`hetc serve` end to end (issue 5): a Llama-shaped model with random fp32 weights saved as
a Hugging Face dir (safetensors + a BPE tokenizer trained here), planned with make_plan over
3 devices of 3 vendors, none big enough for the model alone, served with --emulate (one
CPU process per plan device).

Through the real `openai` client: concurrent greedy completions of mixed prompt lengths
are token-identical to Hugging Face `generate` on the unpartitioned model (with chunked
prefill and a KV pool small enough to force preemption); 32 concurrent streams complete
with more than one sequence running at once; each worker holds exactly its stage's
parameter bytes; bad requests get their status and the server keeps serving; SIGKILL of
a worker turns /health to 503 and ends in-flight requests with an error.
"""

from __future__ import annotations

import asyncio
import concurrent.futures as cf
import json
import os
import signal
import time

import httpx2 as httpx  # the HTTP client the openai package uses
import openai
import pytest
import torch

from hetc.cli import main as hetc_main
from tests.fixtures.serving import KEY, NAME, TEXTS, client, free_port, hf_greedy, metric, start_serve, wait_healthy


@pytest.fixture(scope="module")
def server(built, tmp_path_factory):
    """A running `hetc serve --emulate`: (base url, process)."""
    _, plan, _ = built
    # a 16-token prefill chunk and 8 KV blocks (7 besides the padding block: 224 tokens for 8 sequences):
    # chunked prefill and preemption happen
    served = start_serve(
        plan,
        "--emulate",
        "--api-key",
        KEY,
        "--served-model-name",
        NAME,
        "--max-batched-tokens",
        "16",
        "--num-kv-blocks",
        "8",
        "--max-waiting",
        "32",
        "--timeout",
        "30",
        log=tmp_path_factory.mktemp("log") / "serve.log",
    )
    yield served.url, served.proc
    served.stop(30)


def test_greedy_concurrent_mixed_lengths_match_hf_generate(built, server):
    from transformers import AutoTokenizer

    model_dir, _, _ = built
    url, _ = server
    g = torch.Generator().manual_seed(3)
    prompts: list = [torch.randint(2, 320, (n,), generator=g).tolist() for n in (1, 7, 16, 23, 40, 61)]
    prompts += [TEXTS[0], TEXTS[1] + " " + TEXTS[2]]
    c = client(url)

    def complete(p):
        return c.completions.create(model=NAME, prompt=p, max_tokens=24, temperature=0, extra_body={"return_token_ids": True})

    with cf.ThreadPoolExecutor(len(prompts)) as ex:
        results = list(ex.map(complete, prompts))
    tok = AutoTokenizer.from_pretrained(model_dir)
    for p, (ids, want), r in zip(prompts, hf_greedy(model_dir, prompts, 24), results):
        assert r.model_extra["prompt_token_ids"] == ids
        got = r.choices[0].model_extra["token_ids"]
        assert got == want, f"prompt of {len(ids)} tokens"
        assert r.usage.prompt_tokens == len(ids) and r.usage.completion_tokens == len(got)
        assert r.choices[0].finish_reason == ("stop" if want[-1] == tok.eos_token_id else "length")
        if isinstance(p, str):
            assert r.choices[0].text == tok.decode(want, skip_special_tokens=True)
    # 8 sequences of up to 85 tokens in 224 tokens of KV: some were preempted and recomputed, output unchanged
    assert metric(url, "hetc_num_preemptions")[0][1] > 0


def test_concurrent_streams_complete_with_continuous_batching(server):
    url, _ = server
    c = client(url)

    def stream(i: int):
        s = c.chat.completions.create(
            model=NAME,
            messages=[{"role": "user", "content": f"stream {i}: {TEXTS[i % 4]}"}],
            max_tokens=12,
            temperature=0.8,
            top_p=0.95,
            seed=i,
            stream=True,
            stream_options={"include_usage": True},
            extra_body={"top_k": 50},
        )
        text, finish, usage = "", None, None
        for ch in s:
            if ch.choices:
                text += ch.choices[0].delta.content or ""
                finish = ch.choices[0].finish_reason or finish
            if ch.usage:
                usage = ch.usage
        return text, finish, usage

    with cf.ThreadPoolExecutor(32) as ex:
        out = list(ex.map(stream, range(32)))
    assert all(f in ("stop", "length") for _, f, _ in out)
    assert all(u is not None and 1 <= u.completion_tokens <= 12 for _, _, u in out)
    assert stream(5)[0] == out[5][0]  # seeded sampling: same text again, whatever it was batched with
    assert metric(url, "hetc_num_requests_running_peak")[0][1] > 1
    sizes = dict(metric(url, "hetc_micro_batch_sequences"))
    assert sizes['hetc_micro_batch_sequences_sum{model="tiny"}'] > sizes['hetc_micro_batch_sequences_count{model="tiny"}']
    for name in (
        "hetc_time_to_first_token_seconds_count",
        "hetc_inter_token_latency_seconds_count",
        "hetc_e2e_request_latency_seconds_count",
        "hetc_request_queue_time_seconds_count",
        "hetc_generation_tokens_total",
    ):
        assert metric(url, name)[0][1] > 0, name
    steps = metric(url, "hetc_stage_step_seconds_count")
    assert {k.split('stage="')[1][:3] for k, v in steps if v > 0} == {"0.0", "0.1", "0.2"}
    assert len(metric(url, "hetc_stage_predicted_step_seconds")) == 6


def test_each_worker_holds_only_its_stage(built, server):
    _, _, plan = built
    url, _ = server
    stages = plan["pipelines"][0]["stages"]
    assert len(stages) == 3 and len({s["profile"] for s in stages}) == 3
    units = plan["units"]
    total = sum(u["param_bytes"] for u in units)
    for s in stages:  # the plan had to split the model: no device can hold it alone
        assert s["memory_bytes"]["weights"] < total
    workers = httpx.get(f"{url}/health").json()["workers"]
    assert [w["device"] for w in workers] == [s["devices"][0] for s in stages]  # ranks follow the plan
    for w, s in zip(workers, stages):
        a, b = s["units"]
        assert w["units"] == [a, b]
        assert w["param_bytes"] == sum(u["param_bytes"] for u in units[a : b + 1]) == s["memory_bytes"]["weights"]
    assert sum(w["param_bytes"] for w in workers) == total
    gauges = metric(url, "hetc_stage_parameter_bytes")
    assert sorted(v for _, v in gauges) == sorted(w["param_bytes"] for w in workers)


def test_bad_requests_get_their_status_and_the_server_keeps_serving(server):
    url, _ = server
    h = {"Authorization": f"Bearer {KEY}", "Content-Type": "application/json"}
    cases = [
        ("{not json", 400, None),
        ('["a list"]', 400, None),
        ('{"prompt": "hi"}', 400, "model"),
        ('{"model": "tiny"}', 400, "prompt"),
        ('{"model": "tiny", "prompt": 5}', 400, "prompt"),
        ('{"model": "tiny", "prompt": "hi", "max_tokens": -3}', 400, "max_tokens"),
        ('{"model": "tiny", "prompt": "hi", "max_tokens": 100000}', 400, "max_tokens"),
        ('{"model": "tiny", "prompt": "hi", "max_tokens": "ten"}', 400, "max_tokens"),
        ('{"model": "tiny", "prompt": "hi", "temperature": -1}', 400, "temperature"),
        (json.dumps({"model": "tiny", "prompt": [5] * 300}), 400, "prompt"),  # past the context
        ('{"model": "nope", "prompt": "hi"}', 404, "model"),
    ]
    for body, status, param in cases:
        r = httpx.post(f"{url}/v1/completions", content=body, headers=h)
        assert r.status_code == status, (body, r.text)
        err = r.json()["error"]
        assert set(err) == {"message", "type", "param", "code"} and err["message"] and err["param"] == param, body
    r = httpx.post(f"{url}/v1/chat/completions", content='{"model": "tiny", "messages": "hi"}', headers=h)
    assert r.status_code == 400 and r.json()["error"]["param"] == "messages"
    for key in ("wrong", None):
        r = httpx.post(f"{url}/v1/completions", content='{"model": "tiny", "prompt": "hi"}', headers={"Authorization": f"Bearer {key}"} if key else {})
        assert r.status_code == 401 and r.json()["error"]["code"] == "invalid_api_key"
    with pytest.raises(openai.AuthenticationError):
        client(url, "wrong").models.list()
    with pytest.raises(openai.NotFoundError):
        client(url).completions.create(model="gpt-4", prompt="hi")

    # a full wait queue: 429 with Retry-After, and the accepted requests still finish
    async def flood(n: int) -> list[tuple[int, str | None]]:
        async with httpx.AsyncClient(timeout=60) as ac:
            body = {"model": NAME, "prompt": "hello", "max_tokens": 4, "temperature": 0}

            async def one():
                r = await ac.post(f"{url}/v1/completions", json=body, headers=h)
                return r.status_code, r.headers.get("retry-after")

            return await asyncio.gather(*(one() for _ in range(n)))

    got = asyncio.run(flood(64))
    codes = [c for c, _ in got]
    assert codes.count(429) > 0 and codes.count(200) >= 32 and set(codes) == {200, 429}
    assert all(ra == "1" for c, ra in got if c == 429)

    models = client(url).models.list().data
    assert [m.id for m in models] == [NAME] and models[0].model_extra["tokenizer"] == "hf"
    r = client(url).completions.create(model=NAME, prompt="hello world", max_tokens=4, temperature=0)
    assert r.choices[0].finish_reason in ("stop", "length")
    chat = client(url).chat.completions.create(model=NAME, messages=[{"role": "user", "content": "hi"}], max_tokens=5, temperature=0)
    assert chat.choices[0].message.role == "assistant" and chat.usage.completion_tokens >= 1
    assert httpx.get(f"{url}/health").status_code == 200


def test_killed_worker_fails_in_flight_requests_then_its_pipeline_is_restarted(server):
    url, proc = server
    workers = httpx.get(f"{url}/health").json()["workers"]
    c = client(url)
    results: list = []
    killed_at: list[float] = []

    def long_stream():
        try:
            for _ in c.completions.create(model=NAME, prompt="hello", max_tokens=200, temperature=0, stream=True, extra_body={"ignore_eos": True}):
                pass
            results.append(("finished", time.monotonic()))
        except openai.APIError as e:
            results.append(("error", time.monotonic(), str(e)))

    with cf.ThreadPoolExecutor(3) as ex:
        futs = [ex.submit(long_stream) for _ in range(3)]
        time.sleep(0.5)
        killed_at.append(time.monotonic())
        os.kill(workers[1]["pid"], signal.SIGKILL)
        for f in futs:
            f.result(timeout=30)  # never a hang
    assert [r[0] for r in results] == ["error"] * 3, results
    assert all(workers[1]["device"] in r[2] for r in results)
    assert max(r[1] for r in results) - killed_at[0] < 2.0  # "at once": within 2 s of the death
    r = httpx.get(f"{url}/health")
    assert r.status_code == 503 and workers[1]["device"] in r.json()["error"]["message"]
    with pytest.raises(openai.APIStatusError) as e:
        c.completions.create(model=NAME, prompt="hi", max_tokens=2)
    assert e.value.status_code == 503
    assert proc.poll() is None  # the frontend keeps answering
    # the watchdog restarts the pipeline's workers (new processes, generation 2) without restarting the server
    wait_healthy(url, [proc], timeout=60)
    after = httpx.get(f"{url}/health").json()
    assert all(w["alive"] and w["generation"] == 2 for w in after["workers"])
    assert {w["pid"] for w in after["workers"]}.isdisjoint(w["pid"] for w in workers)
    assert after["units"][0]["restarts"] == 1 and after["units"][0]["state"] == "serving"
    out = c.completions.create(model=NAME, prompt="hello", max_tokens=4, temperature=0)
    assert out.usage.completion_tokens == 4


# ---------------------------------------------------------------- refused at start (exit 2)


def _serve(capsys, *args) -> tuple[int, str]:
    code = hetc_main(["serve", *map(str, args)])
    return code, capsys.readouterr().err


def test_refuses_plans_it_cannot_serve(built, tmp_path, capsys, monkeypatch):
    model, plan_path, plan = built
    bad_json = tmp_path / "bad.json"
    bad_json.write_text("{")
    code, err = _serve(capsys, bad_json, "--emulate")
    assert code == 2 and "not valid JSON" in err and "Traceback" not in err

    other = tmp_path / "v2.json"
    other.write_text(json.dumps({**plan, "schema": "hetc.plan/2"}))
    code, err = _serve(capsys, other, "--emulate")
    assert code == 2 and "schema" in err

    broken = tmp_path / "broken.json"
    broken.write_text(json.dumps({**plan, "pipelines": [{**plan["pipelines"][0], "stages": plan["pipelines"][0]["stages"][1:]}]}))
    code, err = _serve(capsys, broken, "--emulate")
    assert code == 2 and "unit" in err

    wrong = tmp_path / "wrong-hash.json"
    wrong.write_text(json.dumps({**plan, "model": {**plan["model"], "graph_hash": "0" * 64}}))
    code, err = _serve(capsys, wrong, "--emulate", "--port", free_port())
    assert code == 2 and "graph_hash" in err and "re-plan" in err

    code, err = _serve(capsys, plan_path, "--port", free_port())  # cuda/rocm/gaudi devices on a CPU host
    assert code == 2 and "--emulate" in err and "cannot provide" in err

    code, err = _serve(capsys, plan_path, "--model-dir", tmp_path, "--emulate")
    assert code == 2 and "config.json" in err

    # emulating on a host too small for the weights: refused, unless a width-shrunk copy is asked for
    from hetc.runtime import emulate

    monkeypatch.setattr(emulate, "available_bytes", lambda: 1.0e6)
    code, err = _serve(capsys, plan_path, "--emulate", "--port", free_port())
    assert code == 2 and "--random-weights" in err and "width-shrunk" in err
    monkeypatch.undo()

    code, err = _serve(capsys, plan_path, "--emulate", "--nnodes", 2)
    assert code == 2 and "--master-addr" in err
    code, err = _serve(capsys, plan_path, "--emulate", "--nnodes", 4, "--master-addr", "127.0.0.1", "--master-port", 9)
    assert code == 2 and "3 node(s)" in err
