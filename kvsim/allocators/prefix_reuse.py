"""What the two prefix caches share: per-sequence prompt block hashes, a lookup whose hits are
claimed by the very next allocate (hits first, so taking new blocks can never evict one), hit
statistics, and clean-up on free. Subclasses decide how hits are found, claimed and registered."""

from __future__ import annotations

from kvsim.allocators.block_keys import prompt_block_hashes
from kvsim.allocators.paged import PagedAllocator
from kvsim.trace.request import Request


class PrefixReuseAllocator(PagedAllocator):
    def __init__(self, pool_tokens: int, block_size: int = 16, cpu_swap_tokens: int = 0):
        super().__init__(pool_tokens, block_size, cpu_swap_tokens)
        self._chains: dict[int, list[int]] = {}  # seq_id -> its prompt block hashes
        self._pending: dict[int, list[int]] = {}  # seq_id -> hit blocks found by the lookup just made
        self.stats.update(hit_blocks=0, lookup_blocks=0, evictions=0)

    # --- for subclasses -----------------------------------------------------------------------
    def _find_hits(self, chain: list[int]) -> list[int]:
        """Blocks caching the longest run of ``chain`` from its start."""
        raise NotImplementedError

    def _claim_unreferenced(self, block: int) -> None:
        """A cached block with no owner becomes referenced (leaves the evictable set)."""
        raise NotImplementedError

    def _after_claim(self, seq_id: int, hits: list[int]) -> None:
        """Bookkeeping once ``seq_id``'s table starts with ``hits``."""

    def _forget(self, seq_id: int) -> None:
        """Drop per-sequence registration state (on free and on swap-in)."""

    # --- shared ------------------------------------------------------------------------------------
    def _chain(self, seq_id: int, request: Request) -> list[int]:
        chain = self._chains.get(seq_id)
        if chain is None:
            chain = self._chains[seq_id] = prompt_block_hashes(request, self.block_size)
        return chain

    def cached_prefix_tokens(self, seq_id: int, request: Request, max_tokens: int) -> int:
        chain = self._chain(seq_id, request)
        hits = self._find_hits(chain[:max_tokens // self.block_size])
        self._pending[seq_id] = hits
        return len(hits) * self.block_size

    def allocate(self, seq_id: int, request: Request, num_tokens: int) -> bool:
        hits = self._pending.pop(seq_id, None)
        if hits is None:
            return super().allocate(seq_id, request, num_tokens)
        if hits:
            evictable = sum(1 for b in hits if self.ref[b] == 0)  # counted as free until claimed
            if -(-num_tokens // self.block_size) - len(hits) > self.num_free_blocks - evictable:
                return False
            for b in hits:
                if self.ref[b] == 0:
                    self._claim_unreferenced(b)
                else:
                    self._shared_extra += self.block_size
                self.ref[b] += 1
            self._tables[seq_id] = list(hits)
            self._after_claim(seq_id, hits)
        if not super().allocate(seq_id, request, num_tokens):
            return False
        self.stats["lookup_blocks"] += request.prompt_tokens // self.block_size
        self.stats["hit_blocks"] += len(hits)
        return True

    def free(self, seq_id: int) -> None:
        super().free(seq_id)
        self._pending.pop(seq_id, None)
        self._chains.pop(seq_id, None)
        self._forget(seq_id)

    def swap_in(self, seq_id: int, request: Request):
        mapping = super().swap_in(seq_id, request)
        if mapping is not None:
            self._forget(seq_id)  # fresh blocks: offer them to the cache again
        return mapping
