"""Paged KV bookkeeping: fixed-size blocks, a block table per sequence, a free list.

One BlockManager per pipeline lane: the scheduler owns it, every stage of the lane holds
a KV pool with (at least) this many blocks and uses the block tables it is sent, so a
block id means the same slot in every stage's pool. A lane reserves block 0: attention pads
shorter sequences' block lists with it (kv_cache.AttnMeta), masked, and a masked slot holding
a NaN still spreads it (0 · NaN), so the padding block is one no sequence ever writes.
"""

from __future__ import annotations

from collections import deque

from hetc.sequence import Sequence
from hetc.scheduling import KV_BLOCK_TOKENS

__all__ = ["PADDING_BLOCKS", "BlockManager", "blocks_for", "lane_blocks", "stage_blocks"]

PADDING_BLOCKS = 1  # blocks a lane reserves: block 0 pads shorter sequences' block lists


def blocks_for(tokens: int, block_size: int = KV_BLOCK_TOKENS) -> int:
    return -(-tokens // block_size)


def stage_blocks(kv_budget: float, tp: int, kv_bytes_per_token: float) -> int | None:
    """Blocks a stage's plan budget holds for the KV of its layers (None: it holds no attention).

    Args:
        kv_budget: the plan's KV bytes per device of the stage (`memory_bytes.kv`).
        tp: its tensor-parallel degree (each device keeps 1/tp of the heads).
        kv_bytes_per_token: K+V bytes of one token over the stage's layers, all heads, as stored.
    """
    if kv_bytes_per_token <= 0:
        return None
    return int(kv_budget * tp // (KV_BLOCK_TOKENS * kv_bytes_per_token))


def lane_blocks(stage_caps: list[int | None]) -> int:
    """Blocks in every KV pool of a lane (the runtime's and the simulator's): every stage holding
    attention keeps one block per sequence block, so the lane gets its smallest stage's capacity,
    and the padding block comes on top of the plan's budget (taken from it, the plan's own batch
    would not fit). 0 when a stage holding KV has less than one block, or none holds KV.

    Args:
        stage_caps: `stage_blocks` of each stage.
    """
    real = [c for c in stage_caps if c is not None]
    n = min(real) if real else 0
    return n + PADDING_BLOCKS if n >= 1 else 0


class BlockManager:
    """Allocates KV blocks to sequences on demand and frees them when they end."""

    def __init__(self, num_blocks: int, block_size: int = KV_BLOCK_TOKENS, reserved: int = 0):
        """Args:
        num_blocks: blocks in every stage's pool of this lane (the smallest stage budget).
        block_size: tokens per block.
        reserved: blocks 0 .. reserved − 1 are never handed out (a lane reserves the padding block).
        """
        if num_blocks - reserved < 1:
            raise ValueError(f"a KV pool needs at least one block besides its {reserved} reserved, got {num_blocks}")
        self.num_blocks, self.block_size, self.reserved = num_blocks, block_size, reserved
        self._free: deque[int] = deque(range(reserved, num_blocks))

    @property
    def capacity(self) -> int:
        """Blocks sequences may hold."""
        return self.num_blocks - self.reserved

    @property
    def num_free(self) -> int:
        return len(self._free)

    @property
    def num_used(self) -> int:
        return self.capacity - len(self._free)

    def blocks_needed(self, seq: Sequence, new_tokens: int) -> int:
        """Blocks to add so that `seq` can hold KV for `new_tokens` more tokens."""
        return max(0, blocks_for(seq.num_computed + new_tokens, self.block_size) - len(seq.block_table))

    def can_grow(self, seq: Sequence, new_tokens: int) -> bool:
        return self.blocks_needed(seq, new_tokens) <= len(self._free)

    def grow(self, seq: Sequence, new_tokens: int) -> None:
        """Give `seq` the blocks for `new_tokens` more tokens (check can_grow first)."""
        n = self.blocks_needed(seq, new_tokens)
        if n > len(self._free):
            raise RuntimeError(f"seq {seq.seq_id}: needs {n} blocks, {len(self._free)} free")
        seq.block_table.extend(self._free.popleft() for _ in range(n))

    def free_blocks(self, blocks: list[int]) -> None:
        """Return blocks no sequence holds any more (a prefill pool's, once their KV was sent)."""
        self._free.extend(blocks)

    def free(self, seq: Sequence) -> None:
        """Return all of `seq`'s blocks; its KV is gone (num_computed back to 0)."""
        self._free.extend(seq.block_table)
        seq.block_table = []
        seq.num_computed = 0
