"""The CPU side of swapping: a pool of host-memory blocks that preempted sequences' KV is copied to."""

from __future__ import annotations


class SwapSpace:
    def __init__(self, num_blocks: int):
        self.num_blocks = num_blocks
        self._free: list[int] = []  # released blocks, the most recent last
        self._used = 0  # blocks 0 .. _used - 1 have been handed out at least once (the rest cost nothing)
        self._held: dict[int, list[int]] = {}

    @property
    def num_free(self) -> int:
        return len(self._free) + self.num_blocks - self._used

    def store(self, seq_id: int, n: int) -> list[int] | None:
        """n CPU blocks for ``seq_id``'s KV, or None if they are not there."""
        if n > self.num_free or seq_id in self._held:
            return None
        k = min(n, len(self._free))
        blocks = [self._free.pop() for _ in range(k)] + list(range(self._used, self._used + n - k))
        self._used += n - k
        self._held[seq_id] = blocks
        return blocks

    def held(self, seq_id: int) -> list[int] | None:
        return self._held.get(seq_id)

    def release(self, seq_id: int) -> None:
        self._free.extend(reversed(self._held.pop(seq_id)))
