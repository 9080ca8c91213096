import json
import os
import sys
import tempfile
from pathlib import Path

import pytest

from hetc.cluster import load_cluster
from hetc.partitioner.capture.capture import capture

# the serve tests' fixtures (`built`), defined once for every test module (tests/fixtures/serving.py)
pytest_plugins = ["tests.fixtures.serving"]

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures" / "configs"
EXAMPLES = ROOT / "examples"

# module:factory references in tests resolve from the repository root
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
# one capture cache per test process (each `-n` worker has its own; CLI subprocesses inherit it):
# hermetic, and shared by the tests
os.environ["HETC_CACHE_DIR"] = tempfile.mkdtemp(prefix="hetc-capture-")
# compiled stages built by serve: one cache per test run, shared by its `-n` workers (an entry is written
# atomically and keyed by the weights' files and mtimes): a stage of the serve tests' shared model
# (tests/fixtures/serving.py `built`) is compiled once in the run, not once per worker
_RUN = os.environ.get("PYTEST_XDIST_TESTRUNUID")
os.environ["HETC_STAGE_CACHE"] = str(Path(tempfile.gettempdir()) / f"hetc-stages-{_RUN}") if _RUN else tempfile.mkdtemp(prefix="hetc-stages-")


@pytest.fixture(scope="module")
def tiny():
    """The tiny Llama fixture captured at fp32 (the solver tests' model; a module may override it)."""
    return capture(str(FIXTURES / "tiny-llama"), dtype="fp32")


@pytest.fixture(scope="session")
def root() -> Path:
    return ROOT


def tiny_llama_with_layers(d: Path, layers: int) -> Path:
    """The tiny-llama fixture's config with `layers` decoder layers, written to dir `d`."""
    cfg = json.loads((FIXTURES / "tiny-llama" / "config.json").read_text())
    cfg["num_hidden_layers"] = layers
    (d / "config.json").write_text(json.dumps(cfg))
    return d


PROFILE = """name: {name}
vendor: {vendor}
backend: {backend}
memory: {memory}
reserved_memory: 10 kB
memory_bandwidth: {bw}
peak_flops: {{fp32: {flops}, bf16: {flops}}}
efficiency: {{matmul: 0.8, memory: 0.8}}
launch_overhead: 2 us
step_overhead: 20 us
host_link: pcie4
power: 100 W
price: 1 USD/h
sources: ["made up for a test"]
"""


def two_type_cluster(tmp_path: Path, a_memory: str, b_memory: str, a_count: int = 2):
    """Node a: `a_count` fast devices on PCIe (tp groups possible); node b: one big slow device. The
    engine is the one these made-up GPU profiles' figures describe (vllm: hetc/engine.py changes none)."""
    (tmp_path / "fast.yaml").write_text(PROFILE.format(name="fast", vendor="nvidia", backend="cuda", memory=a_memory, bw="40 GB/s", flops="4 TFLOP/s"))
    (tmp_path / "big.yaml").write_text(PROFILE.format(name="big", vendor="amd", backend="rocm", memory=b_memory, bw="10 GB/s", flops="0.5 TFLOP/s"))
    (tmp_path / "c.yaml").write_text(f"""engine: vllm
nodes:
  - {{name: a, device: ./fast.yaml, count: {a_count}, link: pcie4}}
  - {{name: b, device: ./big.yaml, count: 1}}
network: {{default: ethernet-10g}}
""")
    return load_cluster(tmp_path / "c.yaml")


FALLING = """name: fitted
vendor: cpu
backend: cpu
memory: {memory}
reserved_memory: 10 kB
memory_bandwidth: 40 GB/s
peak_flops: {{fp32: 20 GFLOP/s, bf16: 20 GFLOP/s}}
efficiency: {{matmul: 0.8, memory: 0.8}}
efficiency_curves:
  matmul:
    fp32: {{m: [1, 4, 5, 64], nk: [1, 1.0e9], eff: [[0.3, 0.3], [0.9, 0.9], [0.1, 0.1], [0.9, 0.9]]}}
  memory: {{x: [1.0e3, 1.0e6], eff: [2.0, 0.5]}}
launch_overhead: 0 us
step_overhead: 1 us
host_link: pcie4
power: 100 W
price: 1 USD/h
sources: ["made up: a fitted profile whose curves fall (GEMM at M=5 slower than at M=4, small ops in cache)"]
"""


def falling_cluster(tmp_path: Path, memory: str = "2 MB"):
    """two_type_cluster's layout with node a's devices on a fitted profile whose efficiency falls
    as a step grows (so a pipeline's throughput can fall with its batch)."""
    (tmp_path / "fitted.yaml").write_text(FALLING.format(memory=memory))
    (tmp_path / "big.yaml").write_text(PROFILE.format(name="big", vendor="amd", backend="rocm", memory="4 MB", bw="10 GB/s", flops="0.5 TFLOP/s"))
    (tmp_path / "c.yaml").write_text("""nodes:
  - {name: a, device: ./fitted.yaml, count: 2, link: pcie4}
  - {name: b, device: ./big.yaml, count: 1}
network: {default: ethernet-10g}
""")
    return load_cluster(tmp_path / "c.yaml")
