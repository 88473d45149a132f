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

from kvsim.allocators.block_keys import prompt_block_hashes
from kvsim.allocators.paged import PagedAllocator
from kvsim.trace.request import Request


class PrefixCachingAllocator(PagedAllocator):
    def __init__(self, pool_tokens: int, block_size: int = 16, cpu_swap_tokens: int = 0):
        super().__init__(pool_tokens, block_size, cpu_swap_tokens)
        self.name = f"paged:{block_size}+prefix"
        self._free_queue: OrderedDict[int, None] = OrderedDict((b, None) for b in range(self.num_blocks))
        self._free_blocks = []  # unused: the queue replaces the stack
        self._hash_of: dict[int, int] = {}
        self._cached: dict[int, int] = {}
        self._chains: dict[int, list[int]] = {}  # seq_id -> its prompt block hashes
        self._registered: dict[int, int] = {}  # seq_id -> leading blocks already offered to the cache
        self._pending: dict[int, list[int]] = {}  # seq_id -> hit blocks found by the lookup just made
        self.stats.update(hit_blocks=0, lookup_blocks=0, evictions=0)

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
    def _chain(self, seq_id: int, request: Request) -> list[int]:
        chain = self._chains.get(seq_id)
        if chain is None:
            chain = self._chains[seq_id] = prompt_block_hashes(request, self.block_size)
        return chain

    def cached_prefix_tokens(self, seq_id: int, request: Request, max_tokens: int) -> int:
        chain = self._chain(seq_id, request)
        limit = min(len(chain), max_tokens // self.block_size)
        hits = []
        for h in chain[:limit]:
            b = self._cached.get(h)
            if b is None:
                break
            hits.append(b)
        self._pending[seq_id] = hits
        return len(hits) * self.block_size

    def allocate(self, seq_id: int, request: Request, num_tokens: int) -> bool:
        hits = self._pending.pop(seq_id, None)
        if hits is None:
            return super().allocate(seq_id, request, num_tokens)
        if hits:
            # Claim the hits before taking new blocks, so the take can never evict one of them.
            in_queue = sum(1 for b in hits if self.ref[b] == 0)
            if -(-num_tokens // self.block_size) - len(hits) > self.num_free_blocks - in_queue:
                return False
            self._claim(hits)
            self._tables[seq_id] = list(hits)
            self._registered[seq_id] = len(hits)
        if not super().allocate(seq_id, request, num_tokens):
            return False
        self.stats["lookup_blocks"] += request.prompt_tokens // self.block_size
        self.stats["hit_blocks"] += len(hits)
        return True

    def _claim(self, hits: list[int]) -> None:
        for b in hits:
            if self.ref[b] == 0:
                del self._free_queue[b]
            else:
                self._shared_extra += self.block_size
            self.ref[b] += 1

    def on_computed(self, seq_id: int, request: Request, computed_tokens: int) -> None:
        """Register the hashes of prompt blocks whose KV is now computed."""
        chain = self._chain(seq_id, request)
        table = self._tables.get(seq_id)
        if not table:
            return
        upto = min(len(chain), computed_tokens // self.block_size, len(table))
        for j in range(self._registered.get(seq_id, 0), upto):
            b, h = table[j], chain[j]
            if b not in self._hash_of and h not in self._cached:
                self._cached[h] = b
                self._hash_of[b] = h
        if upto > self._registered.get(seq_id, 0):
            self._registered[seq_id] = upto

    def free(self, seq_id: int) -> None:
        super().free(seq_id)
        self._registered.pop(seq_id, None)
        self._pending.pop(seq_id, None)
        self._chains.pop(seq_id, None)

    def swap_in(self, seq_id: int, request: Request):
        mapping = super().swap_in(seq_id, request)
        if mapping is not None:
            self._registered[seq_id] = 0  # fresh blocks: offer them to the cache again
        return mapping

    # --- introspection for tests and metrics --------------------------------------------------------
    def cached_block_count(self) -> int:
        return len(self._cached)

    def is_cached(self, block: int) -> bool:
        return block in self._hash_of

    def counters(self) -> dict:
        return dict(self.stats)
