"""A draft model inside the lane's first stage worker: it proposes a round's tokens where they are
embedded, with KV of its own in the lane's blocks.

Placement. The proposals of a round are the verify step's input tokens, which the first stage
embeds; a drafter there hands them over in memory, with no hop of their own, and the step goes on
through the pipeline as any other (the last stage verifies it: speculate.py). Its KV pool has
the lane's block count and is addressed by the target's block tables, so one block id names the
same positions in the target's and the drafter's pools: the lane's block manager (hetc/kv_blocks.py)
owns both, and the rollback of a round's rejected positions (`BlockManager.trim`), copy-on-write
copies and scrubs act on both. A plan that places its drafter on a device of its own is served
with the drafter in its lane's first stage worker in this version (docs/speculation.md).

Each step, before the target runs it (after looked-ahead tokens are filled in: feedback.py), the
drafter runs every item's known tokens — so its KV follows the target's through prefill and
plain decode — after the tokens it missed (`draft` in StepMeta.extras: positions the target
computed without it, e.g. the last proposal of a round that kept all, or a prompt whose KV came
from a prefill pool). For a round's item it then decodes K − 1 more positions greedily: the
proposals are its argmax tokens, so the verifier's q is a point mass (speculate.verify).
"""

from __future__ import annotations

from typing import Any

import torch

__all__ = ["Drafter", "build_drafter"]


class Drafter:
    """The draft model of a lane's first stage (one owner: the stage's leader thread)."""

    def __init__(self, model: Any, to_device, to_host):
        """Args:
        model: a StageModel of the whole draft model (its KV pool has the lane's block count).
        to_device, to_host: the backend's copies (host ids in, logits out).
        """
        self.model, self.to_device, self.to_host = model, to_device, to_host

    def step(self, meta, packed: torch.Tensor) -> None:
        """Catch up on every item and draft the proposals of the step's rounds: writes them into
        `meta.token_ids` and the same tail of `packed` (the STEP message's meta, forwarded on).

        Args:
            meta: the step's StepMeta (looked-ahead tokens already filled in).
            packed: its encoded int64 form.
        """
        spec = set(meta.extras.get("spec", ()))
        catch = {rec[0]: (rec[1], rec[2]) for rec in meta.extras.get("draft", ())}
        ids = meta.token_ids
        offsets = [0]
        for n in meta.n_new:
            offsets.append(offsets[-1] + n)
        starts, n_new, sample, tokens = [], [], [], []
        for i, (start, n) in enumerate(zip(meta.starts, meta.n_new)):
            frm, missed = catch.get(i, (start, []))
            known = ids[offsets[i] : offsets[i] + (1 if i in spec else n)]
            starts.append(frm)
            n_new.append(len(missed) + len(known))
            sample.append(i in spec)
            tokens += [*missed, *known]
        if not spec:  # no round: the drafter only follows the target's KV
            self._forward(tokens, starts, n_new, [list(t) for t in meta.block_tables], sample)
            return
        rounds = sorted(spec)
        nxt = self._forward(tokens, starts, n_new, meta.block_tables, sample)  # one token per round's item
        for j in range(1, max(meta.n_new[i] for i in rounds)):
            for i, t in zip(rounds, nxt):
                ids[offsets[i] + j] = t
            rounds = [i for i in rounds if meta.n_new[i] - 1 > j]  # items with a proposal after this one
            if not rounds:
                break
            prev = [ids[offsets[i] + j] for i in rounds]
            nxt = self._forward(prev, [meta.starts[i] + j for i in rounds], [1] * len(rounds), [meta.block_tables[i] for i in rounds], [True] * len(rounds))
        packed[packed.numel() - len(ids) :] = torch.tensor(ids, dtype=torch.long)

    def _forward(self, tokens: list[int], starts: list[int], n_new: list[int], tables: list[list[int]], sample: list[bool]) -> list[int]:
        """One packed step of the drafter; the argmax token of each sampled item."""
        attn = self.model.step_meta(starts, n_new, tables, sample)
        logits = self.model(self.to_device(torch.tensor(tokens, dtype=torch.long)), attn)  # [S, V]
        if not any(sample):
            return []
        return self.to_host(logits.argmax(-1)).tolist()


def build_drafter(cfg, plan, num_blocks: int, backend, device_index: int, device) -> Drafter:
    """The plan's draft model as one StageModel on the first stage's device.

    Args:
        cfg: the worker's WorkerConfig (random weights, the emulated width).
        plan: the plan; its `speculation.drafter` names the model (`model.ref`) and its unit table.
        num_blocks: the lane's KV blocks (its pool mirrors the target's).
        backend: the stage's backend; device_index and device: where the stage runs.
    """
    from pathlib import Path

    from hetc.partitioner.capture.capture import load_hf_config
    from hetc.runtime.model_runner import TORCH_DTYPES, StageModel, shrink_config
    from hetc.weights import stage_weights

    d = plan.speculation.drafter
    hf_cfg, _ = load_hf_config(d.model.ref)
    hf_cfg = shrink_config(hf_cfg, cfg.width)
    weights_dir = d.model.ref if Path(d.model.ref).is_dir() and not cfg.random_weights else None
    model = StageModel(
        hf_cfg,
        d.units,
        0,
        len(d.units) - 1,
        dtype=TORCH_DTYPES[d.model.dtype],
        kv_dtype=TORCH_DTYPES[d.model.kv_dtype],
        num_blocks=num_blocks,
        weights=stage_weights(hf_cfg, weights_dir),
        device=device,
    )
    return Drafter(model, lambda x: backend.to_device(x, device_index), backend.to_host)
