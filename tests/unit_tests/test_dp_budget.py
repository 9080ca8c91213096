"""A data-parallel group's token budget (hetc/experts.py StepBudget): engines whose data-parallel ranks each
schedule their own steps (vLLM, TensorRT-LLM) give a `dp-ep` group of g devices g budgets per step, SGLang
one; a pipeline's micro-step is within its narrowest stage's (Workload.ranked), a prompt's chunk within one
rank's; the bound prices each kind at its own budget (valid: no pipeline holding it has more), its regimes
break where any budget's do; `hetc evaluate`'s scheduler gives a lane the same budget."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from hetc.batching import SchedulerConfig, lane_config
from hetc.cluster import Link, Node, load_cluster, load_profile
from hetc.engine import EngineName, load_engine
from hetc.experts import ExpertLayout, StepBudget
from hetc.partitioner.capture.capture import capture
from hetc.partitioner.cost_models.envelope import bound_node
from hetc.partitioner.estimate.budget_floor import floored
from hetc.partitioner.estimate.batches import Regimes
from hetc.partitioner.estimate.simulate import Round, StagePlan, Workload, _seat_life, estimate_pipeline, unit_round_costs
from hetc.partitioner.search.solver import solve
from hetc.scheduling import Phase
from tests.brute_force import all_devices, best_per_set, options, packings
from tests.conftest import FIXTURES, PROFILE

NVLINK = Link(name="nvlink4", bandwidth="450 GB/s", latency="3 us")
PER_RANK = Workload(200, 56, "bf16", "bf16", prefill_chunk=64, experts=ExpertLayout.DP_EP, dp_budget=StepBudget.PER_RANK)


@pytest.fixture(scope="module")
def deepseek():
    return capture(str(FIXTURES / "tiny-deepseek-v3"), dtype="bf16", kv_dtype="bf16", cache=False)


def test_the_engines_say_whose_budget_a_step_fills():
    got = {e: load_engine(e).experts.dp_budget for e in EngineName}
    per_rank, shared = StepBudget.PER_RANK, StepBudget.SHARED
    assert got == {EngineName.VLLM: per_rank, EngineName.TRTLLM: per_rank, EngineName.SGLANG: shared, EngineName.HETC: shared}


def test_a_micro_step_spans_the_narrowest_stages_ranks():
    assert PER_RANK.ranked(8).step_budget == 8 * 64 and PER_RANK.ranked(1).step_budget == 64
    assert PER_RANK.ranked(4).ranked(2).dp_ranks == 2  # re-ranked, not compounded
    shared = Workload(200, 56, "bf16", "bf16", prefill_chunk=64, experts=ExpertLayout.DP_EP)
    tensor = Workload(200, 56, "bf16", "bf16", prefill_chunk=64, dp_budget=StepBudget.PER_RANK)
    assert shared.ranked(8).step_budget == tensor.ranked(8).step_budget == 64  # one budget: SGLang's, or no data parallelism


def test_a_group_decodes_its_ranks_budgets_in_one_step(deepseek):
    """256 decoding sequences on a dp-ep group of 4 at 64 tokens a rank: one step of 256 (one weight stream),
    where one shared budget takes four steps of 64."""
    node = Node(name="n", profile=load_profile("h100-sxm"), count=4, link=NVLINK)
    wl = PER_RANK.ranked(4)
    assert Round.of(wl, 256, 1, Phase.DECODE).steps == ((1, wl.decode_step(256)),)
    assert Round.of(PER_RANK, 256, 1, Phase.DECODE).steps == ((4, PER_RANK.decode_step(64)),)
    stage = [StagePlan(node, 0, len(deepseek.units) - 1, 4)]
    per_rank = estimate_pipeline(deepseek.units, stage, None, PER_RANK, 256, Phase.DECODE)  # type: ignore[arg-type]  # one stage: no link
    shared = estimate_pipeline(deepseek.units, stage, None, replace(PER_RANK, dp_budget=StepBudget.SHARED), 256, Phase.DECODE)  # type: ignore[arg-type]
    assert per_rank.round_s < 0.5 * shared.round_s


def test_a_prompts_chunk_stays_within_one_rank():
    """A 200-token prompt at 64 tokens a rank takes 4 chunks however many ranks share the step; a prefill
    pool's group takes one prompt a rank per step."""
    for ranks in (1, 2, 4, 8):
        assert _seat_life(PER_RANK.ranked(ranks), 1.0)[1] >= math.ceil(200 / 64)
    pool = Round.of(PER_RANK.ranked(4), 4, 1, Phase.PREFILL).steps
    assert [(n, s.total_tokens, s.seqs) for n, s in pool] == [(1.0, 200.0, 4)]  # 4 prompts in 4 steps of 4 × 50 tokens


@pytest.mark.parametrize("name", ["h100-sxm", "mi300x", "gaudi3"])
@pytest.mark.parametrize("phase", [Phase.BOTH, Phase.DECODE])
def test_a_wider_budget_never_costs_a_stage_more(deepseek, name, phase):
    """What makes the bound valid: Tables prices a kind at its own group's budget, the most any pipeline
    holding it runs at; a pipeline with a narrower stage runs at a narrower one, which never costs less."""
    node = bound_node(Node(name="n", profile=load_profile(name), count=8, link=NVLINK))
    for batch in (1, 7, 63, 64, 65, 200, 257, 511, 1024):
        for m in (1, 3):
            costs = []
            for ranks in (1, 2, 4, 8):
                r = Round.of(PER_RANK.ranked(ranks), batch, m, phase)
                unit, over = unit_round_costs(deepseek.units, node, 8, PER_RANK, r)
                costs.append((sum(unit) + over, r.messages))
            for (wide, wide_msgs), (narrow, narrow_msgs) in zip(costs[1:], costs):
                assert wide <= narrow * (1 + 1e-9) and wide_msgs <= narrow_msgs + 1e-9, (batch, m)


def _shape(wl: Workload, phase: Phase, n: int, b: int) -> tuple[int, int]:
    """(micro-steps per pass, 0 at one seat each; prompt chunks) of an n-stage pipeline at b sequences, as Round.of counts them."""
    k = max(min(n, b), math.ceil(b / wl.step_budget))
    return (k if b > n else 0, _seat_life(wl, b / k)[1] if phase == Phase.BOTH else 0)


def test_regimes_break_where_any_budget_does():
    """No batch interval straddles a change of micro-steps or prompt chunks under any budget, short of
    where that budget's steps are full (priced at its floor per sequence there: budget_floor.py)."""
    for phase in (Phase.BOTH, Phase.DECODE):
        regimes = Regimes(PER_RANK, phase, 1200)
        for n in (1, 3):
            for lo, hi in regimes.runs(n, 1, 1200):
                for ranks in (1, 2, 4, 8):
                    wl = PER_RANK.ranked(ranks)
                    shapes = {_shape(wl, phase, n, b) if not floored(wl, n, b, phase) else "past" for b in range(lo, hi + 1)}
                    assert len(shapes) == 1, (phase, n, lo, hi, ranks, shapes)


def test_the_solver_and_bound_against_brute_force_with_rank_budgets(tmp_path, deepseek):
    """Two small fast devices on NVLink (a dp-ep pair, or a chain of two) and a slow big one: the plan is the
    brute-force optimum over every chain, group, split and batch — here the pair past one rank's budget —
    and the bound is above it."""
    (tmp_path / "fast.yaml").write_text(PROFILE.format(name="fast", vendor="nvidia", backend="cuda", memory="0.9 MB", bw="40 GB/s", flops="4 TFLOP/s"))
    (tmp_path / "big.yaml").write_text(PROFILE.format(name="big", vendor="amd", backend="rocm", memory="8 MB", bw="10 GB/s", flops="0.5 TFLOP/s"))
    (tmp_path / "c.yaml").write_text(
        "engine: vllm\nnodes:\n  - {name: a, device: ./fast.yaml, count: 2, link: nvlink4}\n  - {name: b, device: ./big.yaml, count: 1}\n"
        "network: {default: ethernet-10g}\n"
    )
    cluster = load_cluster(tmp_path / "c.yaml")
    wl = Workload(8, 8, "bf16", "bf16", prefill_chunk=16, experts=ExpertLayout.DP_EP, dp_budget=cluster.dp_budget)
    assert wl.dp_budget == StepBudget.PER_RANK
    best = best_per_set(options(deepseek.units, cluster, wl, tp=True, max_num_seqs=96))
    want = packings(best, all_devices(cluster))[frozenset(all_devices(cluster))]
    sol = solve(deepseek.units, cluster, wl, disaggregate="off", max_num_seqs=96)
    assert sol.bound >= want * (1 - 1e-9)
    assert sol.output_tok_s == pytest.approx(want, rel=1e-6)
    pair = next(c.estimate for c in sol.pipelines if any(s.tp == 2 for s in c.stages))
    assert pair.batch > 16  # past one rank's budget: the case a shared budget prices otherwise


def test_the_simulators_lane_schedules_each_ranks_budget():
    """`hetc evaluate`'s scheduler: a lane over 4 ranks takes 4 × 64 tokens a micro-batch, a prompt 64 of them."""
    cfg = lane_config(SchedulerConfig(max_batched_tokens=64), 1, Phase.BOTH, None, 4)
    assert (cfg.max_batched_tokens, cfg.max_chunk_tokens) == (256, 64)
    assert lane_config(SchedulerConfig(max_batched_tokens=64), 1, Phase.BOTH).max_chunk_tokens == 0
