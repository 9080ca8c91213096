"""Rounds 5 and 6 of the public GPU figures, both gathered after the freeze at 005d8e2 (held then, reported
beside now). SOURCES: where each round's figures came from and how they were read; CASES: its rows, in round
order."""

from __future__ import annotations

from public_figures.case import MLPERF_ISL, MLPERF_OSL, Case

SOURCES = {
    # ---- round 5 (gathered after the freeze at 005d8e2) ----
    "mlperf51r5": "MLPerf Inference v5.1 Datacenter, closed, Llama-2-70B (99%) Offline, 'Tokens per second' of "
    "closed/<submitter>/results/<system>/llama2-70b-99/Offline/performance/run_1/mlperf_log_summary.txt in the "
    "mirror ntuhpc/inference_results_v5.1 @ 387c3dd0: every H200 SXM, MI325X and MI300X system of that task "
    "not used in rounds 2-4. H200 on NVIDIA's TensorRT-LLM code, TP1, FP8 with FP8 KV, gpu_batch_size from "
    "each submitter's configs/<system>/Offline/llama2-70b.py (2048; HPE 2506); Cisco's 2-node C885A has no "
    "system config: NVIDIA's H200_SXM_141GBx1 (TP1, 2048) per GPU. MI325X/MI300X on AMD's vLLM code or "
    "MangoBoost's LLMBoost, TP1 × DP, FP8 with FP8 KV; ⚠ batch as AMD's own v5.1 runs (MI325X 2048, MI300X "
    "1536; round 3) — hetc's memory model caps every run below it. Left out: Cisco's 16/32×H100 (NVIDIA's "
    "v5.1 H100 config is PP2, gpu_batch_size 1024: this script caps a run's batch for one stage only), "
    "the two heterogeneous MI300X+MI325X clusters (one --batch for pipelines whose memory admits different "
    "batches), H200 NVL, B200 and MI355X systems (no profile, or FP4)",
    "krai51": "MLPerf Inference v5.1, open division, Krai, Llama-2-70B task (OpenOrca, 24,576 samples) served by "
    "Llama-3.1-70B-Instruct FP8 (one Llama-2-70B run) through vLLM 0.9.2 / 0.9.1 / 0.6.5, SGLang 0.4.9 or "
    "TensorRT-LLM; 'Tokens per second' of open/Krai/results/<sut>/<benchmark>/offline/performance/run_1/"
    "mlperf_log_summary.txt in the mirror ntuhpc/inference_results_v5.1 @ 387c3dd0; tp, dp and max_num_seqs "
    "from open/Krai/measurements/<sut>/<benchmark>/offline/README.md (the PerformanceOnly command); vLLM and "
    "SGLang runs give no kv_cache_dtype, so the engines' default 'auto' (bf16 KV) is used; ⚠ TensorRT-LLM's "
    "B200 run: FP8 KV assumed, batch not given (the largest that fits). ⚠ Lengths as the MLPerf dataset's "
    "(222/294, Llama 2 tokenizer); the runs' tokens/s ÷ samples/s give 291-299 output tokens per sample",
    # ---- round 6 (gathered after the freeze at 005d8e2) ----
    "gaudi120": "Intel's Gaudi 2 and Gaudi 3 throughput figures at Intel Gaudi software 1.20.0: 'ref_perf' of "
    "PyTorch/Hugging_Face_pipelines/Benchmarking_on_Optimum-habana_with_fp8/Gaudi_1-20.json in "
    "HabanaAI/Gaudi-tutorials @ ad1738ecabd782c4ba14ab4f26c61128cf29af14 (the README: Benchmark.py reports "
    "'performance comparison against published numbers in Gaudi Model Performance'; the values are the same "
    "since the file was added at 936902b), each row with its run command: optimum-habana run_generation.py, "
    "FP8 (INC maxabs_quant), DeepSpeed over --world_size cards (TP), --batch_size, --max_input_tokens, "
    "--max_new_tokens; ⚠ metric read as output tok/s, as for gaudi. Held: every row whose (device, model, card "
    "count) Intel's 1.18 pages (rounds 1-4) did not list (Gaudi 3: Llama 3.1 405B x8, Llama 3.3 70B x8 — the "
    "catalog's llama-3.1-70b, same architecture; Gaudi 2: Llama 3.1 70B x2 and x8); the release's other 24 "
    "rows (configurations rounds 1-4 measured at 1.18) are reported beside, not held. Decided before any "
    "prediction was made. The file's Gaudi_1-19.json (software 1.19.0, superseded) is not used",
    "gaudi3vllm": "HabanaAI/Gaudi-tutorials @ c44d768bfe22c48f0731bbe162e874578098804e PyTorch/vLLM_Tutorials/"
    "Deploying_vLLM/README.md: the perftest.sh example outputs 'for Gaudi3' (vLLM v0.7.2+Gaudi-1.21.0, "
    "image vault.habana.ai/gaudi-docker/1.21.0; dtype bfloat16, the default; TP from settings_vllm.csv: "
    "Llama-3.1-8B-Instruct 1, Llama-3.1-405B-Instruct 8); benchmark_serving.py, sonnet dataset, "
    "--sonnet-input-len 2048 --sonnet-output-len 2048 --ignore-eos, 640 prompts at --max-concurrency 64 (the "
    "batch); 'Output token throughput (tok/s)'. Input length = 'Total input tokens' ÷ requests = "
    "1,195,639 / 640 = 1,868 (the sonnet prompts come out below the nominal 2,048); output 1,310,720 / 640 "
    "= 2,048",
}

CASES = [
    # ---- round 5: gathered after the freeze at 005d8e2 (held then, reported beside now) ----
    # MLPerf v5.1 Llama-2-70B Offline, FP8, closed: the systems rounds 2-4 did not use
    *[
        Case(f"mlperf51-{n}x{gpu}-{who}", f"{n}x{gpu}", "llama-2-70b", "fp8", MLPERF_ISL, MLPERF_OSL, v, "mlperf51r5", vendor, spec, b, 5, note)
        for n, gpu, who, vendor, spec, b, v, note in (
            (8, "h200", "dell-xe9680l", "nvidia", "a:0 x8", 2048, 34588.3, "XE9680L; TRT-LLM, TP1 × 8"),
            (8, "h200", "hpe", "nvidia", "a:0 x8", 2506, 34964.6, "Cray XD670; TRT-LLM, TP1 × 8"),
            (8, "h200", "nebius", "nvidia", "a:0 x8", 2048, 34812.1, "TRT-LLM, TP1 × 8"),
            (8, "h200", "qct", "nvidia", "a:0 x8", 2048, 35091.5, "D74U-7U; TRT-LLM, TP1 × 8"),
            (8, "h200", "dell-broadcom", "nvidia", "a:0 x8", 2048, 34301.9, "vXE9680 (VMware); TRT-LLM, TP1 × 8"),
            (16, "h200", "cisco", "nvidia", "a:0 x8;b:0 x8", 2048, 68894.8, "C885A M8, 2 nodes; TRT-LLM, TP1 × 16"),
            (8, "mi325x", "mitac", "amd", "a:0 x8", 2048, 33703.0, "vLLM, TP1 × 8"),
            (8, "mi325x", "qct", "amd", "a:0 x8", 2048, 32760.5, "D75T-7U; vLLM, TP1 × 8"),
            (8, "mi325x", "supermicro", "amd", "a:0 x8", 2048, 33468.4, "vLLM, TP1 × 8"),
            (8, "mi325x", "vultr", "amd", "a:0 x8", 2048, 33762.5, "vLLM, TP1 × 8"),
            (8, "mi325x", "mangoboost", "amd", "a:0 x8", 2048, 34454.4, "LLMBoost, TP1 × 8"),
            (8, "mi300x", "mangoboost", "amd", "a:0 x8", 1536, 27854.4, "EPYC 9534; LLMBoost, TP1 × 8"),
            (16, "mi300x", "dell-mangoboost", "amd", "a:0 x8;b:0 x8", 1536, 53572.2, "2 nodes; LLMBoost, TP1 × 16"),
            (16, "mi325x", "supermicro-mangoboost", "amd", "a:0 x8;b:0 x8", 2048, 65320.1, "2 nodes; LLMBoost, TP1 × 16"),
        )
    ],
    # MLPerf v5.1 open division, Krai: vLLM, SGLang and TensorRT-LLM serving the Llama-2-70B task
    *[
        Case(f"krai51-{n}x{gpu}-{what}", f"{n}x{gpu}", model, "fp8", MLPERF_ISL, MLPERF_OSL, v, "krai51", vendor, spec, b, 5, note, kv)
        for n, gpu, what, vendor, model, spec, b, v, kv, note in (
            (8, "h200", "vllm-dyn", "nvidia", "llama-3.1-70b", "a:0 x8", 1232, 30893.1, "bf16", "vLLM 0.9.2, dynamic FP8"),
            (8, "h200", "vllm-pre", "nvidia", "llama-3.1-70b", "a:0 x8", 630, 26318.8, "bf16", "vLLM 0.9.2, FP8 checkpoint"),
            (8, "h200", "sglang-dyn", "nvidia", "llama-3.1-70b", "a:0 x8", None, 27697.0, "bf16", "SGLang 0.4.9, dynamic FP8"),
            (8, "h200", "sglang-pre", "nvidia", "llama-3.1-70b", "a:0 x8", None, 31383.2, "bf16", "SGLang 0.4.9, FP8 checkpoint"),
            (16, "h200", "vllm", "nvidia", "llama-3.1-70b", "a:0 x8;b:0 x8", 1029, 58617.3, "bf16", "vLLM 0.9.2, 2 nodes"),
            (24, "h200", "vllm", "nvidia", "llama-3.1-70b", "a:0 x8;b:0 x8;c:0 x8", 2401, 87334.0, "bf16", "vLLM 0.9.2, 3 nodes"),
            (8, "h100", "vllm", "nvidia", "llama-3.1-70b", "a:0-1 x4", 3264, 22819.6, "bf16", "vLLM 0.9.2, TP2 × 4"),
            (8, "b200", "trtllm", "nvidia", "llama-3.1-70b", "a:0 x8", None, 65770.1, None, "TensorRT-LLM, FP8 ⚠ KV"),
            (8, "mi300x", "vllm065-l2", "amd", "llama-2-70b", "a:0 x8", 1275, 27185.5, "bf16", "vLLM 0.6.5, Quark FP8"),
            (8, "mi300x", "vllm091", "amd", "llama-3.1-70b", "a:0 x8", 1866, 18558.9, "bf16", "vLLM 0.9.1, dynamic FP8"),
        )
    ],
    # ---- round 6: gathered after the freeze at 005d8e2 (held with round 5 then, reported beside now) ----
    # Intel's figures at software 1.20.0 (optimum-habana, FP8, fixed batch, TP over the cards): held where the
    # (device, model, card count) is new to rounds 1-4, the release's other rows beside (the rule in SOURCES)
    *[
        Case(
            f"g120-{g}-{n}x-{m}-{i}/{o}",
            f"{n}x{g}",
            model,
            "fp8",
            i,
            o,
            v,
            "gaudi120",
            "intel",
            "a:0" if n == 1 else f"a:0-{n - 1}",
            b,
            6,
            f"batch {b}{note}",
            hold=hold,
        )
        for g, n, m, model, note, hold, rows in (
            ("gaudi3", 8, "405b", "llama-3.1-405b", "", True, ((128, 128, 2996, 3488), (128, 2048, 460, 4998), (2048, 128, 195, 394), (2048, 2048, 180, 2238))),
            (
                "gaudi3",
                8,
                "l33-70b",
                "llama-3.1-70b",
                "; Llama 3.3 70B",
                True,
                ((128, 128, 3986, 16622), (128, 2048, 2048, 24705), (2048, 128, 774, 1890), (2048, 2048, 719, 11043)),
            ),
            ("gaudi2", 2, "70b", "llama-3.1-70b", "", True, ((128, 128, 1792, 3421), (128, 2048, 256, 3827), (2048, 128, 142, 462), (2048, 2048, 139, 1665))),
            (
                "gaudi2",
                8,
                "70b",
                "llama-3.1-70b",
                "",
                True,
                ((128, 128, 4000, 10404), (128, 2048, 768, 13639), (2048, 128, 383, 1553), (2048, 2048, 476, 6715)),
            ),
            ("gaudi3", 2, "l2-70b", "llama-2-70b", "", False, ((128, 128, 1750, 4853), (128, 2048, 512, 6835), (2048, 128, 242, 506), (2048, 2048, 241, 2859))),
            ("gaudi3", 1, "8b", "llama-3.1-8b", "", False, ((128, 128, 1536, 25097), (128, 2048, 768, 20425), (2048, 128, 256, 2765), (2048, 2048, 256, 9013))),
            ("gaudi3", 2, "70b", "llama-3.1-70b", "", False, ((128, 128, 2048, 5466), (128, 2048, 450, 6535), (2048, 128, 223, 663), (2048, 2048, 175, 2891))),
            (
                "gaudi3",
                8,
                "70b",
                "llama-3.1-70b",
                "",
                False,
                ((128, 128, 4000, 18290), (128, 2048, 768, 21138), (2048, 128, 512, 2273), (2048, 2048, 600, 10600)),
            ),
            ("gaudi2", 2, "l2-70b", "llama-2-70b", "", False, ((128, 128, 1750, 2935), (128, 2048, 256, 3963), (2048, 128, 95, 318), (2048, 2048, 159, 1767))),
            ("gaudi2", 1, "8b", "llama-3.1-8b", "", False, ((128, 128, 2816, 19907), (128, 2048, 512, 14866), (2048, 128, 179, 2099), (2048, 2048, 256, 6060))),
        )
        for i, o, b, v in rows
    ],
    # Intel's vLLM tutorial: Gaudi 3, BF16, 64 requests in flight
    Case(
        "g3vllm-1x-8b-1868/2048",
        "1xgaudi3",
        "llama-3.1-8b",
        "bf16",
        1868,
        2048,
        3644.60,
        "gaudi3vllm",
        "intel",
        "a:0",
        64,
        6,
        "vLLM 0.7.2+Gaudi, TP1, BF16, 64 concurrent",
    ),
    Case(
        "g3vllm-8x-405b-1868/2048",
        "8xgaudi3",
        "llama-3.1-405b",
        "bf16",
        1868,
        2048,
        865.73,
        "gaudi3vllm",
        "intel",
        "a:0-7",
        64,
        6,
        "vLLM 0.7.2+Gaudi, TP8, BF16, 64 concurrent",
    ),
]
