"""Which cached block a prefix cache drops first when it needs a block and none is empty.

A policy is a sort key over a block's use record: the smallest key is evicted first. It applies to
cached blocks nobody holds (vLLM's free queue, SGLang's unreferenced leaves); blocks without cached
content are always taken before any cached one, except under vLLM V1's own ``lru`` queue, which
takes blocks strictly in the order they were freed (see hashed_pool.py).

Policies: ``lru`` (least recently used, vLLM V1 and SGLang), ``fifo`` (cached earliest), ``lfu``
(fewest reuses, then least recent), ``priority`` (blocks only less important requests used go first,
then least recent: the seed design's hybrid eviction carried over to cached blocks). Custom policies
plug in from Python through :func:`register_policy`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from kvsim.errors import ConfigError


@dataclass(slots=True)
class BlockUse:
    """What eviction policies may look at, per cached block (ticks are a pool-wide event counter)."""

    created: int = 0  # tick the block's content entered the cache
    last_use: int = 0  # tick of its last release or reuse
    hits: int = 0  # times a lookup reused it
    priority: int = 0  # the most important (lowest) priority among requests that used it


EvictionKey = Callable[[BlockUse], tuple]

CACHE_EVICTION_POLICIES: dict[str, EvictionKey] = {
    "lru": lambda u: (u.last_use,),
    "fifo": lambda u: (u.created,),
    "lfu": lambda u: (u.hits, u.last_use),
    "priority": lambda u: (-u.priority, u.last_use),
}

CACHE_EVICTION_HELP = {
    "lru": "least recently used first (vLLM V1, SGLang)",
    "fifo": "cached earliest first",
    "lfu": "fewest reuses first, then least recently used",
    "priority": "blocks only less important requests used first (trace `priority`), then LRU",
}


def register_policy(name: str, key: EvictionKey, help_text: str = "") -> None:
    """Add a cache-eviction policy: ``key(BlockUse)`` returns a tuple, smallest evicted first."""
    CACHE_EVICTION_POLICIES[name] = key
    CACHE_EVICTION_HELP[name] = help_text or "custom policy"


def get_eviction_key(name: str) -> EvictionKey:
    try:
        return CACHE_EVICTION_POLICIES[name]
    except KeyError:
        raise ConfigError(
            f"unknown cache-eviction policy '{name}' (known: {', '.join(CACHE_EVICTION_POLICIES)})"
        ) from None
