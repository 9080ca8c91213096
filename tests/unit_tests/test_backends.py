"""The backend interface: the CPU backend works; vendor backends say what they need when
their hardware or library is absent; backends import neither partitioner nor runtime."""

import subprocess
import sys

import pytest
import torch

from hetc.backends import BACKENDS, Backend, BackendUnavailable, get_backend


def test_cpu_backend_detects_and_runs_a_stage():
    cpu = get_backend("cpu")
    assert isinstance(cpu, Backend) and cpu.dist_backend == "gloo"
    (dev,) = cpu.detect()
    assert dev.backend == "cpu" and dev.total_memory > dev.free_memory > 0 and dev.name
    m = cpu.prepare_stage(torch.nn.Linear(4, 4), 0)
    x = cpu.to_device(torch.ones(2, 4), 0)
    assert cpu.to_host(m(x)).shape == (2, 4) and not m.training
    with pytest.raises(BackendUnavailable, match="device 3 requested"):
        cpu.device_info(3)


@pytest.mark.parametrize("name,needs", [("cuda", "CUDA build of torch"), ("rocm", "ROCm build of torch"),
                                        ("gaudi", "habana_frameworks.torch"), ("openvino", "openvino")])
def test_vendor_backends_fail_clearly_when_absent(name, needs):
    b = get_backend(name)
    try:
        devices = b.detect()
    except BackendUnavailable as e:
        assert name in str(e) and needs in str(e)
        return
    assert devices  # present on this host: then it must list its devices


def test_unknown_backend():
    with pytest.raises(BackendUnavailable, match="unknown backend"):
        get_backend("tpu")


def test_backends_import_neither_partitioner_nor_runtime():
    code = ("import sys, hetc.backends as b\n"
            f"for n in {list(BACKENDS)!r}: b.get_backend(n)\n"
            "bad = [m for m in sys.modules if m.startswith(('hetc.partitioner', 'hetc.runtime'))]\n"
            "assert not bad, bad\n")
    subprocess.run([sys.executable, "-c", code], check=True)
