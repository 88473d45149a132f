"""Allocator names on the command line -> allocator objects."""

from __future__ import annotations

from kvsim.allocators.base import KVAllocator
from kvsim.allocators.contiguous import MaxAllocator, OracleAllocator, Pow2Allocator
from kvsim.allocators.paged import PagedAllocator
from kvsim.errors import ConfigError

ALLOCATOR_HELP = {
    "max": "contiguous reservation of max_seq_len per request (FasterTransformer, Orca(Max))",
    "pow2": "contiguous reservation of next power of two >= prompt+output (Orca(Pow2))",
    "oracle": "contiguous reservation of exactly prompt+output (Orca(Oracle))",
    "paged:B": "vLLM-style blocks of B tokens (default 16), allocated on demand",
}

_CONTIGUOUS = {"max": MaxAllocator, "pow2": Pow2Allocator, "oracle": OracleAllocator}


def make_allocator(spec: str, pool_tokens: int, max_seq_len: int) -> KVAllocator:
    """Build an allocator from its CLI name, e.g. ``max`` or ``paged:16``."""
    name = spec.strip().lower()
    if name in _CONTIGUOUS:
        return _CONTIGUOUS[name](pool_tokens, max_seq_len)
    base, _, arg = name.partition(":")
    if base == "paged":
        try:
            block = int(arg) if arg else 16
        except ValueError:
            raise ConfigError(f"allocator '{spec}': block size '{arg}' is not an integer") from None
        if block <= 0:
            raise ConfigError(f"allocator '{spec}': block size must be > 0")
        return PagedAllocator(pool_tokens, block)
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
