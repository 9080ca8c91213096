"""The backend interface: the CPU backend works; vendor backends say what they need when
their hardware or library is absent; backends import neither partitioner nor runtime."""

import subprocess
import sys

import pytest
import torch

from hetc.backends import BACKENDS, Backend, BackendUnavailable, get_backend


class _EagerStage(torch.nn.Linear):
    executor = "torch"


class _CompiledStep:
    executor = "openvino"


def test_cpu_backend_detects_and_runs_a_stage():
    cpu = get_backend("cpu")
    assert isinstance(cpu, Backend) and cpu.dist_backend == "gloo"
    (dev,) = cpu.detect()
    assert dev.backend == "cpu" and dev.total_memory > dev.free_memory > 0 and dev.name
    step = _CompiledStep()
    assert cpu.prepare_stage(step, 0) is step  # a toolchain's CPU lowering runs on the host as loaded
    m = cpu.prepare_stage(_EagerStage(4, 4), 0)
    x = cpu.to_device(torch.ones(2, 4), 0)
    assert cpu.to_host(m(x)).shape == (2, 4) and not m.training
    with pytest.raises(BackendUnavailable, match="device 3 requested"):
        cpu.device_info(3)


@pytest.mark.parametrize(
    "name,needs", [("cuda", "CUDA build of torch"), ("rocm", "ROCm build of torch"), ("gaudi", "habana_frameworks.torch"), ("openvino", "openvino")]
)
def test_vendor_backends_fail_clearly_when_absent(name, needs):
    b = get_backend(name)
    try:
        devices = b.detect()
    except BackendUnavailable as e:
        assert name in str(e) and needs in str(e)
        return
    assert devices  # present on this host: then it must list its devices


@pytest.mark.parametrize("name", ["cuda", "rocm", "gaudi"])
def test_accelerator_backends_refuse_a_host_compiled_step(name):
    """A toolchain's CPU lowering is not moved onto an accelerator silently: the backend says so
    before it looks for its device."""
    with pytest.raises(BackendUnavailable, match=f"{name}: a stage compiled by openvino runs on the host CPU only"):
        get_backend(name).prepare_stage(_CompiledStep(), 0)


def test_openvino_maps_plan_devices_to_gpu_n():
    """Plan device N of an openvino node is OpenVINO's GPU.N, never the N-th of its device list
    (which holds the CPU plugin too); without that GPU the error names it and what OpenVINO sees."""
    ov = get_backend("openvino")
    try:
        seen = [d.name.split(":")[0] for d in ov.detect()]
    except BackendUnavailable:  # openvino itself missing: the error says so
        with pytest.raises(BackendUnavailable, match="openvino package is not installed"):
            ov.device_name(0)
        return
    missing = next(i for i in range(8) if f"GPU.{i}" not in seen and not (i == 0 and "GPU" in seen))
    with pytest.raises(BackendUnavailable, match=rf"plan device {missing} is OpenVINO's GPU\.{missing}.*CPU"):
        ov.device_name(missing)
    with pytest.raises(BackendUnavailable, match=rf"GPU\.{missing}"):
        ov.prepare_stage(_EagerStage(4, 4), missing)
    if "GPU.1" in seen:
        assert ov.device_name(1) == "GPU.1"


def test_unknown_backend():
    with pytest.raises(BackendUnavailable, match="unknown backend"):
        get_backend("tpu")


def test_backends_import_neither_partitioner_nor_runtime():
    code = (
        "import sys, hetc.backends as b\n"
        f"for n in {list(BACKENDS)!r}: b.get_backend(n)\n"
        "bad = [m for m in sys.modules if m.startswith(('hetc.partitioner', 'hetc.runtime'))]\n"
        "assert not bad, bad\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
