"""Contiguous per-request reservation (FasterTransformer / Orca): max, pow2 and oracle.

Each request reserves one contiguous range at admission, sized by the policy, from a first-fit
address space. It never grows, so running sequences are never preempted for memory.
"""

from __future__ import annotations

from kvsim.allocators.base import NO_HIT, Growth, KVAllocator, PrefixHit
from kvsim.allocators.extents import ExtentAllocator
from kvsim.trace.request import Request


def next_pow2(n: int) -> int:
    return 1 << (n - 1).bit_length()


class ContiguousAllocator(KVAllocator):
    """Base for reservation policies; subclasses decide the reservation size in tokens."""

    def __init__(self, pool_tokens: int, max_model_len: int):
        super().__init__(pool_tokens)
        self.max_model_len = max_model_len
        self._space = ExtentAllocator(pool_tokens)
        self._ranges: dict[int, tuple[int, int]] = {}  # seq_id -> (start, size)

    def reservation(self, request: Request) -> int:
        raise NotImplementedError

    @property
    def smallest_reservation(self) -> int:
        """The smallest reservation any request can get: holes below it are unusable by anyone."""
        return 1

    def footprint(self, request: Request) -> int:
        return self.reservation(request)

    def allocate(
        self, seq_id: int, request: Request, num_tokens: int, hit: PrefixHit = NO_HIT, computed: int | None = None
    ) -> bool:
        held = self._ranges.get(seq_id)
        if held is not None:
            return num_tokens <= held[1]
        size = self.reservation(request)
        if num_tokens > size:
            return False
        start = self._space.alloc(size)
        if start is None:
            return False
        self._ranges[seq_id] = (start, size)
        self._set_overhang(seq_id, size, request.total_tokens)
        return True

    def free(self, seq_id: int) -> None:
        rng = self._ranges.pop(seq_id, None)
        if rng is not None:
            self._space.release(*rng)
            self._drop_overhang(seq_id)

    def held_slots(self, seq_id: int) -> int:
        rng = self._ranges.get(seq_id)
        return rng[1] if rng else 0

    def next_growth(self, seq_id: int, computed: int) -> Growth | None:
        # a reservation covers the whole request: once held, growing never allocates
        return None if seq_id in self._ranges else Growth(computed + 1)

    def range_of(self, seq_id: int) -> tuple[int, int] | None:
        """(start slot, size) of a sequence's reservation."""
        return self._ranges.get(seq_id)

    @property
    def used_slots(self) -> int:
        return self.pool_tokens - self._space.free_total

    def external_fragmentation(self, next_request: Request | None) -> int:
        need = self.reservation(next_request) if next_request is not None else self.smallest_reservation
        return self._space.unusable(need)

    def check_invariants(self) -> None:
        ranges = sorted(self._ranges.values())
        for (s0, n0), (s1, _) in zip(ranges, ranges[1:]):
            assert s0 + n0 <= s1, "reservations overlap"
        assert all(0 <= s and s + n <= self.pool_tokens for s, n in ranges), "reservation outside the pool"
        holes = self._space.holes()
        assert sum(n for _, n in holes) + sum(n for _, n in ranges) == self.pool_tokens, "free + held != pool"
        assert self._overhang_total == sum(self._overhang.values())


class MaxAllocator(ContiguousAllocator):
    """Reserve max_model_len slots for every request (FasterTransformer, Orca (Max))."""

    name = "max"

    def reservation(self, request: Request) -> int:
        return self.max_model_len

    @property
    def smallest_reservation(self) -> int:
        return self.max_model_len


class Pow2Allocator(ContiguousAllocator):
    """Reserve prompt + output budget rounded up to a power of two, capped at max_model_len (Orca (Pow2))."""

    name = "pow2"

    def reservation(self, request: Request) -> int:
        return min(next_pow2(request.total_tokens), max(self.max_model_len, request.total_tokens))


class OracleAllocator(ContiguousAllocator):
    """Reserve exactly prompt + true output length (Orca (Oracle)): the best a contiguous scheme can do."""

    name = "oracle"

    def reservation(self, request: Request) -> int:
        return request.total_tokens
