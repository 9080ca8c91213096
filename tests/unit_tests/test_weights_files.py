"""Stage weights as mapped files: a safetensors file written one tensor at a time reads back the same
tensors (also through the `safetensors` library), and `mapped_weights` hands out views of a file
mapping — the model's own file when it stores the dtype asked for, else a stage file it writes."""

import torch
from safetensors.torch import load_file

from hetc.weights import RandomWeights, SafetensorsWeights, mapped_weights, write_safetensors

SPECS = [("a.weight", torch.Size([64, 48]), torch.float32), ("b.weight", torch.Size([48]), torch.float32), ("c.weight", torch.Size([3, 40, 8]), torch.bfloat16)]


def _file_mapped(t: torch.Tensor, path) -> bool:
    """Whether the tensor's bytes lie in a mapping of `path` (from /proc/self/maps: file pages, not private)."""
    ptr = t.data_ptr()
    for line in open("/proc/self/maps"):
        span, *_, name = line.split(maxsplit=5)
        lo, hi = (int(x, 16) for x in span.split("-"))
        if name.strip() == str(path) and lo <= ptr < hi:
            return True
    return False


def test_streamed_file_reads_back_the_same_tensors(tmp_path):
    rand = RandomWeights(std=0.1)
    n = write_safetensors(tmp_path / "w.safetensors", SPECS, rand.get)
    assert n == sum(s.numel() * d.itemsize for _, s, d in SPECS)
    mine, theirs = SafetensorsWeights(tmp_path), load_file(tmp_path / "w.safetensors")
    for name, shape, dtype in SPECS:
        want = rand.get(name, shape, dtype)
        assert torch.equal(mine.get(name, shape, dtype), want) and torch.equal(theirs[name], want)
        assert mine.maps(name, dtype) and not mine.maps(name, torch.float16)


def test_mapped_weights_are_views_of_a_file(tmp_path):
    rand = RandomWeights(std=0.1)
    (tmp_path / "model").mkdir()
    write_safetensors(tmp_path / "model" / "w.safetensors", [(n, s, torch.float32) for n, s, _ in SPECS], rand.get)
    model = SafetensorsWeights(tmp_path / "model")
    same = [(n, s, torch.float32) for n, s, _ in SPECS]
    assert mapped_weights(model, same, tmp_path / "unused") is model  # stored as asked: the model's own file
    assert not (tmp_path / "unused").exists()
    for source, specs in ((model, SPECS), (rand, SPECS)):  # another dtype, or random: a stage file is written
        folder = tmp_path / f"stage-{type(source).__name__}"
        w = mapped_weights(source, specs, folder)
        for name, shape, dtype in specs:
            t = w.get(name, shape, dtype)
            assert torch.equal(t, source.get(name, shape, dtype))
            assert _file_mapped(t, folder / "weights.safetensors")


def test_a_model_file_aligned_below_what_is_asked_is_realigned(tmp_path):
    """IREE's CPU device imports a mapped parameter in place only at 64 bytes: a model file aligned at
    8 (as `safetensors` writes it; this header's length leaves the data at 8 mod 64) is used as it is when no alignment is asked, and rewritten into a
    stage file whose every tensor starts at a multiple of 64 when it is."""
    from hetc.weights import DATA_ALIGNMENT

    specs = [("a.weight", torch.Size([64, 48]), torch.float32), ("b.weight", torch.Size([48]), torch.float32)]
    (tmp_path / "model").mkdir()
    write_safetensors(tmp_path / "model" / "w.safetensors", specs, RandomWeights(std=0.1).get, align=8)
    model = SafetensorsWeights(tmp_path / "model")
    assert not all(model.maps(n, d, DATA_ALIGNMENT) for n, _, d in specs)
    assert mapped_weights(model, specs, tmp_path / "unused") is model
    w = mapped_weights(model, specs, tmp_path / "stage", align=DATA_ALIGNMENT)
    for name, shape, dtype in specs:
        t = w.get(name, shape, dtype)
        assert t.data_ptr() % DATA_ALIGNMENT == 0 and _file_mapped(t, tmp_path / "stage" / "weights.safetensors")
        assert torch.equal(t, model.get(name, shape, dtype))
