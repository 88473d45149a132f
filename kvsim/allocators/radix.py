"""SGLang-style radix-tree prefix cache over paged blocks (`radix[:B]`).

The tree's edges are full prompt blocks keyed by their chained content hash (block_keys.py), so a
root-to-node path is a cached prefix. A request matches the longest path from the root and holds a
reference on every node of it. Blocks of finished requests stay in the tree; when a new block is
needed and none is free, the least recently used unreferenced *leaf* is evicted, so a prefix is never
evicted before its extensions. (vLLM's queue, by contrast, evicts any unreferenced block in LRU order.)
"""

from __future__ import annotations

import heapq

from kvsim.allocators.prefix_reuse import PrefixReuseAllocator
from kvsim.trace.request import Request


class _Node:
    __slots__ = ("key", "block", "parent", "children", "last_use", "detached")

    def __init__(self, key: int, block: int, parent: "_Node | None"):
        self.key, self.block, self.parent = key, block, parent
        self.children: dict[int, _Node] = {}
        self.last_use = 0
        self.detached = False


class RadixCacheAllocator(PrefixReuseAllocator):
    def __init__(self, pool_tokens: int, block_size: int = 16, cpu_swap_tokens: int = 0):
        super().__init__(pool_tokens, block_size, cpu_swap_tokens)
        self.name = f"radix:{block_size}"
        self.root = _Node(0, -1, None)
        self._node_of: dict[int, _Node] = {}  # block -> tree node
        self._unreferenced = 0  # tree nodes with ref 0 (all evictable, leaves first)
        self._heap: list[tuple[int, int, _Node]] = []  # (last_use, tiebreak, leaf) candidates, lazily checked
        self._tick = 0
        self._cursor: dict[int, tuple[int, _Node]] = {}  # seq_id -> (blocks offered, deepest node)

    # --- block supply ---------------------------------------------------------------------------
    @property
    def num_free_blocks(self) -> int:
        return len(self._free_blocks) + self._unreferenced

    def _push_if_leaf(self, node: _Node) -> None:
        if node is not self.root and not node.children and self.ref[node.block] == 0:
            self._tick += 1
            heapq.heappush(self._heap, (node.last_use, self._tick, node))

    def _evict_one(self) -> int:
        while True:
            _, _, node = heapq.heappop(self._heap)
            if node.detached or node.children or self.ref[node.block] != 0:
                continue  # stale entry
            del node.parent.children[node.key]
            del self._node_of[node.block]
            node.detached = True
            self._unreferenced -= 1
            self.stats["evictions"] += 1
            self._push_if_leaf(node.parent)
            return node.block

    def _take(self, n: int) -> list[int]:
        out = []
        for _ in range(n):
            b = self._free_blocks.pop() if self._free_blocks else self._evict_one()
            self.ref[b] = 1
            out.append(b)
        return out

    def _on_block_free(self, b: int) -> None:
        node = self._node_of.get(b)
        if node is None:
            self._free_blocks.append(b)
            return
        self._unreferenced += 1
        self._tick += 1
        node.last_use = self._tick
        self._push_if_leaf(node)

    # --- prefix reuse -----------------------------------------------------------------------------
    def _find_hits(self, chain: list[int]) -> list[int]:
        node, hits = self.root, []
        for h in chain:
            node = node.children.get(h)
            if node is None:
                break
            hits.append(node.block)
        return hits

    def _claim_unreferenced(self, block: int) -> None:
        self._unreferenced -= 1

    def _after_claim(self, seq_id: int, hits: list[int]) -> None:
        self._tick += 1
        for b in hits:
            self._node_of[b].last_use = self._tick
        self._cursor[seq_id] = (len(hits), self._node_of[hits[-1]])

    def _forget(self, seq_id: int) -> None:
        self._cursor.pop(seq_id, None)

    def on_computed(self, seq_id: int, request: Request, computed_tokens: int) -> None:
        table = self._tables.get(seq_id)
        if not table:
            return
        chain = self._chain(seq_id, request)
        done, node = self._cursor.get(seq_id, (0, self.root))
        upto = min(len(chain), computed_tokens // self.block_size, len(table))
        for j in range(done, upto):
            if node.detached:
                done = upto  # the path we were extending was evicted: stop offering blocks
                break
            h, b = chain[j], table[j]
            if h in node.children or b in self._node_of:
                # Another block already caches this content: ours stays private, and so do the rest
                # (hanging referenced blocks under a path this sequence does not hold would let an
                # unreferenced node have referenced children, which LRU-leaf eviction must never see).
                done = upto
                break
            child = _Node(h, b, node)
            node.children[h] = child
            self._node_of[b] = child
            node = child
            done = j + 1
        self._cursor[seq_id] = (done, node)

    def cached_block_count(self) -> int:
        return len(self._node_of)

    def is_cached(self, block: int) -> bool:
        return block in self._node_of
