"""KV-cache allocators, chosen by name: max, pow2, oracle, paged[:B]."""

from kvsim.allocators.base import MEMORY_CATEGORIES, Breakdown, KVAllocator
from kvsim.allocators.registry import ALLOCATOR_HELP, make_allocator, parse_allocator_list

__all__ = ["MEMORY_CATEGORIES", "Breakdown", "KVAllocator", "ALLOCATOR_HELP",
           "make_allocator", "parse_allocator_list"]
