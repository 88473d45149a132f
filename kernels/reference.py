"""Plain torch references for every kernel, written for clarity, computed in float32.

KV cache layout (both K and V): [num_blocks, block_size, num_kv_heads, head_dim]. Token t of a
sequence lives in block block_table[t // block_size], slot t % block_size.
"""

from __future__ import annotations

import torch


def gather_kv(cache: torch.Tensor, block_table: torch.Tensor, length: int) -> torch.Tensor:
    """[length, num_kv_heads, head_dim]: a sequence's first ``length`` tokens, in order."""
    block_size = cache.shape[1]
    pages = -(-length // block_size)
    blocks = block_table[:pages].long()
    return cache[blocks].reshape(pages * block_size, *cache.shape[2:])[:length]


def _attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float, mask: torch.Tensor | None) -> torch.Tensor:
    """q [Lq, Hq, D], k/v [Lk, Hkv, D] -> [Lq, Hq, D] in float32 (GQA: each KV head serves Hq/Hkv query heads)."""
    group = q.shape[1] // k.shape[1]
    k = k.float().repeat_interleave(group, dim=1)
    v = v.float().repeat_interleave(group, dim=1)
    scores = torch.einsum("qhd,khd->hqk", q.float(), k) * scale
    if mask is not None:
        scores = scores.masked_fill(~mask[None], float("-inf"))
    return torch.einsum("hqk,khd->qhd", scores.softmax(dim=-1), v)


def paged_decode_attention_ref(q, k_cache, v_cache, block_tables, context_lens, scale):
    """q [num_seqs, Hq, D]: one query token per sequence, attending to its whole context."""
    out = torch.empty(q.shape, dtype=torch.float32, device=q.device)
    for s in range(q.shape[0]):
        n = int(context_lens[s])
        k = gather_kv(k_cache, block_tables[s], n)
        v = gather_kv(v_cache, block_tables[s], n)
        out[s] = _attend(q[s : s + 1], k, v, scale, None)[0]
    return out.to(q.dtype)


def paged_prefill_attention_ref(q, k_cache, v_cache, block_tables, context_lens, query_start_loc, scale):
    """q [total_query_tokens, Hq, D]; sequence s owns rows query_start_loc[s]:query_start_loc[s+1], the
    last tokens of its context (whose KV is already in the cache). Causal: query i sees keys <= its position."""
    out = torch.empty(q.shape, dtype=torch.float32, device=q.device)
    for s in range(len(context_lens)):
        a, b = int(query_start_loc[s]), int(query_start_loc[s + 1])
        n = int(context_lens[s])
        if b == a:
            continue
        k = gather_kv(k_cache, block_tables[s], n)
        v = gather_kv(v_cache, block_tables[s], n)
        pos = torch.arange(n - (b - a), n, device=q.device)
        mask = torch.arange(n, device=q.device)[None, :] <= pos[:, None]
        out[a:b] = _attend(q[a:b], k, v, scale, mask)
    return out.to(q.dtype)


def write_kv_ref(k, v, k_cache, v_cache, slot_mapping) -> None:
    """Scatter k/v [num_tokens, Hkv, D] into their slots; a negative slot is padding and is skipped."""
    block_size = k_cache.shape[1]
    for t, slot in enumerate(slot_mapping.tolist()):
        if slot >= 0:
            k_cache[slot // block_size, slot % block_size] = k[t]
            v_cache[slot // block_size, slot % block_size] = v[t]


def copy_blocks_ref(src_cache, dst_cache, block_mapping) -> None:
    """dst_cache[dst] = src_cache[src] for each (src, dst) row of block_mapping."""
    for src, dst in block_mapping.tolist():
        dst_cache[dst] = src_cache[src].to(dst_cache.device)
