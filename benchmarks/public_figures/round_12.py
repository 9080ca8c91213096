"""Round 12 of the public GPU figures, gathered after the freeze at freeze.FROZEN_BY_ROUND[12] and held to the
target (freeze.HELD_ROUNDS). SOURCES: where its figures came from and how they were read, with the round's rule
for which figures are held; CASES: its rows."""

from __future__ import annotations

from public_figures.case import Case
from public_figures.round_11 import LENGTHS, MIXTRAL_ISL, MIXTRAL_OSL

_V50 = "ntuhpc/mlperf_inference_results_v5.0 @ 08990aab"

SOURCES = {
    # ---- round 12 (gathered after the freeze at FROZEN_BY_ROUND[12] = f719561) ----
    # The rule (benchmarks/logs/gpu-public-round12.md, written before any figure was read): every figure below is held
    # unless (a) rounds 1-11 compared the same device, model, device count, parallelism, batch and lengths from another
    # release of the same page or submission (a re-measurement), or (b) it was seen before the freeze (listed as read in
    # an earlier round's log): those are marked beside (hold=False). MLPerf rounds between ones already compared are
    # held, as rounds 4, 5 and 11 held MLPerf v5.0 / v5.1 systems. Left out: models or devices without a profile or
    # cluster file, FP4 / int4, Server and Interactive scenarios, pipeline-parallel runs, rows without stated lengths,
    # batch or parallelism.
    "mlperf50mx": "MLPerf Inference v5.0 Datacenter, closed, Mixtral-8x7B Offline: the 'Offline' 'Tokens/s' of the "
    "mixtral-8x7b row of the Results Table in closed/<submitter>/results/<system>/summary.html of the mirror " + _V50 + " "
    "(MLCommons' generated page of each system; the per-run mlperf_log_summary.txt files of v5.0's Mixtral are not in "
    "the stored mirror, nor is closed/NVIDIA/configs/mixtral-8x7b). H200 SXM x8 and H100 SXM x8 systems on NVIDIA's "
    "TensorRT-LLM code (each system's framework: 'TensorRT 10.8, CUDA 12.8', as NVIDIA's). ⚠ v5.0's Mixtral configs are "
    "not in the mirror: TP1 per GPU, FP8 weights and KV, gpu_batch_size H200 3072 / H100 896 as NVIDIA's code of v4.1 and "
    "v5.1 both set them (SOURCES mlperf41mx, mlperf51mx: TP1, use_fp8 / fp8 + fp8 KV, H200 3072 in both, H100 896 in "
    "v4.1); hetc's memory model caps every such batch below the stated one (round 11). Rule (a): rounds 11 compared "
    "v4.1 and v5.1 Mixtral rows of these configurations, other MLPerf rounds, not another release of these systems' "
    "v5.0 pages: held, as round 11 held both v4.1 and v5.1. Rule (b): round 11's log lists v5.0 Mixtral as not read. "
    "Systems whose v5.0 Results Table has no mixtral-8x7b row (read, none): NVIDIA DGX-H100, Dell XE9680 H100 / H200 "
    "and vXE9680 H100, HPE XD670 H100 / H200, ASUSTeK H200-SXM, Cisco C885A H200, NVIDIA H200 Triton, GigaComputing "
    "G893-ZX1 (MI300X), Supermicro 8xMI325X. AMD's and its partners' v5.0 MI325X entries: Llama-2-70B and SDXL only. "
    "Left out: H200 NVL / H100 NVL systems (PCIe cards, no profile), Lenovo SR675 V3 (4 x H200: no cluster file), B200 "
    "/ GB200 / GH200 systems. " + LENGTHS,
}

# (case name, cluster, placement, batch, published Offline tok/s, system as the results folder names it)
_MX50 = [
    ("mlperf50-8xh200-nvidia-mixtral", "8xh200", 3072, 62629.6, "NVIDIA H200-SXM-141GBx8_TRT"),
    ("mlperf50-8xh200-supermicro-sys821ge-mixtral", "8xh200", 3072, 61964.1, "Supermicro SYS_821GE_TNHR_H200_SXM_141GBX8_TRT"),
    ("mlperf50-8xh200-supermicro-as4125gs-mixtral", "8xh200", 3072, 62766.2, "Supermicro AS_4125GS_TNHR2_LCC_H200_SXM_141GBX8_TRT"),
    ("mlperf50-8xh200-giga-mixtral", "8xh200", 3072, 62386.2, "GigaComputing G893-SD1_H200-SXM-141GBx8_TRT"),
    ("mlperf50-8xh200-lenovo-mixtral", "8xh200", 3072, 63446.7, "Lenovo H200-SXM-141GBx8_TRT"),
    ("mlperf50-8xh200-lenovo-sr780a-mixtral", "8xh200", 3072, 63514.7, "Lenovo SR780a_V3_H200SXMx8"),
    ("mlperf50-8xh200-dell-xe9680l-mixtral", "8xh200", 3072, 62042.2, "Dell XE9680L_H200_SXM_141GBx8_TRT"),
    ("mlperf50-8xh100-cisco-mixtral", "8xh100", 896, 52724.4, "Cisco C885A_H100_SXMx8_TRT"),
]

CASES: list[Case] = [
    Case(
        name,
        cluster,
        "mixtral-8x7b",
        "fp8",
        MIXTRAL_ISL,
        MIXTRAL_OSL,
        public,
        "mlperf50mx",
        "nvidia",
        "a:0 x8",
        batch,
        12,
        f"{system}; TP1 x 8, fp8 + fp8 KV, gpu_batch_size {batch} (⚠ as v4.1 / v5.1)",
    )
    for name, cluster, batch, public, system in _MX50
]
