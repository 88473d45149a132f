"""Triton paged attention over the KV layout [num_blocks, block_size, num_kv_heads, head_dim].

Decode: one query token per sequence. Flash-decoding: the context is cut into splits; a program
(sequence, KV head, split) runs online softmax over its tokens in tiles of TILE tokens, gathering
each token's block through the block table (so any block size works with any tile), for all query
heads of its GQA group at once. A second kernel merges the splits by their log-sum-exp. A split that
receives no tokens writes lse = -inf and a zero partial, which the merge weighs by 0 (no NaN).

Prefill: the query tokens of a chunk attend causally to the sequence's cached prefix and to
themselves (their KV was written first), reading keys through the block table.
"""

from __future__ import annotations

import math

import torch
import triton
import triton.language as tl

from ._runtime import interpreting


@triton.jit
def _gather_kv(
    K, V, BT, bt_row, t, tmask, kvh, d, dmask, s_kb, s_kt, s_kh, BLOCK_SIZE: tl.constexpr, DOT_F32: tl.constexpr
):
    """K and V [TILE, BLOCK_D] of tokens t, each found through the block table row at BT + bt_row."""
    blk = tl.load(BT + bt_row + t // BLOCK_SIZE, mask=tmask, other=0).to(tl.int64)
    off = blk[:, None] * s_kb + (t % BLOCK_SIZE)[:, None] * s_kt + kvh * s_kh + d[None, :]
    kvmask = tmask[:, None] & dmask[None, :]
    k = tl.load(K + off, mask=kvmask, other=0.0)
    v = tl.load(V + off, mask=kvmask, other=0.0)
    if DOT_F32:
        k = k.to(tl.float32)
        v = v.to(tl.float32)
    return k, v


@triton.jit
def _online_softmax_step(q, k, v, ok, m_i, l_i, acc, scale, F32: tl.constexpr):
    """One tile of online softmax; ``ok`` masks (query, key) pairs. A row with nothing visible yet keeps
    m = -inf and contributes nothing (no NaN). F32: operands are fp32, multiply them exactly (no TF32)."""
    if F32:
        s = tl.dot(q, tl.trans(k), input_precision="ieee") * scale
    else:
        s = tl.dot(q, tl.trans(k)) * scale
    s = tl.where(ok, s, float("-inf"))
    m_new = tl.maximum(m_i, tl.max(s, 1))
    m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
    p = tl.exp(s - m_safe[:, None])
    alpha = tl.exp(m_i - m_safe)
    l_i = l_i * alpha + tl.sum(p, 1)
    if F32:
        acc = acc * alpha[:, None] + tl.dot(p, v, input_precision="ieee")
    else:
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
    return m_new, l_i, acc


@triton.jit
def _decode_split_kernel(
    Q,
    K,
    V,
    BT,
    CTX,
    OP,
    LSE,
    scale,
    tokens_per_split,
    s_qs,
    s_qh,
    s_kb,
    s_kt,
    s_kh,
    s_bts,
    s_os,
    s_oh,
    s_osp,
    s_ls,
    s_lh,
    GROUP: tl.constexpr,
    BLOCK_G: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    BLOCK_D: tl.constexpr,
    BLOCK_SIZE: tl.constexpr,
    TILE: tl.constexpr,
    DOT_F32: tl.constexpr,
):
    seq = tl.program_id(0)
    kvh = tl.program_id(1)
    split = tl.program_id(2)
    ctx = tl.load(CTX + seq)
    start = split * tokens_per_split
    end = tl.minimum(ctx, start + tokens_per_split)

    g = tl.arange(0, BLOCK_G)
    d = tl.arange(0, BLOCK_D)
    gmask = g < GROUP
    dmask = d < HEAD_DIM
    qh = kvh * GROUP + g
    q = tl.load(Q + seq * s_qs + qh[:, None] * s_qh + d[None, :], mask=gmask[:, None] & dmask[None, :], other=0.0)
    if DOT_F32:
        q = q.to(tl.float32)

    m_i = tl.full([BLOCK_G], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_G], tl.float32)
    acc = tl.zeros([BLOCK_G, BLOCK_D], tl.float32)
    for t0 in range(start, end, TILE):
        t = t0 + tl.arange(0, TILE)
        tmask = t < end
        k, v = _gather_kv(K, V, BT, seq * s_bts, t, tmask, kvh, d, dmask, s_kb, s_kt, s_kh, BLOCK_SIZE, DOT_F32)
        m_i, l_i, acc = _online_softmax_step(q, k, v, tmask[None, :], m_i, l_i, acc, scale, DOT_F32)

    has = l_i > 0
    out = acc / tl.where(has, l_i, 1.0)[:, None]
    lse = tl.where(has, m_i + tl.log(tl.where(has, l_i, 1.0)), float("-inf"))
    omask = gmask[:, None] & dmask[None, :]
    tl.store(OP + seq * s_os + qh[:, None] * s_oh + split * s_osp + d[None, :], out, mask=omask)
    tl.store(LSE + seq * s_ls + qh * s_lh + split, lse, mask=gmask)


@triton.jit
def _merge_splits_kernel(
    OP,
    LSE,
    O,
    num_splits,
    s_os,
    s_oh,
    s_osp,
    s_ls,
    s_lh,
    s_out_s,
    s_out_h,
    HEAD_DIM: tl.constexpr,
    BLOCK_D: tl.constexpr,
    BLOCK_S: tl.constexpr,
):
    seq = tl.program_id(0)
    h = tl.program_id(1)
    sp = tl.arange(0, BLOCK_S)
    d = tl.arange(0, BLOCK_D)
    smask = sp < num_splits
    lse = tl.load(LSE + seq * s_ls + h * s_lh + sp, mask=smask, other=float("-inf"))
    top = tl.max(lse, 0)
    top = tl.where(top == float("-inf"), 0.0, top)
    w = tl.exp(lse - top)
    w = tl.where(smask, w, 0.0)
    part = tl.load(
        OP + seq * s_os + h * s_oh + sp[:, None] * s_osp + d[None, :],
        mask=smask[:, None] & (d < HEAD_DIM)[None, :],
        other=0.0,
    )
    total = tl.sum(w, 0)
    out = tl.sum(part * w[:, None], 0) / tl.where(total > 0, total, 1.0)
    tl.store(O + seq * s_out_s + h * s_out_h + d, out.to(O.dtype.element_ty), mask=d < HEAD_DIM)


def _pow2(n: int, floor: int = 1) -> int:
    return max(floor, 1 << (max(n, 1) - 1).bit_length())


def choose_num_splits(num_seqs: int, num_kv_heads: int, max_context: int, device: torch.device) -> int:
    """Enough programs to fill the GPU (about 4 per SM), but no split shorter than 256 tokens."""
    if device.type == "cuda":
        target = 4 * torch.cuda.get_device_properties(device).multi_processor_count
    else:
        target = 1
    want = -(-target // max(1, num_seqs * num_kv_heads))
    return max(1, min(want, -(-max_context // 256), 64))


def paged_decode_attention(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_tables: torch.Tensor,
    context_lens: torch.Tensor,
    scale: float,
    num_splits: int | None = None,
    max_context: int | None = None,
) -> torch.Tensor:
    """Decode attention: q [num_seqs, num_q_heads, head_dim] -> same shape, q's dtype.

    block_tables [num_seqs, max_blocks] (int32/int64; entries past a sequence's context are never read),
    context_lens [num_seqs] (tokens, >= 1, including the token being decoded).
    """
    num_seqs, hq, dim = q.shape
    _, block_size, hkv, dim_k = k_cache.shape
    assert dim == dim_k and hq % hkv == 0 and v_cache.shape == k_cache.shape
    group = hq // hkv
    if max_context is None:
        max_context = int(context_lens.max()) if num_seqs else 0
    splits = num_splits or choose_num_splits(num_seqs, hkv, max_context, q.device)
    tile = max(16, min(64, _pow2(block_size)))
    per_split = -(-max(max_context, 1) // splits)
    per_split = -(-per_split // tile) * tile  # tiles never straddle two splits
    out = torch.empty_like(q)
    part = torch.empty((num_seqs, hq, splits, dim), dtype=torch.float32, device=q.device)
    lse = torch.empty((num_seqs, hq, splits), dtype=torch.float32, device=q.device)
    if num_seqs == 0:
        return out
    f32 = interpreting() or q.dtype == torch.float32
    _decode_split_kernel[(num_seqs, hkv, splits)](
        q,
        k_cache,
        v_cache,
        block_tables,
        context_lens,
        part,
        lse,
        scale,
        per_split,
        q.stride(0),
        q.stride(1),
        k_cache.stride(0),
        k_cache.stride(1),
        k_cache.stride(2),
        block_tables.stride(0),
        part.stride(0),
        part.stride(1),
        part.stride(2),
        lse.stride(0),
        lse.stride(1),
        GROUP=group,
        BLOCK_G=_pow2(group, 16),
        HEAD_DIM=dim,
        BLOCK_D=_pow2(dim, 16),
        BLOCK_SIZE=block_size,
        TILE=tile,
        DOT_F32=f32,
        num_warps=4,
    )
    _merge_splits_kernel[(num_seqs, hq)](
        part,
        lse,
        out,
        splits,
        part.stride(0),
        part.stride(1),
        part.stride(2),
        lse.stride(0),
        lse.stride(1),
        out.stride(0),
        out.stride(1),
        HEAD_DIM=dim,
        BLOCK_D=_pow2(dim, 16),
        BLOCK_S=_pow2(splits, 2),
    )
    return out


@triton.jit
def _prefill_kernel(
    Q,
    K,
    V,
    BT,
    CTX,
    QSTART,
    O,
    scale,
    s_qt,
    s_qh,
    s_kb,
    s_kt,
    s_kh,
    s_bts,
    s_ot,
    s_oh,
    GROUP: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    BLOCK_D: tl.constexpr,
    BLOCK_SIZE: tl.constexpr,
    BLOCK_M: tl.constexpr,
    TILE: tl.constexpr,
    DOT_F32: tl.constexpr,
):
    seq = tl.program_id(0)
    h = tl.program_id(1)
    mt = tl.program_id(2)
    q0 = tl.load(QSTART + seq)
    q_len = tl.load(QSTART + seq + 1) - q0
    if mt * BLOCK_M >= q_len:
        return
    ctx = tl.load(CTX + seq)
    kvh = h // GROUP
    i = mt * BLOCK_M + tl.arange(0, BLOCK_M)
    qmask = i < q_len
    pos = ctx - q_len + i  # position of each query token in its sequence
    d = tl.arange(0, BLOCK_D)
    dmask = d < HEAD_DIM
    q = tl.load(Q + (q0 + i)[:, None] * s_qt + h * s_qh + d[None, :], mask=qmask[:, None] & dmask[None, :], other=0.0)
    if DOT_F32:
        q = q.to(tl.float32)
    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_D], tl.float32)
    last = tl.minimum(ctx, ctx - q_len + (mt + 1) * BLOCK_M)  # keys past the tile's last query are masked anyway
    for t0 in range(0, last, TILE):
        t = t0 + tl.arange(0, TILE)
        tmask = t < last
        k, v = _gather_kv(K, V, BT, seq * s_bts, t, tmask, kvh, d, dmask, s_kb, s_kt, s_kh, BLOCK_SIZE, DOT_F32)
        ok = tmask[None, :] & (t[None, :] <= pos[:, None]) & qmask[:, None]
        m_i, l_i, acc = _online_softmax_step(q, k, v, ok, m_i, l_i, acc, scale, DOT_F32)
    out = acc / tl.where(l_i > 0, l_i, 1.0)[:, None]
    tl.store(
        O + (q0 + i)[:, None] * s_ot + h * s_oh + d[None, :],
        out.to(O.dtype.element_ty),
        mask=qmask[:, None] & dmask[None, :],
    )


def paged_prefill_attention(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_tables: torch.Tensor,
    context_lens: torch.Tensor,
    query_start_loc: torch.Tensor,
    scale: float,
    max_query_len: int | None = None,
) -> torch.Tensor:
    """Chunked-prefill / prefix-hit attention. q [total_query_tokens, num_q_heads, head_dim]; sequence s
    owns rows query_start_loc[s]:query_start_loc[s+1], which are the last tokens of its context of
    context_lens[s] tokens (their KV already written). Returns q's shape and dtype."""
    total, hq, dim = q.shape
    _, block_size, hkv, _ = k_cache.shape
    num_seqs = context_lens.shape[0]
    out = torch.empty_like(q)
    if total == 0 or num_seqs == 0:
        return out
    if max_query_len is None:
        max_query_len = int((query_start_loc[1:] - query_start_loc[:-1]).max())
    block_m = 16
    tile = max(16, min(64, _pow2(block_size)))
    grid = (num_seqs, hq, max(1, math.ceil(max_query_len / block_m)))
    _prefill_kernel[grid](
        q,
        k_cache,
        v_cache,
        block_tables,
        context_lens,
        query_start_loc,
        out,
        scale,
        q.stride(0),
        q.stride(1),
        k_cache.stride(0),
        k_cache.stride(1),
        k_cache.stride(2),
        block_tables.stride(0),
        out.stride(0),
        out.stride(1),
        GROUP=hq // hkv,
        HEAD_DIM=dim,
        BLOCK_D=_pow2(dim, 16),
        BLOCK_SIZE=block_size,
        BLOCK_M=block_m,
        TILE=tile,
        DOT_F32=interpreting() or q.dtype == torch.float32,
        num_warps=4,
    )
    return out
