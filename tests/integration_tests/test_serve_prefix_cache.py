"""Prefix caching through the served path: the tiny Llama's 3-stage plan under `hetc serve --emulate`,
prompts sharing 0, 1 and many KV blocks, a prompt cached whole, eviction of cached blocks under a
small pool, and a burst whose sequences share blocks and get preempted — greedy output equal to
Hugging Face's generate (the reference for caching on and off alike), the hits counted in /metrics
under hetc's and vLLM's names, and none with --no-prefix-caching."""

import concurrent.futures as cf

import pytest
import torch

from hetc.scheduling import KV_BLOCK_TOKENS
from tests.fixtures.serving import KEY, NAME, client, metric, start_serve

pytestmark = pytest.mark.slow  # a served process per setting (minutes on the shared host)
MAX_TOKENS = 12
CACHING = [pytest.param(True, id="on"), pytest.param(False, id="off")]


@pytest.fixture(scope="module", params=CACHING)
def served(request, built, tmp_path_factory):
    """(url, caching): a server of 12 KV blocks (11 besides padding: 352 tokens), 64-token prefill chunks."""
    _, plan, _ = built
    extra = () if request.param else ("--no-prefix-caching",)
    s = start_serve(
        plan,
        "--emulate",
        "--api-key",
        KEY,
        "--served-model-name",
        NAME,
        "--max-batched-tokens",
        "64",
        "--num-kv-blocks",
        "12",
        "--timeout",
        "30",
        *extra,
        log=tmp_path_factory.mktemp("log") / "serve.log",
    )
    yield s.url, request.param
    s.stop(30)


@pytest.fixture(scope="module")
def reference(built):
    """Greedy continuation of token ids by Hugging Face's generate (fp32, the same weights)."""
    from transformers import AutoModelForCausalLM

    model_dir, _, _ = built
    hf = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()

    def run(ids: list[int]) -> list[int]:
        x = torch.tensor([ids])
        out = hf.generate(x, attention_mask=torch.ones_like(x), max_new_tokens=MAX_TOKENS, do_sample=False, pad_token_id=1, eos_token_id=None)
        return out[0, len(ids) :].tolist()

    return run


def _ids(seed: int, n: int) -> list[int]:
    return torch.randint(2, 320, (n,), generator=torch.Generator().manual_seed(seed)).tolist()


def _complete(url: str, ids: list[int]) -> list[int]:
    r = client(url).completions.create(model=NAME, prompt=ids, max_tokens=MAX_TOKENS, temperature=0, extra_body={"return_token_ids": True, "ignore_eos": True})
    return r.choices[0].model_extra["token_ids"]


def _hits(url: str) -> tuple[float, float]:
    q = dict(metric(url, "hetc_prefix_cache_queries_total"))[f'hetc_prefix_cache_queries_total{{model="{NAME}"}}']
    h = dict(metric(url, "hetc_prefix_cache_hits_total"))[f'hetc_prefix_cache_hits_total{{model="{NAME}"}}']
    return q, h


def test_greedy_output_with_shared_prefixes_equals_the_reference(served, reference):
    url, caching = served
    base = _ids(1, 5 * KV_BLOCK_TOKENS)
    prompts = [
        base[:40],  # first: fills the cache with its first block
        _ids(2, 40),  # shares 0 blocks
        base[: KV_BLOCK_TOKENS - 1] + _ids(3, 20),  # shares 31 tokens: less than a block, nothing served
        base[:KV_BLOCK_TOKENS] + _ids(4, 12),  # shares 1 block
        base[: 4 * KV_BLOCK_TOKENS] + _ids(5, 9),  # shares many blocks (one from the cache, three computed by the first of them)
        base[: 4 * KV_BLOCK_TOKENS] + _ids(6, 9),  # shares 4 blocks
        base[: 2 * KV_BLOCK_TOKENS],  # cached whole: its last block is recomputed for its logits
        base[: 2 * KV_BLOCK_TOKENS],
    ]
    q0, h0 = _hits(url)
    for p in prompts:
        assert _complete(url, p) == reference(p), f"prompt of {len(p)} tokens"
    q1, h1 = _hits(url)
    assert q1 - q0 == (sum(len(p) for p in prompts) if caching else 0)
    # hits (tokens): 1 block, then 1 and 4 blocks for the 4-block sharers, 1 for each repeat (its last block recomputed)
    assert h1 - h0 == ((1 + 1 + 4 + 1 + 1) * KV_BLOCK_TOKENS if caching else 0)
    vq = dict(metric(url, "vllm:prefix_cache_queries_total"))[f'vllm:prefix_cache_queries_total{{model_name="{NAME}"}}']
    assert vq == q1  # vLLM's name counts the same tokens


def test_evicted_prefixes_and_preempted_sharers_stay_correct(served, reference):
    url, caching = served
    # eviction: 11 blocks; six prompts of 3 full blocks each push the first ones' cached blocks out
    firsts = [_ids(100 + i, 3 * KV_BLOCK_TOKENS + 5) for i in range(6)]
    for p in firsts:
        assert _complete(url, p) == reference(p)
    assert _complete(url, firsts[0]) == reference(firsts[0])  # evicted (or partly): recomputed, same output
    # preemption of sharers: 6 prompts of 3 shared blocks + 1 of their own (9 blocks: all admitted) each
    # need a 5th block once they generate past position 127: 15 blocks in 11
    shared = _ids(200, 3 * KV_BLOCK_TOKENS)
    burst = [shared + _ids(300 + i, KV_BLOCK_TOKENS - 4) for i in range(6)]
    p0 = metric(url, "hetc_num_preemptions")[0][1]
    with cf.ThreadPoolExecutor(len(burst)) as ex:
        got = list(ex.map(lambda p: _complete(url, p), burst))
    for p, g in zip(burst, got):
        assert g == reference(p)
    assert metric(url, "hetc_num_preemptions")[0][1] > p0, "the burst was meant to preempt"
