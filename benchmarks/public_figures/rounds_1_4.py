"""Rounds 1-4 of the public GPU figures: round 1, the first comparison, and rounds 2, 3 and 4, gathered after
the freezes at 11b21d7, 48fca1d and fd4908c (held then, reported beside now). SOURCES: where each round's
figures came from and how they were read; CASES: its rows, in round order."""

from __future__ import annotations

from public_figures.case import MLPERF_ISL, MLPERF_OSL, Case

SOURCES = {
    "trt17": "TensorRT-LLM v0.17 perf overview (docs/source/performance/perf-overview.md @ NVIDIA/TensorRT-LLM "
    "258c7540): trtllm-bench throughput, infinite request rate, FP8 engines with FP8 KV (A100: FP16); "
    "'Token Throughput' = output tok/s of the system",
    "gaudi": "Intel, 'Model Performance Data for Intel Gaudi 2 AI Accelerators' (intel.com/content/www/us/en/"
    "developer/platform/gaudi/model-performance-gaudi2-inference.html), SynapseAI 1.18.0, fixed batch; "
    "⚠ metric not named on the page, read as output tok/s (optimum-habana run_generation: "
    "batch × new tokens / time)",
    "oci": "Oracle, 'Serving Llama 3.1 405B model with AMD Instinct MI300X Accelerators' (blogs.oracle.com/"
    "cloud-infrastructure, 2024-10-10): vLLM benchmark_throughput.py, 8×MI300X TP8, Llama 3.1 405B FP8, "
    "'Output throughput in TPS'; ⚠ KV dtype and max-num-seqs not stated: batch 256 = vLLM's "
    "default max_num_seqs assumed (the post's batch-256 latency run gives 1,846 tok/s at 128/128)",
    "mlperf41": "MLPerf Inference v4.1 Datacenter, closed, Llama-2-70B (99%) Offline, 'Tokens per second' of "
    "results/<system>/llama2-70b-99/Offline/performance/run_1/mlperf_log_summary.txt in "
    "mlcommons/inference_results_v4.1 (parallelism, batch and dtypes from the submitter's code/ and configs/)",
    "mlperf51": "MLPerf Inference v5.1 Datacenter, closed, Llama-2-70B (99%) Offline, as mlperf41 in "
    "mlcommons/inference_results_v5.1 (FP8 entries only; B200 entries are FP4 and left out)",
    "trt10": "TensorRT-LLM v1.0 perf overview (docs/source/performance/perf-overview.md @ NVIDIA/TensorRT-LLM "
    "00f37686): trtllm-bench throughput, PyTorch backend, CUDA graphs with padding, synthetic requests of "
    "exactly ISL/OSL, ModelOpt FP8 checkpoints (FP8 KV), 'Total Output Throughput (tokens/sec)'; rows at "
    "ISL/OSL 500/2000 and 5000/500 (pairs v0.17 did not have) for every H100/H200 FP8 Llama column",
    "gaudi3": "Intel, 'Model Performance Data for Intel Gaudi 3 AI Accelerators' (intel.com/content/www/us/en/"
    "developer/platform/gaudi/model-performance.html), Intel Gaudi software 1.18.0, fixed batch; every "
    "Llama 3.1 row; ⚠ metric 'Throughput (tokens/sec)', read as output tok/s as for gaudi",
    "gaudi2b": "as gaudi (Gaudi 2 page, SynapseAI 1.18.0): the Llama 3.1 8B rows the first comparison did not use",
    # ---- round 3 (gathered after the freeze at 48fca1d) ----
    "mlperf40": "MLPerf Inference v4.0 Datacenter, closed, Llama-2-70B (99.9%) Offline, 'Tokens per second' of "
    "closed/Intel-HabanaLabs/results/HLS-Gaudi2-PT/llama2-70b-99.9/Offline/performance/run_1/"
    "mlperf_log_summary.txt in mlcommons/inference_results_v4.0 @ 3c4a1cf1 (8,034.85); FP8 linears (weights "
    "and activations, README 'FP8 Flow'), TGI-Gaudi with DeepSpeed over the 8 cards (llama2-70b-8x), "
    "batch 1024 (code/llama2-70b-99.9/scenarios.yaml batch_size_Offline)",
    "mlperf41x": "as mlperf41 (inference_results_v4.1 @ 198fc467), systems of other submitters running NVIDIA's and "
    "AMD's code: parallelism and batch from each submitter's configs/llama2-70b/Offline/__init__.py (H100 "
    "SXM: TP2, gpu_batch_size 896; H200: TP1, 806) or AMD's test_VllmFp8_Offline_perf.sh (TP1 × DP, "
    "max_num_seqs 2048 as in round 2)",
    "mlperf51x": "as mlperf51 (inference_results_v5.1 @ 965182b0), systems of other submitters: H200 TP1 "
    "gpu_batch_size 2048 (configs/<system>/Offline/llama2-70b.py: Dell XE9680, ASUSTeK ESC_N8; Cisco "
    "configs/llama2-70b/Offline/__init__.py H200_SXM_141GBx1); MI300X/MI325X on AMD's vLLM code at "
    "round 2's batches (MI300X 1536, MI325X 2048)",
    "gaudi2c": "as gaudi (Gaudi 2 page, SynapseAI 1.18.0): the four LLaMA 2 70b rows (fixed batch, # HPU as listed)",
    "gaudi3b": "as gaudi3 (Gaudi 3 page, software 1.18.0): the four LLaMA 2 70b rows (2 HPU, fixed batch)",
    # ---- round 4 (gathered after the freeze at fd4908c) ----
    "mlperf50": "MLPerf Inference v5.0 Datacenter, closed, Llama-2-70B Offline (99% or 99.9%: both FP8 on these systems), "
    "'Tokens per second' of results/<system>/llama2-70b-99[.9]/Offline/performance/run_1/mlperf_log_summary.txt "
    "in the mirror ntuhpc/mlperf_inference_results_v5.0 @ cf354115 (the mlcommons repository is not stored); "
    "H200/H100 on NVIDIA's TensorRT-LLM code, MI325X/MI300X on AMD's vLLM code (MangoBoost: LLMBoost over "
    "four nodes). ⚠ v5.0's configs are not in the mirror: parallelism and batch as the same code in v4.1/v5.1 "
    "(H200 TP1, H100 TP2, MI3xx TP1 × DP at max_num_seqs 2048); hetc's memory model caps every one of these "
    "below the assumed batch (H200 710, H100 867, MI300X 1254, MI325X 1942), so the assumption does not move "
    "the prediction",
    "rocm25": "AMD, 'Performance results' (amd.com/en/developer/resources/rocm-hub/dev-ai/performance-results.html), vLLM "
    "on 8×MI300X (rocm/vllm:rocm7.0.0_vllm_0.11.1_20251103, dual EPYC 9554), TP8, amd/Llama-3.1-{70B,405B}-"
    "Instruct-FP8-KV (FP8 weights and KV), infinite request rate, 'Max. Seqs' = the batch; the rows at input "
    "128 with outputs 2048 and 4096 only: ⚠ the page does not say whether 'Throughput' counts prompt tokens; at "
    "these lengths the two readings differ by 3–6% (the 500/2000 and 2048/2048 rows, where they differ by "
    "25–100%, are left out)",
    "gaudi2d": "as gaudi (Gaudi 2 page, SynapseAI 1.18.0): the LLaMA 2 7b and Mistral 7b rows (1 HPU, fixed batch)",
    "gaudi3c": "as gaudi3 (Gaudi 3 page, software 1.18.0): the LLaMA 2 7b and Mistral 7b rows (1 HPU, fixed batch)",
}

CASES = [
    Case("h100-8b-1000/1000", "1xh100", "llama-3.1-8b", "fp8", 1000, 1000, 15244.78, "trt17", "nvidia", "a:0", None, 1),
    Case("h100-8b-128/2048", "1xh100", "llama-3.1-8b", "fp8", 128, 2048, 21109.38, "trt17", "nvidia", "a:0", None, 1),
    Case("h100-8b-2048/128", "1xh100", "llama-3.1-8b", "fp8", 2048, 128, 3556.73, "trt17", "nvidia", "a:0", None, 1),
    Case("h200-8b-1000/1000", "1xh200", "llama-3.1-8b", "fp8", 1000, 1000, 17537.96, "trt17", "nvidia", "a:0", None, 1),
    Case("l40s-8b-1000/1000", "1xl40s", "llama-3.1-8b", "fp8", 1000, 1000, 4054.71, "trt17", "nvidia", "a:0", None, 1),
    Case("a100-8b-1000/1000-fp16", "1xa100", "llama-3.1-8b", "fp16", 1000, 1000, 3786.83, "trt17", "nvidia", "a:0", None, 1, "FP16"),
    Case("h200-70b-1000/1000", "1xh200", "llama-3.1-70b", "fp8", 1000, 1000, 2823.45, "trt17", "nvidia", "a:0", None, 1),
    Case("2xh100-70b-1000/1000", "2xh100", "llama-3.1-70b", "fp8", 1000, 1000, 4390.53, "trt17", "nvidia", "a:0-1", None, 1),
    Case("gaudi2-8b-128/2048", "1xgaudi2", "llama-3.1-8b", "fp8", 128, 2048, 11138, "gaudi", "intel", "a:0", 289, 1),
    Case("gaudi2-8b-2048/2048", "1xgaudi2", "llama-3.1-8b", "fp8", 2048, 2048, 5511, "gaudi", "intel", "a:0", 155, 1),
    Case("8xmi300x-405b-128/128", "8xmi300x", "llama-3.1-405b", "fp8", 128, 128, 1993, "oci", "amd", "a:0-7", 256, 1, "batch ≤ 256 ⚠"),
    Case("8xmi300x-405b-128/2048", "8xmi300x", "llama-3.1-405b", "fp8", 128, 2048, 2794, "oci", "amd", "a:0-7", 256, 1, "batch ≤ 256 ⚠"),
    # ---- round 2: gathered after the freeze at 11b21d7 (held then, reported beside now) ----
    # MLPerf Llama-2-70B Offline, FP8 weights and KV, 8-GPU systems as their submitters ran them
    Case(
        "mlperf41-8xh100-nvidia",
        "8xh100",
        "llama-2-70b",
        "fp8",
        MLPERF_ISL,
        MLPERF_OSL,
        24524.9,
        "mlperf41",
        "nvidia",
        "a:0-1 x4",
        896,
        2,
        "TRT-LLM, TP2 × 4, gpu_batch_size 896",
    ),
    Case(
        "mlperf41-8xh200-nvidia",
        "8xh200",
        "llama-2-70b",
        "fp8",
        MLPERF_ISL,
        MLPERF_OSL,
        31302.7,
        "mlperf41",
        "nvidia",
        "a:0 x8",
        806,
        2,
        "TRT-LLM, TP1 × 8, gpu_batch_size 806",
    ),
    Case(
        "mlperf51-8xh200-google",
        "8xh200",
        "llama-2-70b",
        "fp8",
        MLPERF_ISL,
        MLPERF_OSL,
        35043.7,
        "mlperf51",
        "nvidia",
        "a:0 x8",
        2048,
        2,
        "TRT-LLM, TP1 × 8, gpu_batch_size 2048",
    ),
    Case(
        "mlperf41-8xmi300x-amd",
        "8xmi300x",
        "llama-2-70b",
        "fp8",
        MLPERF_ISL,
        MLPERF_OSL,
        23514.8,
        "mlperf41",
        "amd",
        "a:0 x8",
        2048,
        2,
        "vLLM, TP1 × 8 (DP8), max_num_seqs 2048, EPYC 9374F",
    ),
    Case(
        "mlperf41-8xmi300x-amd-turin",
        "8xmi300x",
        "llama-2-70b",
        "fp8",
        MLPERF_ISL,
        MLPERF_OSL,
        24109.8,
        "mlperf41",
        "amd",
        "a:0 x8",
        2048,
        2,
        "vLLM, TP1 × 8, max_num_seqs 2048, EPYC Turin",
    ),
    Case(
        "mlperf51-8xmi300x-amd",
        "8xmi300x",
        "llama-2-70b",
        "fp8",
        MLPERF_ISL,
        MLPERF_OSL,
        27803.9,
        "mlperf51",
        "amd",
        "a:0 x8",
        1536,
        2,
        "vLLM, TP1 × 8, decode batch 1280–1536",
    ),
    Case(
        "mlperf51-8xmi325x-amd",
        "8xmi325x",
        "llama-2-70b",
        "fp8",
        MLPERF_ISL,
        MLPERF_OSL,
        34520.4,
        "mlperf51",
        "amd",
        "a:0 x8",
        2048,
        2,
        "vLLM, TP1 × 8, decode batch 2048",
    ),
    # TensorRT-LLM v1.0: largest batch that fits (its default capacity policy reserves each request's whole length)
    *[
        Case(f"trt10-{gpu}-{m}-{i}/{o}", cl, model, "fp8", i, o, v, "trt10", "nvidia", spec, None, 2)
        for (gpu, cl, m, model, spec), vals in (
            (("h200", "1xh200", "70b", "llama-3.1-70b", "a:0"), (3666, 566)),
            (("h100", "2xh100", "70b", "llama-3.1-70b", "a:0-1"), (5222, 898)),
            (("h200", "8xh200", "405b", "llama-3.1-405b", "a:0-7"), (4724, 650)),
            (("h100", "8xh100", "405b", "llama-3.1-405b", "a:0-7"), (3994, 610)),
            (("h200", "1xh200", "8b", "llama-3.1-8b", "a:0"), (20770, 3902)),
            (("h100", "1xh100", "8b", "llama-3.1-8b", "a:0"), (17660, 3459)),
        )
        for (i, o), v in zip(((500, 2000), (5000, 500)), vals)
    ],
    # Intel's pages: fixed batch
    *[
        Case(f"gaudi3-{n}x-{m}-{i}/{o}", f"{n}xgaudi3", model, "fp8", i, o, v, "gaudi3", "intel", "a:0" if n == 1 else f"a:0-{n - 1}", b, 2, f"batch {b}")
        for n, m, model, rows in (
            (1, "8b", "llama-3.1-8b", ((128, 128, 1536, 24310), (128, 2048, 768, 18830), (2048, 128, 256, 2652), (2048, 2048, 364, 7405))),
            (2, "70b", "llama-3.1-70b", ((128, 128, 3516, 3711), (128, 2048, 450, 5776), (2048, 128, 223, 497), (2048, 2048, 175, 2588))),
            (8, "70b", "llama-3.1-70b", ((128, 128, 4000, 15008), (128, 2048, 600, 15711), (2048, 128, 400, 1600), (2048, 2048, 600, 8946))),
        )
        for i, o, b, v in rows
    ],
    Case("gaudi2-8b-128/128", "1xgaudi2", "llama-3.1-8b", "fp8", 128, 128, 18201, "gaudi2b", "intel", "a:0", 2429, 2, "batch 2429"),
    Case("gaudi2-8b-2048/128", "1xgaudi2", "llama-3.1-8b", "fp8", 2048, 128, 2028, "gaudi2b", "intel", "a:0", 179, 2, "batch 179"),
    # ---- round 3: gathered after the freeze at 48fca1d (held then, reported beside now) ----
    # MLPerf Llama-2-70B Offline, FP8: other submitters' systems and configurations (4 GPUs, 1 GPU, Gaudi 2)
    *[
        Case(f"{r}-{n}x{gpu}-{who}", f"{n}x{gpu}", "llama-2-70b", "fp8", MLPERF_ISL, MLPERF_OSL, v, src, vendor, spec, b, 3, note)
        for r, src, n, gpu, who, vendor, spec, b, v, note in (
            ("mlperf41", "mlperf41x", 4, "h100", "dell", "nvidia", "a:0-1 x2", 896, 10699.6, "XE8640; TRT-LLM, TP2 × 2"),
            ("mlperf41", "mlperf41x", 4, "h100", "fujitsu", "nvidia", "a:0-1 x2", 896, 10133.3, "GX2560M7; TRT-LLM, TP2 × 2"),
            ("mlperf41", "mlperf41x", 8, "h100", "dell", "nvidia", "a:0-1 x4", 896, 24086.7, "XE9680; TRT-LLM, TP2 × 4"),
            ("mlperf41", "mlperf41x", 8, "h100", "hpe", "nvidia", "a:0-1 x4", 896, 24528.3, "Cray XD670; TRT-LLM, TP2 × 4"),
            ("mlperf41", "mlperf41x", 8, "h200", "dell", "nvidia", "a:0 x8", 806, 32124.3, "XE9680; TRT-LLM, TP1 × 8"),
            ("mlperf41", "mlperf41x", 8, "h200", "lenovo", "nvidia", "a:0 x8", 806, 31917.0, "TRT-LLM, TP1 × 8"),
            ("mlperf41", "mlperf41x", 8, "h200", "giga", "nvidia", "a:0 x8", 806, 31263.8, "G593-SD1; TRT-LLM, TP1 × 8"),
            ("mlperf51", "mlperf51x", 8, "h200", "dell", "nvidia", "a:0 x8", 2048, 35316.7, "XE9680; TRT-LLM, TP1 × 8"),
            ("mlperf51", "mlperf51x", 8, "h200", "asus", "nvidia", "a:0 x8", 2048, 35075.1, "ESC N8; TRT-LLM, TP1 × 8"),
            ("mlperf51", "mlperf51x", 8, "h200", "cisco", "nvidia", "a:0 x8", 2048, 34548.2, "C885; TRT-LLM, TP1 × 8"),
            ("mlperf41", "mlperf41x", 1, "mi300x", "amd", "amd", "a:0", 2048, 3062.72, "vLLM, TP1, EPYC 9374F"),
            ("mlperf41", "mlperf41x", 8, "mi300x", "dell", "amd", "a:0 x8", 2048, 22677.6, "XE9680; vLLM, TP1 × 8"),
            ("mlperf51", "mlperf51x", 8, "mi300x", "dell", "amd", "a:0 x8", 1536, 27325.9, "XE9680; vLLM, TP1 × 8"),
            (
                "mlperf51",
                "mlperf51x",
                8,
                "mi300x",
                "mangoboost",
                "amd",
                "a:0 x8",
                1536,
                27678.1,
                "Dell+MangoBoost LLMBoost, TP1 × 8 ⚠ batch not read: AMD's 1536 assumed",
            ),
            ("mlperf51", "mlperf51x", 8, "mi325x", "asus", "amd", "a:0 x8", 2048, 33987.4, "ESC A8A; vLLM, TP1 × 8"),
            ("mlperf51", "mlperf51x", 8, "mi325x", "giga", "amd", "a:0 x8", 2048, 34483.2, "vLLM, TP1 × 8"),
            ("mlperf51", "mlperf51x", 8, "mi325x", "amd-2", "amd", "a:0 x8", 2048, 34555.0, "AMD's second MI325X system"),
            ("mlperf40", "mlperf40", 8, "gaudi2", "intel", "intel", "a:0-7", 1024, 8034.85, "TGI-Gaudi, TP8, batch 1024"),
        )
    ],
    # Intel's pages: the LLaMA 2 70b rows (fixed batch)
    *[
        Case(f"{g}-{n}x-l2-70b-{i}/{o}", f"{n}x{g}", "llama-2-70b", "fp8", i, o, v, src, "intel", f"a:0-{n - 1}", b, 3, f"batch {b}")
        for g, src, rows in (
            ("gaudi2", "gaudi2c", ((2, 128, 128, 1750, 2844), (4, 128, 2048, 327, 3211), (2, 2048, 128, 95, 310), (2, 2048, 2048, 78, 1438))),
            ("gaudi3", "gaudi3b", ((2, 128, 128, 1750, 4433), (2, 128, 2048, 512, 6026), (2, 2048, 128, 231, 498), (2, 2048, 2048, 240, 2641))),
        )
        for n, i, o, b, v in rows
    ],
    # ---- round 4: gathered after the freeze at fd4908c (held then, reported beside now) ----
    # MLPerf v5.0 Llama-2-70B Offline, FP8: every system found in the stored mirror
    *[
        Case(f"mlperf50-{n}x{gpu}-{who}", cl, "llama-2-70b", "fp8", MLPERF_ISL, MLPERF_OSL, v, "mlperf50", vendor, spec, b, 4, note)
        for n, gpu, cl, who, vendor, spec, b, v, note in (
            (8, "h200", "8xh200", "nvidia", "nvidia", "a:0 x8", 2048, 34988.2, "H200-SXM-141GBx8; TRT-LLM, TP1 × 8"),
            (8, "h200", "8xh200", "supermicro", "nvidia", "a:0 x8", 2048, 35026.8, "AS-4125GS-TNHR2-LCC; TRT-LLM, TP1 × 8"),
            (8, "h200", "8xh200", "lenovo", "nvidia", "a:0 x8", 2048, 35453.0, "TRT-LLM, TP1 × 8"),
            (8, "h200", "8xh200", "dell", "nvidia", "a:0 x8", 2048, 34822.6, "XE9680 (99.9%); TRT-LLM, TP1 × 8"),
            (8, "h200", "8xh200", "asus", "nvidia", "a:0 x8", 2048, 34807.1, "TRT-LLM, TP1 × 8"),
            (8, "h100", "8xh100", "nvidia", "nvidia", "a:0-1 x4", 896, 31306.8, "DGX-H100; TRT-LLM, TP2 × 4"),
            (8, "h100", "8xh100", "dell", "nvidia", "a:0-1 x4", 896, 31216.8, "XE9680; TRT-LLM, TP2 × 4"),
            (8, "mi325x", "8xmi325x", "amd", "amd", "a:0 x8", 2048, 33928.1, "99.9%; vLLM, TP1 × 8"),
            (8, "mi325x", "8xmi325x", "supermicro", "amd", "a:0 x8", 2048, 33069.1, "99.9%; vLLM, TP1 × 8"),
            (8, "mi325x", "8xmi325x", "asus", "amd", "a:0 x8", 2048, 33366.5, "ESC A8A, 99.9%; vLLM, TP1 × 8"),
            (8, "mi325x", "8xmi325x", "giga", "amd", "a:0 x8", 2048, 33251.3, "G893-ZX1, 99.9%; vLLM, TP1 × 8"),
            (32, "mi300x", "32xmi300x", "mangoboost", "amd", "a:0 x8;b:0 x8;c:0 x8;d:0 x8", 2048, 103182.0, "4 nodes, 99.9%; LLMBoost, TP1 × 32"),
        )
    ],
    # AMD's performance page: vLLM, TP8 on 8×MI300X at its max_num_seqs
    *[
        Case(f"rocm-8xmi300x-{m}-{i}/{o}", "8xmi300x", model, "fp8", i, o, v, "rocm25", "amd", "a:0-7", b, 4, f"max seqs {b}")
        for m, model, i, o, b, v in (
            ("70b", "llama-3.1-70b", 128, 2048, 3200, 13279.6),
            ("70b", "llama-3.1-70b", 128, 4096, 1500, 11449.7),
            ("405b", "llama-3.1-405b", 128, 2048, 1500, 3816.8),
            ("405b", "llama-3.1-405b", 128, 4096, 1500, 3099.6),
        )
    ],
    # Intel's pages: the LLaMA 2 7b and Mistral 7b rows (1 HPU, fixed batch)
    *[
        Case(f"{g}-1x-{m}-{i}/{o}", f"1x{g}", model, "fp8", i, o, v, src, "intel", "a:0", b, 4, f"batch {b}")
        for g, src, m, model, rows in (
            ("gaudi2", "gaudi2d", "l2-7b", "llama-2-7b", ((128, 128, 1230, 13137), (128, 2048, 163, 4791), (2048, 128, 94, 1449), (2048, 2048, 81, 1953))),
            (
                "gaudi2",
                "gaudi2d",
                "mistral-7b",
                "mistral-7b",
                ((128, 128, 896, 18023), (128, 2048, 120, 11294), (2048, 128, 120, 1427), (2048, 2048, 44, 3947)),
            ),
            ("gaudi3", "gaudi3c", "l2-7b", "llama-2-7b", ((128, 128, 1536, 19810), (128, 2048, 217, 6763), (2048, 128, 153, 2029), (2048, 2048, 75, 2734))),
            (
                "gaudi3",
                "gaudi3c",
                "mistral-7b",
                "mistral-7b",
                ((128, 128, 896, 24433), (128, 2048, 120, 13726), (2048, 128, 120, 2085), (2048, 2048, 44, 4970)),
            ),
        )
        for i, o, b, v in rows
    ],
]
