"""torch.export's refusals become exit-2 errors; under another torch than hetc's pin they say so."""

import sys

import pytest
import torch

from hetc.errors import BadInput
from hetc.partitioner.capture.capture import capture, supported_torch


class DataDependent(torch.nn.Module):
    def forward(self, x):  # x: [B, D]; a branch on a value no export can trace through
        return x * 2 if x.sum().item() > 0 else x


def factory():
    return DataDependent(), (torch.randn(3, 4),)


@pytest.fixture
def ref(monkeypatch):
    monkeypatch.setitem(sys.modules, "hetc_test_dd", sys.modules[__name__])
    return "hetc_test_dd:factory"


def test_supported_torch_is_read_from_the_package_metadata():
    assert supported_torch() == "<2.14,>=2.11"  # pyproject.toml's `torch>=2.11,<2.14` (packaging sorts it)


def test_export_refusal_is_a_bad_model_error(ref):
    with pytest.raises(BadInput) as e:
        capture(ref, dtype="fp32", cache=False)
    assert "torch.export rejected it" in str(e.value) and "catalog name" in e.value.fix


def test_export_refusal_under_another_torch_names_both_versions(ref, monkeypatch):
    monkeypatch.setattr(torch, "__version__", "2.10.0+cu128")
    with pytest.raises(BadInput) as e:
        capture(ref, dtype="fp32", cache=False)
    assert "torch 2.10.0+cu128" in str(e.value) and "torch <2.14,>=2.11" in str(e.value)
    assert "install torch<2.14,>=2.11" in e.value.fix
