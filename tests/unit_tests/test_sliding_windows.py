"""Sliding-window layers (gpt-oss's alternating ones, mistral's): a layer keeps at most its window of
K/V where the engine frees the blocks behind it (hetc/engine.py `sliding_windows`), so memory, the
cost of its attention, the batch ceiling and the bounds see the window; under hetc's own runtime,
which keeps every block, nothing changes."""

from __future__ import annotations

import warnings

import pytest
import torch

from hetc.cluster import load_cluster
from hetc.engine import EngineName, WindowKV, load_engine
from hetc.kv_blocks import window_span
from hetc.partitioner.bounds.aggregate import Rows
from hetc.partitioner.bounds.cells import CountSpace
from hetc.partitioner.bounds.stage_costs import StageCosts
from hetc.partitioner.capture.capture import capture, load_hf_config
from hetc.partitioner.cost_models.analytic import Step, units_time
from hetc.partitioner.cost_models.memory import stage_memory
from hetc.partitioner.estimate.batches import batch_ceiling
from hetc.partitioner.estimate.simulate import Workload
from hetc.partitioner.estimate.tables import Tables, kinds_of
from hetc.scheduling import KV_BLOCK_TOKENS, Phase
from tests.brute_force import rows_bound_every_option
from tests.conftest import FIXTURES, ROOT, two_type_cluster

WL = Workload(160, 32, "fp32", "fp32", prefill_chunk=32, windowed=True)  # a 192-token context, past a 16-token window's blocks


@pytest.fixture(scope="module")
def gpt_oss():
    return capture(str(FIXTURES / "tiny-gpt-oss"), dtype="fp32", kv_dtype="fp32", cache=False)


def test_each_layers_window_is_transformers_own(gpt_oss):
    """The window captured for each layer is what transformers' attention module of that layer uses."""
    from transformers import AutoModelForCausalLM

    for name in ("tiny-gpt-oss", "tiny-mistral", "tiny-llama"):
        path = str(FIXTURES / name)
        cfg, _ = load_hf_config(path)
        with torch.device("meta"), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            hf = AutoModelForCausalLM.from_config(cfg)
        # a module keeping its own window (gpt-oss) says it; else the config's applies to every layer (mistral)
        expected = [a.sliding_window if hasattr(a, "sliding_window") else getattr(cfg, "sliding_window", None) for a in (x.self_attn for x in hf.model.layers)]
        m = gpt_oss if name == "tiny-gpt-oss" else capture(path, dtype="fp32", cache=False)
        got = [u.kv_window for u in m.units if u.kv_bytes_per_token]
        assert got == expected, name
        assert all(u.kv_window is None for u in m.units if not u.kv_bytes_per_token), name  # attention units alone
    assert {u.kv_window for u in gpt_oss.units if u.kv_bytes_per_token} == {16, None}


@pytest.mark.parametrize("window", [1, 2, 31, 32, 33, 128, 4096])
def test_window_span_is_the_most_blocks_any_window_touches(window):
    """Brute force over where the window starts within a block."""
    most = max((start + window - 1) // KV_BLOCK_TOKENS - start // KV_BLOCK_TOKENS + 1 for start in range(KV_BLOCK_TOKENS))
    assert window_span(window) == most * KV_BLOCK_TOKENS


def test_memory_keeps_a_sliding_layers_window_only_where_the_engine_does(gpt_oss):
    """K/V of a 192-token sequence: full layers every token, sliding layers their window's blocks."""
    attn = [u for u in gpt_oss.units if u.kv_bytes_per_token]
    full = sum(u.kv_bytes_per_token for u in attn) * 192
    windowed = sum(u.kv_bytes_per_token * (192 if u.kv_window is None else window_span(16)) for u in attn)
    assert window_span(16) < 192 and windowed < full
    for flag, expected in ((False, full), (True, windowed)):
        mem = stage_memory(gpt_oss.units, batch=3, context=192, prefill_chunk=32, windowed=flag)
        assert mem.kv == pytest.approx(3 * expected)


def test_sliding_attention_reads_its_window_alone(gpt_oss):
    """A sliding layer's decode step costs the same at any context past its window; a full layer's grows."""
    prof = load_cluster(ROOT / "examples" / "one-h100.yaml").nodes[0].profile
    sliding = [u for u in gpt_oss.units if u.kv_window and u.kv_bytes_per_token][0]
    full = [u for u in gpt_oss.units if u.kv_bytes_per_token and not u.kv_window][0]

    def t(u, ctx: float, windowed: bool) -> float:
        return units_time([u], prof, Step(64, 64, ctx), dtype="fp32", kv_dtype="fp32", windowed=windowed)

    assert t(sliding, 4000, True) == pytest.approx(t(sliding, 16, True)) and t(sliding, 4000, True) < t(sliding, 4000, False)
    assert t(full, 4000, True) == t(full, 4000, False) > t(full, 16, True)


def test_engines_say_what_they_keep():
    assert load_engine(EngineName.HETC).sliding_windows.kv == WindowKV.FULL  # its block manager keeps every block
    assert all(load_engine(e).sliding_windows.kv == WindowKV.WINDOW for e in (EngineName.VLLM, EngineName.SGLANG, EngineName.TRTLLM))


def test_the_batch_ceiling_grows_by_the_kv_a_window_frees(tmp_path, gpt_oss):
    assert not load_cluster(ROOT / "examples" / "one-h100.yaml", engine="hetc").windowed_kv
    cluster = two_type_cluster(tmp_path, "2.5 MB", "6 MB", a_count=3)  # vllm
    free = sum(n.profile.usable_memory * n.count for n in cluster.nodes) - gpt_oss.param_bytes
    attn = [u for u in gpt_oss.units if u.kv_bytes_per_token]
    for wl, per_seq in (
        (Workload(160, 32, "fp32", "fp32"), sum(u.kv_bytes_per_token * 192 for u in attn)),
        (WL, sum(u.kv_bytes_per_token * (window_span(16) if u.kv_window else 192) for u in attn)),
    ):
        assert batch_ceiling(gpt_oss.units, cluster, wl) == int(free // per_seq)


@pytest.mark.parametrize("phase", [Phase.BOTH, Phase.DECODE])
def test_the_first_pass_bounds_every_windowed_pipeline(tmp_path, gpt_oss, phase):
    """With windows kept, `row` and `rest` still bound every brute-forced pipeline on exactly its cell
    (the bound's memory and costs see the same window as the estimate's)."""
    cluster = two_type_cluster(tmp_path, "2.5 MB", "6 MB", a_count=3)
    assert cluster.windowed_kv
    costs = StageCosts(Tables(gpt_oss.units, WL), kinds_of(cluster), cluster)
    space = CountSpace(costs.devices)
    rows, rests = Rows(costs, space, phase, max_stages=4, ceiling=40), Rows(costs, space, phase, max_stages=4, ceiling=40)
    while rows.left:
        rows.step()
    rests.cut_here()
    assert rows_bound_every_option(gpt_oss.units, cluster, WL, costs, space, phase, rows, rests) > 20
