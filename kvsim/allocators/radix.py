"""SGLang-style radix-tree prefix cache over paged blocks (`radix[:B]`).

The tree's edges are full prompt blocks keyed by their chained content hash (block_keys.py), so a
root-to-node path is a cached prefix. A request matches the longest path from the root and holds a
reference on every node of it. Blocks of finished requests stay in the tree; when a new block is
needed and none is free, the least recently used unreferenced *leaf* is evicted, so a prefix is never
evicted before its extensions. (vLLM's queue, by contrast, evicts any unreferenced block in LRU order.)
"""

from __future__ import annotations

import heapq

from kvsim.allocators.block_keys import prompt_block_hashes
from kvsim.allocators.paged import PagedAllocator
from kvsim.trace.request import Request


class _Node:
    __slots__ = ("key", "block", "parent", "children", "last_use", "detached")

    def __init__(self, key: int, block: int, parent: "_Node | None"):
        self.key, self.block, self.parent = key, block, parent
        self.children: dict[int, _Node] = {}
        self.last_use = 0
        self.detached = False


class RadixCacheAllocator(PagedAllocator):
    def __init__(self, pool_tokens: int, block_size: int = 16, cpu_swap_tokens: int = 0):
        super().__init__(pool_tokens, block_size, cpu_swap_tokens)
        self.name = f"radix:{block_size}"
        self.root = _Node(0, -1, None)
        self._node_of: dict[int, _Node] = {}  # block -> tree node
        self._unreferenced = 0  # tree nodes with ref 0 (all evictable, leaves first)
        self._heap: list[tuple[int, int, _Node]] = []  # (last_use, tiebreak, leaf) candidates, lazily checked
        self._tick = 0
        self._chains: dict[int, list[int]] = {}
        self._cursor: dict[int, tuple[int, _Node]] = {}  # seq_id -> (blocks offered, deepest node)
        self._pending: dict[int, list[int]] = {}
        self.stats.update(hit_blocks=0, lookup_blocks=0, evictions=0)

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
    def _chain(self, seq_id: int, request: Request) -> list[int]:
        chain = self._chains.get(seq_id)
        if chain is None:
            chain = self._chains[seq_id] = prompt_block_hashes(request, self.block_size)
        return chain

    def cached_prefix_tokens(self, seq_id: int, request: Request, max_tokens: int) -> int:
        chain = self._chain(seq_id, request)
        node, hits = self.root, []
        for h in chain[:max_tokens // self.block_size]:
            node = node.children.get(h)
            if node is None:
                break
            hits.append(node.block)
        self._pending[seq_id] = hits
        return len(hits) * self.block_size

    def allocate(self, seq_id: int, request: Request, num_tokens: int) -> bool:
        hits = self._pending.pop(seq_id, None)
        if hits is None:
            return super().allocate(seq_id, request, num_tokens)
        if hits:
            unreferenced = sum(1 for b in hits if self.ref[b] == 0)
            if -(-num_tokens // self.block_size) - len(hits) > self.num_free_blocks - unreferenced:
                return False
            self._tick += 1
            for b in hits:
                if self.ref[b] == 0:
                    self._unreferenced -= 1
                else:
                    self._shared_extra += self.block_size
                self.ref[b] += 1
                self._node_of[b].last_use = self._tick
            self._tables[seq_id] = list(hits)
            self._cursor[seq_id] = (len(hits), self._node_of[hits[-1]])
        if not super().allocate(seq_id, request, num_tokens):
            return False
        self.stats["lookup_blocks"] += request.prompt_tokens // self.block_size
        self.stats["hit_blocks"] += len(hits)
        return True

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

    def free(self, seq_id: int) -> None:
        super().free(seq_id)
        self._cursor.pop(seq_id, None)
        self._pending.pop(seq_id, None)
        self._chains.pop(seq_id, None)

    def swap_in(self, seq_id: int, request: Request):
        mapping = super().swap_in(seq_id, request)
        if mapping is not None:
            self._cursor[seq_id] = (0, self.root)
        return mapping

    def cached_block_count(self) -> int:
        return len(self._node_of)

    def is_cached(self, block: int) -> bool:
        return block in self._node_of

    def counters(self) -> dict:
        return dict(self.stats)
