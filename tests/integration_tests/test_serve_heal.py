"""Self-healing under `hetc serve --emulate` (slow: servers with up to 8 workers).

Two pipeline replicas (two lanes, each its own process group) of test_serve.py's 3-stage
plan with its middle stage made tensor-parallel (tp 2). Requests stream on both lanes while
one worker of a kind is SIGKILLed — the first stage, the middle stage's leader, its tp
member, the last stage: the killed lane's requests end with an error within 2 s, the other
lane's requests finish and new requests succeed while the killed lane restarts, and /health
is 200 again within 60 s with fresh workers (a new group generation), serving requests. In a
disaggregated plan a dead decode pool's streams go back to the prefill pool, which never
stops: they complete with the tokens of an undisturbed run once the decode pool is restarted
alone. With --max-restarts 0 the lane stays down and /health says which stage and why; a
request whose logits are NaN fails alone before that, without a restart.
"""

from __future__ import annotations

import concurrent.futures as cf
import json
import os
import signal
import threading
import time

import httpx2 as httpx
import openai
import pytest

from tests.fixtures.serving import KEY, NAME, Served, client, plan_pools, start_serve, wait_healthy

pytestmark = pytest.mark.slow

RECOVER_S = 60.0  # the bound for the test model


def two_lanes_with_tp(plan: dict) -> dict:
    """test_serve's plan as 2 replicas, stage 1 over 2 devices (tp 2): lanes 0 and 1."""
    p = plan["pipelines"][0]
    assert len(p["stages"]) == 3
    p["replicas"] = 2
    st = p["stages"][1]
    st["tp"], st["devices"] = 2, [f"{st['node']}:0", f"{st['node']}:1"]
    counts = {s["node"]: 2 * s["tp"] for s in p["stages"]}
    for n in plan["cluster"]["nodes"]:
        n["count"] = counts.get(n["name"], n.get("count", 1))
    return plan


def _start(plan_path, model, *extra) -> Served:
    return start_serve(
        plan_path,
        "--emulate",
        "--model-dir",
        model,
        "--served-model-name",
        NAME,
        "--api-key",
        KEY,
        "--threads",
        "1",
        "--timeout",
        "30",
        "--executor",
        "torch",
        *extra,
        log=str(plan_path) + ".log",
    )


def _stream(c, max_tokens: int = 120, started=None):
    """('finished', end time, tokens) or ('error', end time, message); `started` is set at the
    first chunk."""
    n = 0
    try:
        for chunk in c.completions.create(
            model=NAME,
            prompt="hello",
            max_tokens=max_tokens,
            temperature=0,
            stream=True,
            stream_options={"include_usage": True},
            extra_body={"ignore_eos": True},
        ):
            if started is not None:
                started.set()
            if chunk.usage is not None:
                n = chunk.usage.completion_tokens
        return ("finished", time.monotonic(), n)
    except openai.APIError as e:
        return ("error", time.monotonic(), str(e))


def _kill_and_recover(url: str, victim: dict) -> None:
    c = client(url)
    before = {w["rank"]: w["pid"] for w in httpx.get(f"{url}/health").json()["workers"]}
    lane = victim["stage"].split(".")[0]
    with cf.ThreadPoolExecutor(6) as ex:
        futs = [ex.submit(_stream, c) for _ in range(4)]  # least loaded: two on each lane
        time.sleep(1.0)
        t_kill = time.monotonic()
        os.kill(victim["pid"], signal.SIGKILL)
        time.sleep(0.5)
        # the other lane keeps serving while the killed one restarts
        during = [c.completions.create(model=NAME, prompt="hi", max_tokens=4, temperature=0) for _ in range(2)]
        results = [f.result(timeout=90) for f in futs]
    errors = [r for r in results if r[0] == "error"]
    finished = [r for r in results if r[0] == "finished"]
    assert errors and finished, results
    for r in errors:  # the killed lane's requests: at once, naming its lane
        assert r[1] - t_kill < 2.0, (r, t_kill)
        assert f"lane {lane}" in r[2] or victim["device"] in r[2], r[2]
    assert all(r[2] == 120 for r in finished), finished  # every token of the other lane's streams
    assert all(d.usage.completion_tokens == 4 for d in during)
    health = httpx.get(f"{url}/health")
    assert health.status_code in (200, 503)
    wait_healthy(url, [], timeout=RECOVER_S - (time.monotonic() - t_kill))
    workers = httpx.get(f"{url}/health").json()["workers"]
    restarted = {w["rank"] for w in workers if w["pid"] != before[w["rank"]]}
    assert restarted == {w["rank"] for w in workers if w["stage"].split(".")[0] == lane}  # only that lane
    out = [c.completions.create(model=NAME, prompt="hello again", max_tokens=6, temperature=0) for _ in range(4)]
    assert all(o.usage.completion_tokens == 6 for o in out)


def test_killing_each_kind_of_worker_fails_only_its_lane_which_restarts(built, tmp_path):
    model, _, plan = built
    path = tmp_path / "two.json"
    path.write_text(json.dumps(two_lanes_with_tp(plan)))
    srv = _start(path, model)
    url = srv.url
    try:
        workers = httpx.get(f"{url}/health").json()["workers"]
        assert sorted({w["stage"] for w in workers}) == ["0.0", "0.1", "0.2", "1.0", "1.1", "1.2"]
        kinds = [("0.0", 0), ("1.1", 0), ("0.1", 1), ("1.2", 0)]  # first, middle (tp leader), tp member, last
        for stage, tp_rank in kinds:
            ws = httpx.get(f"{url}/health").json()["workers"]
            victim = next(w for w in ws if w["stage"] == stage and w["tp_rank"] == tp_rank)
            _kill_and_recover(url, victim)
        units = httpx.get(f"{url}/health").json()["units"]
        assert [u["restarts"] for u in units] == [2, 2] and all(u["state"] == "serving" for u in units)
    except BaseException:
        print(srv.output())
        raise
    finally:
        assert srv.stop() == 0


def _stream_ids(c, max_tokens: int, started=None):
    """('finished', end time, token ids) or ('error', end time, message) of a greedy stream."""
    ids: list[int] = []
    try:
        for chunk in c.completions.create(
            model=NAME, prompt="hello", max_tokens=max_tokens, temperature=0, stream=True, extra_body={"ignore_eos": True, "return_token_ids": True}
        ):
            ids += chunk.choices[0].model_extra.get("token_ids") or []
            if started is not None and len(ids) >= 3:
                started.set()
        return ("finished", time.monotonic(), ids)
    except openai.APIError as e:
        return ("error", time.monotonic(), str(e))


def test_a_dead_decode_pool_sends_its_sequences_back_to_prefill(built, tmp_path):
    model, _, _ = built
    plan_pools(model, tmp_path)
    srv = _start(tmp_path / "dis.json", model, "--max-batched-tokens", "16")
    url = srv.url
    try:
        ws = httpx.get(f"{url}/health").json()["workers"]
        decode_lane = max(int(w["stage"].split(".")[0]) for w in ws)
        victim = next(w for w in ws if w["stage"].startswith(f"{decode_lane}."))
        prefill = {w["rank"]: w["pid"] for w in ws if not w["stage"].startswith(f"{decode_lane}.")}
        c = client(url)
        want = _stream_ids(c, 120)
        assert want[0] == "finished" and len(want[2]) == 120
        with cf.ThreadPoolExecutor(3) as ex:
            started = threading.Event()
            futs = [ex.submit(_stream_ids, c, 120, started) for _ in range(3)]
            assert started.wait(30)  # decoding: the decode pool holds the sequences
            t_kill = time.monotonic()
            os.kill(victim["pid"], signal.SIGKILL)
            results = [f.result(timeout=120) for f in futs]
        # recomputed by the prefill pool and decoded again once the pool is back: every stream
        # completes with the greedy tokens of the undisturbed run, none repeated or lost
        assert all(r[0] == "finished" and r[2] == want[2] for r in results), results
        wait_healthy(url, [srv.proc], timeout=RECOVER_S - (time.monotonic() - t_kill))
        ws = httpx.get(f"{url}/health").json()["workers"]
        assert {w["rank"]: w["pid"] for w in ws if w["rank"] in prefill} == prefill  # the prefill pool never stopped
        assert all(w["generation"] == 2 for w in ws if w["rank"] not in prefill)
        units = httpx.get(f"{url}/health").json()["units"]
        assert [u["restarts"] for u in units] == [0 if u["lanes"][0] != decode_lane else 1 for u in units]
        out = c.completions.create(model=NAME, prompt="after", max_tokens=8, temperature=0)
        assert out.usage.completion_tokens == 8
        assert "stays down" not in srv.output()
    except BaseException:
        print(srv.output())
        raise
    finally:
        assert srv.stop() == 0


def _with_a_nan_token(model, root) -> tuple[str, int]:
    """A copy of the model whose embedding of one token is NaN: one that neither the prompts of
    this file's kill test nor their greedy completions (HF, the original model) contain."""
    import shutil

    import torch
    from safetensors.torch import load_file, save_file
    from transformers import AutoModelForCausalLM, AutoTokenizer

    copy = root / "nan-model"
    shutil.copytree(model, copy)
    tok = AutoTokenizer.from_pretrained(copy)
    hf = AutoModelForCausalLM.from_pretrained(model).eval()
    used: set[int] = set()
    for text, n in (("hello", 40), ("hi", 2)):
        ids = tok.encode(text)
        with torch.no_grad():
            for _ in range(n):
                ids.append(int(hf(torch.tensor([ids])).logits[0, -1].argmax()))
        used |= set(ids)
    bad = max(set(range(len(tok))) - used)
    f = copy / "model.safetensors"
    w = load_file(f)
    w["model.embed_tokens.weight"][bad] = float("nan")
    save_file(w, f, metadata={"format": "pt"})
    return str(copy), bad


def _nan_requests_fail_alone(url: str, bad: int) -> None:
    """Requests whose logits are NaN end with a 500 naming it; a stream beside them and the requests
    after them (on reused, scrubbed KV blocks) get the tokens of an undisturbed run; no worker restarts."""
    c = client(url)
    pids = {w["rank"]: w["pid"] for w in httpx.get(f"{url}/health").json()["workers"]}
    want = _stream_ids(c, 40)
    assert want[0] == "finished"
    with cf.ThreadPoolExecutor(2) as ex:
        started = threading.Event()
        beside = ex.submit(_stream_ids, c, 40, started)
        assert started.wait(30)
        for stream in (False, True):
            for temperature in (0.0, 0.8):
                with pytest.raises(openai.APIError) as e:
                    out = c.completions.create(model=NAME, prompt=[bad, *range(2, 20)], max_tokens=8, temperature=temperature, stream=stream)
                    if stream:
                        list(out)
                assert "not finite" in str(e.value)
                if not stream:
                    assert e.value.status_code == 500  # type: ignore[attr-defined]
        r = beside.result(60)
        assert r[0] == "finished" and r[2] == want[2]
    for _ in range(3):  # through every block of the small pool: the scrubbed ones too
        again = _stream_ids(c, 40)
        assert again[0] == "finished" and again[2] == want[2]
    health = httpx.get(f"{url}/health")
    assert health.status_code == 200 and {w["rank"]: w["pid"] for w in health.json()["workers"]} == pids


def test_without_restarts_health_names_the_dead_stage(built, tmp_path):
    model, plan_path, _ = built
    nan_model, bad = _with_a_nan_token(model, tmp_path)
    # 8 KV blocks (7 usable, 112 tokens): blocks are reused request after request
    srv = _start(plan_path, nan_model, "--max-restarts", "0", "--num-kv-blocks", "8")
    url = srv.url
    try:
        _nan_requests_fail_alone(url, bad)  # a sampler that raised ended its worker: this lane would stay down
        ws = httpx.get(f"{url}/health").json()["workers"]
        victim = ws[-1]
        os.kill(victim["pid"], signal.SIGKILL)
        deadline = time.monotonic() + 10
        while (h := httpx.get(f"{url}/health").json()).get("units", [{}])[0].get("state") != "failed":
            assert time.monotonic() < deadline, h
            time.sleep(0.2)
        r = httpx.get(f"{url}/health")
        body = r.json()
        assert r.status_code == 503 and body["status"] == "unavailable"
        assert f"stage {victim['stage']}" in body["reason"] and victim["device"] in body["reason"]
        assert "gave up after 0 restart" in body["reason"]
        time.sleep(2)
        assert httpx.get(f"{url}/health").status_code == 503  # stays down
        with pytest.raises(openai.APIStatusError) as e:
            client(url).completions.create(model=NAME, prompt="hi", max_tokens=2)
        assert e.value.status_code == 503
    finally:
        assert srv.stop() == 0


def test_failed_restarts_leave_the_stage_down_with_the_reason(built, tmp_path):
    import shutil

    model, plan_path, _ = built
    copy = tmp_path / "model"
    shutil.copytree(model, copy)
    srv = _start(plan_path, copy, "--max-restarts", "2")
    url = srv.url
    try:
        for f in copy.glob("*.safetensors"):  # a restarted worker cannot load its weights any more
            f.rename(f.with_suffix(".gone"))
        victim = httpx.get(f"{url}/health").json()["workers"][0]
        os.kill(victim["pid"], signal.SIGKILL)
        deadline = time.monotonic() + 120
        while (h := httpx.get(f"{url}/health").json())["units"][0]["state"] != "failed":
            assert time.monotonic() < deadline, h
            time.sleep(0.5)
        r = httpx.get(f"{url}/health")
        reason = r.json()["reason"]
        assert r.status_code == 503 and f"stage {victim['stage']}" in reason and victim["device"] in reason
        assert "gave up after 2 restart attempt(s)" in reason and "while starting" in reason
        text = srv.output()
        assert text.count("restarting pipeline unit 0 (attempt") == 2
    finally:
        assert srv.stop() == 0
