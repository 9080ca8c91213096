"""Round 10 of the public GPU figures, gathered after the freeze at freeze.FROZEN_BY_ROUND[10] and held to the
target (freeze.HELD_ROUNDS). SOURCES: where its figures came from and how they were read, with the round's rule
for which figures are held; CASES: its rows."""

from __future__ import annotations

from public_figures.case import MLPERF_ISL, MLPERF_OSL, Case

SOURCES = {
    # ---- round 10 (gathered after the freeze at FROZEN_BY_ROUND[10] = 5552722) ----
    # The rule (benchmarks/logs/gpu-public-round10.md, written before any figure was read): every figure below is held
    # unless (a) rounds 1-9 compared the same device, model, device count, parallelism, batch and lengths from another
    # release of the same page or submission (a re-measurement), or (b) it was seen before the freeze (listed as read
    # in an earlier round's log): those are marked beside (hold=False). Left out: models or devices without a profile,
    # FP4 / int4, Server-scenario figures, rows without stated lengths or parallelism.
    "trt09": "TensorRT-LLM v0.9.0 performance overview, 'Peak Throughput' tables ('All data was generated using version "
    "0.9.0'): docs/source/performance/perf-overview.md as stored in the fork WhiteD2125/TensorRT-LLM @ "
    "6ad7cf1bcc08e31990c62ba929a8e84f35667654 (upstream's v0.9.0 page, nvidia.github.io/TensorRT-LLM 0.9.0 "
    "'Performance Overview'; rounds 1, 2 and 7 used the v0.17, v1.0 and 1.2 pages, other models): static batching "
    "(v0.9's benchmarks; the v0.10 page says later ones use in-flight batching), the batch size and TP stated per row, "
    "fixed input/output lengths; 'Throughput (out tok/s/GPU)' x TP = the system's output tok/s. H200/H100/L40S: FP8 "
    "(⚠ KV dtype not stated: FP8, as the H200 LLaMA 70B TP1 batch-1024 row needs to fit; hetc's default, the "
    "weights' dtype), A100: FP16. 'LLaMA 7B' = llama-2-7b (⚠ the page says LLaMA 7B; LLaMA 1 and 2 7B share the "
    "architecture), 'LLaMA 70B' = llama-2-70b, 'Mistral 7B' = mistral-7b. TP2 on 2xh100 / 2xh200, TP4 as four GPUs "
    "of an 8xh100 node (NVSwitch: ⚠ the host is not stated; DGX/HGX assumed). Left out: GPT-J 6B and Falcon 180B "
    "(not in the catalog), A100 Mixtral TP2 and LLaMA 70B TP4/8, L40S LLaMA 70B TP2/4 (no cluster file of those "
    "devices), the low-latency (batch 1 first-token) tables",
    "mlperf41sm": "MLPerf Inference v4.1 Datacenter, closed, Llama-2-70B (99%) Offline, Supermicro's H100 SXM x8 systems "
    "running NVIDIA's TensorRT-LLM code: 'Tokens per second' of closed/Supermicro/results/<system>/llama2-70b-99/"
    "Offline/performance/run_1/mlperf_log_summary.txt in mlcommons/inference_results_v4.1 @ a2f5d66d; every system "
    "inherits H100_SXM_80GB_TP2x4 (TP2 x 4, gpu_batch_size 896, FP8) in closed/Supermicro/configs/llama2-70b/Offline/"
    "custom.py. Rounds 2-3 used v4.1's NVIDIA, Dell, HPE, Lenovo, GigaComputing and Fujitsu systems; round 9 used "
    "v4.0's Supermicro SYS-821GE-TNHR (its v4.1 entry: beside by rule (a)). Lengths 222/294 (MLPERF_LENGTHS)",
    "amd0715": "AMD, 'Performance results' (amd.com/en/developer/resources/rocm-hub/dev-ai/performance-results.html), the "
    "release on docker rocm/vllm:rocm6.4.1_vllm_0.9.1_20250715 (released July 16, 2025; a stored copy of the en page "
    "not among the releases rounds 4 and 7 used: 0605, 0909, 1006, 1103), 8xMI300X (dual EPYC 9554), TP8, "
    "amd/Llama-3.1-{70B,405B}-Instruct-FP8-KV (FP8 weights and KV). 'Latency Measurements' (benchmark_latency: one "
    "batch of Batch Size prompts of Input tokens generating Output tokens, 'Latency (sec)' end to end): output tok/s "
    "= batch x output / latency, the rows the stored text shows (70B, 128/2048, batch 1 and 2; the rest of the table "
    "is cut off in the stored copy). 'Throughput Measurements' rows at 128/2048 and 128/4096: beside by rule (a) "
    "(rounds 4 and 7 compared these configurations from the page's other releases); ⚠ 'Throughput' may count "
    "prompt tokens (3-6% at these lengths, as rocm25)",
    "oci10": "as oci (Oracle's post, 2024-10-10): its 'Latency measurements' table (vLLM benchmark_latency.py, 8xMI300X "
    "TP8, Llama 3.1 405B FP8, input 128 / output 128, batch 1-256, 'Output throughput in token per second'); beside "
    "by rule (b): round 1 read the post (SOURCES oci cites its batch-256 row). ⚠ KV dtype not stated: FP8 (the "
    "weights', hetc's default), as oci",
}

CASES = [
    # ---- round 10 (gathered after the freeze at FROZEN_BY_ROUND[10] = 5552722; the rule with SOURCES) ----
    # TensorRT-LLM v0.9.0 perf overview: static batch, per-GPU output tok/s x TP
    *[
        Case(
            f"trt09-{gpu}-{m}-{i}/{o}",
            {1: f"1x{gpu}", 2: f"2x{gpu}", 4: "8xh100"}[tp],
            model,
            dtype,
            i,
            o,
            per_gpu * tp,
            "trt09",
            "nvidia",
            {1: "a:0", 2: "a:0-1", 4: "a:0-3"}[tp],
            b,
            10,
            f"TensorRT-LLM 0.9.0, static batch {b}, TP{tp}",
        )
        for gpu, dtype, m, model, rows in (
            *[
                (g, "fp8", m, model, rows)
                for g, tables in (
                    (
                        "h200",
                        (
                            (
                                "mistral7b",
                                "mistral-7b",
                                ((1, 896, 128, 128, 20460), (1, 120, 128, 2048, 8950), (1, 64, 2048, 128, 2423), (1, 56, 2048, 2048, 3867)),
                            ),
                            (
                                "llama7b",
                                "llama-2-7b",
                                ((1, 896, 128, 128, 20618), (1, 120, 128, 2048, 8348), (1, 64, 2048, 128, 2391), (1, 56, 2048, 2048, 3522)),
                            ),
                            (
                                "llama70b",
                                "llama-2-70b",
                                ((1, 1024, 128, 128, 3989), (2, 512, 128, 2048, 3963), (1, 64, 2048, 128, 418), (1, 64, 2048, 2048, 1458)),
                            ),
                        ),
                    ),
                    (
                        "h100",
                        (
                            (
                                "mistral7b",
                                "mistral-7b",
                                ((1, 896, 128, 128, 20404), (1, 120, 128, 2048, 8623), (1, 84, 2048, 128, 2405), (1, 56, 2048, 2048, 3731)),
                            ),
                            (
                                "llama7b",
                                "llama-2-7b",
                                ((1, 896, 128, 128, 19854), (1, 120, 128, 2048, 6944), (1, 84, 2048, 128, 2163), (1, 56, 2048, 2048, 2826)),
                            ),
                            (
                                "llama70b",
                                "llama-2-70b",
                                ((2, 1024, 128, 128, 3214), (4, 512, 128, 2048, 2725), (2, 96, 2048, 128, 346), (2, 64, 2048, 2048, 1011)),
                            ),
                        ),
                    ),
                    (
                        "l40s",
                        (
                            (
                                "mistral7b",
                                "mistral-7b",
                                ((1, 896, 128, 128, 9562), (1, 120, 128, 2048, 4387), (1, 84, 2048, 128, 971), (1, 56, 2048, 2048, 1721)),
                            ),
                            ("llama7b", "llama-2-7b", ((1, 256, 128, 128, 5885), (1, 64, 128, 2048, 1654), (1, 32, 2048, 128, 574), (1, 16, 2048, 2048, 537))),
                        ),
                    ),
                )
                for m, model, rows in tables
            ],
            (
                "a100",
                "fp16",
                "mistral7b",
                "mistral-7b",
                ((1, 896, 128, 128, 6251), (1, 120, 128, 2048, 3776), (1, 64, 2048, 128, 698), (1, 56, 2048, 2048, 1576)),
            ),
            ("a100", "fp16", "llama7b", "llama-2-7b", ((1, 256, 128, 128, 5390), (1, 32, 128, 2048, 1484), (1, 32, 2048, 128, 533), (1, 16, 2048, 2048, 603))),
        )
        for tp, b, i, o, per_gpu in rows
    ],
    # MLPerf v4.1 Llama-2-70B Offline, closed: Supermicro's H100 SXM x8 systems (NVIDIA's TensorRT-LLM code, TP2 x 4, 896)
    *[
        Case(f"mlperf41-8xh100-{who}", "8xh100", "llama-2-70b", "fp8", MLPERF_ISL, MLPERF_OSL, v, "mlperf41sm", "nvidia", "a:0-1 x4", 896, 10, note, hold=hold)
        for who, v, hold, note in (
            ("supermicro-as4125gs", 24216.8, True, "AS-4125GS-TNHR2-LCC, 99%; TRT-LLM, TP2 × 4"),
            ("supermicro-sys421ge", 24180.6, True, "SYS-421GE-TNHR2-LCC, 99%; TRT-LLM, TP2 × 4"),
            ("supermicro-sys821ge", 24140.1, False, "SYS-821GE-TNHR, 99%; TRT-LLM, TP2 × 4 (= mlperf40-8xh100-supermicro's system and configuration)"),
        )
    ],
    # AMD's performance page, the 0715 release (vLLM 0.9.1): latency rows as batch x output / latency (held), throughput rows (beside)
    *[
        Case(
            f"amd0715-8xmi300x-{m}-{i}/{o}" + (f"-b{b}" if "latency" in what else ""),
            "8xmi300x",
            f"llama-3.1-{m}",
            "fp8",
            i,
            o,
            v,
            "amd0715",
            "amd",
            "a:0-7",
            b,
            10,
            f"vLLM 0.9.1, {what}",
            hold=hold,
        )
        for m, i, o, b, v, what, hold in (
            ("70b", 128, 2048, 1, 1 * 2048 / 17.236, "latency batch 1 (17.236 s)", True),
            ("70b", 128, 2048, 2, 2 * 2048 / 18.057, "latency batch 2 (18.057 s)", True),
            ("70b", 128, 2048, 3200, 12638.9, "throughput, max seqs 3200", False),
            ("70b", 128, 4096, 1500, 10756.8, "throughput, max seqs 1500", False),
            ("405b", 128, 2048, 1500, 3912.8, "throughput, max seqs 1500", False),
            ("405b", 128, 4096, 1500, 3084.7, "throughput, max seqs 1500", False),
        )
    ],
    # Oracle's post: benchmark_latency at fixed batch, 405B FP8 TP8, 128/128 (beside: read in round 1)
    *[
        Case(
            f"oci-8xmi300x-405b-128/128-b{b}",
            "8xmi300x",
            "llama-3.1-405b",
            "fp8",
            128,
            128,
            v,
            "oci10",
            "amd",
            "a:0-7",
            b,
            10,
            f"benchmark_latency batch {b}",
            hold=False,
        )
        for b, v in ((1, 36), (2, 71), (4, 137), (8, 258), (16, 468), (32, 798), (64, 1184), (128, 1585), (256, 1846))
    ],
]
