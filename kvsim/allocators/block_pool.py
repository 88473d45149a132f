"""Where a paged allocator's blocks come from and go back to.

A block pool owns ``num_blocks`` blocks and their reference counts. It hands out free blocks
(:meth:`take`) and takes back blocks whose last reference was dropped (:meth:`on_unreferenced`).
The plain pool here keeps free blocks on a stack (the most recently freed is reused first) and caches
nothing; the caching pools (hashed_pool.py: vLLM V1's hash map and free queue, radix_pool.py: SGLang's
radix tree) also keep released blocks' content findable until the blocks are needed again.

Every pool holds to: blocks in use (ref > 0) + blocks :meth:`take` can hand out (empty or evictable)
== num_blocks; :meth:`check_invariants` asserts it and each pool's own structure.
"""

from __future__ import annotations

from kvsim.trace.request import Request


class BlockPool:
    """The interface, with the non-caching defaults of the prefix hooks."""

    caches_prefixes = False

    def __init__(self, num_blocks: int):
        self.num_blocks = num_blocks
        self.ref = [0] * num_blocks
        self.evictions = 0  # cached blocks whose content was dropped to reuse the block

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

    def is_cached(self, block: int) -> bool:
        return False

    # --- checks --------------------------------------------------------------------------------
    def check_invariants(self) -> None:
        assert len(self.ref) == self.num_blocks and min(self.ref, default=0) >= 0
        order = self.free_order()
        assert len(order) == len(set(order)) == self.num_free, "a free block is listed twice"
        assert set(order) == {b for b, r in enumerate(self.ref) if r == 0}, "free set != unreferenced blocks"
        in_use = sum(1 for r in self.ref if r > 0)
        assert in_use + self.num_free == self.num_blocks, "in use + free + evictable != total"


class FreeStackPool(BlockPool):
    """No cache: free blocks on a stack, the most recently freed handed out first."""

    def __init__(self, num_blocks: int):
        super().__init__(num_blocks)
        self._free: list[int] = list(range(num_blocks - 1, -1, -1))

    @property
    def num_free(self) -> int:
        return len(self._free)

    def take_one(self) -> int:
        b = self._free.pop()
        self.ref[b] = 1
        return b

    def take(self, n: int) -> list[int]:
        free, ref = self._free, self.ref
        out = free[len(free) - n:]
        del free[len(free) - n:]
        out.reverse()  # the most recently freed first
        for b in out:
            ref[b] = 1
        return out

    def on_unreferenced(self, block: int) -> None:
        self._free.append(block)

    def on_unreferenced_many(self, blocks: list[int]) -> None:
        self._free.extend(blocks)

    def free_order(self) -> list[int]:
        return self._free[::-1]
