"""SGLang-style radix-tree prefix cache as a block pool (`radix[:B]`).

The tree's edges are full prompt blocks keyed by their chained content hash (block_keys.py), so a
root-to-node path is a cached prefix. A request matches the longest path from the root and holds a
reference on every node of it. Blocks of finished requests stay in the tree; when a new block is
needed and none is empty, an unreferenced *leaf* is evicted (the least recently used one, or the
first by another cache-eviction policy), so a prefix is never evicted before its extensions.
(vLLM's queue, by contrast, evicts any unreferenced block in LRU order.)
"""

from __future__ import annotations

import heapq

from kvsim.allocators.block_pool import BlockPool, FreeStackPool
from kvsim.allocators.cache_eviction import get_eviction_key
from kvsim.trace.request import Request


_STOPPED = 1 << 62  # a sequence's registration was abandoned (its blocks stay private)


class _Node:
    """A cached block; its use fields are what cache-eviction policies read (cache_eviction.BlockUse)."""

    __slots__ = ("key", "block", "parent", "children", "detached", "created", "last_use", "hits", "priority")

    def __init__(self, key: int, block: int, parent: "_Node | None", tick: int = 0, priority: int = 0):
        self.key, self.block, self.parent = key, block, parent
        self.children: dict[int, _Node] = {}
        self.detached = False
        self.created = self.last_use = tick
        self.hits = 0
        self.priority = priority


class RadixBlockPool(FreeStackPool):
    caches_prefixes = True

    def __init__(self, num_blocks: int, eviction: str = "lru"):
        super().__init__(num_blocks)
        self._key = get_eviction_key(eviction)
        self.root = _Node(0, -1, None)
        self._node_of: dict[int, _Node] = {}  # block -> tree node
        self._unreferenced = 0  # tree nodes with ref 0 (all evictable, leaves first)
        self._heap: list[tuple[tuple, int, _Node]] = []  # (policy key, tiebreak, leaf) candidates, lazily checked
        self._tick = 0
        # seq_id -> (blocks offered, the node of its last one), or (_STOPPED, node) once abandoned
        self._cursor: dict[int, tuple[int, _Node]] = {}

    # --- supply ------------------------------------------------------------------------------
    @property
    def num_free(self) -> int:
        return len(self._free) + self.num_fresh + self._unreferenced

    take_one_if_free = BlockPool.take_one_if_free  # free counts evictable tree nodes: take_one evicts them

    def _push_if_leaf(self, node: _Node) -> None:
        if node is not self.root and not node.children and self.ref[node.block] == 0:
            self._tick += 1
            heapq.heappush(self._heap, (self._key(node), self._tick, node))

    def _evict_one(self) -> int:
        while True:
            key, _, node = heapq.heappop(self._heap)
            if node.detached or node.children or self.ref[node.block] != 0 or key != self._key(node):
                continue  # stale entry (a node reused since it was queued has a newer one)
            del node.parent.children[node.key]
            del self._node_of[node.block]
            node.detached = True
            self._unreferenced -= 1
            self.evictions += 1
            if self.spill is not None:
                self.spill(node.key)
            self._push_if_leaf(node.parent)
            return node.block

    def take(self, n: int) -> list[int]:
        out = []
        for _ in range(n):
            if self._free:
                b = self._free.pop()
            elif self.num_fresh:
                out.extend(self._take_fresh(1))
                continue
            else:
                b = self._evict_one()
            self.ref[b] = 1
            out.append(b)
        return out

    def on_unreferenced(self, block: int) -> None:
        node = self._node_of.get(block)
        if node is None:
            self._free.append(block)
            return
        self._unreferenced += 1
        self._tick += 1
        node.last_use = self._tick
        self._push_if_leaf(node)

    def take_one(self) -> int:
        return self.take(1)[0]

    def on_unreferenced_many(self, blocks: list[int]) -> None:
        for b in blocks:  # each may be a tree node
            self.on_unreferenced(b)

    def free_order(self) -> list[int]:
        # empty blocks first; cached ones are evicted leaf by leaf, so list the unreferenced nodes
        cached = [n.block for n in self._node_of.values() if self.ref[n.block] == 0]
        return self._free[::-1] + self._fresh_order() + cached

    # --- prefix reuse ------------------------------------------------------------------------------
    def lookup(self, chain: list[int]) -> list[int]:
        node, hits = self.root, []
        for h in chain:
            node = node.children.get(h)
            if node is None:
                break
            hits.append(node.block)
        return hits

    def claim(self, block: int) -> None:
        self._unreferenced -= 1

    def after_claim(self, seq_id: int, hits: list[int], request: Request) -> None:
        self._tick += 1
        for b in hits:
            node = self._node_of[b]
            node.last_use = self._tick
            node.hits += 1
            node.priority = min(node.priority, request.priority)
        self._cursor[seq_id] = (len(hits), self._node_of[hits[-1]])

    def register(self, seq_id: int, chain: list[int], table: list[int], upto: int, request: Request) -> None:
        done, node = self._cursor.get(seq_id, (0, self.root))
        for j in range(done, upto):
            if node.detached:
                done = _STOPPED  # the path we were extending was evicted: stop offering blocks
                break
            h, b = chain[j], table[j]
            if h in node.children or b in self._node_of:
                # Another block already caches this content: ours stays private, and so do the rest
                # (hanging referenced blocks under a path this sequence does not hold would let an
                # unreferenced node have referenced children, which LRU-leaf eviction must never see).
                done = _STOPPED
                break
            child = _Node(h, b, node, self._tick, request.priority)
            node.children[h] = child
            self._node_of[b] = child
            if self.recached is not None:
                self.recached(h)
            node = child
            done = j + 1
        self._cursor[seq_id] = (done, node)

    def forget(self, seq_id: int) -> None:
        self._cursor.pop(seq_id, None)

    def truncate(self, seq_id: int, table: list[int]) -> None:
        # The released tail nodes are unreferenced now; later blocks must not hang below them (an
        # unreferenced node with a referenced child could never be evicted), so registration resumes
        # from the node of the last block kept.
        done, node = self._cursor.get(seq_id, (0, self.root))
        if len(table) < done < _STOPPED:  # the cursor node is the one of table[done - 1]
            for _ in range(done - len(table)):
                node = node.parent
            self._cursor[seq_id] = (len(table), node)

    def cached_block_count(self) -> int:
        return len(self._node_of)

    def cached_hash(self, block: int) -> int | None:
        node = self._node_of.get(block)
        return None if node is None else node.key

    def is_cached(self, block: int) -> bool:
        return block in self._node_of

    def check_invariants(self) -> None:
        super().check_invariants()
        unref = [n for n in self._node_of.values() if self.ref[n.block] == 0]
        assert len(unref) == self._unreferenced, "evictable count != unreferenced tree nodes"
        for b, n in self._node_of.items():
            assert n.block == b and not n.detached and n.parent.children.get(n.key) is n
        for n in unref:  # an unreferenced prefix never has referenced extensions
            stack = list(n.children.values())
            while stack:
                m = stack.pop()
                assert self.ref[m.block] == 0, "an unreferenced node has a referenced descendant"
                stack.extend(m.children.values())
