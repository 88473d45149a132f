"""A first-fit allocator over a linear address range, with coalescing on free.

Used by the contiguous (reservation) policies so that external fragmentation is real: holes
between live reservations exist, and a request fits only if one hole is large enough.
"""

from __future__ import annotations

import bisect


class ExtentAllocator:
    """Address space [0, capacity); free space kept as sorted, non-adjacent (start, length) extents."""

    def __init__(self, capacity: int):
        self.capacity = capacity
        self._starts: list[int] = [0] if capacity > 0 else []
        self._lengths: list[int] = [capacity] if capacity > 0 else []
        self.free_total = capacity

    def alloc(self, size: int) -> int | None:
        """Lowest-addressed hole of at least ``size``; returns its start, or None."""
        for i, length in enumerate(self._lengths):
            if length >= size:
                start = self._starts[i]
                if length == size:
                    del self._starts[i], self._lengths[i]
                else:
                    self._starts[i] += size
                    self._lengths[i] -= size
                self.free_total -= size
                return start
        return None

    def release(self, start: int, size: int) -> None:
        i = bisect.bisect_left(self._starts, start)
        if i < len(self._starts) and self._starts[i] < start + size:
            raise ValueError(f"double free or overlap at [{start}, {start + size})")
        if i > 0 and self._starts[i - 1] + self._lengths[i - 1] > start:
            raise ValueError(f"double free or overlap at [{start}, {start + size})")
        merge_left = i > 0 and self._starts[i - 1] + self._lengths[i - 1] == start
        merge_right = i < len(self._starts) and start + size == self._starts[i]
        if merge_left and merge_right:
            self._lengths[i - 1] += size + self._lengths[i]
            del self._starts[i], self._lengths[i]
        elif merge_left:
            self._lengths[i - 1] += size
        elif merge_right:
            self._starts[i] = start
            self._lengths[i] += size
        else:
            self._starts.insert(i, start)
            self._lengths.insert(i, size)
        self.free_total += size

    def holes(self) -> list[tuple[int, int]]:
        return list(zip(self._starts, self._lengths))

    def unusable(self, need: int) -> int:
        """Free slots in holes too small for ``need``."""
        return sum(length for length in self._lengths if length < need)
