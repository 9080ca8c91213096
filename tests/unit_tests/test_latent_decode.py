"""hetc's MLA decode with the up-projections absorbed (runtime/kv_cache.py latent_decode): the same
attention as every cached latent up-projected to each head's key and value (transformers' form), over
paged blocks of sequences of different lengths."""

from __future__ import annotations

import torch
from torch.nn import functional as F

from hetc.runtime.kv_cache import DecodeMeta, KVPool, latent_decode


def test_absorbed_decode_equals_attention_over_up_projected_keys_and_values():
    torch.manual_seed(0)
    heads, nope, rope, v, rank, bs = 4, 16, 8, 12, 32, 4
    kv_b = torch.randn(heads * (nope + v), rank) / rank**0.5  # kv_b_proj.weight
    w = kv_b.view(heads, nope + v, rank)
    w_uk, w_uv = w[:, :nope], w[:, nope:]
    lens = [1, 6, 9]  # cached tokens before this step's, per sequence
    tables = [[1, 2], [3, 4], [5, 6, 7]]
    pool = KVPool([0], 8, 1, rank + rope, torch.float32, block_size=bs, values=False)
    history = [torch.randn(n, rank + rope) for n in lens]
    for seq, (n, table) in enumerate(zip(lens, tables)):
        slots = torch.tensor([table[i // bs] * bs + i % bs for i in range(n)])
        pool.k[0].index_copy_(0, slots, history[seq][:, None])
    meta = DecodeMeta.build(lens, tables, rows=3, width=3, block_size=bs)
    q = torch.randn(3, heads, nope + rope)
    new = torch.randn(3, 1, rank + rope)
    scale = (nope + rope) ** -0.5
    out = latent_decode(q, new, pool, 0, meta, scale, (w_uk, w_uv))  # [B, H * v]
    for seq in range(len(lens)):
        lat = torch.cat((history[seq], new[seq]), 0)  # [L, R + rope]
        kv = lat[:, :rank] @ kv_b.T  # [L, H * (nope + v)]: transformers' kv_b_proj
        k_nope, val = kv.view(-1, heads, nope + v).split([nope, v], dim=-1)
        keys = torch.cat((k_nope, lat[:, None, rank:].expand(-1, heads, rope)), -1)  # [L, H, nope + rope]
        ref = F.scaled_dot_product_attention(q[seq][:, None], keys.transpose(0, 1), val.transpose(0, 1), scale=scale)  # [H, 1, v]
        torch.testing.assert_close(out[seq], ref.flatten(), rtol=1e-5, atol=1e-5)
