"""vLLM V1-style automatic prefix caching on top of paged blocks (`paged:B+prefix`).

- Full prompt blocks are identified by chained hashes (block_keys.py). Once a block's tokens are
  computed, its hash is registered in a hash -> block map.
- A new (or restarted) request reuses the longest run of cached blocks from its start; each hit
  block gains a reference. When every prompt token would hit, the last block is recomputed so that
  the step still produces logits (V1 caps hits at prompt length - 1, block aligned).
- A block whose reference count drops to 0 keeps its hash and goes to the tail of an LRU free
  queue (a request's tail blocks first, so they are evicted before its head). Blocks are taken from
  the head of the queue; a taken block that still carries a hash is evicted from the map then (lazily).
"""

from __future__ import annotations

from collections import OrderedDict

from kvsim.allocators.prefix_reuse import PrefixReuseAllocator
from kvsim.trace.request import Request


class PrefixCachingAllocator(PrefixReuseAllocator):
    def __init__(self, pool_tokens: int, block_size: int = 16, cpu_swap_tokens: int = 0):
        super().__init__(pool_tokens, block_size, cpu_swap_tokens)
        self.name = f"paged:{block_size}+prefix"
        self._free_queue: OrderedDict[int, None] = OrderedDict((b, None) for b in range(self.num_blocks))
        self._free_blocks = []  # unused: the queue replaces the stack
        self._hash_of: dict[int, int] = {}
        self._cached: dict[int, int] = {}
        self._registered: dict[int, int] = {}  # seq_id -> leading blocks already offered to the cache

    # --- block supply ---------------------------------------------------------------------------
    @property
    def num_free_blocks(self) -> int:
        return len(self._free_queue)

    def _take(self, n: int) -> list[int]:
        out = []
        for _ in range(n):
            b, _ = self._free_queue.popitem(last=False)
            h = self._hash_of.pop(b, None)
            if h is not None:  # lazy eviction of a cached block
                del self._cached[h]
                self.stats["evictions"] += 1
            self.ref[b] = 1
            out.append(b)
        return out

    def _on_block_free(self, b: int) -> None:
        self._free_queue[b] = None

    # --- prefix reuse -----------------------------------------------------------------------------
    def _find_hits(self, chain: list[int]) -> list[int]:
        hits = []
        for h in chain:
            b = self._cached.get(h)
            if b is None:
                break
            hits.append(b)
        return hits

    def _claim_unreferenced(self, block: int) -> None:
        del self._free_queue[block]

    def _after_claim(self, seq_id: int, hits: list[int]) -> None:
        self._registered[seq_id] = len(hits)

    def _forget(self, seq_id: int) -> None:
        self._registered.pop(seq_id, None)

    def on_computed(self, seq_id: int, request: Request, computed_tokens: int) -> None:
        """Register the hashes of prompt blocks whose KV is now computed."""
        chain = self._chain(seq_id, request)
        table = self._tables.get(seq_id)
        if not table:
            return
        done = self._registered.get(seq_id, 0)
        upto = min(len(chain), computed_tokens // self.block_size, len(table))
        for j in range(done, upto):
            b, h = table[j], chain[j]
            if b not in self._hash_of and h not in self._cached:
                self._cached[h] = b
                self._hash_of[b] = h
        if upto > done:
            self._registered[seq_id] = upto

    # --- introspection for tests and metrics --------------------------------------------------------
    def cached_block_count(self) -> int:
        return len(self._cached)

    def is_cached(self, block: int) -> bool:
        return block in self._hash_of
