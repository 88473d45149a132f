"""Allocator names on the command line -> allocator objects."""

from __future__ import annotations

from kvsim.allocators.base import KVAllocator
from kvsim.allocators.contiguous import MaxAllocator, OracleAllocator, Pow2Allocator
from kvsim.allocators.paged import PagedAllocator
from kvsim.allocators.prefix import PrefixCachingAllocator
from kvsim.allocators.radix import RadixCacheAllocator
from kvsim.errors import ConfigError

ALLOCATOR_HELP = {
    "max": "contiguous reservation of max_seq_len per request (FasterTransformer, Orca(Max))",
    "pow2": "contiguous reservation of next power of two >= prompt+output (Orca(Pow2))",
    "oracle": "contiguous reservation of exactly prompt+output (Orca(Oracle))",
    "paged:B": "vLLM-style blocks of B tokens (default 16), allocated on demand",
    "paged:B+prefix": "paged with vLLM V1 automatic prefix caching (hash-chained full blocks, LRU free queue)",
    "radix[:B]": "paged with an SGLang-style radix tree of cached prefixes (LRU eviction of unreferenced leaves)",
}

_CONTIGUOUS = {"max": MaxAllocator, "pow2": Pow2Allocator, "oracle": OracleAllocator}


def _block_size(spec: str, arg: str) -> int:
    try:
        block = int(arg) if arg else 16
    except ValueError:
        raise ConfigError(f"allocator '{spec}': block size '{arg}' is not an integer") from None
    if block <= 0:
        raise ConfigError(f"allocator '{spec}': block size must be > 0")
    return block


def make_allocator(spec: str, pool_tokens: int, max_seq_len: int, cpu_swap_tokens: int = 0) -> KVAllocator:
    """Build an allocator from its CLI name, e.g. ``max``, ``paged:16``, ``paged:16+prefix``, ``radix``.

    ``cpu_swap_tokens``: host-memory slots for swapped-out KV (paged allocators only).
    """
    name = spec.strip().lower()
    if name in _CONTIGUOUS:
        return _CONTIGUOUS[name](pool_tokens, max_seq_len)
    head, plus, option = name.partition("+")
    base, _, arg = head.partition(":")
    if base == "paged" and not plus:
        return PagedAllocator(pool_tokens, _block_size(spec, arg), cpu_swap_tokens)
    if base == "paged" and option == "prefix":
        return PrefixCachingAllocator(pool_tokens, _block_size(spec, arg), cpu_swap_tokens)
    if base == "radix" and not plus:
        return RadixCacheAllocator(pool_tokens, _block_size(spec, arg), cpu_swap_tokens)
    raise ConfigError(f"unknown allocator '{spec}' (known: {', '.join(ALLOCATOR_HELP)})")


def parse_allocator_list(text: str) -> list[str]:
    names = [s.strip() for s in text.split(",") if s.strip()]
    if not names:
        raise ConfigError("--allocators is empty")
    for n in names:
        make_allocator(n, 1 << 20, 4096)  # validate early, before any simulation runs
    if len(set(names)) != len(names):
        raise ConfigError(f"--allocators lists a name twice: {text}")
    return names
