"""`hetc evaluate`: vLLM's names on stdout and in -o, bad input as exit 2, and a plan edited by hand
evaluated with its derived fields recomputed."""

import json
import subprocess
import sys

import pytest

from hetc.partitioner.planner import PlanRequest, make_plan
from hetc.plan import save_plan
from tests.conftest import FIXTURES, two_type_cluster

MODEL = str(FIXTURES / "tiny-llama")
VLLM = [
    "request_throughput",
    "output_throughput",
    "total_token_throughput",
    "request_goodput",
    *(f"{s}_{m}_ms" for m in ("ttft", "tpot", "itl", "e2el") for s in ("mean", "median", "p90", "p99")),
]


def _hetc(*args):
    return subprocess.run([sys.executable, "-m", "hetc.cli", "evaluate", *args], capture_output=True, text=True)


@pytest.fixture(scope="module")
def plan_file(tmp_path_factory):
    d = tmp_path_factory.mktemp("ev")
    two_type_cluster(d, "2 MB", "4 MB", a_count=2)
    plan = make_plan(
        PlanRequest(model=MODEL, profiles=str(d / "c.yaml"), dtype="fp32", input_len=32, output_len=16, time_limit=2, placement="a:0|b:0", batch=8)
    )
    save_plan(plan, d / "p.json")
    return d / "p.json"


def test_figures_under_vllms_names(plan_file, tmp_path):
    r = _hetc(
        str(plan_file),
        "--rate",
        "50",
        "--requests",
        "200",
        "--ttft-slo",
        "50",
        "--tpot-slo",
        "20",
        "--json",
        "-o",
        str(tmp_path / "r.json"),
        "--output-len-dist",
        "uniform:8-24",
    )
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc == json.loads((tmp_path / "r.json").read_text())
    for k in VLLM + [
        "output_throughput_per_device",
        "tok_s_per_user",
        "usd_per_mtok",
        "watts",
        "joule_per_output_token",
        "distserve_goodput",
        "saturates_first",
        "stages",
    ]:
        assert doc[k] is not None, k
    assert doc["completed"] == 200 and doc["devices"] == 2
    assert doc["tok_s_per_user"] == pytest.approx(1e3 / doc["median_tpot_ms"])
    assert doc["joule_per_output_token"] == pytest.approx(doc["watts"] / doc["output_throughput"])
    assert doc["p99_ttft_ms"] >= doc["median_ttft_ms"] and doc["distserve_goodput"] > 0
    assert [s["stage"] for s in doc["stages"]] == [0, 1] and all(0 < s["memory_headroom_share"] < 1 for s in doc["stages"])


def test_hand_edited_plan_is_recomputed(plan_file, tmp_path):
    doc = json.loads(plan_file.read_text())
    doc["pipelines"][0]["stages"][0]["memory_bytes"]["kv"] = 1.0  # stale: one byte of KV
    doc["pipelines"][0]["stages"][1]["predicted_ms"]["decode"] = 1e6
    (tmp_path / "edited.json").write_text(json.dumps(doc))
    a = json.loads(_hetc(str(plan_file), "--concurrency", "4", "--requests", "40", "--json").stdout)
    r = _hetc(str(tmp_path / "edited.json"), "--concurrency", "4", "--requests", "40", "--json")
    assert r.returncode == 0, r.stderr
    b = json.loads(r.stdout)
    assert any("stage 0: memory_bytes recomputed (kv" in n for n in b["notes"])
    assert any("stage 1: predicted_ms recomputed (decode" in n for n in b["notes"])
    assert a["output_throughput"] == pytest.approx(b["output_throughput"]) and not a["notes"]


def test_the_window_reported_is_said(plan_file):
    """--warmup/--cooldown: the text names the requests and seconds the figures cover, the JSON the same;
    without them the whole run (every request) is said to be reported."""
    r = _hetc(str(plan_file), "--concurrency", "4", "--requests", "40", "--warmup", "4", "--cooldown", "10%", "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["window"] | {"start_s": 0, "end_s": 0} == {
        "warmup": "4 requests",
        "cooldown": "10% of requests",
        "first_request": 4,
        "requests": 32,
        "sent": 40,
        "start_s": 0,
        "end_s": 0,
    }
    assert doc["completed"] == 32 and 0 < doc["window"]["start_s"] < doc["window"]["end_s"]
    assert "figures over requests 5–36 of 40 sent" in " ".join(r.stderr.split())
    whole = _hetc(str(plan_file), "--concurrency", "4", "--requests", "40", "--json")
    assert json.loads(whole.stdout)["window"]["requests"] == 40 and "figures over every request (40)" in " ".join(whole.stderr.split())


@pytest.mark.parametrize(
    "args, field",
    [
        (["--rate", "1", "--trace", "t.jsonl"], "not allowed with"),
        (["--rate", "0"], "--rate"),
        (["--input-len-dist", "zipf:2"], "--input-len-dist"),
        (["--attainment", "1.5"], "--attainment"),
        (["--trace", "missing.jsonl"], "--trace"),
        (["--warmup", "ten"], "--warmup"),
        (["--cooldown", "100%"], "--cooldown"),
        (["--requests", "20", "--warmup", "12", "--cooldown", "8"], "--warmup"),
        (["--requests", "20", "--warmup", "1000s"], "--warmup"),
        (["--prefix-len", "-1"], "--prefix-len"),
        (["--prefix-groups", "0"], "--prefix-groups"),
        (["--prefix-groups", "3"], "--prefix-groups"),  # and no prefix, neither given nor the plan's
        (["--trace", "t.jsonl", "--prefix-len", "64"], "--trace"),
    ],
)
def test_bad_input_exits_2(plan_file, args, field):
    r = _hetc(str(plan_file), *args)
    assert r.returncode == 2 and field in r.stderr and "Traceback" not in r.stderr
