"""Verification of speculative rounds on the last stage (runtime/speculate.py).

- The rejection rule keeps the target's distribution: over many seeded draws with a tiny
  vocabulary, the first token a round yields follows p (chi-square), for a drafted q and for a
  point-mass proposal (n-gram, a drafter's argmax), with temperature and top-k filters.
- A real model through the lane's message path (StepMeta, the rows kept past the cut, sample_step,
  verify_items, the RESULT payload and its reading): greedy rounds with n-gram proposals yield the
  tokens plain decoding yields, and after every round the KV the target holds for the sequence's
  computed positions equals the KV of a run that never proposed the rejected tokens.
"""

import pytest
import torch
from scipy.stats import chisquare
from transformers import LlamaConfig

from hetc.batching import MicroBatch, Scheduler, SchedulerConfig
from hetc.kv_blocks import BlockManager
from hetc.runtime.drafter import Drafter
from hetc.runtime.model_runner import StageModel
from hetc.runtime.sampler import sampling_probs
from hetc.runtime.sampling_state import SamplingStates, keep_all_rows, sample_rows, sample_step
from hetc.runtime.speculate import result_payload, result_tokens, spec_extras, verify, verify_items
from hetc.runtime.transport import StepMeta
from hetc.scheduling import KV_BLOCK_TOKENS
from hetc.sequence import SamplingParams, Sequence
from hetc.spec_rounds import SpecConfig
from hetc.speculation import SpeculationMethod
from hetc.weights import RandomWeights
from tests.fixtures.stages import llama_units

V = 5
DRAWS = 6000


def _first_tokens(p_logits: torch.Tensor, params, q: torch.Tensor | None, propose) -> list[int]:
    """The first token of DRAWS rounds, each seeded differently, proposals from `propose(seed)`."""
    out = []
    for seed in range(DRAWS):
        draft = propose(seed)
        logits = p_logits.expand(len(draft) + 1, V).contiguous()
        out.append(verify(logits, draft, (*params[:3], seed), 10, bonus=-99, q=q)[0])
    return out


def _chi2(tokens: list[int], p: torch.Tensor) -> float:
    counts = torch.bincount(torch.tensor(tokens), minlength=V).double()
    keep = p > 0
    assert counts[~keep].sum() == 0, "a token the target cannot produce was emitted"
    exp = p[keep].double() / p[keep].double().sum() * len(tokens)
    return float(chisquare(counts[keep].numpy(), exp.numpy()).pvalue)


@pytest.mark.parametrize("temp,top_k", [(1.0, 0), (0.7, 3)])
def test_rejection_rule_keeps_the_target_distribution_with_a_drafted_q(temp, top_k):
    g = torch.Generator().manual_seed(1)
    p_logits = torch.randn(V, generator=g) * 1.5
    q = torch.softmax(torch.randn(V, generator=g), -1)  # the drafter's distribution, far from p
    qs = q.expand(2, V)
    p = sampling_probs(p_logits - p_logits.max(), temp, 1.0, top_k)
    draws = torch.multinomial(q, DRAWS, replacement=True, generator=torch.Generator().manual_seed(2)).tolist()
    toks = _first_tokens(p_logits, (temp, 1.0, top_k), qs, lambda s: [draws[s], draws[-s - 1]])
    assert _chi2(toks, p) > 1e-3
    if top_k == 0:  # and not by accident: the proposals alone are far from p
        assert _chi2(draws, p) < 1e-6


def test_rejection_rule_with_point_mass_proposals_keeps_the_target_distribution():
    p_logits = torch.tensor([2.0, 0.5, 1.0, -1.0, 0.0])
    p = sampling_probs(p_logits - p_logits.max(), 1.0, 1.0, 0)
    for fixed in (0, 3):  # the target's favourite, and an unlikely one
        toks = _first_tokens(p_logits, (1.0, 1.0, 0), None, lambda s, d=fixed: [d, d])
        assert _chi2(toks, p) > 1e-3
    # the acceptance rate of a point-mass proposal d is p(d)
    toks = _first_tokens(p_logits, (1.0, 1.0, 0), None, lambda s: [0])
    kept = sum(1 for s in range(DRAWS) if verify(p_logits.expand(2, V).contiguous(), [0], (1.0, 1.0, 0, s), 10, bonus=-1) == [0, -1])
    assert abs(kept / DRAWS - float(p[0])) < 4 * (float(p[0]) * (1 - float(p[0])) / DRAWS) ** 0.5
    assert len(toks) == DRAWS


def test_greedy_verification_keeps_the_prefix_the_argmax_agrees_with():
    logits = torch.tensor([[0.0, 3.0, 1.0], [2.0, 0.0, 1.0], [0.0, 0.0, 5.0]])  # argmax 1, 0, 2
    greedy = (0.0, 1.0, 0, 0)
    assert verify(logits, [1, 0], greedy, 4, bonus=9) == [1, 0, 2]  # all kept: the bonus is row 2's argmax
    assert verify(logits, [1, 2], greedy, 4, bonus=9) == [1, 0]
    assert verify(logits, [2, 0], greedy, 4, bonus=9) == [1]
    bad = logits.clone()
    bad[1] = float("nan")
    assert verify(bad, [1, 0], greedy, 4, bonus=9) == [1, -2]  # the row it would come from is not finite


def test_result_payload_round_trip():
    emitted = [[5], [1, 2, 3], [-2]]
    pay = result_payload(emitted, 4, [0, 2, 3])
    assert pay.shape == (4, 3)
    assert result_tokens(pay, 4) == ([5, -1, 3, -2], [[], [], [1, 2], []])
    assert result_tokens(result_payload([[5], [7]], 2, [0, 1]), 2) == ([5, 7], None)


# ---- a real model through the lane's message path ------------------------------------------------
CFG = dict(
    vocab_size=64,
    hidden_size=64,
    intermediate_size=96,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=256,
    initializer_range=0.3,
)
BLOCKS = 24


def _model(layers: int = 2) -> StageModel:
    cfg = LlamaConfig(**{**CFG, "num_hidden_layers": layers})
    units = llama_units(cfg.num_hidden_layers)
    return StageModel(cfg, units, 0, len(units) - 1, dtype=torch.float32, kv_dtype=torch.float32, num_blocks=BLOCKS, weights=RandomWeights())


def _run_step(model: StageModel, sched: Scheduler, batch: MicroBatch, drafter: Drafter | None = None) -> None:
    """What the lane, the workers and the lane's receiver do with one micro-batch (one stage)."""
    items = batch.items
    meta = StepMeta(
        [i.seq.seq_id for i in items],
        [i.start for i in items],
        [i.n_new for i in items],
        [i.sample for i in items],
        [list(i.seq.block_table) for i in items],
        [t for i in items for t in i.tokens],
        [(0.0, 1.0, 0, 0)] * len(items),
        spec_extras(items, drafter is not None),
    )
    packed, samp = meta.encode()
    meta = StepMeta.decode(packed, samp)
    if drafter is not None:
        drafter.step(meta, packed)
        assert StepMeta.decode(packed, samp).token_ids == meta.token_ids and -1 not in meta.token_ids
    attn = model.step_meta(meta.starts, meta.n_new, meta.block_tables, meta.sample, keep_all=keep_all_rows(meta))
    y = model(torch.tensor(meta.token_ids), attn)
    states = SamplingStates()
    states.begin(meta)
    sampled, _, picked, _, _ = sample_step(y, meta, states, lambda t: t)
    emitted = verify_items(y, meta, sample_rows(meta), sampled, picked, lambda t: t)
    sched.on_result(batch, *result_tokens(result_payload(emitted, len(items), sampled), len(items)))


def _kv(model: StageModel, table: list[int], n: int) -> torch.Tensor:
    """[layers, 2, n, KVH, Dh]: the KV the pool holds at positions 0 .. n − 1 of a block table."""
    pos = torch.arange(n)
    slots = torch.tensor(table)[pos // KV_BLOCK_TOKENS] * KV_BLOCK_TOKENS + pos % KV_BLOCK_TOKENS
    return torch.stack([model.kv.read(layer, slots) for layer in sorted(model.kv.k)])


def _fresh_kv(model: StageModel, tokens: list[int]) -> torch.Tensor:
    """The KV of `tokens` prefilled in one chunk into a pool nobody else wrote: a run that never proposed."""
    model.kv.zero_blocks(list(range(1, BLOCKS)))
    table = list(range(1, 1 + -(-len(tokens) // KV_BLOCK_TOKENS)))
    model(torch.tensor(tokens), model.step_meta([0], [len(tokens)], [table], [True]))
    return _kv(model, table, len(tokens))


def _paired(method: SpeculationMethod, k: int, prompts: list[list[int]], max_tokens: int) -> tuple[Scheduler, list[Sequence], list[Sequence]]:
    """A speculating scheduler holding greedy sequences of `prompts`, and the same sequences decoded
    to the end without speculation (by a model of the same weights): (scheduler, its sequences, plain's)."""
    cfg = dict(max_batched_tokens=256)
    spec = Scheduler(BlockManager(BLOCKS, reserved=1), SchedulerConfig(**cfg, speculation=SpecConfig(method, k)))
    plain, plain_model = Scheduler(BlockManager(BLOCKS, reserved=1), SchedulerConfig(**cfg)), _model()
    mk = lambda i, p: Sequence(i, list(p), len(p), SamplingParams(temperature=0, max_tokens=max_tokens, ignore_eos=True))
    a, b = [mk(i, p) for i, p in enumerate(prompts)], [mk(i, p) for i, p in enumerate(prompts)]
    for s in a:
        spec.add(s)
    for s in b:
        plain.add(s)
    while plain.has_unfinished():
        _run_step(plain_model, plain, plain.schedule())
    assert plain.blocks.num_free == BLOCKS - 1
    return spec, a, b


def test_greedy_rounds_match_plain_decoding_and_leave_the_kv_it_would():
    spec_model, ref_model = _model(), _model()  # the same weights (seeded by name)
    g = torch.Generator().manual_seed(5)
    # repetitive prompts, so that lookup proposes and some proposals are kept, some rejected
    prompts = [(torch.randint(1, 64, (n,), generator=g).tolist() * 3)[: 3 * n] for n in (5, 9, 13)]
    spec, a, b = _paired(SpeculationMethod.NGRAM, 4, prompts, 40)
    rounds = 0
    while spec.has_unfinished():
        batch = spec.schedule()
        rounds += any(it.draft for it in batch.items)
        _run_step(spec_model, spec, batch)
        for s in a:
            if s.is_finished or not s.num_generated:
                continue
            assert s.token_ids == b[s.seq_id].token_ids[: s.num_tokens]
            assert len(s.block_table) == -(-s.num_computed // KV_BLOCK_TOKENS)  # nothing held past its computed tokens
            got = _kv(spec_model, s.block_table, s.num_computed)
            torch.testing.assert_close(got, _fresh_kv(ref_model, s.token_ids[: s.num_computed]), atol=1e-5, rtol=1e-5)
    assert [s.token_ids for s in a] == [s.token_ids for s in b]
    assert rounds > 0 and sum(s.spec_accepted for s in a) > 0 and sum(s.spec_drafted - s.spec_accepted for s in a) > 0
    assert spec.blocks.num_free == BLOCKS - 1


@pytest.mark.parametrize("layers", [1, 2])
def test_a_drafter_in_the_first_stage_proposes_and_greedy_output_is_unchanged(layers):
    """A drafter cut from the target (its first layer, or all of it: then every proposal is kept)."""
    target = _model()
    drafter = Drafter(_model(layers), lambda x: x, lambda x: x)
    g = torch.Generator().manual_seed(9)
    spec, a, b = _paired(SpeculationMethod.DRAFT, 3, [torch.randint(1, 64, (n,), generator=g).tolist() for n in (3, 17, 40)], 30)
    while spec.has_unfinished():
        _run_step(target, spec, spec.schedule(), drafter)
    assert [s.token_ids for s in a] == [s.token_ids for s in b]
    drafted, accepted = sum(s.spec_drafted for s in a), sum(s.spec_accepted for s in a)
    if layers == 2:
        assert accepted == drafted > 0  # the drafter is the target
    else:
        assert 0 < accepted < drafted


def test_the_first_stage_leaves_a_rounds_undrafted_slots_to_its_drafter():
    """Looked-ahead -1s are filled from the last stage's samples; a round's -1s are its proposals,
    drafted on the first stage: the fill must not wait for them."""
    from hetc.runtime.feedback import SampledTokens

    meta = StepMeta([1, 2], [10, 4], [1, 3], [True, True], [[1], [2]], [-1, 7, -1, -1], [(0.0, 1.0, 0, 0)] * 2, {"spec": [1]})
    packed, _ = meta.encode()
    store = SampledTokens()
    store.put([1], [10], [42])
    store.fill(meta, packed, timeout=0.01)
    assert meta.token_ids == [42, 7, -1, -1] and packed[-4:].tolist() == [42, 7, -1, -1]
