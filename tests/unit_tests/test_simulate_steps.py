"""The saturation model's steps against the runtime's own scheduler driven step by step.

The reference runs hetc/batching.py at saturation (a queue that never empties, fixed
prompt and output lengths, every sequence to its length), records each micro-batch it forms —
decode tokens, prompt chunks, their real contexts, tokens sampled — and costs each with the
same analytic model. `Round.of` must give the same tokens per step, the same share of steps
carrying prompts and the same output tokens per second of work.
"""

from collections import deque

import pytest

from hetc.cluster import load_profile
from hetc.partitioner.capture.capture import capture
from hetc.partitioner.cost_models.analytic import Step, units_time
from hetc.partitioner.estimate.simulate import Round, Workload
from hetc.kv_blocks import BlockManager, blocks_for
from hetc.batching import Scheduler, SchedulerConfig
from hetc.sequence import SamplingParams, Sequence
from tests.conftest import FIXTURES as CONFIGS

# (input, output, batch, stages, token budget): prompts in one step or in chunks, prompts that queue
# for the budget, micro-batches over two stages, short outputs (many prompts per step)
CASES = [
    (1000, 100, 64, 1, 2048),
    (300, 50, 64, 1, 2048),
    (2048, 32, 64, 1, 2048),
    (100, 20, 256, 1, 2048),
    (3000, 40, 16, 1, 1024),
    (500, 60, 64, 2, 2048),
    (5000, 64, 32, 1, 2048),
    (4000, 1, 4, 1, 2048),
    (1000, 2, 64, 1, 2048),
]


def reference(wl: Workload, batch: int, n_stages: int, steps: int) -> list[tuple[Step, int]]:
    """(step, tokens sampled) of every micro-batch the scheduler forms after its first third (prompts of
    their own: nothing for the prefix cache to share)."""
    sched = Scheduler(
        BlockManager(batch * blocks_for(wl.context)),
        SchedulerConfig(max_num_seqs=batch, max_batched_tokens=wl.prefill_chunk, n_stages=n_stages, max_waiting=10**9),
    )
    inflight: deque = deque()
    out = []
    next_id = 0
    while len(out) < steps:
        while sched.num_waiting < batch:  # offline: the queue never empties
            sched.add(Sequence(next_id, [next_id] * wl.input_len, wl.input_len, SamplingParams(max_tokens=wl.output_len, ignore_eos=True)))
            next_id += 1
        while len(inflight) < n_stages and (mb := sched.schedule()) is not None:
            inflight.append(mb)
        mb = inflight.popleft()
        dec = [it for it in mb.items if it.start >= it.seq.num_prompt_tokens]
        pre = [it for it in mb.items if it.start < it.seq.num_prompt_tokens]
        ptok = sum(it.n_new for it in pre)
        step = Step.mixed(
            len(dec), sum(it.start for it in dec) / max(len(dec), 1), ptok, len(pre), sum(it.n_new * (it.start + it.n_new / 2) for it in pre) / max(ptok, 1)
        )
        out.append((step, sum(it.sample for it in mb.items)))
        sched.on_result(mb, [7 if it.sample else -1 for it in mb.items])
    return out[steps // 3 :]


@pytest.fixture(scope="module")
def cost():
    units, prof = capture(str(CONFIGS / "tiny-llama"), dtype="bf16").units, load_profile("h100-sxm")

    def f(step: Step) -> float:
        return units_time(units, prof, step, dtype="bf16", kv_dtype="bf16") + prof.step_overhead

    return f


@pytest.mark.parametrize("case", CASES, ids=lambda c: "-".join(map(str, c)))
def test_rounds_are_the_steps_the_runtime_scheduler_forms(case, cost):
    inp, out, batch, n, budget = case
    wl = Workload(inp, out, "bf16", "bf16", budget)
    r = Round.of(wl, batch, n)
    ref = reference(wl, batch, n, steps=30 * n * (out + 10))
    k = r.messages
    ref_out = sum(o for _, o in ref) / len(ref)
    assert batch / k == pytest.approx(ref_out, rel=0.02)  # a round: one token per sequence in flight
    assert r.tokens / k == pytest.approx(sum(s.total_tokens for s, _ in ref) / len(ref), rel=0.03)
    mixed = sum(c for c, s in r.steps if not s.decode_only) / k
    assert mixed == pytest.approx(sum(1 for s, _ in ref if not s.decode_only) / len(ref), abs=0.15)
    # what it all costs: output tokens per second of stage work, step by step vs per round
    model = batch / sum(c * cost(s) for c, s in r.steps)
    assert model == pytest.approx(sum(o for _, o in ref) / sum(cost(s) for s, _ in ref), rel=0.03)


def test_prefill_rides_in_decode_steps_and_costs_less_than_its_own_steps(cost):
    """The old model prefilled every prompt in steps of its own; packing the chunks beside the
    decode tokens streams the weights and pays the step once."""
    wl = Workload(1000, 100, "bf16", "bf16")
    r = Round.of(wl, 64, 1)
    own = cost(Step(64, 64, wl.decode_ctx)) + 64 / wl.output_len * cost(Step(1000, 1, 500))
    assert sum(c * cost(s) for c, s in r.steps) < own
