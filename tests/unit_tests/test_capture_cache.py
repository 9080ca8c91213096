"""The on-disk capture cache: a warm capture equals the cold one, and every input of the key counts."""

import json

import pytest

from hetc.partitioner.capture import capture as capture_mod
from hetc.partitioner.capture import capture_cache
from hetc.partitioner.capture.capture import capture
from tests.conftest import tiny_llama_with_layers


@pytest.fixture()
def cache(tmp_path, monkeypatch):
    d = tmp_path / "cache"
    monkeypatch.setenv("HETC_CACHE_DIR", str(d))
    return d


def _no_capture(*a, **k):
    raise AssertionError("captured again: the cache missed")


def test_warm_capture_equals_cold_and_skips_export(tmp_path, cache, monkeypatch):
    model_dir = tiny_llama_with_layers(tmp_path, 5)  # > 3 layers: exported short, replicated
    cold = capture(str(model_dir), dtype="fp32")
    assert len(list(cache.glob("*.json"))) == 1
    monkeypatch.setattr(capture_mod, "_capture", _no_capture)
    warm = capture(str(model_dir), dtype="fp32")
    assert warm.units == cold.units
    assert [u.cost_key for u in warm.units] == [u.cost_key for u in cold.units]
    assert warm.graph_hash == cold.graph_hash
    assert (warm.num_layers, warm.num_params, warm.exported_layers, warm.notes) == (cold.num_layers, cold.num_params, cold.exported_layers, cold.notes)
    assert warm.graph == cold.graph and warm.config == cold.config


def test_key_follows_model_files_and_dtypes(tmp_path, cache):
    model_dir = tiny_llama_with_layers(tmp_path, 2)
    key = capture_cache.cache_key(str(model_dir), "bf16", "bf16")
    assert key == capture_cache.cache_key(str(model_dir), "bf16", "bf16")
    assert key != capture_cache.cache_key(str(model_dir), "fp32", "fp32")
    assert key != capture_cache.cache_key(str(model_dir), "bf16", "fp8")
    cfg = json.loads((model_dir / "config.json").read_text())
    cfg["intermediate_size"] += 8
    (model_dir / "config.json").write_text(json.dumps(cfg))
    assert key != capture_cache.cache_key(str(model_dir), "bf16", "bf16")
    # user code hetc cannot see is never cached
    assert capture_cache.cache_key("tests.fixtures.small_cnn:make", "fp32", "fp32") is None


def test_damaged_entry_is_a_miss_and_is_rewritten(tmp_path, cache):
    model_dir = tiny_llama_with_layers(tmp_path, 2)
    cold = capture(str(model_dir), dtype="fp32")
    (entry,) = cache.glob("*.json")
    entry.write_text(entry.read_text()[:1000])
    assert capture(str(model_dir), dtype="fp32").units == cold.units
    assert json.loads(entry.read_text())["schema"] == capture_cache.SCHEMA


def test_cache_off(tmp_path, monkeypatch):
    monkeypatch.setenv("HETC_CACHE_DIR", "off")
    assert capture_cache.cache_dir() is None
    capture(str(tiny_llama_with_layers(tmp_path, 2)), dtype="fp32")
    assert not list(tmp_path.glob("**/*.json.tmp"))
