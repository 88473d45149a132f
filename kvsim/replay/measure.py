"""Shared pieces of kernel replay and benchmarking: pools, timing, and the measurement table."""

from __future__ import annotations

import time

from kvsim.errors import ConfigError

TORCH_DTYPES = {
    "fp16": "float16",
    "float16": "float16",
    "bf16": "bfloat16",
    "bfloat16": "bfloat16",
    "fp32": "float32",
    "float32": "float32",
}

# Columns every measurement CSV has (replay and bench), which `kvsim calibrate` reads.
MEASUREMENT_COLUMNS = [
    "source",
    "device",
    "impl",
    "kind",
    "dtype",
    "block_size",
    "q_heads",
    "kv_heads",
    "head_dim",
    "num_seqs",
    "new_tokens",
    "total_context",
    "max_context",
    "kv_bytes",
    "time_s",
]


def load_kernels(device: str | None = None):
    """The kernel namespace (kvsim_kernels.load), with its errors as one-line kvsim errors."""
    try:
        import torch  # noqa: F401
        from kvsim_kernels import KernelUnavailable, load
    except ImportError as e:
        raise ConfigError(
            f"the kernel commands need PyTorch and Triton ({e.name} is missing): pip install 'kvsim[kernels]'"
        ) from None
    try:
        return load(device)
    except KernelUnavailable as e:
        raise ConfigError(str(e)) from None


def device_gpu():
    """The GPU preset matching the CUDA device in use (by its name), or None."""
    import torch

    from kvsim.hardware.gpus import GPU_PRESETS

    name = torch.cuda.get_device_name().lower() if torch.cuda.is_available() else ""
    mem = torch.cuda.get_device_properties(0).total_memory if name else 0
    for key, preset in (
        ("h200", "h200-141gb"),
        ("h100", "h100-80gb"),
        ("a100", "a100-80gb" if mem > 50 * 2**30 else "a100-40gb"),
        ("a40", "a40"),
        ("l40s", "l40s"),
        ("4090", "rtx-4090"),
    ):
        if key in name:
            return GPU_PRESETS[preset]
    return None


def torch_dtype(name: str):
    import torch

    try:
        return getattr(torch, TORCH_DTYPES[name])
    except KeyError:
        raise ConfigError(f"unsupported kernel dtype '{name}' (fp16, bf16, fp32)") from None


def make_pool(
    num_blocks: int, block_size: int, kv_heads: int, head_dim: int, dtype, device: str, max_gib: float, seed: int = 0
):
    """Random K and V caches of one layer, [num_blocks, block_size, kv_heads, head_dim] each."""
    import torch

    elems = num_blocks * block_size * kv_heads * head_dim
    gib = 2 * elems * torch.tensor([], dtype=dtype).element_size() / (1 << 30)
    if gib > max_gib:
        raise ConfigError(
            f"a one-layer KV pool of {num_blocks} blocks needs {gib:.1f} GiB (> --max-pool-gib {max_gib:g});"
            " raise the limit or record a smaller run"
        )
    # generated where it lives: filling a multi-GB GPU pool from the CPU would dominate a GPU check
    g = torch.Generator(device=device).manual_seed(seed)
    shape = (num_blocks, block_size, kv_heads, head_dim)
    k = torch.randn(shape, generator=g, device=device, dtype=torch.float32).to(dtype)
    v = torch.randn(shape, generator=g, device=device, dtype=torch.float32).to(dtype)
    return k, v


def check_reference_memory(keys: int, queries: int, q_heads: int, head_dim: int, max_gib: float, what: str) -> None:
    """The float32 torch reference (and SDPA's GQA fallback) expand K and V to every query head and hold a
    score per (query, key, head): refuse a check that would need more than ``max_gib`` for it, before
    allocating anything (``keys``: the KV tokens attended to at once, ``queries``: the query tokens)."""
    gib = (3 * keys * head_dim + queries * keys) * q_heads * 4 / (1 << 30)
    if gib > max_gib:
        raise ConfigError(
            f"{what}: checking it against the torch reference needs {gib:,.1f} GiB (> --max-pool-gib "
            f"{max_gib:g}: K and V for each of {q_heads:,} query heads over {keys:,} tokens); raise "
            "the limit or use fewer heads or tokens"
        )


def kv_bytes_read(context_lens, kv_heads: int, head_dim: int, elem_bytes: int) -> int:
    """Bytes of K and V an attention pass over these contexts reads."""
    return int(sum(context_lens)) * kv_heads * head_dim * 2 * elem_bytes


def time_it(fn, device: str, reps: int = 5) -> float:
    """Median seconds per call. GPU: triton.testing.do_bench (it flushes L2 before every run);
    CPU: wall clock, for pipeline checks only."""
    if device == "cuda":
        import triton.testing

        return triton.testing.do_bench(fn, warmup=10, rep=50, return_mode="median") / 1000.0
    fn()
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    times.sort()
    return times[len(times) // 2]
