"""The paged core: sequences' block tables over one block pool, and the reference counts behind them.

Both paged allocators are built on it: the plain one (paged.py) keeps one :class:`BlockTables` for its
single table per sequence; the layer-group allocator (hybrid.py) keeps one per KV cache group, each a
per-kind manager (kv_managers.py), several of which may take blocks from the same pool.

A block holds ``block_size`` tokens of ``token_units`` units each. Everything that shares blocks lives
here: prefix hits claimed (a cached block gains a holder, one nobody held stops being evictable),
parallel-sampling forks (every block gains a holder; the partial last block is copied before a holder
writes into it), tails given back (partial preemption) and tables rebuilt after a swap. Leading table
entries may be ``NULL``: blocks a window freed or a prefix hit never needed. ``shared_units`` counts the
units held by several tables but stored once, ``dropped_units`` the units of computed tokens whose
blocks are NULL, so that the allocators' memory breakdowns add up exactly.
"""

from __future__ import annotations

from kvsim.allocators.block_pool import BlockPool
from kvsim.trace.request import Request

NULL = -1  # a table entry without a block (a window freed it, or a prefix hit never needed it)


class BlockTables:
    """Block tables of sequences over one block pool."""

    def __init__(self, pool: BlockPool, block_size: int, token_units: int = 1, key: int | None = None):
        self.pool = pool
        self.B = block_size
        self.token_units = token_units  # units one token takes in a block (1: a plain model's slot)
        self.block_units = block_size * token_units
        self.key = key  # when several tables share the pool, the pool knows a sequence as (seq_id, key)
        self.tables: dict[int, list[int]] = {}
        self.first: dict[int, int] = {}  # leading NULL entries of a table (absent: none)
        self.partial_fill: dict[int, int] = {}  # fork-shared partial last block -> tokens filled at the fork
        self.shared_units = 0  # units held by several tables, stored once
        self.extra_refs = 0  # references beyond the first, over all blocks of these tables (0: nothing shared)
        self.in_use = 0  # blocks these tables hold
        self.dropped_units = 0  # units of the tokens that leading NULL entries stand for

    def owner(self, seq_id: int):
        """How the pool knows ``seq_id``'s table."""
        return seq_id if self.key is None else (seq_id, self.key)

    def live(self, seq_id: int) -> list[int]:
        """The blocks ``seq_id``'s table holds (its entries after the leading NULLs)."""
        table = self.tables.get(seq_id)
        return table[self.first.get(seq_id, 0) :] if table else []

    # --- taking and giving back ------------------------------------------------------------------
    def take(self, table: list[int], n: int) -> None:
        """Append ``n`` free blocks to ``table`` (the caller checked the pool has them)."""
        table.extend(self.pool.take(n))
        self.in_use += n

    def take_one(self, table: list[int]) -> None:
        table.append(self.pool.take_one())
        self.in_use += 1

    def release(self, blocks: list[int]) -> None:
        """Drop one reference to each of ``blocks``, in this order (a table's tail first, as vLLM frees a
        request)."""
        ref = self.pool.ref
        if not self.extra_refs and not self.partial_fill:
            for b in blocks:  # nothing shared: the common case, without a per-block branch
                ref[b] = 0
            self.in_use -= len(blocks)
            self.pool.on_unreferenced_many(blocks)
            return
        freed = []
        for b in blocks:
            r = ref[b]
            if r > 1:
                self.shared_units -= self.partial_fill.get(b, self.B) * self.token_units
                self.extra_refs -= 1
                ref[b] = r - 1
                continue
            ref[b] = 0
            self.partial_fill.pop(b, None)
            freed.append(b)
        self.in_use -= len(freed)
        self.pool.on_unreferenced_many(freed)

    def free(self, seq_id: int) -> None:
        """Give back everything ``seq_id``'s table holds."""
        table = self.tables.pop(seq_id, None)
        first = self.first.pop(seq_id, 0)
        if table:
            live = table[first:]
            live.reverse()
            self.release(live)
            self.dropped_units -= first * self.block_units
        self.pool.forget(self.owner(seq_id))

    def drop_leading(self, seq_id: int, upto: int) -> int:
        """Free the table's blocks before entry ``upto`` (a window no longer needs them); returns how many
        were held."""
        table = self.tables[seq_id]
        f = self.first.get(seq_id, 0)
        upto = min(upto, len(table))
        if upto <= f:
            return 0
        gone = table[f:upto]
        table[f:upto] = [NULL] * (upto - f)
        self.first[seq_id] = upto
        self.dropped_units += (upto - f) * self.block_units
        self.release(gone)  # oldest first
        return len(gone)

    def drop_tail(self, seq_id: int, n: int) -> None:
        """Give back the last ``n`` blocks of the table (partial preemption); the prefix cache resumes
        registering after what stays."""
        table = self.tables[seq_id]
        tail = table[len(table) - n :]
        tail.reverse()
        self.release(tail)
        del table[len(table) - n :]
        self.pool.truncate(self.owner(seq_id), table)

    # --- sharing ---------------------------------------------------------------------------------
    def claim(self, seq_id: int, hits: list[int], request: Request) -> None:
        """Start ``seq_id``'s table with a prefix hit's blocks (NULL where the hit needs none): each block
        gains a holder; a cached block nobody held stops being evictable."""
        pool = self.pool
        ref = pool.ref
        real = []
        for b in hits:
            if b == NULL:
                continue
            if ref[b] == 0:
                pool.claim(b)
                self.in_use += 1
            else:
                self.shared_units += self.block_units
                self.extra_refs += 1
            ref[b] += 1
            real.append(b)
        self.tables[seq_id] = list(hits)
        nulls = len(hits) - len(real)
        if nulls:
            self.first[seq_id] = nulls
            self.dropped_units += nulls * self.block_units
        pool.after_claim(self.owner(seq_id), real, request)

    def fork(self, parent: int, child: int, filled_tokens: int) -> bool:
        """``child`` shares every block of ``parent``'s table, which holds ``filled_tokens`` computed tokens;
        a partial last block is copied before either writes past ``filled_tokens`` (:meth:`must_copy_last`)."""
        table = self.tables.get(parent)
        if not table:
            return False
        f = self.first.get(parent, 0)
        ref = self.pool.ref
        for b in table[f:]:
            ref[b] += 1
        self.extra_refs += len(table) - f
        full, part = divmod(filled_tokens, self.B)
        self.shared_units += ((full - f) * self.B + part) * self.token_units
        if part and len(table) > full:
            self.partial_fill[table[full]] = part
        self.tables[child] = list(table)
        if f:
            self.first[child] = f
            self.dropped_units += f * self.block_units
        return True

    def must_copy_last(self, table: list[int], num_tokens: int) -> bool:
        """Whether ``table`` (its last block fork-shared, in :attr:`partial_fill`) must copy that block before
        holding ``num_tokens`` tokens: it writes past the fill while another table holds the block. A block
        whose other holders are gone becomes this table's own here."""
        last = table[-1]
        if self.pool.ref[last] == 1:
            del self.partial_fill[last]
            return False
        return num_tokens > (len(table) - 1) * self.B + self.partial_fill[last]

    def copy_last(self, table: list[int]) -> tuple[int, int]:
        """Give ``table`` a private copy of its shared last block (a free block is there); (source, copy)."""
        last = table[-1]
        fill = self.partial_fill[last]
        copy = self.pool.take(1)[0]
        self.in_use += 1
        ref = self.pool.ref
        ref[last] -= 1
        self.extra_refs -= 1
        self.shared_units -= fill * self.token_units
        if ref[last] == 1:
            del self.partial_fill[last]
        table[-1] = copy
        return last, copy

    def restore(self, seq_id: int, blocks: list[int], first: int) -> None:
        """Rebuild a swapped-in table: ``first`` NULLs, then ``blocks`` (just taken)."""
        self.tables[seq_id] = [NULL] * first + blocks
        if first:
            self.first[seq_id] = first
            self.dropped_units += first * self.block_units
        self.in_use += len(blocks)
        self.pool.forget(self.owner(seq_id))  # fresh blocks: the prefix cache registers them anew

    # --- checks ----------------------------------------------------------------------------------
    def count_refs(self, counts: list[int]) -> None:
        """Add one to ``counts[b]`` for every table entry holding block b."""
        for sid, table in self.tables.items():
            f = self.first.get(sid, 0)
            assert all(b == NULL for b in table[:f]) and NULL not in table[f:], "NULL entries not leading"
            for b in table[f:]:
                counts[b] += 1

    def check_invariants(self) -> None:
        """This core's own counts (reference counts are checked per pool by the allocator)."""
        held = {b for sid, t in self.tables.items() for b in t[self.first.get(sid, 0) :]}
        assert self.in_use == len(held), "blocks in use are off"
        assert self.dropped_units == sum(self.first.values()) * self.block_units, "dropped tokens are off"
        assert all(f > 0 for f in self.first.values()) and set(self.first) <= set(self.tables)
