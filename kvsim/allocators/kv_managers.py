"""What one KV cache group holds for a sequence, kind by kind: the managers the layer-group allocator
(hybrid.py) coordinates, each over the paged core (block_tables.py).

As vLLM V1 maps a layer's cache spec to a manager (full attention, sliding window, chunked local
attention, mamba), :func:`manager_for` maps a group's kind (layer_kinds.py) to a class here, by what the kind
keeps; the kind's own rules (window, what a prefix hit keeps, peaks) come from its object:

- :class:`FullAttention`: a block every ``block_size`` tokens, kept to the end; a prefix hit needs every
  block of it cached.
- :class:`WindowedAttention` (sliding window, chunked local): the same growth, but blocks wholly before the
  first token a later token attends to are freed when the sequence next allocates (vLLM's
  ``remove_skipped_blocks``), leaving NULL entries; a hit needs only the blocks its window (or chunk)
  reads, so the longest acceptable hit is searched from the right.
- :class:`MambaState`: one page per sequence (its recurrent state) from its first allocation to its end;
  a fork copies it; states at token boundaries are not cached, and a tail cannot be given back.

Sizes are the layout's units (kv_groups.py); lengths are tokens; counts of blocks are pages of the group.
"""

from __future__ import annotations

from kvsim.allocators.block_pool import BlockPool
from kvsim.allocators.block_tables import NULL, BlockTables
from kvsim.allocators.kv_groups import KVGroup
from kvsim.hardware.layer_kinds import LayerKind


class GroupManager(BlockTables):
    """A group's tables, and the rules of its kind (these defaults: full attention)."""

    attention = True
    windowed = False

    def __init__(self, group: KVGroup, pool: BlockPool, block_size: int, key: int):
        super().__init__(pool, block_size, group.token_units, key)
        self.group = group
        self.page_units = group.page_units
        # units of a held page that hold nothing (padding layers, a state padded to the page), and a state
        self.pad_per_block = group.page_units - (self.block_units if self.attention else group.state_units)
        self.state_per_block = group.state_units

    # --- how much it holds ---------------------------------------------------------------------
    def blocks_at(self, computed: int, tokens: int) -> int:
        """Pages a sequence holds with ``tokens`` tokens allocated, ``computed`` of them computed."""
        return -(-tokens // self.B)

    def start_blocks(self, grow: int) -> int:
        """Pages a sequence's first allocation takes beyond its prefix hit, ``grow`` blocks of tokens."""
        return grow

    def free_skipped(self, seq_id: int, computed: int) -> int:
        """Free what no token after the first ``computed`` reads; returns the pages freed."""
        return 0

    def next_free(self, seq_id: int, computed: int) -> int | None:
        """The token count whose allocation next frees a page (windows), or None."""
        return None

    def can_resume(self, seq_id: int, tokens: int) -> bool:
        """Whether the table's first ``tokens`` tokens, its tail given back, hold what computing on from
        there reads."""
        return True

    def peak_points(self, prompt: int, total: int) -> set[int]:
        """Computed-token counts near which a decoding sequence's holding here may peak (besides its end)."""
        return set()

    # --- prefix hits ---------------------------------------------------------------------------
    def needed_hit_blocks(self, hit_blocks: int) -> int:
        """Of a hit of ``hit_blocks`` blocks, how many (the last ones) this group must have cached."""
        return hit_blocks

    def hit_blocks(self, chain: list[int], limit: int) -> int:
        """The longest hit of at most ``limit`` blocks of ``chain`` (this group's block hashes) it accepts."""
        return len(self.pool.lookup(chain[:limit]))

    def hit_table(self, chain: list[int], n: int) -> list[int]:
        """The table entries of a hit of ``n`` blocks: NULL where the group needs no block."""
        need = self.needed_hit_blocks(n)
        pool = self.pool
        return [NULL] * (n - need) + [pool.cached_block(h) for h in chain[n - need : n]]

    # --- parallel sampling ---------------------------------------------------------------------
    def fork_pages(self) -> int:
        """Fresh pages a fork takes (a state is copied; blocks are shared)."""
        return 0

    def fork_into(self, parent: int, child: int, filled_tokens: int) -> tuple[int, int] | None:
        """Let ``child`` hold what ``parent`` holds; a copy made (source, destination), or None."""
        self.fork(parent, child, filled_tokens)
        return None


class FullAttention(GroupManager):
    """Full attention: every block kept to the end, every block of a hit needed."""


class WindowedAttention(GroupManager):
    """Sliding-window and chunked-local layers: the group's kind says which tokens a token attends to."""

    windowed = True

    def blocks_at(self, computed: int, tokens: int) -> int:
        return -(-tokens // self.B) - self.group.skipped_tokens(computed) // self.B

    def free_skipped(self, seq_id: int, computed: int) -> int:
        return self.drop_leading(seq_id, self.group.skipped_tokens(computed) // self.B)

    def next_free(self, seq_id: int, computed: int) -> int | None:
        first = self.first.get(seq_id, 0)
        return max(self.group.computed_skipping((first + 1) * self.B), computed) + 1

    def can_resume(self, seq_id: int, tokens: int) -> bool:
        return self.first.get(seq_id, 0) <= self.group.skipped_tokens(tokens) // self.B

    def peak_points(self, prompt: int, total: int) -> set[int]:
        return self.group.spec.peak_points(self.group.window, prompt, total)

    def needed_hit_blocks(self, hit_blocks: int) -> int:
        return self.group.needed_hit_blocks(hit_blocks, self.B)

    def hit_blocks(self, chain: list[int], limit: int) -> int:
        """Scanning from the right, the first run of cached blocks long enough for the window that ends
        where the run ends."""
        pool = self.pool
        run = right = 0
        for j in range(limit - 1, -1, -1):
            if pool.cached_block(chain[j]) is None:
                run = 0
                continue
            if run == 0:
                right = j + 1
            run += 1
            if run >= self.needed_hit_blocks(right):
                return right
        return 0


class MambaState(GroupManager):
    """A recurrent state: one page per sequence, whatever its length."""

    attention = False

    def blocks_at(self, computed: int, tokens: int) -> int:
        return 1

    def start_blocks(self, grow: int) -> int:
        return 1

    def can_resume(self, seq_id: int, tokens: int) -> bool:
        return False  # the state is the last token's; an earlier one is not kept

    def fork_pages(self) -> int:
        return 1

    def fork_into(self, parent: int, child: int, filled_tokens: int) -> tuple[int, int] | None:
        table: list[int] = []
        self.take_one(table)
        self.tables[child] = table
        return self.tables[parent][0], table[0]


def manager_for(kind: LayerKind) -> type[GroupManager]:
    """The manager of a KV cache group of ``kind`` (vLLM V1: the cache spec -> manager map): a recurrent state,
    a window that frees what it skips, or full attention."""
    if not kind.attention:
        return MambaState
    return WindowedAttention if kind.windowed else FullAttention
