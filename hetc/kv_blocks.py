"""Paged KV bookkeeping, shared: reference-counted blocks, a prefix cache, copy-on-write.

One BlockManager per pipeline lane: the scheduler owns it, every stage of the lane holds a KV
pool with (at least) this many blocks and uses the block tables it is sent, so a block id means
the same slot in every stage's pool. A lane reserves block 0: attention pads shorter sequences'
block lists with it (kv_cache.AttnMeta), masked, and a masked slot holding a NaN still spreads it
(0 · NaN), so the padding block is one no sequence ever writes. The capacity simulator runs this
same class, so its hit rates and evictions are the server's.

Sharing. A block may be held by several sequences (its reference count): sequences whose prompts
begin alike (the prefix cache) and samples forked from one prompt (`fork`, for `n` > 1). A block
is written only by a sequence that holds it alone: before a step writes into a block others hold,
`grow` gives the writer a fresh copy (copy-on-write) and queues the copy (`copies`, block pairs
that every stage copies before the step runs).

The prefix cache is vLLM's automatic prefix caching: a full block is keyed by a hash of its
tokens chained with the key of the block before it (`prefix_hashes`), so one key names the whole
prefix up to the block's end. Chosen over SGLang's radix tree because KV here lives in fixed
blocks whose ids every stage shares: a tree would match at token granularity that a block table
cannot use without copying a partial block, and the flat map gives an O(1) look-up per block
that the frontend uses, without the lane's lock, to route a request to the lane holding its
longest prefix. Keys are SHA-256 (vLLM's default since its Python-`hash` keys were shown
collidable on purpose: a collision would hand one request another's KV). A block is keyed when
a step that fills it is scheduled, not when its KV is back: a later micro-batch (or a later
sequence of the same one) that reuses it runs after that write in every stage, as stages take
messages in order and a step writes its new KV before its attention reads any.

Blocks no sequence holds are free. Free keyed blocks stay in the cache until their slot is
needed: allocation takes never-keyed blocks first, then evicts keyed ones least recently used
(a sequence's last blocks before its first, which other prompts are likelier to share). A hit
on a free block takes it out of the free list. A request always recomputes at least its last
prompt token (its logits are sampled): the cache serves whole blocks before it, so a fully
cached prompt recomputes its last block (vLLM v1 does the same rather than copy a block to
write one token).
"""

from __future__ import annotations

import hashlib
from array import array
from collections import OrderedDict, deque

from hetc.scheduling import KV_BLOCK_TOKENS
from hetc.sequence import Sequence

__all__ = ["PADDING_BLOCKS", "BlockManager", "blocks_for", "cached_tokens", "lane_blocks", "prefix_hashes", "stage_blocks", "window_span"]

PADDING_BLOCKS = 1  # blocks a lane reserves: block 0 pads shorter sequences' block lists
_ROOT = b""  # the key the first block chains from


def blocks_for(tokens: int, block_size: int = KV_BLOCK_TOKENS) -> int:
    return -(-tokens // block_size)


def prefix_hashes(tokens: list[int], block_size: int = KV_BLOCK_TOKENS, parents: list[bytes] | None = None) -> list[bytes]:
    """Keys of the full blocks of `tokens`: block i's is SHA-256(key of block i − 1 ‖ its token ids).

    Args:
        tokens: token ids from position 0.
        block_size: tokens per block.
        parents: keys already known for the first blocks (extended, not recomputed; returned).
    """
    out = parents if parents is not None else []
    for i in range(len(out), len(tokens) // block_size):
        prev = out[-1] if out else _ROOT
        out.append(hashlib.sha256(prev + array("q", tokens[i * block_size : (i + 1) * block_size]).tobytes()).digest())
    return out


def cached_tokens(input_len: int, prefix_len: int, block_size: int = KV_BLOCK_TOKENS) -> int:
    """Prompt tokens the prefix cache serves a prompt of `input_len` tokens whose first `prefix_len`
    are cached: the whole blocks of that prefix, short of the last prompt token (always recomputed:
    `BlockManager.cached_prefix`). What the planner prices a shared prefix's hit at."""
    return min(prefix_len, input_len - 1) // block_size * block_size


def window_span(window: int, block_size: int = KV_BLOCK_TOKENS) -> int:
    """Tokens of the whole blocks a sliding window of `window` tokens (the query's own included)
    spans at most: an engine that frees the blocks behind the window keeps this many per sequence
    and sliding layer (vLLM's sliding-window KV manager keeps cdiv(window − 1, block) + 1 blocks)."""
    return (-(-(window - 1) // block_size) + 1) * block_size


def stage_blocks(kv_budget: float, ways: int, kv_bytes_per_token: float) -> int | None:
    """Blocks a stage's plan budget holds for the KV of its layers (None: it holds no attention).

    Args:
        kv_budget: the plan's KV bytes per device of the stage (`memory_bytes.kv`).
        ways: the devices its KV splits over: its tensor-parallel degree (each device keeps 1/tp of
            the heads), or 1 for a latent every device keeps whole (MLA: Unit.kv_ways).
        kv_bytes_per_token: K+V bytes of one token over the stage's layers, all heads, as stored.
    """
    if kv_bytes_per_token <= 0:
        return None
    return int(kv_budget * ways // (KV_BLOCK_TOKENS * kv_bytes_per_token))


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
    """The lane's KV blocks: who holds each, which full blocks the prefix cache keys, which are free."""

    def __init__(self, num_blocks: int, block_size: int = KV_BLOCK_TOKENS, reserved: int = 0, caching: bool = True):
        """Args:
        num_blocks: blocks in every stage's pool of this lane (the smallest stage budget).
        block_size: tokens per block.
        reserved: blocks 0 .. reserved − 1 are never handed out (a lane reserves the padding block).
        caching: keep full blocks for reuse by later sequences with the same prefix (prefix caching).
        """
        if num_blocks - reserved < 1:
            raise ValueError(f"a KV pool needs at least one block besides its {reserved} reserved, got {num_blocks}")
        self.num_blocks, self.block_size, self.reserved, self.caching = num_blocks, block_size, reserved, caching
        self._refs = [0] * num_blocks
        self._empty: deque[int] = deque(range(reserved, num_blocks))  # free, keyed by nothing
        self._lru: OrderedDict[int, None] = OrderedDict()  # free and keyed: evicted first to last
        self._key_of: dict[int, bytes] = {}  # block → its prefix key
        self._block_of: dict[bytes, int] = {}  # prefix key → the block holding it
        self.copies: list[tuple[int, int]] = []  # (src, dst): copy-on-write copies not yet sent to the stages
        self.queried_tokens = 0  # prompt tokens looked up in the cache (`admit`), and of them found
        self.hit_tokens = 0

    # ---- counts ---------------------------------------------------------------------------
    @property
    def capacity(self) -> int:
        """Blocks sequences may hold."""
        return self.num_blocks - self.reserved

    @property
    def num_free(self) -> int:
        """Blocks no sequence holds (cached ones included: they are evicted when needed)."""
        return len(self._empty) + len(self._lru)

    @property
    def num_used(self) -> int:
        return self.capacity - self.num_free

    @property
    def num_cached(self) -> int:
        """Free blocks the prefix cache still keys."""
        return len(self._lru)

    def refs(self, block: int) -> int:
        """Sequences (and transfers) holding `block`."""
        return self._refs[block]

    # ---- the prefix cache ---------------------------------------------------------------------
    def cached_blocks(self, keys: list[bytes]) -> int:
        """How many of `keys`, from the first, the cache holds (a look-up only: nothing is taken)."""
        n = 0
        if self.caching:
            for k in keys:
                if k not in self._block_of:
                    break
                n += 1
        return n

    def cached_prefix(self, seq: Sequence) -> list[int]:
        """Blocks holding the longest cached prefix of `seq`'s tokens, leaving at least its last
        token to compute (its logits are sampled). [] with caching off."""
        if not self.caching:
            return []
        keys = prefix_hashes(seq.token_ids, self.block_size, seq.block_hashes)
        n = self.cached_blocks(keys[: (seq.num_tokens - 1) // self.block_size])
        return [self._block_of[k] for k in keys[:n]]

    def can_admit(self, seq: Sequence, hit: list[int], new_tokens: int) -> bool:
        """`seq` (holding no blocks) fits with `hit` (from `cached_prefix`) and `new_tokens` after it."""
        need = blocks_for(len(hit) * self.block_size + new_tokens, self.block_size) - len(hit)
        return need <= self.num_free - sum(1 for b in hit if self._refs[b] == 0)

    def admit(self, seq: Sequence, hit: list[int]) -> int:
        """Give `seq` (holding no blocks) the cached blocks `hit`: its KV up to their end is computed.
        Counts the query; returns the tokens served from the cache."""
        assert not seq.block_table, f"seq {seq.seq_id} already holds blocks"
        for b in hit:
            self._hold(b)
        seq.block_table, seq.num_keyed = list(hit), len(hit)
        seq.num_computed = seq.num_draft_computed = len(hit) * self.block_size  # a drafter wrote what its target did
        if self.caching:
            self.queried_tokens += seq.num_tokens
            self.hit_tokens += seq.num_computed
        return seq.num_computed

    def key_full(self, seq: Sequence, end: int) -> None:
        """Key the blocks of `seq` that positions below `end` fill (a step computing them was scheduled):
        later sequences with the same prefix reuse them. A block whose key another block already
        has (two prompts computed at once) stays unkeyed."""
        if not self.caching:
            return
        n = min(end, seq.num_tokens, len(seq.block_table) * self.block_size) // self.block_size
        if n <= seq.num_keyed:
            return
        keys = prefix_hashes(seq.token_ids[: n * self.block_size], self.block_size, seq.block_hashes)
        for i in range(seq.num_keyed, n):
            b = seq.block_table[i]
            if keys[i] not in self._block_of and b not in self._key_of:
                self._block_of[keys[i]] = b
                self._key_of[b] = keys[i]
        seq.num_keyed = n

    # ---- growth and copy-on-write ---------------------------------------------------------------
    def blocks_needed(self, seq: Sequence, new_tokens: int, start: int | None = None) -> int:
        """Blocks to take so that `seq` holds KV for `new_tokens` more tokens, written from position
        `start` on (default: its computed tokens): new blocks, and copies of shared ones written into."""
        first = (seq.num_computed if start is None else start) // self.block_size
        shared = sum(1 for b in seq.block_table[first:] if self._refs[b] > 1)
        return max(0, blocks_for(seq.num_computed + new_tokens, self.block_size) - len(seq.block_table)) + shared

    def can_grow(self, seq: Sequence, new_tokens: int, start: int | None = None) -> bool:
        return self.blocks_needed(seq, new_tokens, start) <= self.num_free

    def grow(self, seq: Sequence, new_tokens: int, start: int | None = None) -> None:
        """Give `seq` the blocks for `new_tokens` more tokens (check can_grow first); a block it shares
        at or after `start` (the first position the step writes) becomes its own copy (`copies`)."""
        n = self.blocks_needed(seq, new_tokens, start)
        if n > self.num_free:
            raise RuntimeError(f"seq {seq.seq_id}: needs {n} blocks, {self.num_free} free")
        first = (seq.num_computed if start is None else start) // self.block_size
        table = seq.block_table
        for i in range(first, len(table)):
            if self._refs[table[i]] > 1:
                dst = self._take()
                self.copies.append((table[i], dst))
                self._release(table[i])
                table[i] = dst
        while len(table) < blocks_for(seq.num_computed + new_tokens, self.block_size):
            table.append(self._take())

    def take_copies(self) -> list[tuple[int, int]]:
        """The copy-on-write copies queued since the last call (the step that needs them goes after)."""
        out, self.copies = self.copies, []
        return out

    def fork(self, parent: Sequence, child: Sequence) -> None:
        """`child` (a copy of `parent`'s tokens, holding no blocks) shares all of `parent`'s blocks
        and computed KV; whichever writes a shared block first gets its own copy (`grow`).

        Raises:
            ValueError: `parent` has a step in flight (its table may cover KV not written yet),
                or `child` holds blocks or has other tokens.
        """
        if parent.in_flight:
            raise ValueError(f"seq {parent.seq_id} has a step in flight: fork it once its result is back")
        if child.block_table or child.token_ids[: parent.num_computed] != parent.token_ids[: parent.num_computed]:
            raise ValueError(f"seq {child.seq_id} must hold no blocks and begin with seq {parent.seq_id}'s computed tokens")
        for b in parent.block_table:
            self._hold(b)
        child.block_table = list(parent.block_table)
        child.num_computed, child.num_keyed, child.num_draft_computed = parent.num_computed, parent.num_keyed, parent.num_draft_computed
        child.block_hashes = list(parent.block_hashes)

    # ---- freeing ---------------------------------------------------------------------------------
    def free(self, seq: Sequence) -> None:
        """Drop all of `seq`'s blocks; its KV is gone (num_computed back to 0). Blocks others hold
        stay theirs; freed keyed blocks stay cached, its last ones first in line for eviction."""
        self.free_blocks(seq.block_table[::-1])
        seq.block_table = []
        seq.num_computed = seq.num_keyed = seq.num_draft_computed = 0

    def trim(self, seq: Sequence) -> list[int]:
        """Roll `seq`'s KV back to its computed tokens: the blocks past them (reserved for proposals a
        speculative round rejected) are released, as a run that never proposed them would not hold
        them. They were never keyed (`key_full` keys known tokens only), so no prefix hash names a
        rejected token; KV left past `num_computed` in its last block is overwritten by its next step
        before anything reads it (attention reads positions below the context length only).
        Returns the blocks released."""
        keep = blocks_for(seq.num_computed, self.block_size)
        assert seq.num_keyed <= keep, f"seq {seq.seq_id}: a keyed block past its computed tokens"
        gone = seq.block_table[keep:]
        del seq.block_table[keep:]
        self.free_blocks(gone[::-1])
        return gone

    def free_blocks(self, blocks: list[int]) -> None:
        """Drop one hold of each block, in order (a prefill pool's, once their KV was sent)."""
        for b in blocks:
            self._release(b)

    def unkey(self, seq: Sequence) -> list[int]:
        """Take `seq`'s blocks away to be scrubbed (its logits were not finite: its KV may hold NaN):
        none of them serves a later prefix any more; returns those no other sequence holds (not free
        until the stages zeroed them: `reclaim`)."""
        out = []
        for b in seq.block_table:
            key = self._key_of.pop(b, None)
            if key is not None:
                del self._block_of[key]
            self._refs[b] -= 1
            if self._refs[b] == 0:
                out.append(b)
        seq.block_table = []
        seq.num_computed = seq.num_keyed = seq.num_draft_computed = 0
        return out

    def reclaim(self, blocks: list[int]) -> None:
        """Blocks `unkey` returned, zeroed in every stage: free again."""
        self._empty.extend(blocks)

    # ---- internals -------------------------------------------------------------------------------
    def _hold(self, b: int) -> None:
        if self._refs[b] == 0:
            del self._lru[b]  # a cached free block: in use again
        self._refs[b] += 1

    def _release(self, b: int) -> None:
        self._refs[b] -= 1
        assert self._refs[b] >= 0, f"block {b} released more often than held"
        if self._refs[b] == 0:
            if b in self._key_of:
                self._lru[b] = None
            else:
                self._empty.append(b)

    def _take(self) -> int:
        if self._empty:
            b = self._empty.popleft()
        else:
            b, _ = self._lru.popitem(last=False)  # evict the least recently used cached block
            del self._block_of[self._key_of.pop(b)]
        self._refs[b] = 1
        return b
