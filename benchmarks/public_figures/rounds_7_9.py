"""Rounds 7, 8 and 9 of the public GPU figures, each gathered after its freeze (freeze.FROZEN_BY_ROUND) and held
to the target then (checked once each), training rows of the engine figures frozen before round 10. SOURCES:
where each round's figures came from and how they were read, with the round's rule for which figures are held;
CASES: its rows, in round order."""

from __future__ import annotations

from public_figures.case import MLPERF_ISL, MLPERF_OSL, Case

SOURCES = {
    # ---- round 7 (gathered after FROZEN) ----
    # The rule, fixed before any round-7 prediction: every figure below is held unless it is marked beside
    # (hold=False), which is so where (a) rounds 1-6 used a figure of the same device, model, device count,
    # parallelism, batch and lengths from an earlier release of the same benchmark page (a re-measurement of a
    # configuration already compared), or (b) the figure was seen before the freeze. Newer releases of pages and
    # benchmark rounds that rounds 1-6 used at other releases (MLPerf v6.0, AMD's page, TensorRT-LLM's overview)
    # are held, as rounds 4 and 5 held MLPerf v5.0 / v5.1 systems. Left out, not beside: rows whose Gaudi 2 and
    # Gaudi 3 values are identical (a copied placeholder, not a measurement of either card), tests commented out of
    # the suite, rows without stated input lengths, models or devices without a profile, FP4.
    "trt12": "TensorRT-LLM performance overview, docs/source/developer-guide/perf-overview.md @ NVIDIA/TensorRT-LLM "
    "03e27c7d5ff0c6e89f8328838c0a8e64f1b34f9d (the 1.2-era page; rounds 1-2 used v0.17 @ 258c7540 and v1.0 @ "
    "00f37686): 'LLaMA v3.3 70B' table, H200 TP2 (FP8) and H100 TP2 (FP8) columns, nvidia/Llama-3.3-70B-"
    "Instruct-FP8 (the catalog's llama-3.1-70b: same architecture), trtllm-bench throughput, PyTorch backend, "
    "CUDA graphs with padding, synthetic requests of exactly ISL/OSL; 'Output Throughput per GPU' x 2 GPUs. "
    "⚠ KV dtype not stated for Llama 3.3: FP8 assumed (the ModelOpt FP8 checkpoint, as trt10); batch not "
    "stated: the largest that fits",
    "mlperf60": "MLPerf Inference v6.0 Datacenter, closed, Llama-2-70B Offline (99 and 99.9 give the same run), "
    "'Tokens per second' of closed/<submitter>/results/<system>/llama2-70b-99/Offline/performance/run_1/"
    "mlperf_log_summary.txt in the mirror gbeezybez/inference_results_v6.0 @ 232fbf90 (the mlcommons "
    "repository holds 9 files here): every MI300X, MI325X and H100/H200 SXM system of that task (Dell "
    "8xMI300X_2xPlatinum_8470 on AMD's vLLM 0.9.0.2 code, ROCm 6.4.1; MangoBoost 8xMI300X and 8xMI325X on "
    "LLMBoost 0.5.2), TP1 x 8, FP8 with FP8 KV; ⚠ the configs are not in the mirror: batch as AMD's own "
    "v5.1 runs (MI300X 1536, MI325X 2048; round 3), which hetc's memory model caps below. Lengths 222/294 "
    "as rounds 2-5. No H100/H200 SXM system ran this task in v6.0 (H200 NVL, B200/B300 FP4, RTX PRO, "
    "MI350X/MI355X: no profile or FP4); the heterogeneous Dell+MangoBoost MI300X+MI325X+MI355X run has "
    "MI355X",
    "krai60": "MLPerf Inference v6.0, open division, Krai, Llama-2-70B task served by Llama-3.1-70B-Instruct with "
    "dynamic FP8 on vLLM v0.15.0-dev (nightly d88a1df6), 8xH200-SXM-141GB, 'Tokens per second' of "
    "open/Krai/results/h200_n1-vllm/llama3_1-70b-fp8_dyn/offline/performance/run_1/mlperf_log_summary.txt "
    "(gbeezybez/inference_results_v6.0 @ 232fbf90); tp=1, dp=8, max_num_seqs=1232 from the same directory's "
    "README (the PerformanceOnly command); no kv dtype given: bf16 KV (the engine's default), as krai51",
    "rocm25b": "AMD, 'Performance results' (amd.com/<lang>/developer/resources/rocm-hub/dev-ai/performance-results.html), "
    "vLLM on 8xMI300X (dual EPYC 9554), TP8, amd/Llama-3.1-{70B,405B}-Instruct-FP8-KV, 'Max Num Seqs' as the "
    "batch, the three releases of the page other than rocm25's (stored copies): en, docker rocm/vllm:"
    "rocm6.4.1_vllm_0.9.0.1_20250605; fr, rocm6.4.1_vllm_0.10.1_20250909; zh-cn, rocm7.0.0_vllm_0.10.2_"
    "20251006. Rows at input 128 with outputs 2048 and 4096 only, by rocm25's rule (⚠ 'Throughput' may "
    "count prompt tokens: 3-6% at these lengths). ⚠ which releases round 4 saw is not recorded; held",
    "ohci": "optimum-habana's CI performance baselines: 'throughput' (run_generation.py: generated tokens / s) of the "
    "test_text_generation_fp8 cases in tests/baselines/fixture/tests/test_text_generation_example.json @ "
    "huggingface/optimum-habana 1d8504c6c7666a19d71968dba50976dceaf7c6b6, per device (gaudi2, gaudi3); the "
    "test passes when a run reaches 0.95x the baseline. Each case's configuration from "
    "tests/test_text_generation_example.py (MODELS_TO_TEST['fp8']: model, world_size, batch_size, input and "
    "output lengths): run_generation.py --use_kv_cache --use_hpu_graphs --limit_hpu_graphs, FP8 (INC "
    "maxabs_quant), DeepSpeed TP over world_size cards, --max_input_tokens / --max_new_tokens (fixed lengths, "
    "bucketed KV for Llama 2 and Mixtral), flash attention (the flex-attention key where only it exists). "
    "Left out: Mistral 120-batch and Mixtral 96-batch rows (commented out of the suite; Gaudi 2 = Gaudi 3 "
    "values), Mixtral 2 x 768 (Gaudi 2 = Gaudi 3), bf16 and DeepSpeed batch-1 rows (default prompt, input "
    "length not stated), Falcon-180B and phi-2 (not in the catalog)",
    # ---- round 8 (gathered after the freeze at FROZEN_BY_ROUND[8] = dedf7ee) ----
    # The rule, fixed before any round-8 prediction (as round 7's): every figure below is held unless it is marked beside
    # (hold=False), which is so where (a) rounds 1-7 used a figure of the same device, model, device count, parallelism,
    # batch and lengths from an earlier release of the same page (a re-measurement of a configuration already compared;
    # ROCm/vllm's docs/dev-docker/README.md counts as the same page as AMD's "Performance results" page: AMD publishes one
    # table on both, and the README's June 10, 2025 release repeats the page's 0605 release that round 7 used), or (b) the
    # figure was seen before the freeze. Other rounds of a benchmark that rounds 1-7 used at other rounds (MLPerf v4.0's
    # NVIDIA systems, v5.0's open division) and releases of a page older than those used are held, as rounds 4, 5 and 7
    # held theirs. Left out, not beside: a table release that repeats one already used (the README's June 10 release =
    # the page's 0605), a second run of a configuration in the same source (Krai's llama3_1-70b-interactive offline run
    # = its fp8_pre run), rows whose 'Throughput' may count prompt tokens by more than rocm25's 3-6% (500/2000,
    # 2048/2048), Server-scenario figures, models or devices without a profile, FP4 and int4. Intel: no Gaudi figure
    # not already used was found in the stored material (see benchmarks/logs/gpu-public-round8.md).
    "krai50": "MLPerf Inference v5.0, open division, Krai, Llama-2-70B task (OpenOrca, 24,576 samples) served by "
    "Llama-2-70B or Llama-3.1-70B-Instruct through vLLM 0.6.4 / 0.7.3 or SGLang on 8xH200 (HPE XD670) and 8xMI300X "
    "(Dell XE9680); 'Tokens per second' of open/Krai/results/<sut>/<benchmark>/offline/performance/run_1/"
    "mlperf_log_summary.txt in the mirror ntuhpc/mlperf_inference_results_v5.0 @ cf354115915ea369f05db424b051da8c5bf957dc "
    "(rounds 5 and 7 used Krai's v5.1 and v6.0 runs); tp, dp and max_num_seqs from open/Krai/measurements/<sut>/"
    "<benchmark>/offline/README.md (the PerformanceOnly command): tp=1, dp=8, quantization=fp8 (dynamic FP8 of the "
    "bf16 checkpoint; 'fp8_pre': Meta-Llama-3.1-70B-Instruct-FP8); no kv_cache_dtype given: the engines' default "
    "'auto' (bf16 KV), as krai51. ⚠ SGLang on H200: image lmsysorg/sglang:latest (version not stated) and "
    "max_num_seqs=700 in Krai's command, not shown to reach SGLang's --max-running-requests; SGLang on MI300X: "
    "lmsysorg/sglang:v0.4.3.post2-rocm630-srt, no max_num_seqs (the largest that fits). ⚠ Lengths as the MLPerf "
    "dataset's (222/294, Llama 2 tokenizer); the runs' tokens/s ÷ samples/s give 292-301 output tokens per sample",
    "mlperf40nv": "MLPerf Inference v4.0 Datacenter, closed, Llama-2-70B (99.9%) Offline, NVIDIA's DGX-H100 systems: "
    "'Tokens per second' of closed/NVIDIA/results/DGX-H100_H100-SXM-80GBx{2,8}_TRT/llama2-70b-99.9/Offline/performance/"
    "run_1/mlperf_log_summary.txt in mlcommons/inference_results_v4.0 @ 3c4a1cf196b70175cfe7c59e067cd1d923aa4f3f; "
    "TensorRT-LLM, FP8 (use_fp8; the 99.9% configs inherit the 99% ones), TP2 x (GPUs / 2), gpu_batch_size 896 from "
    "closed/NVIDIA/configs/llama2-70b/Offline/__init__.py (H100_SXM_80GB_TP2x1 / TP2x4 and their _HighAccuracy) @ "
    "8121a811. Round 3 used only Intel's Gaudi 2 entry of v4.0; rounds 2-4 used v4.1 and v5.0 NVIDIA systems at the "
    "same 8-GPU configuration (later rounds of the benchmark: held, as in round 7's rule)",
    "rocmvllm": "AMD's vLLM docker README, docs/dev-docker/README.md of ROCm/vllm ('Performance Results' / 'Throughput "
    "Measurements': benchmark_throughput.py, infinite request rate, 'Max Num Seqs' = the batch, --kv-cache-dtype fp8, "
    "amd/Llama-3.1-{70B,405B}-Instruct-FP8-KV, TP8 on 8xMI300X in a Supermicro AS-8125GS-TNMR2), three releases: "
    "vLLM 0.7.3 / ROCm 6.3.1 @ 25070a1841df0dca585b7ddcb967c42aaec4b7c5 ('Docs_update_20250327 (#493)', 2x EPYC 9554, "
    "docker built from ROCm/vllm 51641aaa), vLLM 0.8.5 / ROCm 6.3.1 @ 7bb0618b1fe725b7d4fad9e525aa44da12c94a8b ('Added "
    "benchmark results and commit hash (#556)', 2025-05-29, 2x EPYC 9575F, docker 91a56009), vLLM 0.10.0 / ROCm 6.4.1 "
    "@ 040de12d45c16d6de6ad386cc57dd68b8c5b805e ('August 12 RC2', 2x EPYC 9554, docker 340ea86d; not on main). Rows at "
    "input 128 with outputs 2048 and 4096 only, by rocm25's rule (⚠ 'Throughput (tokens/s)' may count prompt tokens: "
    "3-6% at these lengths). The 0.10.0 release post-dates the page's 0605 release (round 7) of the same "
    "configurations: beside by the rule; the 0.7.3 and 0.8.5 releases pre-date every release rounds 4 and 7 used: held",
    "mlperf40x": "MLPerf Inference v4.0 Datacenter, closed, Llama-2-70B (99.9%) Offline, systems of other submitters "
    "running NVIDIA's TensorRT-LLM code (round 9, gathered after the freeze at 58f17c1): 'Tokens per second' of "
    "closed/<submitter>/results/<system>/llama2-70b-99.9/Offline/performance/run_1/mlperf_log_summary.txt in "
    "mlcommons/inference_results_v4.0 @ 3c4a1cf196b70175cfe7c59e067cd1d923aa4f3f (only the 99.9% entries are stored), "
    "FP8 (use_fp8) with FP8 KV as mlperf40nv, parallelism and gpu_batch_size from each submitter's "
    "configs/llama2-70b/Offline/ (__init__.py or custom.py): Supermicro SYS_821GE_TNHR, Google, GigaComputing G593-SD1 "
    "and HPE XD670 inherit H100_SXM_80GB_TP2x4 (TP2, 896); Dell XE9680 TP2, 896; Dell XE8640 H100_SXM_80GB_TP2x1 "
    "(896); Dell XE9640 TP2, 920; Fujitsu GX2560M7 TP2, 1024; NVIDIA H200_SXM_141GBx8 (closed/NVIDIA/configs @ "
    "8121a811) TP1, 806. The TensorRT-LLM release is not stated (the system files name TensorRT): predicted at "
    "trtllm@fit. Rule (benchmarks/logs/engine-releases-2026-11-29.md, written before any figure was read): held "
    "unless rounds 1-8 compared the same device, model, device count, parallelism, batch and lengths from another "
    "release of the same submission (beside: NVIDIA H200 x8, HPE XD670, Dell XE9680 and XE8640 = their v4.1 entries "
    "of round 2-3) or the figure was seen before the freeze (none)",
}

CASES = [
    # ---- round 7: gathered after the freeze at FROZEN (held to the target, by the rule with SOURCES) ----
    # TensorRT-LLM's 1.2-era overview: Llama 3.3 70B FP8 at TP2 (per-GPU figures x 2)
    *[
        Case(
            f"trt12-{n}-70b-{i}/{o}",
            f"2x{gpu}",
            "llama-3.1-70b",
            "fp8",
            i,
            o,
            per_gpu * 2,
            "trt12",
            "nvidia",
            "a:0-1",
            None,
            7,
            "TP2; Llama 3.3 70B",
            hold=hold,
        )
        for gpu, n, i, o, per_gpu, hold in (
            ("h200", "2xh200", 1000, 1000, 2587, True),
            ("h200", "2xh200", 1024, 1024, 2582, True),
            ("h200", "2xh200", 1024, 8192, 2009, True),
            ("h200", "2xh200", 8192, 1024, 537, True),
            ("h200", "2xh200", 32768, 1024, 120, True),
            ("h100", "2xh100", 8192, 1024, 398, True),
            ("h100", "2xh100", 1000, 1000, 2209, False),
        )
    ],  # round 1's 2xh100-70b-1000/1000 configuration: beside
    # MLPerf v6.0 Llama-2-70B Offline, closed: every MI300X / MI325X system
    *[
        Case(f"mlperf60-8x{gpu}-{who}", f"8x{gpu}", "llama-2-70b", "fp8", MLPERF_ISL, MLPERF_OSL, v, "mlperf60", "amd", "a:0 x8", b, 7, note)
        for gpu, who, b, v, note in (
            ("mi300x", "dell", 1536, 27072.5, "Xeon 8470; vLLM 0.9.0.2, TP1 × 8"),
            ("mi300x", "mangoboost", 1536, 27598.7, "EPYC 9534; LLMBoost 0.5.2, TP1 × 8"),
            ("mi325x", "mangoboost", 2048, 33880.4, "EPYC 9655; LLMBoost 0.5.2, TP1 × 8"),
        )
    ],
    Case(
        "krai60-8xh200-vllm-dyn",
        "8xh200",
        "llama-3.1-70b",
        "fp8",
        MLPERF_ISL,
        MLPERF_OSL,
        25939.8,
        "krai60",
        "nvidia",
        "a:0 x8",
        1232,
        7,
        "vLLM 0.15.0-dev, dynamic FP8",
        "bf16",
    ),
    # AMD's performance page, three more releases: TP8 on 8xMI300X, FP8 weights and KV
    *[
        Case(f"rocm-{rel}-8xmi300x-{m}-128/{o}", "8xmi300x", model, "fp8", 128, o, v, "rocm25b", "amd", "a:0-7", b, 7, f"max seqs {b}; {docker}")
        for rel, docker, rows in (
            (
                "0605",
                "vLLM 0.9.0.1, ROCm 6.4.1",
                (("70b", 2048, 3200, 16581.5), ("70b", 4096, 1500, 13667.3), ("405b", 2048, 1500, 4275.0), ("405b", 4096, 1500, 3356.7)),
            ),
            (
                "0909",
                "vLLM 0.10.1, ROCm 6.4.1",
                (("70b", 2048, 3200, 13818.7), ("70b", 4096, 1500, 11612.0), ("405b", 2048, 1500, 4134.0), ("405b", 4096, 1500, 3177.6)),
            ),
            (
                "1006",
                "vLLM 0.10.2, ROCm 7.0.0",
                (("70b", 2048, 3200, 13212.5), ("70b", 4096, 1500, 11312.8), ("405b", 2048, 1500, 4201.7), ("405b", 4096, 1500, 3176.3)),
            ),
        )
        for m, o, b, v in rows
        for model in (f"llama-3.1-{m}",)
    ],
    # optimum-habana's CI baselines, FP8, fixed batch, TP over the cards (Gaudi 2 and Gaudi 3 values of each case)
    *[
        Case(
            f"ohci-{g}-{n}x-{m}-b{b}-{i}/{o}", f"{n}x{g}", model, "fp8", i, o, v, "ohci", "intel", "a:0" if n == 1 else f"a:0-{n - 1}", b, 7, f"batch {b}{note}"
        )
        for m, model, n, b, i, o, g2, g3, note in (
            ("l2-7b", "llama-2-7b", 1, 1230, 128, 128, 13152.7, 19132.3193582529, ""),
            ("l2-7b", "llama-2-7b", 1, 163, 128, 2048, 4774.7, 7240.988993899055, ""),
            ("l2-7b", "llama-2-7b", 1, 94, 2048, 128, 1293.3, 1852.6696711170073, ""),
            ("l2-7b", "llama-2-7b", 1, 81, 2048, 2048, 1942.9, 2868.2782272085133, ""),
            ("l2-70b", "llama-2-70b", 4, 3042, 128, 128, 5374.6, 9105.741034094377, ""),
            ("l2-70b", "llama-2-70b", 4, 750, 128, 2048, 7422.4, 12966.32808044709, "; flex attention"),
            ("l2-70b", "llama-2-70b", 4, 207, 2048, 128, 568.5, 918.3333993444961, ""),
            ("l2-70b", "llama-2-70b", 8, 172, 2048, 2048, 4656.2, 6059.088893259565, ""),
            ("mistral-7b", "mistral-7b", 1, 896, 128, 128, 17068.965283763682, 25100.757003294264, "; v0.2"),
            ("mistral-7b", "mistral-7b", 1, 44, 2048, 2048, 3393.149396451692, 4877.759076826148, "; v0.2"),
            ("mixtral", "mixtral-8x7b", 1, 1, 128, 128, 40.94, 114.8447433058542, ""),
            ("mixtral", "mixtral-8x7b", 2, 48, 2048, 2048, 1147.5, 2632.4017718271375, ""),
        )
        for g, v in (("gaudi2", g2), ("gaudi3", g3))
    ],
    # ---- round 8: gathered after the freeze at FROZEN_BY_ROUND[8] (held to the target, by the rule with SOURCES) ----
    # MLPerf v5.0 open division, Krai: vLLM 0.6.4 / 0.7.3 and SGLang serving the Llama-2-70B task, TP1 x 8, bf16 KV
    *[
        Case(f"krai50-8x{gpu}-{what}", f"8x{gpu}", model, "fp8", MLPERF_ISL, MLPERF_OSL, v, "krai50", vendor, "a:0 x8", b, 8, note, "bf16")
        for gpu, what, vendor, model, b, v, note in (
            ("h200", "vllm064", "nvidia", "llama-2-70b", 1024, 15906.1, "vLLM 0.6.4, dynamic FP8"),
            ("h200", "vllm064-flashinfer", "nvidia", "llama-2-70b", 1024, 21372.3, "vLLM 0.6.4, FlashInfer attention, dynamic FP8"),
            ("h200", "vllm073", "nvidia", "llama-2-70b", 1024, 16229.0, "vLLM 0.7.3, dynamic FP8"),
            ("h200", "sglang-dyn", "nvidia", "llama-3.1-70b", 700, 24624.1, "SGLang (image 'latest' ⚠), dynamic FP8, max_num_seqs 700 ⚠"),
            ("h200", "sglang-pre", "nvidia", "llama-3.1-70b", 700, 27687.9, "SGLang (image 'latest' ⚠), FP8 checkpoint, max_num_seqs 700 ⚠"),
            ("mi300x", "vllm064", "amd", "llama-2-70b", 2048, 18561.4, "vLLM 0.6.4 (ROCm), dynamic FP8"),
            ("mi300x", "vllm073", "amd", "llama-2-70b", 2048, 17128.9, "vLLM 0.7.3 (ROCm), dynamic FP8"),
            ("mi300x", "sglang-dyn", "amd", "llama-3.1-70b", None, 16162.8, "SGLang 0.4.3.post2 (ROCm 6.3.0), dynamic FP8"),
        )
    ],
    # MLPerf v4.0 Llama-2-70B Offline, closed: NVIDIA's DGX-H100 systems (TensorRT-LLM, FP8, TP2 groups)
    *[
        Case(f"mlperf40-{n}xh100-nvidia", f"{n}xh100", "llama-2-70b", "fp8", MLPERF_ISL, MLPERF_OSL, v, "mlperf40nv", "nvidia", spec, 896, 8, note)
        for n, spec, v, note in (
            (2, "a:0-1", 5539.47, "DGX-H100, 99.9%; TRT-LLM, TP2 × 1, gpu_batch_size 896"),
            (8, "a:0-1 x4", 21805.8, "DGX-H100, 99.9%; TRT-LLM, TP2 × 4, gpu_batch_size 896"),
        )
    ],
    # AMD's vLLM docker README, three releases: TP8 on 8xMI300X, FP8 weights and KV (0.10.0 beside, by the rule)
    *[
        Case(
            f"rocmvllm-{rel}-8xmi300x-{m}-128/{o}",
            "8xmi300x",
            f"llama-3.1-{m}",
            "fp8",
            128,
            o,
            v,
            "rocmvllm",
            "amd",
            "a:0-7",
            b,
            8,
            f"max seqs {b}; {docker}",
            hold=hold,
        )
        for rel, docker, hold, rows in (
            (
                "0327",
                "vLLM 0.7.3, ROCm 6.3.1",
                True,
                (("70b", 2048, 3200, 15684.7), ("70b", 4096, 1500, 11761.5), ("405b", 2048, 1500, 4218.6), ("405b", 4096, 1500, 3326.2)),
            ),
            (
                "0529",
                "vLLM 0.8.5, ROCm 6.3.1",
                True,
                (("70b", 2048, 3200, 16622.2), ("70b", 4096, 1500, 13779.8), ("405b", 2048, 1500, 4243.9), ("405b", 4096, 1500, 3394.4)),
            ),
            (
                "0812",
                "vLLM 0.10.0, ROCm 6.4.1",
                False,
                (("70b", 2048, 3200, 13383.3), ("70b", 4096, 1500, 11203.6), ("405b", 2048, 1500, 3867.7), ("405b", 4096, 1500, 3043.3)),
            ),
        )
        for m, o, b, v in rows
    ],
    # ---- round 9 (gathered after the freeze at FROZEN_BY_ROUND[9] = 58f17c1; the rule with SOURCES) ----
    # MLPerf v4.0 Llama-2-70B Offline, closed: other submitters' H100 systems and NVIDIA's H200 (TensorRT-LLM, FP8)
    *[
        Case(f"mlperf40-{n}x{gpu}-{who}", f"{n}x{gpu}", "llama-2-70b", "fp8", MLPERF_ISL, MLPERF_OSL, v, "mlperf40x", "nvidia", spec, b, 9, note, hold=hold)
        for n, gpu, who, spec, b, v, hold, note in (
            (8, "h100", "supermicro", "a:0-1 x4", 896, 22202.2, True, "SYS-821GE-TNHR, 99.9%; TRT-LLM, TP2 × 4"),
            (8, "h100", "google", "a:0-1 x4", 896, 20992.0, True, "99.9%; TRT-LLM, TP2 × 4"),
            (8, "h100", "giga", "a:0-1 x4", 896, 22289.7, True, "G593-SD1, 99.9%; TRT-LLM, TP2 × 4"),
            (4, "h100", "dell-xe9640", "a:0-1 x2", 920, 9248.35, True, "XE9640, 99.9%; TRT-LLM, TP2 × 2"),
            (4, "h100", "fujitsu", "a:0-1 x2", 1024, 8435.97, True, "GX2560M7, 99.9%; TRT-LLM, TP2 × 2, gpu_batch_size 1024"),
            (8, "h200", "nvidia", "a:0 x8", 806, 27738.3, False, "99.9%; TRT-LLM, TP1 × 8 (= mlperf41-8xh200-nvidia's configuration)"),
            (8, "h100", "hpe", "a:0-1 x4", 896, 20973.2, False, "Cray XD670, 99.9%; TRT-LLM, TP2 × 4 (= mlperf41-8xh100-hpe's)"),
            (8, "h100", "dell", "a:0-1 x4", 896, 21884.2, False, "XE9680, 99.9%; TRT-LLM, TP2 × 4 (= mlperf41-8xh100-dell's)"),
            (4, "h100", "dell-xe8640", "a:0-1 x2", 896, 9896.75, False, "XE8640, 99.9%; TRT-LLM, TP2 × 2 (= mlperf41-4xh100-dell's)"),
        )
    ],
]
