"""Where a paged allocator's blocks come from and go back to.

A block pool owns ``num_blocks`` blocks and their reference counts. It hands out free blocks
(:meth:`take`) and takes back blocks whose last reference was dropped (:meth:`on_unreferenced`).
The plain pool here keeps free blocks on a stack (the most recently freed is reused first) and caches
nothing; the caching pools (hashed_pool.py: vLLM V1's hash map and free queue, radix_pool.py: SGLang's
radix tree) also keep released blocks' content findable until the blocks are needed again.

Every pool holds to: blocks in use (ref > 0) + blocks :meth:`take` can hand out (empty or evictable)
== num_blocks; :meth:`check_invariants` asserts it and each pool's own structure.

Blocks come into existence lazily: ids ``len(ref)`` .. ``num_blocks - 1`` have never been handed out
and cost no memory, so a pool of 10^8 blocks is as cheap as its busiest moment. Every pool hands out
never-used blocks in ascending id order exactly where an eagerly built free list would have them.
"""

from __future__ import annotations

from typing import Callable

from kvsim.trace.request import Request


class BlockPool:
    """The interface, with the non-caching defaults of the prefix hooks."""

    caches_prefixes = False

    def __init__(self, num_blocks: int):
        self.num_blocks = num_blocks
        self.ref: list[int] = []  # reference count by block id; grows when a never-used block is first taken
        self.evictions = 0  # cached blocks whose content was dropped to reuse the block
        # lower cache tiers: ``spill`` takes the hash of each evicted block, ``recached`` of each block whose
        # content is cached in GPU memory again (recomputed or loaded)
        self.spill: Callable[[int], None] | None = None
        self.recached: Callable[[int], None] | None = None

    # --- supply ------------------------------------------------------------------------------
    @property
    def num_free(self) -> int:
        """Blocks :meth:`take` can hand out now (empty, or cached and unreferenced)."""
        raise NotImplementedError

    def take(self, n: int) -> list[int]:
        """n blocks (the caller checked :attr:`num_free`) with ref count 1; may evict cached content."""
        raise NotImplementedError

    def take_one(self) -> int:
        """One block (the caller checked :attr:`num_free`), ref count 1."""
        return self.take(1)[0]

    def take_one_if_free(self) -> int:
        """One block, ref count 1, or -1 when none is free (a decode's growth: one call, not two)."""
        return self.take_one() if self.num_free else -1

    @property
    def num_fresh(self) -> int:
        """Blocks never handed out yet."""
        return self.num_blocks - len(self.ref)

    def _take_fresh(self, n: int) -> list[int]:
        """The next n never-used blocks (ascending ids), ref count 1."""
        start = len(self.ref)
        self.ref.extend([1] * n)
        return list(range(start, start + n))

    def _fresh_order(self) -> list[int]:
        return list(range(len(self.ref), self.num_blocks))

    def on_unreferenced(self, block: int) -> None:
        """``block``'s ref count just dropped to 0."""
        raise NotImplementedError

    def on_unreferenced_many(self, blocks: list[int]) -> None:
        """Several blocks' ref counts just dropped to 0, in this order."""
        for b in blocks:
            self.on_unreferenced(b)

    def free_order(self) -> list[int]:
        """Unreferenced blocks in the order :meth:`take` would hand them out (for tests and inspection)."""
        raise NotImplementedError

    # --- prefix cache hooks (no-ops without a cache) --------------------------------------------
    def lookup(self, chain: list[int]) -> list[int]:
        """Blocks caching the longest run of ``chain`` (chained block hashes) from its start."""
        return []

    def claim(self, block: int) -> None:
        """A cached block nobody held is about to be referenced: it stops being evictable."""
        raise AssertionError("a pool without a cache has no cached blocks to claim")

    def after_claim(self, seq_id: int, hits: list[int], request: Request) -> None:
        """``seq_id``'s table now starts with ``hits`` (each referenced once more)."""

    def register(self, seq_id: int, chain: list[int], table: list[int], upto: int, request: Request) -> None:
        """The first ``upto`` blocks of ``seq_id``'s table now hold computed KV for ``chain[:upto]``."""

    def forget(self, seq_id: int) -> None:
        """Drop per-sequence registration state (the sequence freed or was given fresh blocks)."""

    def truncate(self, seq_id: int, table: list[int]) -> None:
        """``seq_id`` gave back its tail blocks and now holds ``table``: registration resumes after it."""

    def cached_block_count(self) -> int:
        return 0

    def cached_block(self, block_hash: int) -> int | None:
        """The block caching ``block_hash``, if any."""
        return None

    def cached_hash(self, block: int) -> int | None:
        """The hash of the content ``block`` caches, or None."""
        return None

    def is_cached(self, block: int) -> bool:
        return False

    # --- checks --------------------------------------------------------------------------------
    def check_invariants(self) -> None:
        assert len(self.ref) <= self.num_blocks and min(self.ref, default=0) >= 0
        order = self.free_order()
        assert len(order) == len(set(order)) == self.num_free, "a free block is listed twice"
        unreferenced = {b for b, r in enumerate(self.ref) if r == 0} | set(self._fresh_order())
        assert set(order) == unreferenced, "free set != unreferenced blocks"
        in_use = sum(1 for r in self.ref if r > 0)
        assert in_use + self.num_free == self.num_blocks, "in use + free + evictable != total"


class FreeStackPool(BlockPool):
    """No cache: freed blocks on a stack, the most recently freed handed out first, then never-used ones."""

    def __init__(self, num_blocks: int):
        super().__init__(num_blocks)
        self._free: list[int] = []  # freed blocks, the most recent last

    @property
    def num_free(self) -> int:
        return len(self._free) + self.num_blocks - len(self.ref)  # num_fresh, inlined: asked at every growth

    def take_one(self) -> int:
        if self._free:
            b = self._free.pop()
            self.ref[b] = 1
            return b
        self.ref.append(1)
        return len(self.ref) - 1

    def take_one_if_free(self) -> int:
        free, ref = self._free, self.ref
        if free:
            b = free.pop()
            ref[b] = 1
            return b
        if len(ref) < self.num_blocks:
            ref.append(1)
            return len(ref) - 1
        return -1

    def take(self, n: int) -> list[int]:
        free, ref = self._free, self.ref
        k = min(n, len(free))
        out = free[len(free) - k :]
        del free[len(free) - k :]
        out.reverse()  # the most recently freed first
        for b in out:
            ref[b] = 1
        if k < n:
            out.extend(self._take_fresh(n - k))
        return out

    def on_unreferenced(self, block: int) -> None:
        self._free.append(block)

    def on_unreferenced_many(self, blocks: list[int]) -> None:
        self._free.extend(blocks)

    def free_order(self) -> list[int]:
        return self._free[::-1] + self._fresh_order()
