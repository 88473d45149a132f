"""`kvsim kernels bench`: decode attention over a sweep of batch size x context length x block size.

Each point builds a pool whose blocks are handed out in random order (a fragmented pool, as a long-
running engine has), times the paged decode kernel, and reports the KV bandwidth it achieved (bytes
of K and V it must read / time) as a fraction of the device's peak, next to PyTorch's
scaled_dot_product_attention on the same data laid out contiguously. On CPU the timed code is the
torch reference (a pipeline check, not a GPU number).
"""

from __future__ import annotations

from dataclasses import dataclass

from kvsim.errors import ConfigError
from kvsim.replay.measure import check_reference_memory, kv_bytes_read, make_pool, time_it, torch_dtype


@dataclass
class BenchOptions:
    batches: list[int] | None  # None: 1,8,64 on a GPU, 1,4 on CPU
    contexts: list[int] | None  # None: 512,4096 on a GPU, 64,256 on CPU
    block_sizes: list[int]
    dtype: str = "bf16"
    q_heads: int = 32
    kv_heads: int = 8
    head_dim: int = 128
    peak_bandwidth: float | None = None  # bytes/s to compare with; None: the preset of the GPU it runs on
    device: str | None = None
    max_pool_gib: float | None = None  # None: 40 on a GPU, 1 on CPU
    seed: int = 0
    prefill: list | None = None  # (chunk tokens, cached tokens) pairs for prefill rows (one sequence each)


def _sdpa_time(q, k, v, device):
    import torch.nn.functional as F

    group = q.shape[1] // k.shape[1]
    try:
        fn = lambda: F.scaled_dot_product_attention(q, k, v, enable_gqa=group > 1)  # noqa: E731
        fn()
    except TypeError:  # torch without enable_gqa
        k2, v2 = k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)
        fn = lambda: F.scaled_dot_product_attention(q, k2, v2)  # noqa: E731
    return time_it(fn, device)


def bench(opts: BenchOptions) -> "list[dict]":
    from kvsim.replay.measure import load_kernels as load

    from dataclasses import replace

    from kvsim.output.progress import Progress
    from kvsim.replay.measure import device_gpu

    K = load(opts.device)
    gpu = K.device == "cuda"
    opts = replace(
        opts,
        batches=opts.batches or ([1, 8, 64] if gpu else [1, 4]),
        contexts=opts.contexts or ([512, 4096] if gpu else [64, 256]),
        max_pool_gib=opts.max_pool_gib or (40.0 if gpu else 1.0),
        peak_bandwidth=opts.peak_bandwidth or (device_gpu().hbm_bandwidth if gpu and device_gpu() else float("nan")),
    )
    if opts.q_heads % opts.kv_heads:
        raise ConfigError(
            f"--q-heads {opts.q_heads} must be a multiple of --kv-heads {opts.kv_heads} (each KV head "
            "serves a whole group of query heads)"
        )
    points = [("decode", B, a, b) for B in opts.block_sizes for a in opts.batches for b in opts.contexts]
    points += [("prefill", B, chunk, cached) for B in opts.block_sizes for chunk, cached in (opts.prefill or [])]
    for kind, _, a, b in points:
        keys, queries = (a * b, 1) if kind == "decode" else (a + b, a)  # decode: one query per sequence
        check_reference_memory(keys, queries, opts.q_heads, opts.head_dim, opts.max_pool_gib, f"{kind} point {a} x {b}")
    rows = []
    with Progress(len(points), "bench", log_when_piped=True) as bar:
        for kind, B, a, b in points:
            rows.append(
                _bench_point(K, opts, B, a, b, opts.seed)
                if kind == "decode"
                else _bench_prefill_point(K, opts, B, a, b, opts.seed)
            )
            bar.advance()
    return rows


def _bench_prefill_point(K, opts: BenchOptions, B: int, chunk: int, cached: int, seed: int) -> dict:
    """One sequence computing ``chunk`` tokens after ``cached`` ones (its KV already in the pool)."""
    import functools

    import torch

    dtype = torch_dtype(opts.dtype)
    elem = torch.tensor([], dtype=dtype).element_size()
    g = torch.Generator().manual_seed(seed + 104729 * chunk + cached + B)
    ctx = cached + chunk
    pages = -(-ctx // B)
    kc, vc = make_pool(pages, B, opts.kv_heads, opts.head_dim, dtype, K.device, opts.max_pool_gib, seed)
    bt = torch.randperm(pages, generator=g).reshape(1, pages).to(torch.int32).to(K.device)
    lens = torch.tensor([ctx], dtype=torch.int32, device=K.device)
    starts = torch.tensor([0, chunk], dtype=torch.int32, device=K.device)
    q = torch.randn(chunk, opts.q_heads, opts.head_dim, generator=g).to(dtype).to(K.device)
    scale = opts.head_dim**-0.5
    if K.device == "cuda":
        run = functools.partial(K.paged_prefill_attention, q, kc, vc, bt, lens, starts, scale)
        t, impl = time_it(run, "cuda"), K.mode
    else:
        run = functools.partial(K.paged_prefill_attention_ref, q, kc, vc, bt, lens, starts, scale)
        t, impl = time_it(run, "cpu", reps=3), "torch-reference-cpu (pipeline check, not a GPU number)"
    nbytes = kv_bytes_read([ctx], opts.kv_heads, opts.head_dim, elem)
    return {
        "source": "bench",
        "device": K.device,
        "impl": impl,
        "kind": "prefill",
        "dtype": opts.dtype,
        "block_size": B,
        "q_heads": opts.q_heads,
        "kv_heads": opts.kv_heads,
        "head_dim": opts.head_dim,
        "num_seqs": 1,
        "new_tokens": chunk,
        "total_context": ctx,
        "max_context": ctx,
        "kv_bytes": nbytes,
        "time_s": t,
        "achieved_bw": nbytes / t,
        "peak_bw": opts.peak_bandwidth,
        "frac_of_peak": nbytes / t / opts.peak_bandwidth,
        "sdpa_time_s": float("nan"),
        "ratio_vs_sdpa": float("nan"),
    }


def _bench_point(K, opts: BenchOptions, B: int, batch: int, ctx: int, seed: int) -> dict:
    """One sweep point; its tensors are freed on return, before the next point allocates."""
    import functools

    import torch

    dtype = torch_dtype(opts.dtype)
    elem = torch.tensor([], dtype=dtype).element_size()
    g = torch.Generator().manual_seed(seed + 7919 * batch + ctx + B)
    scale = opts.head_dim**-0.5
    pages = -(-ctx // B)
    nblocks = batch * pages
    kc, vc = make_pool(nblocks, B, opts.kv_heads, opts.head_dim, dtype, K.device, opts.max_pool_gib, seed)
    bt = torch.randperm(nblocks, generator=g).reshape(batch, pages).to(torch.int32).to(K.device)
    lens = torch.full((batch,), ctx, dtype=torch.int32, device=K.device)
    q = torch.randn(batch, opts.q_heads, opts.head_dim, generator=g).to(dtype).to(K.device)
    if K.device == "cuda":
        run = functools.partial(K.paged_decode_attention, q, kc, vc, bt, lens, scale, max_context=ctx)
        t, impl = time_it(run, "cuda"), K.mode
    else:
        run = functools.partial(K.paged_decode_attention_ref, q, kc, vc, bt, lens, scale)
        t, impl = time_it(run, "cpu", reps=3), "torch-reference-cpu (pipeline check, not a GPU number)"
    # the same KV laid out contiguously, for scaled_dot_product_attention
    kk = kc[bt.long()].reshape(batch, pages * B, opts.kv_heads, opts.head_dim)[:, :ctx].transpose(1, 2).contiguous()
    vv = vc[bt.long()].reshape(batch, pages * B, opts.kv_heads, opts.head_dim)[:, :ctx].transpose(1, 2).contiguous()
    sdpa = _sdpa_time(q[:, :, None, :], kk, vv, K.device)
    nbytes = kv_bytes_read([ctx] * batch, opts.kv_heads, opts.head_dim, elem)
    return {
        "source": "bench",
        "device": K.device,
        "impl": impl,
        "kind": "decode",
        "dtype": opts.dtype,
        "block_size": B,
        "q_heads": opts.q_heads,
        "kv_heads": opts.kv_heads,
        "head_dim": opts.head_dim,
        "num_seqs": batch,
        "new_tokens": batch,
        "total_context": batch * ctx,
        "max_context": ctx,
        "kv_bytes": nbytes,
        "time_s": t,
        "achieved_bw": nbytes / t,
        "peak_bw": opts.peak_bandwidth,
        "frac_of_peak": nbytes / t / opts.peak_bandwidth,
        "sdpa_time_s": sdpa,
        "ratio_vs_sdpa": t / sdpa,
    }
