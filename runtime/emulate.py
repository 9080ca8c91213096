"""`--emulate`: a plan's devices as processes of one host, sized to fit it.

Emulated devices share the host's memory: the weights of this host's stages, their KV
pools and one Python/torch process per device must fit in what is available. A model too
big runs as a width-shrunk copy (random weights only): 1/2^k of the heads, hidden and MLP
width, the same layers, units and cuts.
"""

from __future__ import annotations

from hetc.errors import BadInput
from hetc.partitioner.capture.terms import DTYPE_BYTES
from hetc.plan import PlanUnit, UnitKind
from hetc.scheduling import KV_BLOCK_TOKENS
from hetc.backends.decoder import is_mla, kv_tensors
from hetc.runtime.model_runner import TORCH_DTYPES, kv_layout, param_count, shrink_config
from hetc.quantity import Kind, format_quantity

__all__ = ["available_bytes", "cap_kv_blocks", "fit_width"]

PROCESS_BYTES = 0.4e9  # a worker's interpreter, torch and transformers
WEIGHT_SHARE, KV_SHARE = 0.5, 0.2  # of the host's available memory


def available_bytes() -> float:
    from hetc.backends import get_backend

    return float(get_backend("cpu").detect()[0].free_memory)


def fit_width(plan, cfg, local_workers, random_weights: bool, file: str):
    """(width factor, config to run): 1 and `cfg` when this host's stages fit as they are.

    Args:
        plan: the Plan; cfg: the model's transformers config.
        local_workers: the WorkerSpecs this host runs.
        random_weights: a shrunk copy needs them (real weights cannot be shrunk).

    Raises:
        BadInput: too big with real weights, or even at 1/256 of the width.
    """
    avail = available_bytes()
    # the processes' own memory comes off the weights' share, which keeps at least half of it
    budget = max(WEIGHT_SHARE * avail / 2, WEIGHT_SHARE * avail - PROCESS_BYTES * len(local_workers))
    # the plan's bytes are at its dtype; this runtime holds fp8 weights as bf16
    scale = TORCH_DTYPES[plan.model.dtype].itemsize / DTYPE_BYTES[plan.model.dtype]
    need = scale * sum(sum(u.param_bytes for u in plan.units[w.stage.units[0] : w.stage.units[1] + 1]) / w.stage.tp for w in local_workers)
    if need <= budget:
        return 1, cfg
    if not random_weights:
        raise BadInput(
            f"this host's stages hold {format_quantity(need, Kind.BYTES)} of weights; emulating them here allows {format_quantity(budget, Kind.BYTES)}.",
            file=file,
            field="model",
            fix="pass --random-weights to emulate a width-shrunk copy (same layers and cuts), or serve on the plan's devices.",
        )
    full = param_count(cfg)
    for f in (2, 4, 8, 16, 32, 64, 128, 256):
        small = shrink_config(cfg, f)
        if need * param_count(small) / full <= budget:
            return f, small
    raise BadInput(
        f"even a 1/256-width copy of the model does not fit this host ({format_quantity(avail, Kind.BYTES)} available).",
        file=file,
        field="model",
        fix="spread the plan over hosts with --nnodes.",
    )


def cap_kv_blocks(plan, cfg, units: list[PlanUnit], local_workers, blocks: dict[int, int]) -> dict[int, int]:
    """The lanes' KV blocks, scaled down so this host's pools fit in its share of memory.

    Args:
        cfg: the config the workers run (shrunk or not).
        blocks: lane id → blocks from the plan's budgets.
    """
    kvh, hd = kv_layout(cfg)
    per = kv_tensors(cfg) * hd * KV_BLOCK_TOKENS * TORCH_DTYPES[plan.model.kv_dtype].itemsize  # one block, one layer, one KV head
    per_lane: dict[int, float] = {}
    for w in local_workers:
        layers = sum(1 for u in units[w.stage.units[0] : w.stage.units[1] + 1] if u.kind == UnitKind.ATTENTION)
        heads = kvh if is_mla(cfg) else kvh // w.stage.tp  # each rank keeps 1/tp of the heads; MLA's latent whole (model_runner.py)
        per_lane[w.stage.lane] = per_lane.get(w.stage.lane, 0.0) + layers * per * heads
    total = sum(blocks[lane] * b for lane, b in per_lane.items())
    allowed = KV_SHARE * available_bytes()
    if total <= allowed:
        return blocks
    k = allowed / total
    return {lane: max(1, int(n * k)) if lane in per_lane else n for lane, n in blocks.items()}
