"""Round 11 of the public GPU figures, gathered after the freeze at freeze.FROZEN_BY_ROUND[11] and held to the
target (freeze.HELD_ROUNDS). SOURCES: where its figures came from and how they were read, with the round's rule
for which figures are held; CASES: its rows."""

from __future__ import annotations

from public_figures.case import Case

# MLPerf Mixtral-8x7B workload (15,000 samples: 5,000 each of OpenOrca, GSM8K, MBXP), at its means
MIXTRAL_ISL, MIXTRAL_OSL = 427, 145
# MLPerf Llama-3.1-8B datacenter workload (CNN/DailyMail, 13,368 samples), at its means
LLAMA31_8B_ISL, LLAMA31_8B_OSL = 871, 128
LENGTHS = (
    "MLPerf Mixtral-8x7B lengths: input 427 = mean input_length (427.39; median 283, max 1,948) and output 145 = mean "
    "output_length (144.84, = MLCommons' 'tokens per sample' of the reference) of the 15,000 rows of "
    "openshift-psap/performance-dashboard mlperf-data/summaries/mixtral-8x7b.csv @ 7100702 (per-sample lengths of "
    "the MLPerf dataset); each run's Tokens per second / Samples per second gives 143.4-145.9. MLPerf Llama-3.1-8B "
    "lengths: input 871 = mean input_length (870.73; median 784, max 2,540) of the 13,368 rows of mlperf-data/summaries/"
    "llama3-1-8b-datacenter.csv (same commit); output 128 = every run's Tokens per second / Samples per second "
    "(128.0 on each of the four runs below; the csv's reference outputs average 81.6, which the runs do not stop at)"
)

_V51 = "ntuhpc/inference_results_v5.1 @ 387c3dd0"
_V41 = "mlcommons/inference_results_v4.1 @ 198fc467"

SOURCES = {
    # ---- round 11 (gathered after the freeze at FROZEN_BY_ROUND[11] = 2694874) ----
    # The rule (benchmarks/logs/gpu-public-round11.md, written before any figure was read): every figure below is held
    # unless (a) rounds 1-10 compared the same device, model, device count, parallelism, batch and lengths from another
    # release of the same page or submission (a re-measurement), or (b) it was seen before the freeze (listed as read in
    # an earlier round's log): those are marked beside (hold=False). Left out: models or devices without a profile or
    # cluster file, FP4 / int4, Server and Interactive scenarios, power-capped (MaxQ) runs, pipeline-parallel runs (this
    # script predicts tensor-parallel groups), rows without stated lengths, batch or parallelism.
    "mlperf51mx": "MLPerf Inference v5.1 Datacenter, closed, Mixtral-8x7B Offline: 'Tokens per second' of closed/<submitter>/"
    "results/<system>/mixtral-8x7b/Offline/performance/run_1/mlperf_log_summary.txt in the mirror " + _V51 + ". "
    "MI300X / MI325X systems on AMD's vLLM harness: closed/<submitter>/code/mixtral-8x7b/harness_llm/models/mixtral-8x7b/"
    "offline_mi300x.yaml / offline_mi325x.yaml (each submitter's copy): tensor_parallel_size 1 over the 8 GPUs "
    "(device_count 8), quantization fp8, kv_cache_dtype fp8, max_num_seqs 5000 (MI300X) / 4736 (MI325X) = the batch, "
    "max_num_batched_tokens 51200, chunked prefill off. AMD's systems state vLLM 0.9.0.2 (closed/AMD/systems/*.json "
    "'framework'); ⚠ the partners' system files state 'vLLM 0.6.5.dev964+mlperf50' (as their v5.0 descriptions) while "
    "running AMD's v5.1 harness (AITER MoE, num_scheduler_steps): their rows name no release. H200 SXM x8 systems on "
    "NVIDIA's TensorRT-LLM code: closed/<submitter>/configs/<system>/Offline/mixtral-8x7b.py (TP1, PP1, gpu_batch_size "
    "3072, precision fp8, kv_cache_dtype fp8). Lengths 427/145 (LENGTHS). Rounds 2-5 read these submitters' "
    "Llama-2-70B files (SOURCES mlperf51, mlperf51x, mlperf51r5); no earlier log lists a Mixtral figure: held. Left out: "
    "HPE's RTX PRO 6000 and every B200 / GB200 system (no profile, or FP4); Dell_Broadcom's and Cisco's H200 Mixtral "
    "configs have no Offline result in the mirror. " + LENGTHS,
    "mlperf51l8": "MLPerf Inference v5.1 Datacenter, closed, Llama-3.1-8B Offline, 'Tokens per second' as mlperf51mx (" + _V51 + "): "
    "H200 SXM x8 systems on NVIDIA's TensorRT-LLM code, closed/<submitter>/configs/<system>/Offline/llama3_1-8b.py (TP1, "
    "PP1, gpu_batch_size 2048, precision fp8, kv_cache_dtype fp8); Red Hat's Dell XE8640 entry on vLLM 0.10.0 "
    "(systems/XE8640_4xH100_vLLM.json: 1 x H100-SXM-80GB per node) with code/llama3.1-8b/README.md's H100 Offline command "
    "(SUT_VLLM_SingleReplica.py --max-num-seqs 1024 --kv-cache-dtype fp8 --max-num-batched-tokens 4096; no quantization "
    "flag: ⚠ BF16 weights assumed, the MLCommons checkpoint). Lengths 871/128 (LENGTHS). Left out: Cisco C885 H200 "
    "(no llama3_1-8b config in its configs/), the IBM Cloud 2 x L40S entry (no cluster file), every Llama-3.1-405B "
    "entry (TP4 x PP2: a pipeline)",
    "mlperf41mx": "MLPerf Inference v4.1 Datacenter, closed, Mixtral-8x7B (99%) Offline, 'Tokens per second' of closed/<submitter>/"
    "results/<system>/mixtral-8x7b/Offline/performance/run_1/mlperf_log_summary.txt in " + _V41 + ", H100 SXM and H200 "
    "SXM systems on NVIDIA's TensorRT-LLM code: closed/<submitter>/configs/mixtral-8x7b/Offline/__init__.py or custom.py "
    "(TP1 per GPU, use_fp8: FP8 weights and KV as mlperf41; gpu_batch_size H100 896 — HPE XD670 1024 —, H200 3072). "
    "Rounds 2-3 and 10 read these submissions' Llama-2-70B files; no earlier log lists a Mixtral figure: held. Lengths "
    "427/145 (LENGTHS). Left out: NVIDIA's H200 x8 MaxQ (500 W power cap), GH200 (no profile), HPE's open-division "
    "H100 NVL (no profile)",
}


def _mx(name: str, cluster: str, public: float, source: str, vendor: str, placement: str, batch: int, note: str) -> Case:
    return Case(name, cluster, "mixtral-8x7b", "fp8", MIXTRAL_ISL, MIXTRAL_OSL, public, source, vendor, placement, batch, 11, note)


CASES = [
    # ---- round 11 (gathered after the freeze at FROZEN_BY_ROUND[11] = 2694874; the rule with SOURCES) ----
    # MLPerf v5.1 Mixtral-8x7B Offline on MI300X / MI325X (AMD's vLLM harness, TP1 x 8, FP8 weights and KV)
    *[
        _mx(f"mlperf51-8x{gpu}-{who}-mixtral", f"8x{gpu}", v, "mlperf51mx", "amd", "a:0 x8", 5000 if gpu == "mi300x" else 4736, note)
        for gpu, who, v, note in (
            ("mi300x", "amd", 53017.3, "8xMI300X_2xEPYC_9575F; vLLM 0.9.0.2, TP1 × 8, max_num_seqs 5000"),
            ("mi325x", "amd", 68781.4, "8xMI325X_2xEPYC_9575F_1; vLLM 0.9.0.2, TP1 × 8, max_num_seqs 4736"),
            ("mi325x", "asus", 68121.2, "ESC_A8A_MI325X_256GBx8; AMD's v5.1 vLLM harness, TP1 × 8, max_num_seqs 4736"),
            ("mi300x", "dell", 53333.9, "XE9680_MI300X_192GBx8; AMD's v5.1 vLLM harness, TP1 × 8, max_num_seqs 5000"),
            ("mi325x", "giga", 69692.0, "8xMI325X_2xEPYC_9575F; AMD's v5.1 vLLM harness, TP1 × 8, max_num_seqs 4736"),
            ("mi325x", "mitac", 67964.4, "8xMI325X_2xEPYC_9755; AMD's v5.1 vLLM harness, TP1 × 8, max_num_seqs 4736"),
            ("mi325x", "qct", 68218.7, "D75T-7U_8xMI325X; AMD's v5.1 vLLM harness, TP1 × 8, max_num_seqs 4736"),
            ("mi325x", "vultr", 70035.6, "8xMI325X_2xEPYC_9575F; AMD's v5.1 vLLM harness, TP1 × 8, max_num_seqs 4736"),
        )
    ],
    # MLPerf v5.1 Mixtral-8x7B Offline on H200 SXM x8 (NVIDIA's TensorRT-LLM code, TP1 x 8, 3072)
    *[
        _mx(f"mlperf51-8xh200-{who}-mixtral", "8xh200", v, "mlperf51mx", "nvidia", "a:0 x8", 3072, note)
        for who, v, note in (
            ("asus", 61372.4, "ESC_N8_H200-SXM-141GBx8_TRT; TRT-LLM, TP1 × 8, batch 3072"),
            ("hpe", 62108.4, "HPE_Cray_XD670_H200_SXM_141GBx8_TRT; TRT-LLM, TP1 × 8, batch 3072"),
        )
    ],
    # MLPerf v5.1 Llama-3.1-8B Offline: H200 SXM x8 on TensorRT-LLM (TP1 x 8, 2048), Red Hat's 1 x H100 on vLLM 0.10.0
    *[
        Case(
            f"mlperf51-8xh200-{who}-l31-8b",
            "8xh200",
            "llama-3.1-8b",
            "fp8",
            LLAMA31_8B_ISL,
            LLAMA31_8B_OSL,
            v,
            "mlperf51l8",
            "nvidia",
            "a:0 x8",
            2048,
            11,
            note,
        )
        for who, v, note in (
            ("hpe", 66036.8, "HPE_Cray_XD670_H200_SXM_141GBx8_TRT; TRT-LLM, TP1 × 8, batch 2048"),
            ("qct", 56917.3, "D74U-7U_H200-SXM-141GBx8_TRT; TRT-LLM, TP1 × 8, batch 2048"),
        )
    ],
    Case(
        "mlperf51-1xh100-redhat-l31-8b",
        "1xh100",
        "llama-3.1-8b",
        "bf16",
        LLAMA31_8B_ISL,
        LLAMA31_8B_OSL,
        5777.08,
        "mlperf51l8",
        "nvidia",
        "a:0",
        1024,
        11,
        "XE8640_4xH100_vLLM (1 GPU); vLLM 0.10.0, max-num-seqs 1024, FP8 KV (⚠ BF16 weights assumed)",
        kv_dtype="fp8",
    ),
    # MLPerf v4.1 Mixtral-8x7B Offline on H100 / H200 SXM (NVIDIA's TensorRT-LLM code, TP1 per GPU, FP8)
    *[
        _mx(f"mlperf41-{n}x{gpu}-{who}-mixtral", f"{n}x{gpu}", v, "mlperf41mx", "nvidia", f"a:0 x{n}", b, note)
        for n, gpu, who, v, b, note in (
            (8, "h100", "nvidia", 52415.9, 896, "DGX-H100_H100-SXM-80GBx8_TRT; TRT-LLM, TP1 × 8, batch 896"),
            (8, "h200", "nvidia", 59022.3, 3072, "H200-SXM-141GBx8_TRT; TRT-LLM, TP1 × 8, batch 3072"),
            (4, "h100", "dell", 26824.4, 896, "XE8640_H100_SXM_80GBx4_TRT (HGX 4-GPU); TRT-LLM, TP1 × 4, batch 896"),
            (4, "h100", "fujitsu", 26641.6, 896, "GX2560M7_H100_SXM_80GBx4_TRT (HGX 4-GPU); TRT-LLM, TP1 × 4, batch 896"),
            (8, "h200", "giga", 59334.8, 3072, "GIGABYTE_G593_SD1_H200_SXM_141GBx8_TRT; TRT-LLM, TP1 × 8, batch 3072"),
            (8, "h100", "google", 52524.4, 896, "DGX-H100_H100-SXM-80GBx8_TRT; TRT-LLM, TP1 × 8, batch 896"),
            (8, "h100", "hpe", 52395.1, 1024, "HPE_Cray_XD670_H100_SXM_80GBx8_TRT; TRT-LLM, TP1 × 8, batch 1024"),
            (8, "h100", "supermicro-as4125gs", 51269.0, 896, "AS_4125GS_TNHR2_LCC_H100_SXM_80GBx8_TRT; TRT-LLM, TP1 × 8, batch 896"),
            (8, "h100", "supermicro-as8125gs", 50970.6, 896, "AS_8125GS_TNHR_H100_SXM_80GBx8_TRT; TRT-LLM, TP1 × 8, batch 896"),
            (8, "h100", "supermicro-sys421ge", 52452.0, 896, "SYS_421GE_TNHR2_LCC_H100_SXM_80GBx8_TRT; TRT-LLM, TP1 × 8, batch 896"),
            (8, "h100", "supermicro-sys821ge", 52353.8, 896, "SYS_821GE_TNHR_H100_SXM_80GBx8_TRT; TRT-LLM, TP1 × 8, batch 896"),
            (8, "h100", "smc", 52817.7, 896, "SMC_H100_SXM_80GBX8_TRT (Sustainable Metal Cloud); TRT-LLM, TP1 × 8, batch 896"),
        )
    ],
]
