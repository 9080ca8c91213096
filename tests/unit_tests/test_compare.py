"""`hetc compare`: plans or clusters side by side under one simulated load; each row is that plan's
own `hetc evaluate` under the same load; the HTML page is self-contained (no script, no external
resource) and carries the table, the latency CDFs, the Pareto chart and every placement."""

import csv
import json
import re
import subprocess
import sys

import pytest

from hetc.partitioner.planner import PlanRequest, make_plan
from hetc.plan import save_plan
from tests.conftest import FIXTURES, two_type_cluster

MODEL = str(FIXTURES / "tiny-llama")


def _hetc(*args):
    return subprocess.run([sys.executable, "-m", "hetc.cli", *args], capture_output=True, text=True)


def test_plans_side_by_side_under_one_load(tmp_path):
    two_type_cluster(tmp_path, "0.6 MB", "2 MB", a_count=2)
    kw = dict(model=MODEL, profiles=str(tmp_path / "c.yaml"), dtype="fp32", input_len=32, output_len=16, time_limit=2)
    best, slow = make_plan(PlanRequest(**kw)), make_plan(PlanRequest(**kw, placement="b:0"))
    save_plan(best, tmp_path / "best.json")
    save_plan(slow, tmp_path / "slow.json")
    load = ["--rate", "200", "--requests", "150", "--ttft-slo", "20", "--tpot-slo", "5"]
    r = _hetc(
        "compare",
        str(tmp_path / "best.json"),
        str(tmp_path / "slow.json"),
        *load,
        "--json",
        "--csv",
        str(tmp_path / "c.csv"),
        "--html",
        str(tmp_path / "r.html"),
    )
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert "Poisson at 200 req/s" in doc["load"]
    rows = doc["rows"]
    assert [x["name"] for x in rows] == ["best", "slow"]
    assert rows[0]["saturation_output_tok_s"] == pytest.approx(best.predicted.output_tok_s)
    assert rows[1]["devices"] == 1 and rows[0]["distserve_goodput"] > 0 and rows[1]["distserve_goodput"] > 0
    assert rows[0]["tok_s_per_device"] == pytest.approx(rows[0]["output_throughput"] / rows[0]["devices"])
    one = json.loads(_hetc("evaluate", str(tmp_path / "slow.json"), *load, "--json").stdout)  # the same figures alone
    for k in ("output_throughput", "median_ttft_ms", "p99_tpot_ms", "distserve_goodput"):
        assert rows[1][k] == pytest.approx(one[k]), k
    assert len(list(csv.DictReader(open(tmp_path / "c.csv")))) == 2
    page = (tmp_path / "r.html").read_text()
    assert len(re.findall(r"src='data:image/png;base64,|src=\"data:image/png;base64,", page)) == 4  # CDFs, Pareto, 2 plans
    assert "http://" not in page and "https://" not in page and "<script" not in page  # opens offline


def test_clusters_planned_once_each_and_bad_input(tmp_path):
    two_type_cluster(tmp_path, "0.6 MB", "2 MB", a_count=2)
    (tmp_path / "d.yaml").write_text((tmp_path / "c.yaml").read_text().replace("count: 2", "count: 1"))
    r = _hetc(
        "compare",
        "--profiles",
        str(tmp_path / "c.yaml"),
        str(tmp_path / "d.yaml"),
        MODEL,
        "--dtype",
        "fp32",
        "--input-len",
        "32",
        "--output-len",
        "16",
        "--time-limit",
        "2",
        "--requests",
        "60",
        "--json",
    )
    assert r.returncode == 0, r.stderr
    rows = json.loads(r.stdout)["rows"]
    assert [x["name"] for x in rows] == ["c", "d"] and rows[0]["devices"] >= rows[1]["devices"]
    r = _hetc("compare")
    assert r.returncode == 2 and "nothing to compare" in r.stderr
    r = _hetc("compare", str(tmp_path / "missing.json"))
    assert r.returncode == 2 and "Traceback" not in r.stderr
    r = _hetc("compare", "A", "B", "--profiles", str(tmp_path / "c.yaml"))
    assert r.returncode == 2 and "give one MODEL" in r.stderr
