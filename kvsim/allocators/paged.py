"""vLLM-style paged KV cache: fixed-size blocks from a free list, a block table per sequence,
allocated on demand as the sequence grows and returned when it finishes."""

from __future__ import annotations

from typing import Iterable

from kvsim.allocators.base import KVAllocator
from kvsim.trace.request import Request


def blocks_for(tokens: int, block_size: int) -> int:
    return -(-tokens // block_size)


class PagedAllocator(KVAllocator):
    def __init__(self, pool_tokens: int, block_size: int = 16):
        super().__init__(pool_tokens)
        if block_size <= 0:
            raise ValueError("block size must be > 0")
        self.block_size = block_size
        self.num_blocks = pool_tokens // block_size
        self.name = f"paged:{block_size}"
        # A stack: the most recently freed block is reused first (warm in L2, like vLLM's free list).
        self._free_blocks: list[int] = list(range(self.num_blocks - 1, -1, -1))
        self._tables: dict[int, list[int]] = {}

    @property
    def usable_tokens(self) -> int:
        return self.num_blocks * self.block_size

    def footprint(self, request: Request) -> int:
        return blocks_for(request.total_tokens, self.block_size) * self.block_size

    @property
    def num_free_blocks(self) -> int:
        return len(self._free_blocks)

    def allocate(self, seq_id: int, request: Request, num_tokens: int) -> bool:
        table = self._tables.get(seq_id)
        need = -(-num_tokens // self.block_size) - (len(table) if table is not None else 0)
        if need <= 0:
            return True
        if need > len(self._free_blocks):
            return False
        new = [self._free_blocks.pop() for _ in range(need)]
        if table is None:
            self._tables[seq_id] = table = new
        else:
            table.extend(new)
        self._set_overhang(seq_id, len(table) * self.block_size, request.total_tokens)
        return True

    def free(self, seq_id: int) -> None:
        table = self._tables.pop(seq_id, None)
        if table:
            self._free_blocks.extend(reversed(table))
        self._drop_overhang(seq_id)

    def held_slots(self, seq_id: int) -> int:
        table = self._tables.get(seq_id)
        return len(table) * self.block_size if table else 0

    def block_table(self, seq_id: int) -> list[int]:
        return list(self._tables.get(seq_id, ()))

    @property
    def used_slots(self) -> int:
        return (self.num_blocks - len(self._free_blocks)) * self.block_size

    def decode_run_integrals(self, seqs: list[tuple[int, int, int]], k: int) -> tuple[int, int]:
        b = self.block_size

        def ceil_sum(m: int) -> int:  # sum_{x=1}^{m} ceil(x / b)
            q, r = divmod(m, b)
            return b * q * (q + 1) // 2 + r * (q + 1)

        used = k * self.used_slots
        internal = 0
        for sid, filled, final in seqs:
            h = len(self._tables.get(sid, ()))
            end = filled + k
            m = max(filled, h * b)
            if end > m:  # blocks gained during the run, summed over its steps
                used += b * (ceil_sum(end) - ceil_sum(m) - h * (end - m))
            fb = -(-final // b)
            if h >= fb:
                internal += k * max(0, h * b - final)
            else:  # only the request's last block reaches past its final length
                internal += (fb * b - final) * max(0, end - max(filled, (fb - 1) * b))
        return used, internal

    def decode_headroom(self, seqs: Iterable[tuple[int, int]], k_max: int) -> int:
        b = self.block_size
        state = [(filled, len(self._tables.get(sid, ()))) for sid, filled in seqs]
        free = len(self._free_blocks)

        def needed(k: int) -> int:
            return sum(max(0, -(-(f + k) // b) - held) for f, held in state)

        if needed(k_max) <= free:
            return k_max
        lo, hi = 0, k_max  # needed(lo) <= free < needed(hi)
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if needed(mid) <= free:
                lo = mid
            else:
                hi = mid
        return lo
