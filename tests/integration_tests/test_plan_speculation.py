"""`hetc plan --draft / --speculate` end to end: the catalog case (llama-3.1-8b drafting llama-3.1-70b on a
mixed cluster), the with/without choice, plan.json's speculation section, and bad input (exit 2)."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from hetc.partitioner.planner import PlanRequest, make_plan
from hetc.plan import load_plan, save_plan
from hetc.requests import SpecRequest
from hetc.speculation import AcceptanceSource, SpeculationMethod, expected_tokens_per_round

REPO = Path(__file__).resolve().parents[2]
K, ALPHA = 4, 0.7


def _cluster(d: Path, other: str) -> str:
    """Two H100s (the 70B's weights leave no room for a drafter beside them) and one other device."""
    path = d / f"h100x2-{other}.yaml"
    path.write_text(f"""nodes:
  - {{name: a, device: h100-sxm, count: 2, link: nvlink4}}
  - {{name: b, device: {other}, count: 1}}
network: {{default: roce-400g}}
""")
    return str(path)


def _plan(profiles: str, **spec):
    req = PlanRequest(
        model="llama-3.1-70b",
        profiles=profiles,
        max_num_seqs=8,  # an engine's cap: decode streams the weights, where proposals pay
        time_limit=5,
        spec=SpecRequest(draft="llama-3.1-8b", num_speculative_tokens=K, **({"acceptance": ALPHA} | spec)),
    )
    return make_plan(req)


@pytest.fixture(scope="module")
def h200(tmp_path_factory):
    return _plan(_cluster(tmp_path_factory.mktemp("c"), "h200-sxm"))


def test_a_fast_device_of_another_type_drafts_and_the_gain_is_reported(h200, tmp_path):
    s = h200.speculation
    assert s is not None and s.method is SpeculationMethod.DRAFT and s.drafter is not None
    assert s.expected_tokens_per_round == pytest.approx(expected_tokens_per_round(ALPHA, K), rel=1e-12)
    assert (s.acceptance, s.acceptance_source, s.num_speculative_tokens) == (ALPHA, AcceptanceSource.GIVEN, K)
    assert {st.profile for st in s.drafter.stages} == {"h200-sxm"}  # not beside the H100s: no room there
    assert s.drafter.model.ref == "llama-3.1-8b" and s.drafter.predicted_ms_per_token > 0
    assert s.drafter.stages[0].units[0] == 0 and s.drafter.stages[-1].units[1] == s.drafter.model.num_units - 1
    without = h200.baselines["no_speculation"]
    gain = h200.predicted.output_tok_s / without.output_tok_s
    assert gain > 1.2  # predicted: ~1.5× at α 0.7
    assert without.tpot_ms / h200.predicted.tpot_ms > 1.2  # tok/s per user at the same devices
    assert any("predicted gain" in n for n in h200.solver.notes)
    assert h200.solver.objective / h200.solver.bound >= 0.97  # the bound covers plans with and without a drafter
    save_plan(h200, tmp_path / "p.json")
    assert load_plan(tmp_path / "p.json").speculation == s


def test_a_slow_drafter_is_not_chosen(tmp_path):
    """An L40S drafts too slowly for the H100s: the plan speculates not, and says what it would give."""
    plan = _plan(_cluster(tmp_path, "l40s"))
    assert plan.speculation is None
    assert plan.baselines["speculation"].output_tok_s < plan.predicted.output_tok_s
    assert plan.solver.objective / plan.solver.bound >= 0.97


def test_acceptance_from_a_served_runs_metrics(tmp_path):
    """α read from vLLM's counters: accepted over drafted tokens is the geometric prefix's mean share."""
    share = 0.5
    metrics = tmp_path / "metrics.txt"
    metrics.write_text(
        f"vllm:spec_decode_num_accepted_tokens_total {share * 4000}\nvllm:spec_decode_num_draft_tokens_total 4000\nvllm:spec_decode_num_drafts_total 1000\n"
    )
    plan = _plan(_cluster(tmp_path, "h200-sxm"), acceptance=None, acceptance_from=str(metrics))
    s = plan.speculation
    assert s is not None and s.acceptance_source is AcceptanceSource.MEASURED and str(metrics) in s.acceptance_from
    assert expected_tokens_per_round(s.acceptance, K) - 1 == pytest.approx(share * K, rel=1e-6)
    assert s.proposal_rate == 1.0  # vLLM's counters say nothing of the steps without proposals


# -------------------------------------------------------------------- bad input (exit 2, one paragraph)


def hetc(*args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "HETC_DEBUG"}
    return subprocess.run([sys.executable, "-m", "hetc.cli", *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=300)


BASE = ["plan", "llama-3.1-70b", "--profiles", "examples/small-mixed.yaml", "-o", os.devnull, "--time-limit", "1"]


@pytest.mark.parametrize(
    ("args", "flag"),
    [
        (["--draft", "llama-3.1-8b", "--acceptance", "0.7", "--num-speculative-tokens", "0"], "--num-speculative-tokens"),
        (["--draft", "llama-3.1-8b", "--acceptance", "0.7", "--num-speculative-tokens", "17"], "--num-speculative-tokens"),
        (["--draft", "llama-3.1-8b", "--acceptance", "1.5"], "--acceptance"),
        (["--draft", "llama-3.1-8b"], "--acceptance"),
        (["--speculate", "ngram", "--acceptance", "0.5", "--acceptance-from", "m.txt"], "--acceptance"),
        (["--speculate", "ngram", "--draft", "llama-3.1-8b", "--acceptance", "0.5"], "--speculate"),
        (["--speculate", "draft", "--acceptance", "0.5"], "--draft"),
        (["--speculate", "ngram", "--acceptance", "0.5", "--disaggregate", "on"], "--disaggregate"),
        (["--speculate", "ngram", "--acceptance-from", "no-such-metrics.txt"], "--acceptance-from"),
        (["--speculate", "ngram", "--acceptance", "0.5", "--proposal-rate", "0"], "--proposal-rate"),
        (["--draft", "mistral-7b", "--acceptance", "0.7"], "--draft"),  # 32,000 tokens against 128,256
    ],
)
def test_bad_speculation_input_exits_2_naming_the_flag(args, flag):
    r = hetc(*BASE, *args)
    out = r.stdout + r.stderr
    assert r.returncode == 2, out
    assert "Traceback" not in out
    assert flag in r.stderr and "Fix:" in r.stderr, r.stderr
    assert len([line for line in r.stderr.strip().splitlines() if line.strip()]) <= 4  # one paragraph (wrapped)
