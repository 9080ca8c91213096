"""The eager stages of tiny gpt-oss, DeepSeek-V3 and Qwen3-MoE models (transformers' own classes, random
weights) give the unpartitioned model's logits through paged KV — a prompt in chunks beside another
sequence's decode, past gpt-oss's sliding window — split in two pipeline stages, and with the second
stage's experts split over two gloo ranks (expert parallelism). MLA caches its latent only."""

from __future__ import annotations

import pytest
import torch
from transformers import AutoConfig, AutoModelForCausalLM

from hetc.backends.experts import ExpertsKernel
from hetc.plan import PlanUnit
from hetc.runtime.kv_cache import AttnMeta, DecodeMeta
from hetc.runtime.model_runner import StageModel
from hetc.weights import SafetensorsWeights
from tests.fixtures.moe_models import ARCHS, build_moe

TOL = 1e-4


def _units(cfg) -> list[PlanUnit]:
    dense = set(range(getattr(cfg, "first_k_dense_replace", 0)))
    kinds = [("embed", 0)] + [(k, layer) for layer in range(cfg.num_hidden_layers) for k in ("attention", "mlp" if layer in dense else "moe")]
    kinds += [("norm", cfg.num_hidden_layers - 1), ("head", cfg.num_hidden_layers - 1)]
    return [PlanUnit(index=i, kind=k, layer=layer) for i, (k, layer) in enumerate(kinds)]


@pytest.fixture(scope="module", params=ARCHS)
def model(request, tmp_path_factory):
    d = tmp_path_factory.mktemp(request.param)
    build_moe(d, request.param)
    return d, AutoConfig.from_pretrained(d), AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32).eval()


def _run(stages, a: list[int], b: list[int]) -> list[torch.Tensor]:
    """a's prompt in two chunks beside b's prompt and decode, then both decode (in the fixed-shape
    decode form): the sampled rows' logits."""
    tables = {0: [3, 0, 7], 1: [5]}  # non-contiguous blocks
    seqs = {0: a, 1: b}
    outs = []
    for items in ([(0, 0, 16, False), (1, 0, 5, True)], [(1, 5, 1, True), (0, 16, 14, True)], [(0, 30, 1, True), (1, 6, 1, True)]):
        meta: AttnMeta | DecodeMeta = AttnMeta.build([i[1] for i in items], [i[2] for i in items], [tables[i[0]] for i in items], [i[3] for i in items])
        x = torch.tensor([t for s, st, n, _ in items for t in seqs[s][st : st + n]])
        if items[0][1] == 30:  # the last step as a CUDA graph's decode (fixed shapes: 4 rows, 2 of them padding)
            meta = DecodeMeta.build([i[1] for i in items], [tables[i[0]] for i in items], rows=4, width=3)
            x = torch.cat([x, x.new_zeros(2)])
        for stage in stages:
            x = stage(x, meta)
        outs.append(x[: len(items)])
    return outs


def _check(outs: list[torch.Tensor], ref, a: list[int], b: list[int], tol: float = TOL) -> None:
    with torch.no_grad():
        ra, rb = ref(torch.tensor([a])).logits[0], ref(torch.tensor([b])).logits[0]
    want = [[rb[4]], [rb[5], ra[29]], [ra[30], rb[6]]]
    for got, exp in zip(outs, want):
        for g, e in zip(got, exp):
            assert (g - e).abs().max().item() < tol


def _prompts(cfg) -> tuple[list[int], list[int]]:
    g = torch.Generator().manual_seed(1)
    return torch.randint(0, cfg.vocab_size, (31,), generator=g).tolist(), torch.randint(0, cfg.vocab_size, (7,), generator=g).tolist()


def test_two_stages_match_unpartitioned_logits(model):
    d, cfg, ref = model
    units = _units(cfg)
    cut = 4  # the second stage starts at layer 1's MoE half
    stages = [
        StageModel(cfg, units, a, z, dtype=torch.float32, kv_dtype=torch.float32, num_blocks=8, weights=SafetensorsWeights(d))
        for a, z in ((0, cut - 1), (cut, len(units) - 1))
    ]
    if cfg.model_type == "deepseek_v3":  # MLA: one latent of kv_lora_rank + qk_rope_head_dim per token, no V
        pool = stages[0].kv
        assert pool.row_shape == (1, cfg.kv_lora_rank + cfg.qk_rope_head_dim) and not pool.v
    a, b = _prompts(cfg)
    _check(_run(stages, a, b), ref, a, b)


@pytest.mark.parametrize("kernel", [ExpertsKernel.GROUPED, ExpertsKernel.BATCHED])
def test_static_experts_match_unpartitioned_logits(model, kernel):
    """The experts as one grouped or batched GEMM (what cuda stages run, so a CUDA graph holds the
    step) give the loop's logits, and only then is the stage capturable."""
    d, cfg, ref = model
    units = _units(cfg)
    stage = StageModel(cfg, units, 0, len(units) - 1, dtype=torch.float32, kv_dtype=torch.float32, num_blocks=8, weights=SafetensorsWeights(d))
    assert not stage.capturable  # transformers' loop finds the experts hit on the host
    stage.static_experts(kernel)
    assert stage.capturable and stage.experts_kernel is kernel
    a, b = _prompts(cfg)
    _check(_run([stage], a, b), ref, a, b, tol=5e-4)  # sums in another order: fp32 rounding (1.2e-4 seen), not a wrong expert
    stage.split_experts(0, 2)
    assert not stage.capturable  # a part of the experts picks its tokens on the host


def _ep_rank(rank: int, init: str, model_dir: str, out: str) -> None:
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=2)
    torch.set_num_threads(1)
    cfg = AutoConfig.from_pretrained(model_dir)
    units = _units(cfg)
    w = SafetensorsWeights(model_dir)
    first = StageModel(cfg, units, 0, 3, dtype=torch.float32, kv_dtype=torch.float32, num_blocks=8, weights=w)
    second = StageModel(cfg, units, 4, len(units) - 1, dtype=torch.float32, kv_dtype=torch.float32, num_blocks=8, weights=w, tp_rank=rank, tp_size=2)
    second.tp_group = dist.group.WORLD
    experts = {n: p.shape[0] for n, p in second.named_parameters() if ".experts." in n}
    a, b = _prompts(cfg)
    torch.save({"outs": _run([first, second], a, b), "experts": experts}, f"{out}.{rank}")
    dist.destroy_process_group()


@pytest.mark.slow  # two spawned processes per architecture
def test_expert_parallel_stage_matches_unpartitioned_logits(model, tmp_path):
    """The second stage over two ranks: each holds E/2 experts (and half of the heads); the outputs agree."""
    import torch.multiprocessing as mp

    d, cfg, ref = model
    out = str(tmp_path / "ep")
    mp.start_processes(_ep_rank, args=(f"file://{tmp_path / 'store'}", str(d), out), nprocs=2, start_method="spawn")
    r0, r1 = (torch.load(f"{out}.{r}", weights_only=True) for r in (0, 1))
    n_experts = getattr(cfg, "num_local_experts", None) or getattr(cfg, "n_routed_experts", None) or cfg.num_experts
    assert r0["experts"] and set(r0["experts"].values()) == {n_experts // 2}
    a, b = _prompts(cfg)
    _check(r0["outs"], ref, a, b)
    assert all(torch.equal(x, y) for x, y in zip(r0["outs"], r1["outs"]))
