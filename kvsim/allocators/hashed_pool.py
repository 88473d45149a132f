"""vLLM V1-style prefix cache as a block pool (`paged:B+prefix`).

- Full prompt blocks are identified by chained hashes (block_keys.py). Once a block's tokens are
  computed, its hash is registered in a hash -> block map.
- A block whose reference count drops to 0 keeps its hash and joins the free queue. With the default
  ``lru`` policy that is vLLM V1's queue exactly: every free block, cached or not, in the order it was
  freed (a request's tail blocks first, so they go before its head); blocks are taken from the head,
  and a taken block that still carries a hash is evicted then (lazily). Never-used blocks (block_pool.py)
  stand at the head of the queue. Other policies
  (cache_eviction.py) take empty blocks first, then cached blocks by their key.
"""

from __future__ import annotations

import heapq
from collections import OrderedDict, deque

from kvsim.allocators.block_pool import BlockPool
from kvsim.allocators.cache_eviction import BlockUse, EvictionKey, get_eviction_key
from kvsim.trace.request import Request


class _LruQueue:
    """vLLM V1's free block queue: every free block, cached or not, in the order it was freed."""

    def __init__(self):
        self._q: OrderedDict[int, None] = OrderedDict()

    def __len__(self) -> int:
        return len(self._q)

    def push(self, block: int, cached: bool) -> None:
        self._q[block] = None

    def pop(self) -> int:
        return self._q.popitem(last=False)[0]

    def pop_many(self, n: int) -> list[int]:
        popitem = self._q.popitem
        return [popitem(False)[0] for _ in range(n)]

    def extend(self, blocks: list[int]) -> None:
        """Free ``blocks`` in this order (the queue needs no cached flag)."""
        q = self._q
        for b in blocks:
            q[b] = None

    def remove(self, block: int) -> None:
        del self._q[block]

    def order(self) -> list[int]:
        return list(self._q)


class _KeyedQueue:
    """Empty blocks first (oldest first), then cached blocks by the policy's key (a lazy heap)."""

    def __init__(self, key: EvictionKey, uses: dict[int, BlockUse]):
        self._empty: deque[int] = deque()
        self._heap: list[tuple[tuple, int, int]] = []
        self._live: dict[int, int] = {}  # cached free block -> its heap entry's tick
        self._tick = 0
        self._key, self._uses = key, uses

    def __len__(self) -> int:
        return len(self._empty) + len(self._live)

    def push(self, block: int, cached: bool) -> None:
        if not cached:
            self._empty.append(block)
            return
        self._tick += 1
        self._live[block] = self._tick
        heapq.heappush(self._heap, (self._key(self._uses[block]), self._tick, block))

    def pop(self) -> int:
        if self._empty:
            return self._empty.popleft()
        while True:
            _, tick, block = heapq.heappop(self._heap)
            if self._live.get(block) == tick:
                del self._live[block]
                return block

    def pop_many(self, n: int) -> list[int]:
        return [self.pop() for _ in range(n)]

    def remove(self, block: int) -> None:
        if self._live.pop(block, None) is None:
            self._empty.remove(block)

    def order(self) -> list[int]:
        cached = [b for _, t, b in sorted(self._heap) if self._live.get(b) == t]
        return list(self._empty) + cached


class HashedBlockPool(BlockPool):
    caches_prefixes = True

    def __init__(self, num_blocks: int, eviction: str = "lru"):
        super().__init__(num_blocks)
        self._hash_of: dict[int, int] = {}  # block -> hash of the content it caches
        self._cached: dict[int, int] = {}  # hash -> block
        self._registered: dict[int, int] = {}  # seq_id -> leading blocks already offered to the cache
        # V1's own queue needs no use records; the other policies sort cached blocks by them.
        self._uses: dict[int, BlockUse] | None = None
        if eviction == "lru":
            self._queue: _LruQueue | _KeyedQueue = _LruQueue()
        else:
            self._uses = {}
            self._queue = _KeyedQueue(get_eviction_key(eviction), self._uses)
        self._tick = 0

    # --- supply ------------------------------------------------------------------------------
    @property
    def num_free(self) -> int:
        return len(self._queue) + self.num_blocks - len(self.ref)

    def take(self, n: int) -> list[int]:
        # Never-used blocks sit at the head of vLLM's queue (and are empty for the other policies).
        fresh = min(n, self.num_fresh)
        out = self._take_fresh(fresh) if fresh else []
        # taking and freeing are the pool's hot paths (every block boundary, every finished request): whole
        # runs of blocks go through the queue at once, not a method call per block
        got = self._queue.pop_many(n - fresh)
        hash_of = self._hash_of
        if hash_of:
            for b in got:
                if b in hash_of:  # lazy eviction of a cached block
                    self._evict(b)
        ref = self.ref
        for b in got:
            ref[b] = 1
        out += got
        return out

    def take_one_if_free(self) -> int:
        ref = self.ref
        if len(ref) < self.num_blocks:  # never-used blocks first, in ascending ids (as take)
            ref.append(1)
            return len(ref) - 1
        q = self._queue
        if not len(q):
            return -1
        b = q.pop()
        if b in self._hash_of:
            self._evict(b)
        ref[b] = 1
        return b

    def _evict(self, block: int) -> None:
        """``block`` is being reused: the content it caches is dropped (lazily, as vLLM V1 evicts)."""
        h = self._hash_of.pop(block)
        del self._cached[h]
        self.evictions += 1
        if self.spill is not None:
            self.spill(h)
        if self._uses is not None:
            del self._uses[block]

    def on_unreferenced(self, block: int) -> None:
        cached = block in self._hash_of
        if cached and self._uses is not None:
            self._tick += 1
            self._uses[block].last_use = self._tick
        self._queue.push(block, cached)

    def on_unreferenced_many(self, blocks: list[int]) -> None:
        if self._uses is None:  # vLLM's queue: appended in the order freed, cached or not
            self._queue.extend(blocks)
            return
        for b in blocks:
            self.on_unreferenced(b)

    def free_order(self) -> list[int]:
        return self._fresh_order() + self._queue.order()

    # --- prefix reuse ------------------------------------------------------------------------------
    def lookup(self, chain: list[int]) -> list[int]:
        hits = []
        for h in chain:
            b = self._cached.get(h)
            if b is None:
                break
            hits.append(b)
        return hits

    def claim(self, block: int) -> None:
        self._queue.remove(block)

    def after_claim(self, seq_id: int, hits: list[int], request: Request) -> None:
        self._registered[seq_id] = len(hits)
        if self._uses is not None:
            self._tick += 1
            for b in hits:
                u = self._uses[b]
                u.hits += 1
                u.last_use = self._tick
                u.priority = min(u.priority, request.priority)

    def register(self, seq_id: int, chain: list[int], table: list[int], upto: int, request: Request) -> None:
        done = self._registered.get(seq_id, 0)
        for j in range(done, upto):
            b, h = table[j], chain[j]
            if b >= 0 and b not in self._hash_of and h not in self._cached:  # b < 0: a window freed it
                self._cached[h] = b
                self._hash_of[b] = h
                if self.recached is not None:
                    self.recached(h)
                if self._uses is not None:
                    self._tick += 1
                    self._uses[b] = BlockUse(created=self._tick, last_use=self._tick, priority=request.priority)
        if upto > done:
            self._registered[seq_id] = upto

    def forget(self, seq_id: int) -> None:
        self._registered.pop(seq_id, None)

    def truncate(self, seq_id: int, table: list[int]) -> None:
        if self._registered.get(seq_id, 0) > len(table):
            self._registered[seq_id] = len(table)

    def cached_block_count(self) -> int:
        return len(self._cached)

    def cached_block(self, block_hash: int) -> int | None:
        return self._cached.get(block_hash)

    def cached_hash(self, block: int) -> int | None:
        return self._hash_of.get(block)

    def is_cached(self, block: int) -> bool:
        return block in self._hash_of

    def check_invariants(self) -> None:
        super().check_invariants()
        assert len(self._cached) == len(self._hash_of)
        assert all(self._cached[h] == b for b, h in self._hash_of.items()), "hash map and block map disagree"
        if self._uses is not None:
            assert set(self._uses) == set(self._hash_of), "a cached block has no use record"
