import json
import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures" / "configs"
EXAMPLES = ROOT / "examples"

# module:factory references in tests resolve from the repository root
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")


@pytest.fixture(scope="session")
def root() -> Path:
    return ROOT


def tiny_llama_with_layers(d: Path, layers: int) -> Path:
    """The tiny-llama fixture's config with `layers` decoder layers, written to dir `d`."""
    cfg = json.loads((FIXTURES / "tiny-llama" / "config.json").read_text())
    cfg["num_hidden_layers"] = layers
    (d / "config.json").write_text(json.dumps(cfg))
    return d
