"""Paged-KV bookkeeping lives in hetc/kv_blocks.py (the serving policy's, shared with the
capacity simulator); this module keeps the runtime's import path."""

from hetc.kv_blocks import BlockManager, blocks_for

__all__ = ["BlockManager", "blocks_for"]
