"""hetc's GPU predictions against public measured throughput of other engines.

For each public figure below (engine, devices, model, dtype, input/output lengths, where it
came from), run hetc twice on the same devices and workload:
- at the public run's own configuration: `hetc plan --placement SPEC [--batch N]` (one pipeline,
  one tensor-parallel group of the devices the run used, the run's batch where the source
  states it or the engine's cap on running sequences, else the best batch that fits);
- as `hetc plan` would run it (its own choice of parallelism, pools and batch).
It prints a markdown table with pred/public − 1, then the median |error| over the figures held
to the target (HELD_ROUNDS: gathered after the cost model was frozen, at FROZEN_BY_ROUND[round]), overall and per
vendor over the held rounds together and per round, with the earlier rounds reported beside (round 1:
the first comparison; rounds 2, 3, 4 and 5 + 6: gathered after the freezes at 11b21d7, 48fca1d, fd4908c and
005d8e2). Every public figure is output tokens per
second of the whole system, all its devices together (`predicted.output_tok_s`).

The cost model and profiles were frozen at FROZEN (the commit recorded in BENCHMARKS.md) before
any figure held to the target was looked at, and again at FROZEN_BY_ROUND[8] before round 8's; the
script says if any of FROZEN_PATHS has moved since (each held round against its own freeze).
Nothing in the cost model is fitted to these figures and there are no per-case constants.

Every figure is predicted with the engine its source names (`--engine`, hetc/engine.py; SOURCE_ENGINE,
HETC_ENGINE: vLLM's figures stand in for optimum-habana, TGI-Gaudi and LLMBoost).

`--per-release` predicts each figure at the figures fitted for the engine release it names
(benchmarks/engine_releases.py: `vllm@0.9`), the engine's `fit` where that release has none (said per row).

Usage: python benchmarks/gpu_public.py [--only NAME] [--round N ...] [--no-plan] [--fit | --per-release]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CLUSTERS = "benchmarks/public_gpu"
FROZEN = "aa910d803a8733d2d4819468b97fd86d7883017c"  # the cost-model commit, made before any held figure was looked at
# each held round's freeze: the cost-model commit made before any of that round's figures was looked at
# (9: the per-release engine figures, engine_releases.py, committed before any round-9 figure was looked at;
# 10: the engine figures refitted on rounds 1-9, committed before any round-10 figure was looked at)
FROZEN_BY_ROUND = {
    7: FROZEN,
    8: "dedf7eed2591c63ecd6be9ffcd5f827b7985d01d",
    9: "58f17c198612f9b5f0a0a59252b12a1a37c4cd83",
    10: "5552722e18747211bf1fd3b7875145c5507879b5",
}
# the rounds of figures gathered after their freeze and not yet trained on (the earlier rounds are reported beside):
# rounds 7, 8 and 9 were held at their freezes (checked once each: benchmarks/logs/gpu-public-round8.md,
# engine-releases-2026-11-29.md) and are training rows of the engine figures frozen before round 10
HELD_ROUNDS = (10,)
# what a prediction reads: the profiles, the cost model, the saturation model and the scheduling numbers
FROZEN_PATHS = (
    "hardware_profiles",
    "partitioner/cost_models/analytic.py",
    "partitioner/cost_models/memory.py",
    "partitioner/cost_models/links.py",
    "partitioner/cost_models/collectives.py",
    "partitioner/cost_models/curves.py",
    "partitioner/estimate/simulate.py",
    "partitioner/capture/fusion.py",
    "partitioner/capture/op_records.py",
    "partitioner/capture/units.py",
    "partitioner/capture/graph.py",
    "hetc/execution.py",
    "hetc/engine.py",
    "hetc/efficiency.py",
    "hetc/scheduling.py",
    "benchmarks/engine_releases.py",  # which release's figures a row gets (--per-release)
)

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
# The engine each source's figures were measured with, as the source names it (MLPerf rows: NVIDIA's
# submissions run TensorRT-LLM, AMD's vLLM; a row's note overrides where it names another).
SOURCE_ENGINE = {
    **dict.fromkeys(("trt17", "trt10", "trt12", "mlperf40nv", "trt09"), "TensorRT-LLM"),
    **dict.fromkeys(("oci", "rocm25", "rocm25b", "gaudi3vllm", "krai60", "rocmvllm", "amd0715", "oci10"), "vLLM"),
    **dict.fromkeys(("gaudi", "gaudi2b", "gaudi2c", "gaudi2d", "gaudi3", "gaudi3b", "gaudi3c", "gaudi120", "ohci"), "optimum-habana"),
    "mlperf40": "TGI-Gaudi",
}
# hetc's engine (hetc/engine.py) whose figures a named engine is predicted with. optimum-habana,
# TGI-Gaudi and MangoBoost's LLMBoost have no entry of their own: vLLM's figures stand in (on Gaudi the
# profile's HPU graphs for every step, as run_generation --use_hpu_graphs and TGI-Gaudi's warm-up
# record them; LLMBoost serves the same AMD MLPerf task as AMD's vLLM code), and the tables mark them.
STAND_INS = ("optimum-habana", "TGI-Gaudi", "LLMBoost")
HETC_ENGINE = {"TensorRT-LLM": "trtllm", "vLLM": "vllm", "SGLang": "sglang", **dict.fromkeys(STAND_INS, "vllm")}

# MLPerf Llama-2-70B offline workload: dataset statistics, see MLPERF_LENGTHS
MLPERF_ISL, MLPERF_OSL = 222, 294
MLPERF_LENGTHS = (
    "MLPerf Llama-2-70B lengths: input 222 = mean tok_input_length of the 24,576 OpenOrca samples "
    "(open_orca_gpt4_tokenized_llama.sampled_24576, per-sample lengths as extracted in "
    "openshift-psap/performance-dashboard mlperf-data/summaries/llama2-70b-99.csv @ 71007029; median "
    "152, max 1021); output 294 = 'Tokens per sample: 294.45' of mlcommons/inference "
    "language/llama2-70b/README.md (each run's tokens/s ÷ samples/s gives 290–301); prompts vary in "
    "length, hetc models them at their means"
)


@dataclass(frozen=True, slots=True)
class Case:
    """One public figure and the configuration it was measured at."""

    name: str
    cluster: str  # benchmarks/public_gpu/<cluster>.yaml: one node of the run's devices
    model: str  # a catalog name (hardware_profiles/models)
    dtype: str
    isl: int
    osl: int
    public: float  # output tok/s of the whole system
    source: str  # a SOURCES key
    vendor: str  # nvidia | amd | intel
    placement: str  # the run's parallelism as a --placement SPEC
    batch: int | None  # the run's batch (or the engine's cap on running sequences); None: the best that fits
    round: int  # 1: the first comparison; 2, 3, 4, 5 + 6: after the freezes at 11b21d7, 48fca1d, fd4908c, 005d8e2; 7: FROZEN; 8-10: FROZEN_BY_ROUND
    note: str = ""
    kv_dtype: str | None = None  # the run's KV-cache dtype where it is not the weights' (hetc's default)
    hold: bool = True  # False: gathered in a held round but reported beside, by a rule stated with its source

    @property
    def named_engine(self) -> str:
        """The engine the source names for this figure (SOURCE_ENGINE, or the row's note)."""
        for name in ("LLMBoost", "SGLang", "TensorRT-LLM", "vLLM"):
            if name in self.note or (name == "TensorRT-LLM" and "TRT-LLM" in self.note):
                return name
        return SOURCE_ENGINE.get(self.source) or {"nvidia": "TensorRT-LLM", "amd": "vLLM"}[self.vendor]

    @property
    def engine(self) -> str:
        """hetc's `--engine` for this figure (HETC_ENGINE: a stand-in where the named engine has no entry)."""
        return HETC_ENGINE[self.named_engine]

    @property
    def held(self) -> bool:
        """Gathered after its round's freeze (FROZEN_BY_ROUND) and not set aside by its round's rule: held to the target."""
        return self.round in HELD_ROUNDS and self.hold


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


def frozen_state(commit: str = FROZEN) -> str:
    """Whether the frozen paths still match `commit` (FROZEN, or a round's FROZEN_BY_ROUND; working tree included)."""
    moved = subprocess.run(["git", "-C", str(ROOT), "diff", "--quiet", commit, "--", *FROZEN_PATHS]).returncode
    return "unchanged" if moved == 0 else "CHANGED since the freeze"


def plan(case: Case, *extra: str, release: str | None = None) -> dict:
    """`hetc plan` of the case's cluster and workload (with `extra` flags) under the case's engine (at
    `release` of it: `fit`, the figures fitted by engine_calibration.py), as plan.json."""
    with tempfile.NamedTemporaryFile(suffix=".json") as f:
        subprocess.run(
            [
                sys.executable,
                "-m",
                "hetc.cli",
                "plan",
                "--profiles",
                f"{CLUSTERS}/{case.cluster}.yaml",
                case.model,
                "--dtype",
                case.dtype,
                "--input-len",
                str(case.isl),
                "--output-len",
                str(case.osl),
                "--engine",
                f"{case.engine}@{release}" if release else case.engine,
                *(["--kv-dtype", case.kv_dtype] if case.kv_dtype else []),
                "-o",
                f.name,
                *extra,
            ],
            check=True,
            cwd=ROOT,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        return json.load(open(f.name))


@cache
def run_batch(case: Case) -> int:
    """The batch the public run held per replica: its stated batch (or the engine's cap on running
    sequences), no more than fits one replica in hetc's memory model (every sequence reserves its
    prompt + output); with no stated batch, the largest that fits."""
    from hetc.cluster import load_cluster
    from hetc.partitioner.capture.capture import capture
    from hetc.partitioner.estimate.simulate import StagePlan, Workload, max_batch
    from hetc.placement import parse_placement

    m = capture(case.model, dtype=case.dtype, kv_dtype=case.kv_dtype)
    cluster = load_cluster(str(ROOT / CLUSTERS / f"{case.cluster}.yaml"), engine=case.engine)
    tp = parse_placement(case.placement, cluster, m.num_layers)[0].stages[0].tp
    stages = [StagePlan(cluster.nodes[0], 0, len(m.units) - 1, tp)]
    return max_batch(m.units, stages, Workload(case.isl, case.osl, case.dtype, m.kv_dtype), limit=case.batch or 4096)


def at_public_config(case: Case, release: str | None = None) -> dict:
    return plan(case, "--placement", case.placement, "--batch", str(run_batch(case)), release=release)


def shape(p: dict) -> str:
    """The plan in brief: replicas × (stages × TP), batch per pipeline (pools marked P / D)."""
    mark = {"prefill": "P ", "decode": "D "}
    return ", ".join(
        f"{mark.get(pl['phase'], '')}{pl['replicas']}×[{'+'.join('tp' + str(s['tp']) for s in pl['stages'])}] b{pl['batch']}" for pl in p["pipelines"]
    )


def medians(errs: list[tuple[Case, float]]) -> str:
    if not errs:
        return "no figures"
    e = [x for _, x in errs]
    return (
        f"median |pred/public − 1| = {statistics.median(abs(x) for x in e):.1%} over {len(e)} "
        f"(signed {statistics.median(e):+.1%}, range {min(e):+.0%} … {max(e):+.0%})"
    )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--only", help="one case by name")
    ap.add_argument("--round", type=int, action="append", help="only the cases of this round (repeatable)")
    ap.add_argument("--no-plan", action="store_true", help="skip hetc plan's own choice (the slower half)")
    ap.add_argument("--fit", action="store_true", help="each engine's figures fitted on the training rounds (ENGINE@fit, engine_calibration.py TRAIN_ROUNDS)")
    ap.add_argument(
        "--per-release", action="store_true", help="each row at its engine release's fitted figures (ENGINE@REL, engine_releases.py), else ENGINE@fit"
    )
    a = ap.parse_args()
    if a.per_release:
        import engine_releases  # imports this module: loaded here, not at the top
    figures = ", each row's release (@REL, engine_releases.py; @fit where it has none)" if a.per_release else ", their fitted figures (@fit)" if a.fit else ""
    print(f"cost model frozen at {FROZEN[:12]}: {frozen_state()}; engines: each figure's own{figures}")
    for r, commit in sorted(FROZEN_BY_ROUND.items()):
        if commit != FROZEN and (not a.round or r in a.round):
            print(f"round {r}'s figures: cost model frozen at {commit[:12]}: {frozen_state(commit)}")
    print()
    cols = (
        "case",
        "vendor",
        "engine",
        "public out tok/s",
        "public run",
        "hetc at public config",
        "−1",
        "hetc plan",
        "−1",
        "hetc plan's choice",
        "round",
        "source",
    )
    print("| " + " | ".join(cols) + " |")
    print("|---|---|---|---:|---|---:|---:|---:|---:|---|---|---|")
    at: list[tuple[Case, float]] = []
    own: list[tuple[Case, float]] = []
    for c in CASES:
        if (a.only and a.only != c.name) or (a.round and c.round not in a.round):
            continue
        release, why = engine_releases.release_for(c) if a.per_release else ("fit" if a.fit else None, "")
        cfg = at_public_config(c, release)["predicted"]["output_tok_s"]
        at.append((c, cfg / c.public - 1))
        mine, choice = "", ""
        if not a.no_plan:
            p = plan(c, release=release)
            mine, choice = f"{p['predicted']['output_tok_s']:,.0f} | {p['predicted']['output_tok_s'] / c.public - 1:+.0%}", shape(p)
            own.append((c, p["predicted"]["output_tok_s"] / c.public - 1))
        b = run_batch(c)
        run = f"{c.placement} b{b}" + (f" (of {c.batch}: memory)" if c.batch and b < c.batch else "") + (f"; {c.note}" if c.note else "")
        eng = f"{c.named_engine} → {c.engine}" + (f"@{release}" if release else "") + (f" ({why})" if why else "")
        mark = " (held)" if c.held else " (beside)" if c.round in HELD_ROUNDS else ""
        print(
            f"| {c.name} | {c.vendor} | {eng} | {c.public:,.0f} | {run} | {cfg:,.0f} | {cfg / c.public - 1:+.0%} | "
            f"{mine or '– | –'} | {choice or '–'} | {c.round}{mark} | {c.source} |",
            flush=True,
        )
    print()
    held_rounds = sorted({c.round for c, _ in at if c.held})
    groups = [(f"held figures, rounds {' + '.join(map(str, held_rounds))} together", lambda c: c.held)] if len(held_rounds) > 1 else []
    for r in sorted({c.round for c, _ in at}, reverse=True):
        if r in HELD_ROUNDS:
            groups.append((f"held figures, round {r}", lambda c, r=r: c.round == r and c.held))
            groups.append((f"round {r}, set aside by its rule (reported beside)", lambda c, r=r: c.round == r and not c.held))
        else:
            groups.append((f"round {r} (reported beside)", lambda c, r=r: c.round == r))
    for what, member in groups:
        errs = [(c, e) for c, e in at if member(c)]
        if not errs:
            continue
        print(f"- at the public configuration, {what}: {medians(errs)}")
        for v in ("nvidia", "amd", "intel"):
            print(f"  - {v}: {medians([(c, e) for c, e in errs if c.vendor == v])}")
        for named in sorted({c.named_engine for c, _ in errs}):
            stand_in = " (stand-in)" if named in STAND_INS else ""
            print(f"  - engine {named} (--engine {HETC_ENGINE[named]}{stand_in}): {medians([(c, e) for c, e in errs if c.named_engine == named])}")
        if own:
            print(f"  - hetc plan's own choice vs the public figure: {medians([(c, e) for c, e in own if member(c)])}")
        worst = max(errs, key=lambda ce: abs(ce[1]))
        print(f"  - worst: {worst[0].name} {worst[1]:+.1%}")
    print(f"\n{MLPERF_LENGTHS}")
    print("\nSources:")
    for k, v in SOURCES.items():
        print(f"- {k}: {v}")


if __name__ == "__main__":
    main()
