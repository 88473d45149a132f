"""Triton kernels that move KV: scatter new tokens into their slots, and copy whole blocks
(copy-on-write inside the GPU pool; swap between the GPU pool and a pinned host pool)."""

from __future__ import annotations

import torch
import triton
import triton.language as tl


@triton.jit
def _write_kv_kernel(
    K,
    V,
    KC,
    VC,
    SLOTS,
    s_kt,
    s_kh,
    s_cb,
    s_ct,
    s_ch,
    HEADS: tl.constexpr,
    BLOCK_H: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    BLOCK_D: tl.constexpr,
    BLOCK_SIZE: tl.constexpr,
):
    tok = tl.program_id(0)
    slot = tl.load(SLOTS + tok).to(tl.int64)
    if slot < 0:
        return  # padding token
    h = tl.arange(0, BLOCK_H)
    d = tl.arange(0, BLOCK_D)
    mask = (h < HEADS)[:, None] & (d < HEAD_DIM)[None, :]
    src = tok * s_kt + h[:, None] * s_kh + d[None, :]
    dst = (slot // BLOCK_SIZE) * s_cb + (slot % BLOCK_SIZE) * s_ct + h[:, None] * s_ch + d[None, :]
    tl.store(KC + dst, tl.load(K + src, mask=mask), mask=mask)
    tl.store(VC + dst, tl.load(V + src, mask=mask), mask=mask)


def _pow2(n: int) -> int:
    return max(16, 1 << (max(n, 1) - 1).bit_length())


def write_kv(
    k: torch.Tensor, v: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, slot_mapping: torch.Tensor
) -> None:
    """k, v [num_tokens, num_kv_heads, head_dim] into their slots (block * block_size + offset); slot < 0 skips."""
    n, heads, dim = k.shape
    if n == 0:
        return
    k, v = k.contiguous(), v.contiguous()
    _write_kv_kernel[(n,)](
        k,
        v,
        k_cache,
        v_cache,
        slot_mapping,
        k.stride(0),
        k.stride(1),
        k_cache.stride(0),
        k_cache.stride(1),
        k_cache.stride(2),
        HEADS=heads,
        BLOCK_H=_pow2(heads),
        HEAD_DIM=dim,
        BLOCK_D=_pow2(dim),
        BLOCK_SIZE=k_cache.shape[1],
    )


@triton.jit
def _copy_blocks_kernel(SRC, DST, MAP, block_elems, BLOCK: tl.constexpr):
    pair = tl.program_id(0)
    chunk = tl.program_id(1)
    src = tl.load(MAP + 2 * pair).to(tl.int64)
    dst = tl.load(MAP + 2 * pair + 1).to(tl.int64)
    offs = chunk * BLOCK + tl.arange(0, BLOCK)
    mask = offs < block_elems
    tl.store(DST + dst * block_elems + offs, tl.load(SRC + src * block_elems + offs, mask=mask), mask=mask)


def copy_blocks(src_cache: torch.Tensor, dst_cache: torch.Tensor, block_mapping: torch.Tensor) -> None:
    """dst_cache[dst] = src_cache[src] for each (src, dst) row of block_mapping [n, 2].

    Same device (copy-on-write inside the pool): a Triton kernel. Across devices (swap between GPU and
    pinned host memory): a Triton kernel cannot address both, so one gathered tensor copy per call.
    """
    if block_mapping.numel() == 0:
        return
    if src_cache.device != dst_cache.device:
        src_ids = block_mapping[:, 0].to(src_cache.device, torch.long)
        dst_ids = block_mapping[:, 1].to(dst_cache.device, torch.long)
        dst_cache[dst_ids] = src_cache[src_ids].to(dst_cache.device, non_blocking=True)
        return
    assert src_cache.is_contiguous() and dst_cache.is_contiguous() and src_cache.shape[1:] == dst_cache.shape[1:]
    mapping = block_mapping.to(src_cache.device, torch.int64).contiguous()
    elems = src_cache[0].numel()
    block = 1024
    _copy_blocks_kernel[(mapping.shape[0], triton.cdiv(elems, block))](
        src_cache, dst_cache, mapping, elems, BLOCK=block
    )
