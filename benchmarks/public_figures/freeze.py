"""The freezes of the public GPU figures: the cost-model commit each round's figures were gathered after, the
rounds held to the target, and the paths a freeze covers (benchmarks/gpu_public.py says whether any has moved
since)."""

from __future__ import annotations

FROZEN = "aa910d803a8733d2d4819468b97fd86d7883017c"  # the cost-model commit, made before any held figure was looked at
# each held round's freeze: the cost-model commit made before any of that round's figures was looked at
# (9: the per-release engine figures, engine_releases.py, committed before any round-9 figure was looked at;
# 10: the engine figures refitted on rounds 1-9, committed before any round-10 figure was looked at;
# 11: main at 2694874, the cost model as it stood when round 11 began, before any round-11 figure was looked at:
# FROZEN_PATHS had moved since 5552722 (analytic.py, simulate.py, engine_releases.py), so the freeze is that HEAD;
# 12: r12 at f719561, TensorRT-LLM's `experts` figure (its MoE layer at 0.72 of its dense GEMMs, from its v0.17 perf
# overview's Mixtral / Mistral-7B pairs) added after round 11's prediction, before any round-12 figure was looked at;
# 13: main at b61b446, FROZEN_PATHS as at f719561, before any round-13 figure was predicted: gpu-public-round13.md)
FROZEN_BY_ROUND = {
    7: FROZEN,
    8: "dedf7eed2591c63ecd6be9ffcd5f827b7985d01d",
    9: "58f17c198612f9b5f0a0a59252b12a1a37c4cd83",
    10: "5552722e18747211bf1fd3b7875145c5507879b5",
    11: "2694874100015a949615a8fd9ff2d362119febbb",
    12: "f719561951fba43f96991d8a4cdd01710ead76e1",
    13: "b61b4462497d02b804b8f4295a45e5326c1f9919",
}
# the rounds of figures gathered after their freeze and not yet trained on (the earlier rounds are reported beside):
# rounds 7, 8 and 9 were held at their freezes (checked once each: benchmarks/logs/gpu-public-round8.md,
# engine-releases-2026-11-29.md) and are training rows of the engine figures frozen before round 10; round 10 was
# checked once at 5552722 (gpu-public-round10.md) and stays held beside round 11, held at its own freeze; round 11
# was checked once at 2694874 (gpu-public-round11.md) and stays held beside round 12; round 13's figures are all
# beside by its rule (re-measurements of configurations already compared), so it adds no held row
HELD_ROUNDS = (10, 11, 12, 13)
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
