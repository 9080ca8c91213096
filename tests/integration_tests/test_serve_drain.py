"""SIGTERM drains `hetc serve` (slow: another server): new requests get 503 with the reason
and /health turns 503 at once, while the HTTP server keeps answering; open requests finish
until --drain-timeout, those still open then end with an error; the server and its workers
exit 0."""

from __future__ import annotations

import concurrent.futures as cf
import signal
import subprocess
import sys
import threading
import time

import httpx2 as httpx
import openai
import pytest

from tests.fixtures.serving import KEY, NAME, REPO, client, free_port, wait_healthy

pytestmark = pytest.mark.slow


def test_sigterm_refuses_new_requests_finishes_or_times_out_open_ones_and_exits_0(built, tmp_path):
    model, plan_path, _ = built
    port = free_port()
    log = open(tmp_path / "serve.log", "w+")
    # one sequence at a time: the long requests queue behind each other and outlive a 1.5 s drain
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "hetc.cli",
            "serve",
            str(plan_path),
            "--emulate",
            "--model-dir",
            str(model),
            "--port",
            str(port),
            "--served-model-name",
            NAME,
            "--api-key",
            KEY,
            "--max-num-seqs",
            "1",
            "--drain-timeout",
            "1.5",
            "--max-queue-wait",
            "600",
            "--executor",
            "torch",
        ],
        cwd=REPO,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(url, [proc])
        c = client(url)
        started = threading.Event()

        def run(max_tokens: int):
            try:
                n = 0
                for chunk in c.completions.create(
                    model=NAME,
                    prompt="drain",
                    max_tokens=max_tokens,
                    temperature=0,
                    stream=True,
                    stream_options={"include_usage": True},
                    extra_body={"ignore_eos": True},
                ):
                    started.set()
                    if chunk.usage is not None:
                        n = chunk.usage.completion_tokens
                return ("finished", n)
            except openai.APIError as e:
                return ("error", str(e))

        with cf.ThreadPoolExecutor(4) as ex:
            short = ex.submit(run, 8)
            assert started.wait(30)
            longs = [ex.submit(run, 240) for _ in range(3)]
            time.sleep(0.3)
            t0 = time.monotonic()
            proc.send_signal(signal.SIGTERM)
            time.sleep(0.3)
            with pytest.raises(openai.APIStatusError) as e:  # still answering, but admitting nothing
                c.completions.create(model=NAME, prompt="late", max_tokens=2)
            assert e.value.status_code == 503 and "shutting down" in str(e.value)
            h = httpx.get(f"{url}/health")
            assert h.status_code == 503 and "draining" in h.json()["reason"]
            assert short.result(timeout=30) == ("finished", 8)
            results = [f.result(timeout=30) for f in longs]
        assert all(r == ("finished", 240) or (r[0] == "error" and "drain timeout" in r[1]) for r in results), results
        assert any(r[0] == "error" for r in results)  # the queued ones could not finish in 1.5 s
        assert proc.wait(30) == 0
        assert time.monotonic() - t0 < 1.5 + 15  # the drain timeout, then stopping the workers
        log.seek(0)
        text = log.read()
        assert "drain timeout (1.5 s): ended" in text and "workers stopped" in text
    finally:
        if proc.poll() is None:
            proc.kill()
        log.close()
