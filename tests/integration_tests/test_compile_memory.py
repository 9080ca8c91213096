"""`hetc compile` does not need the host memory of a stage's weights (slow): compiling a stage whose
weights must be drawn (`--random-weights`) or converted (stored bf16, compiled fp32) to OpenVINO IR
and ONNX grows the process's private memory (RssAnon, polled from outside) by a small fraction of
the stage's weight bytes — building the stage from materialised weights took 2x them — and the IR's
`.bin` and ONNX's external data hold the very weights `hetc serve --random-weights` draws. IREE and
AOTInductor likewise, with their subprocesses (iree-compile, the C++ compiler) counted: saving the
exported `.pt2` with its weights copied each tensor on the way (about 1x the stage here)."""

import importlib.util
import json
import mmap
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from hetc.partitioner.planner import PlanRequest, make_plan
from hetc.plan import save_plan
from hetc.weights import RandomWeights, stage_weights, write_safetensors
from tests.conftest import PROFILE

pytestmark = pytest.mark.slow

# the benchmark's /proc readers: a process's RssAnon, and the programs it started (not its forks)
_spec = importlib.util.spec_from_file_location("compile_memory", Path(__file__).resolve().parents[2] / "benchmarks" / "compile_memory.py")
compile_memory = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(compile_memory)  # type: ignore[union-attr]

# 6 layers × 1536, vocab 4096: 624 MiB of fp32 weights in one stage; its largest tensor 24 MiB
CFG = dict(
    vocab_size=4096,
    hidden_size=1536,
    intermediate_size=4096,
    num_hidden_layers=6,
    num_attention_heads=12,
    num_key_value_heads=4,
    max_position_embeddings=512,
    initializer_range=0.05,
    tie_word_embeddings=False,
)
# IREE and AOTInductor compile code by the layer: 2 layers × 1536, vocab 32000: 576 MiB in one stage whose
# largest tensors are the 188 MiB embedding and head
WIDE_VOCAB = CFG | dict(vocab_size=32000, num_hidden_layers=2)
# the child: every toolchain imported, its private memory printed, then one compile without the check
CHILD = r"""
import json, sys, warnings
warnings.simplefilter("ignore")
import torch, openvino, onnx, onnxscript, onnxruntime, iree.compiler, torch_mlir, torch._inductor
from hetc.runtime.compile import CompileOptions, compile_plan
anon = lambda: int(next(l for l in open("/proc/self/status") if l.startswith("RssAnon")).split()[1])
print("BEFORE", anon(), flush=True)
m = compile_plan(CompileOptions(plan=sys.argv[1], out_dir=sys.argv[2], model_dir=sys.argv[3],
                                random_weights=sys.argv[4] == "1", check=False, only=tuple(sys.argv[5].split(","))))
print("BUILT", json.dumps([a["built"] for s in m["stages"] for a in s["artifacts"]]), flush=True)
"""
# of the stage's weight bytes: OpenVINO and ONNX ~0.2 measured (export and the converters' own work), 2.0 before;
# IREE and AOTInductor ~0.3 in the process itself, 0.9 before (the `.pt2` saved with its weights)
GROWTH = 0.5
# with their subprocesses (iree-compile ~0.1 GiB, the C++ compiler ~0.3 GiB of their own on a 4.5 GB stage too)
# they stay under the stage's weights: no subprocess reads them
TREE_GROWTH = 1.0


def _anon(pid: int) -> int:
    """RssAnon (KiB) of `pid`, 0 when it has gone."""
    return (compile_memory._status(pid) or {}).get("RssAnon", 0)


def _peak_anon_growth(args: list[str]) -> tuple[int, int, str]:
    """Run CHILD; the peak of its RssAnon (KiB) after its BEFORE line, less that line's, the same with its
    subprocesses' RssAnon added (polled together), and its stdout."""
    p = subprocess.Popen([sys.executable, "-c", CHILD, *args], stdout=subprocess.PIPE, text=True)
    before = int(p.stdout.readline().split()[1])  # type: ignore[union-attr]
    own = tree = before
    while p.poll() is None:
        mine = _anon(p.pid)
        own, tree = max(own, mine), max(tree, mine + sum(_anon(c) for c in compile_memory._descendants(p.pid)))
        time.sleep(0.005)
    out = p.stdout.read()  # type: ignore[union-attr]
    assert p.wait() == 0
    return own - before, tree - before, out


def _one_stage_plan(d: Path, model: Path, weight_bytes: int, vendor: str, backend: str, target: str) -> Path:
    """A plan of the model on one device of `vendor` (room for 4x its weights): one stage."""
    profile = PROFILE.format(name=vendor, vendor=vendor, backend=backend, memory=f"{weight_bytes * 4} B", bw="400 GB/s", flops="20 TFLOP/s")
    (d / f"{vendor}.yaml").write_text(profile.replace(f"backend: {backend}\n", f"backend: {backend}\ntarget: {target}\n"))
    (d / "c.yaml").write_text(f"nodes:\n  - {{name: a, device: ./{vendor}.yaml, count: 1}}\nnetwork: {{default: ethernet-10g}}\n")
    plan = make_plan(PlanRequest(model=str(model), profiles=str(d / "c.yaml"), dtype="fp32", input_len=64, output_len=16, disaggregate="off", time_limit=5))
    assert [len(p.stages) for p in plan.pipelines] == [1]
    save_plan(plan, d / "plan.json")
    return d / "plan.json"


@pytest.mark.parametrize("source", ["random", "converted"])
def test_compiling_a_stage_does_not_hold_its_weights_in_private_memory(tmp_path, source):
    cfg = LlamaConfig(**CFG)
    model = tmp_path / "model"
    cfg.save_pretrained(model)
    with torch.device("meta"):
        specs = [(n, p.shape, torch.bfloat16) for n, p in LlamaForCausalLM(cfg).named_parameters()]
    weight_bytes = sum(s.numel() for _, s, _ in specs) * 4  # the stage's, at fp32
    if source == "converted":  # stored bf16, compiled at fp32: every weight converted on its way in
        write_safetensors(model / "model.safetensors", specs, RandomWeights(std=0.05).get)
    plan = _one_stage_plan(tmp_path, model, weight_bytes, "intel", "openvino", "GPU")
    out = tmp_path / "art"
    _, growth, stdout = _peak_anon_growth([str(plan), str(out), str(model), "1" if source == "random" else "0", "openvino,onnx"])
    assert json.loads(stdout.split("BUILT", 1)[1]) == [True, True]
    assert growth * 1024 < GROWTH * weight_bytes, f"+{growth / 1024:.0f} MiB for {weight_bytes / 2**20:.0f} MiB"
    # the weight files hold what serve takes: its seeded random weights, or the stored ones at fp32
    weights = stage_weights(cfg, None if source == "random" else str(model))
    manifest = json.loads((out / "manifest.json").read_text())
    files = [out / f["path"] for a in manifest["stages"][0]["artifacts"] for f in a["files"] if f["path"].endswith((".bin", ".onnx.data"))]
    assert len(files) == 2
    for f in files:
        with open(f, "rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as data:
            for name, shape, _ in specs[:: len(specs) // 6]:
                if len(shape) == 2:
                    head = weights.get(name, shape, torch.float32).reshape(-1)[:16].numpy().tobytes()
                    assert data.find(head) >= 0, f"{name} not in {f.name}"


@pytest.mark.parametrize("name,vendor,backend,target", [("iree", "amd", "rocm", "gfx942"), ("inductor", "nvidia", "cuda", "sm_90")])
def test_iree_and_inductor_compile_without_a_stages_weights_in_private_memory(tmp_path, name, vendor, backend, target):
    cfg = LlamaConfig(**WIDE_VOCAB)
    model = tmp_path / "model"
    cfg.save_pretrained(model)
    with torch.device("meta"):
        specs = [(n, p.shape, torch.float32) for n, p in LlamaForCausalLM(cfg).named_parameters()]
    weight_bytes = sum(s.numel() for _, s, _ in specs) * 4
    write_safetensors(model / "model.safetensors", specs, RandomWeights(std=0.05).get)  # mapped as they are
    plan = _one_stage_plan(tmp_path, model, weight_bytes, vendor, backend, target)
    out = tmp_path / "art"
    growth, tree, stdout = _peak_anon_growth([str(plan), str(out), str(model), "0", name])
    assert json.loads(stdout.split("BUILT", 1)[1]) == [True]
    said = f"+{growth / 1024:.0f} MiB, +{tree / 1024:.0f} MiB with subprocesses, for {weight_bytes / 2**20:.0f} MiB"
    assert growth * 1024 < GROWTH * weight_bytes and tree * 1024 < TREE_GROWTH * weight_bytes, said
    exported = out / json.loads((out / "manifest.json").read_text())["stages"][0]["exported"]["path"]
    assert exported.stat().st_size < weight_bytes / 100  # the program, not its weights
