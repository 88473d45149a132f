"""KV-cache allocators behind one interface (base.py), named and built in registry.py."""

from kvsim.allocators.base import MEMORY_CATEGORIES, NO_HIT, Breakdown, KVAllocator, PrefixHit
from kvsim.allocators.registry import (
    AllocatorSpec,
    allocator_help,
    example_specs,
    make_allocator,
    parse_allocator,
    parse_allocator_list,
)

__all__ = [
    "MEMORY_CATEGORIES",
    "NO_HIT",
    "Breakdown",
    "KVAllocator",
    "PrefixHit",
    "AllocatorSpec",
    "allocator_help",
    "example_specs",
    "make_allocator",
    "parse_allocator",
    "parse_allocator_list",
]
