"""Lower tiers of a prefix cache: host memory, disk or a store shared by a fleet.

A cached block evicted from GPU memory keeps its content one tier down (vLLM's KV offloading, LMCache,
SGLang's HiCache): its hash moves to the engine's CPU tier (a block that tier evicts moves on to a slower
private tier, if any), and a copy goes to the store the fleet shares, if there is one, so that every
replica can find it. A prefix lookup that runs out of GPU hits continues in the tiers, private ones
first; a block found there is loaded into a fresh GPU block before the request computes anything (its
bytes over the tier's bandwidth, after the tier's fixed latency).

The GPU and an engine's private tier are exclusive (a loaded block leaves the CPU tier, an evicted one
leaves the GPU), so no block is in both. A shared tier is a cache of its own, inclusive: a block one
replica loads stays there for the others.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass


@dataclass(frozen=True)
class TierSpec:
    """A tier's size and speed: ``capacity_bytes``, ``bandwidth`` bytes/s into one GPU, ``latency_s`` per load."""

    name: str
    capacity_bytes: float
    bandwidth: float
    latency_s: float = 0.0
    shared: bool = False


class KVTier:
    """Block hashes whose KV a tier holds, least recently used first, at most ``capacity`` blocks."""

    def __init__(self, spec: TierSpec, block_bytes: int):
        self.spec = spec
        self.name = spec.name
        self.block_bytes = block_bytes
        self.capacity = int(spec.capacity_bytes // block_bytes) if block_bytes > 0 else 0
        self.lower: KVTier | None = None  # where blocks this tier evicts go
        self._lru: OrderedDict[int, None] = OrderedDict()
        self.stats = {"stored_blocks": 0, "evicted_blocks": 0, "loaded_blocks": 0}

    def __contains__(self, block_hash: int) -> bool:
        return block_hash in self._lru

    def __len__(self) -> int:
        return len(self._lru)

    def put(self, block_hash: int) -> None:
        """Keep the content of ``block_hash`` (evicted from above), evicting the least recently used if full."""
        if self.capacity <= 0:
            if self.lower is not None:
                self.lower.put(block_hash)
            return
        lru = self._lru
        if block_hash in lru:
            lru.move_to_end(block_hash)
            return
        lru[block_hash] = None
        self.stats["stored_blocks"] += 1
        if len(lru) > self.capacity:
            old, _ = lru.popitem(last=False)
            self.stats["evicted_blocks"] += 1
            if self.lower is not None:
                self.lower.put(old)

    def touch(self, block_hash: int) -> None:
        """A lookup found the block: it is the most recently used."""
        if block_hash in self._lru:
            self._lru.move_to_end(block_hash)

    def load(self, block_hash: int) -> None:
        """The block's content was copied into GPU memory; a private tier gives it up (exclusive tiers)."""
        self.stats["loaded_blocks"] += 1
        if not self.spec.shared:
            self._lru.pop(block_hash, None)

    def discard(self, block_hash: int) -> None:
        """The GPU computed this content again: a private tier drops its copy (exclusive tiers)."""
        if not self.spec.shared:
            self._lru.pop(block_hash, None)

    def seconds(self, blocks: int) -> float:
        """Time to load ``blocks`` blocks into one GPU."""
        if blocks <= 0:
            return 0.0
        return self.spec.latency_s + blocks * self.block_bytes / self.spec.bandwidth

    def counters(self) -> dict:
        out = {f"tier_{self.name}_{k}": v for k, v in self.stats.items()}
        out[f"tier_{self.name}_capacity_blocks"] = self.capacity
        out[f"tier_{self.name}_used_blocks"] = len(self._lru)
        out[f"tier_{self.name}_loaded_gb"] = self.stats["loaded_blocks"] * self.block_bytes / 1e9
        return out
