"""Round 13 of the public GPU figures (Intel Gaudi), gathered after the freeze at freeze.FROZEN_BY_ROUND[13].
SOURCES: where its figures came from and how they were read, with the round's rule for which figures are held;
CASES: its rows. No figure of this round is held: every one re-measures a configuration rounds 1-12 compared
(benchmarks/logs/gpu-public-round13.md); they are reported beside."""

from __future__ import annotations

from public_figures.case import Case

_OH = "huggingface/optimum-habana @ c68dcc4fc53f55392ce28b9480a30fb4132bc33c"

SOURCES = {
    # ---- round 13 (gathered after the freeze at FROZEN_BY_ROUND[13] = b61b446) ----
    # The rule (benchmarks/logs/gpu-public-round13.md, written before any round-13 prediction): every figure below is
    # held unless (a) rounds 1-12 compared the same device, model, card count, parallelism, batch and lengths from
    # another release of the same page or source (a re-measurement), or (b) it was seen before the freeze (listed as
    # read in an earlier round's log): those are marked beside (hold=False). Left out: models or devices without a
    # profile, FP4 / int4, rows without stated lengths, batch or card count, a second run of a configuration in the
    # same source and release, rows whose device generation is neither stated nor inferable.
    "gaudi116": "Intel's Gaudi throughput figures at Intel Gaudi software 1.16.0, as optimum-habana's "
    "performance_inference.md reproduces them ('the exact configuration to replicate the Intel Gaudi Throughput "
    "Performance Numbers posted on the Intel Gaudi Developer website', release 1.16.0 docker, optimum-habana 1.11.1; "
    "the file of PR #1078, never merged, at its last commit " + _OH + "): 'Max Throughput' with each row's "
    "run_generation.py command (FP8 via QUANT_CONFIG maxabs_quant, --max_input_tokens / --max_new_tokens, "
    "--batch_size, DeepSpeed --world_size N = TP over N cards, HPU graphs, bucketed KV); ⚠ metric read as output "
    "tok/s, as for gaudi. ⚠ The card generation is not named: Gaudi 2, inferred — five rows equal optimum-habana's gaudi2 CI "
    "baselines (round 7, ohci) within 0.2% (Llama 2 7B "
    "13,163 / 4,777 / 1,291 / 1,943 vs 13,153 / 4,775 / 1,293 / 1,943; Llama 2 70B 4 cards 7,422 = 7,422); Gaudi 3's "
    "1.18 values are 1.5x higher. Every row is beside by rule (a): rounds 1-4 compared each configuration at 1.18.0 "
    "(gaudi2c, gaudi2d; same cards, batch and lengths), except Llama 2 70B 128/2048 on 4 cards at batch 750, which "
    "round 7 compared at the same value (ohci; rule b as well). Left out: optimum-habana PRs #918 / #935 (Mistral 7B "
    "FP8 on Gaudi 2 at 1.16, 128/128 batch 896: 13,251 and 13,236; 2048/128 batch 120: 1,363) — second runs of rows "
    "of this table's release",
}

# (model tag, catalog model, cards, ((input, output, batch, published tok/s), ...))
_ROWS = (
    ("l2-7b", "llama-2-7b", 1, ((128, 128, 1230, 13163), (128, 2048, 163, 4777), (2048, 128, 94, 1291), (2048, 2048, 81, 1943))),
    ("l2-70b", "llama-2-70b", 2, ((128, 128, 1750, 2727), (2048, 128, 95, 276), (2048, 2048, 78, 958))),
    ("l2-70b", "llama-2-70b", 4, ((128, 2048, 750, 7422),)),
    ("mistral-7b", "mistral-7b", 1, ((128, 128, 896, 13112), (128, 2048, 120, 7947), (2048, 128, 120, 1360), (2048, 2048, 44, 3143))),
)

CASES: list[Case] = [
    Case(
        f"g116-gaudi2-{n}x-{tag}-{i}/{o}",
        f"{n}xgaudi2",
        model,
        "fp8",
        i,
        o,
        public,
        "gaudi116",
        "intel",
        "a:0" if n == 1 else f"a:0-{n - 1}",
        batch,
        13,
        f"batch {batch}; software 1.16.0",
        hold=False,
    )
    for tag, model, n, rows in _ROWS
    for i, o, batch, public in rows
]
