"""Schema fuzzing (slow): schemathesis against `hetc serve --emulate`'s own /openapi.json.

Two runs of the `st` command, each a public reproduce command (BENCHMARKS.md "Schema fuzzing"):
1. every check but negative_data_rejection on the served document: no 500, every response as
   documented (status, content type, body schema, Retry-After, Allow on 405), every request the
   document calls valid accepted (positive_data_acceptance), the API key enforced (ignored_auth);
2. negative mode with negative_data_rejection on the document with its prompt and message
   lengths (and max_tokens' maximum) taken out: those are sizes whose tokens always fit, and a longer prompt whose
   tokens fit is rightly accepted (openapi.py), so only the structural rules are asked to reject.
Then, from the recorded responses and /metrics: every error body is OpenAI's error JSON, each
generation answered 200 was a request the engine finished (hetc_request_success_total moved by
exactly that many), and the server still serves a normal request with /health 200.
"""

from __future__ import annotations

import base64
import json
import subprocess
import time
from pathlib import Path

import httpx2 as httpx
import pytest

from hetc.runtime.openapi import FITS
from tests.fixtures.serving import KEY, NAME, client, start_serve

pytestmark = pytest.mark.slow

ST = str(Path(__import__("sys").executable).parent / "st")
GENERATE = ("/v1/completions", "/v1/chat/completions")


def _finished(url: str) -> float:
    text = httpx.get(f"{url}/metrics").text
    return sum(float(l.rsplit(" ", 1)[1]) for l in text.splitlines() if l.startswith("hetc_request_success_total"))


def _run(args: list[str], report: Path) -> list[dict]:
    """`st run ARGS` (exit 0 or the test fails with its output); the responses it recorded."""
    # a generation without max_tokens runs to the 256-token context: on the shared 2-core host (load 6-10) that
    # took 10-12 s, past st's default 10 s request timeout ("Network Error") and the 10 s limit of the
    # max_response_time check that `--checks all` adds; this test is about the responses, not their latency
    r = subprocess.run(
        [
            ST,
            "run",
            *args,
            "-H",
            f"Authorization: Bearer {KEY}",
            "--seed",
            "1",
            "--workers",
            "1",
            "--request-timeout",
            "120",
            "--max-response-time",
            "120",
            "--report",
            "ndjson",
            "--report-ndjson-path",
            str(report),
        ],
        capture_output=True,
        text=True,
        timeout=900,
        cwd=report.parent,
    )  # its cache folder goes there, not into the repo
    assert r.returncode == 0, r.stdout[-6000:] + r.stderr[-2000:]
    out = []
    for line in report.read_text().splitlines():
        event = json.loads(line)
        for it in event.get("ScenarioFinished", {}).get("recorder", {}).get("interactions", {}).values():
            if it.get("response"):
                out.append(it)
    return out


def _sequences(body: str, request: dict) -> int:
    """The sequences a generation answered 200 started: one per choice of its JSON answer; for
    server-sent events, n per prompt of the request (the recorder may hold only the stream's
    start: a client that stops reading ends the rest, which the engine counts as finished too,
    and `n` samples fork a step after their first, so a short start may show only some choices)."""
    if not body.startswith("data:"):
        return len(json.loads(body)["choices"])
    p = request.get("prompt")
    prompts = len(p) if isinstance(p, list) and p and all(isinstance(x, (str, list)) for x in p) else 1
    return int(request.get("n") or 1) * prompts


def _lengths_out(node):
    """The document without the bounds that only promise acceptance (openapi.FITS): prompt and message
    lengths, tools' count, the JSON Schema subset it describes for structured output."""
    if isinstance(node, dict):
        if str(node.get("description", "")).startswith(FITS):
            for key in ("maxLength", "maxItems", "maximum", "additionalProperties"):
                node.pop(key, None)
        for v in node.values():
            _lengths_out(v)
    elif isinstance(node, list):
        for v in node:
            _lengths_out(v)
    return node


def test_schemathesis_finds_no_500_and_valid_requests_reach_the_engine(built, tmp_path):
    model, plan, _ = built
    srv = start_serve(
        plan,
        "--emulate",
        "--model-dir",
        model,
        "--served-model-name",
        NAME,
        "--api-key",
        KEY,
        "--executor",
        "torch",
        "--max-queue-wait",
        "600",
        "--timeout",
        "30",
        log=tmp_path / "serve.log",
    )
    try:
        before = _finished(srv.url)
        doc = httpx.get(f"{srv.url}/openapi.json").json()
        (tmp_path / "structural.json").write_text(json.dumps(_lengths_out(doc)))
        seen = _run(
            [
                f"{srv.url}/openapi.json",
                "--checks",
                "all",
                "--exclude-checks",
                "negative_data_rejection",
                "--phases",
                "coverage,fuzzing",
                "--max-examples",
                "40",
            ],
            tmp_path / "all.ndjson",
        )
        seen += _run(
            [
                str(tmp_path / "structural.json"),
                "--url",
                srv.url,
                "--mode",
                "negative",
                "--checks",
                "not_a_server_error,negative_data_rejection,content_type_conformance",
                "--phases",
                "coverage,fuzzing",
                "--max-examples",
                "40",
            ],
            tmp_path / "negative.ndjson",
        )
        statuses = [it["response"]["status_code"] for it in seen]
        assert 500 not in statuses and len(seen) > 200, statuses
        ok = 0
        for it in seen:
            res, path = it["response"], it["request"]["uri"].removeprefix(srv.url)
            if res["status_code"] >= 400:  # OpenAI's error JSON, whatever the status
                body = json.loads(base64.b64decode(res["content"]["$base64"]))
                err = body["error"]
                assert set(err) == {"message", "type", "param", "code"} and err["message"], (path, body)
            elif path in GENERATE and it["request"]["method"] == "POST":
                ok += _sequences(base64.b64decode(res["content"]["$base64"]).decode(), json.loads(base64.b64decode(it["request"]["body"]["$base64"])))
        assert ok >= 40, statuses  # plenty of valid generations (sequences), not only refusals
        deadline = time.monotonic() + 10  # a stop string's abort is counted when its last step returns
        while _finished(srv.url) - before != ok and time.monotonic() < deadline:
            time.sleep(0.2)
        assert _finished(srv.url) - before == ok
        assert httpx.get(f"{srv.url}/health").status_code == 200
        out = client(srv.url).completions.create(model=NAME, prompt="after the fuzz", max_tokens=5, temperature=0)
        assert out.usage.completion_tokens == 5
    except BaseException:
        print(srv.output()[-5000:])
        raise
    finally:
        srv.stop()
