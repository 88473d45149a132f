"""Paged KV cache for models whose layers keep different caches (`hybrid`, `static-split`, `naive`).

A coordinator over one manager per KV cache group (kv_managers.py: full attention, sliding window,
chunked local, mamba state), each over the paged core (block_tables.py) that the plain paged allocator
uses too. Every sequence has one block table per group. Attention groups grow a block every
``block_size`` tokens, all at the same token; a mamba group holds one page per sequence (its recurrent
state) from its first allocation to its end. Sliding-window and chunked-local groups free the blocks no
later token attends to when the sequence next allocates (vLLM V1: ``remove_skipped_blocks`` before
``allocate_slots``), leaving a NULL entry in the table.

Prefix caching (``+prefix``) keeps vLLM V1's hashed pool (hashed_pool.py) with per-group keys, and its
per-group hit rules: full attention needs every block of the hit; a sliding window only the last
cdiv(W - 1, B) blocks before the hit point; a chunked layer only those of the current chunk; the hit is
the longest length every group accepts. Mamba states are not cached at token boundaries, so a model
with mamba layers gets no hits (as vLLM V1 without its experimental mamba prefix caching).

Parallel-sampling forks share every attention block (the partial last blocks copied on write, group by
group) and copy the recurrent states. Partial preemption gives back the same number of tail blocks in
every attention group, as long as what stays still holds every window the next token reads (never with
mamba layers: their state is the last token's). Swap copies every pool's pages to a CPU space of its own;
copies count in units of the smallest page (``copy_unit``), so a split layout's larger pages count as
several units, but each page is one copy call (its time is charged once per page, not per unit).

Units: see kv_groups.py. The memory breakdown adds ``recurrent_state`` (mamba states) and
``page_padding`` (page units that hold nothing: padding layers of a partial group, a state page padded
to the attention page size) to the five categories, all adding to the pool.
"""

from __future__ import annotations

import math

from kvsim.allocators.base import NO_HIT, Breakdown, Growth, KVAllocator, PrefixHit, SwapMapping
from kvsim.allocators.block_keys import prompt_block_hashes
from kvsim.allocators.block_pool import BlockPool, FreeStackPool
from kvsim.allocators.block_tables import NULL
from kvsim.allocators.kv_groups import KVGroup, KVLayout
from kvsim.allocators.kv_managers import FullAttention, GroupManager, manager_for
from kvsim.allocators.swap import SwapSpace
from kvsim.trace.request import Request

__all__ = ["HybridAllocator", "NULL"]


class HybridAllocator(KVAllocator):
    shares_kv = True
    forks = True

    def __init__(
        self,
        layout: KVLayout,
        pool_units: int,
        windows: bool = True,
        prefix: bool = False,
        cache_eviction: str = "lru",
        cpu_swap_units: int = 0,
        name: str = "hybrid",
        prefill_chunk: int = 0,
    ):
        super().__init__(pool_units)
        self.layout, self.name = layout, name
        self.groups: tuple[KVGroup, ...] = layout.groups
        self.B = self.block_size = layout.block_size
        self.windows = windows and any(g.windowed for g in self.groups)
        self.unit_bytes = self.slot_bytes = layout.unit_bytes
        self.token_slots = sum(g.token_units for g in self.groups)
        if prefix:
            from kvsim.allocators.hashed_pool import HashedBlockPool

            self.pools: list[BlockPool] = [HashedBlockPool(n, cache_eviction) for n in layout.pool_blocks]
        else:
            self.pools = [FreeStackPool(n) for n in layout.pool_blocks]
        self.caches_prefixes = prefix
        # windows off (the naive baseline): every attention group is kept as full attention
        self.managers: list[GroupManager] = [
            (manager_for(g.spec) if self.windows or not g.windowed else FullAttention)(g, self.pools[g.pool], self.B, i)
            for i, g in enumerate(self.groups)
        ]
        self._attn = [m for m in self.managers if m.attention]
        self._windowed = [m for m in self._attn if m.windowed]
        self._mamba = [m for m in self.managers if not m.attention]
        # groups that hold alike (same kind, window, pool and page): (one of them, how many)
        alike: dict[tuple, list] = {}
        for m in self.managers:
            g = m.group
            alike.setdefault((g.kind, g.window, g.pool, g.page_units), [m, 0])[1] += 1
        self._alike = [tuple(v) for v in alike.values()]
        # copies move units of the smallest page; a page of a larger one is several
        self.copy_unit = math.gcd(*layout.pool_page_units)
        # attention groups per pool: one growth "unit" takes a page in each of them
        self._attn_per_pool = [sum(1 for m in self._attn if m.group.pool == p) for p in range(len(self.pools))]
        self._tokens: dict[int, int] = {}  # sequences with tables -> tokens of the last allocation
        self.prefill_chunk = prefill_chunk  # tokens a prompt is computed in at most (0: whole); for footprints
        # a CPU space per pool, in its pages, sized in proportion to the pool
        total = layout.total_units
        self.swaps = (
            [
                SwapSpace(cpu_swap_units * (n * u) // total // u)
                for n, u in zip(layout.pool_blocks, layout.pool_page_units)
            ]
            if cpu_swap_units > 0
            else []
        )
        self._swapped_shape: dict[int, tuple[list[tuple[int, int]], int]] = {}  # tables' (length, NULLs), tokens
        self.stats = {"window_freed_blocks": 0, "forks": 0, "cow_copies": 0}
        if prefix:
            self.stats.update(hit_blocks=0, lookup_blocks=0)

    # --- helpers -----------------------------------------------------------------------------------
    def _pool(self, g: int) -> BlockPool:
        return self.pools[self.groups[g].pool]

    def _note_overhang(self, seq_id: int, held_blocks: int, final: int) -> None:
        """Every attention table holds ``held_blocks`` entries: slots past the final length, in all groups."""
        self._set_overhang(seq_id, max(0, held_blocks * self.B - final) * self.token_slots, 0)

    def _short(self, need: list[int]) -> bool:
        """Some pool lacks the ``need`` free pages asked of it."""
        return any(n > pool.num_free for n, pool in zip(need, self.pools))

    # --- capacity ------------------------------------------------------------------------------------
    def _holdings(self, request: Request) -> list[tuple[int, list[int]]]:
        """(units, blocks per pool) at the moments the request, alone, could hold the most: its prompt
        computed in chunks of ``prefill_chunk`` tokens (whole if 0), then one token at a time; or, preempted
        late and recomputed, its prompt and all but its last output token computed in such chunks."""
        B, L, P = self.B, request.total_tokens, request.prompt_tokens
        steps = []  # (computed, tokens allocated)
        for known in {P, L - 1} - {0}:
            chunk = self.prefill_chunk or known
            steps += [(c, min(known, c + chunk)) for c in range(0, known, chunk)]
        # decoding, full groups only grow and windowed ones are periodic once their window is full (growing
        # before): the peak is within a block of the request's end or of a point the group names
        ends = set()
        for m, _ in self._alike:
            ends |= m.peak_points(P, L)
        cands = {L - 1 - k for k in range(2 * B + 2)} | {e + k for e in ends for k in range(-B, B + 1)}
        steps += [(c, c + 1) for c in sorted(cands) if P <= c < L]
        out = []
        npools = len(self.pools)
        for c, n in steps:
            units, per_pool = 0, [0] * npools
            for m, count in self._alike:
                k = m.blocks_at(c, n)
                units += k * m.page_units * count
                per_pool[m.group.pool] += k * count
            out.append((units, per_pool))
        return out

    def footprint(self, request: Request) -> int:
        return max(units for units, _ in self._holdings(request))

    def alone_problem(self, request: Request) -> str | None:
        need = [0] * len(self.pools)
        for _, per_pool in self._holdings(request):
            need = [max(a, b) for a, b in zip(need, per_pool)]
        for p, (n, pool) in enumerate(zip(need, self.pools)):
            if n > pool.num_blocks:
                kinds = "+".join(sorted({g.kind for g in self.groups if g.pool == p}))
                where = f"the {kinds} pool" if len(self.pools) > 1 else "the pool"
                return f"needs {n:,} pages at its peak; {where} has {pool.num_blocks:,}"
        return None

    @property
    def usable_tokens(self) -> int:
        return self.layout.total_units

    def describe(self) -> dict:
        return {
            "num_blocks": sum(self.layout.pool_blocks),
            "block_size": self.B,
            "kv_groups": len(self.groups),
            "page_bytes": self.layout.pool_page_units[0] * self.unit_bytes,
            "slot_bytes": self.unit_bytes,
        }

    # --- prefix cache ----------------------------------------------------------------------------------
    def _group_chains(self, seq_id: int, request: Request) -> list[list[int]]:
        chains = self._chains.get(seq_id)
        if chains is None:
            base = prompt_block_hashes(request, self.B)
            chains = self._chains[seq_id] = [[hash((h, g)) for h in base] for g in range(len(self.groups))]
        return chains

    @property
    def _stamp(self) -> int:
        return sum(p.evictions for p in self.pools)

    def lookup_prefix(self, seq_id: int, request: Request, max_tokens: int) -> PrefixHit:
        if not self.caches_prefixes:
            return NO_HIT
        if self._mamba:
            return PrefixHit((), 0, True, self._stamp)
        chains = self._group_chains(seq_id, request)
        L = min(len(chains[0]), max_tokens // self.B)
        for m in self._attn:  # full attention: the longest run of cached blocks from the start
            if not m.windowed:
                L = m.hit_blocks(chains[m.key], L)
        while True:  # each windowed group may shorten the hit, which the others must accept again
            lower = L
            for m in self._windowed:
                lower = min(lower, m.hit_blocks(chains[m.key], lower))
            if lower == L:
                break
            L = lower
        blocks: list[int] = []
        for m in self._attn:
            blocks += m.hit_table(chains[m.key], L)
        return PrefixHit(tuple(blocks), L * self.B, True, self._stamp)

    # --- ownership -------------------------------------------------------------------------------------
    def allocate(
        self, seq_id: int, request: Request, num_tokens: int, hit: PrefixHit = NO_HIT, computed: int | None = None
    ) -> bool:
        if seq_id not in self._tokens and not self._start(seq_id, request, num_tokens, hit):
            return False  # a prefix hit only ever starts a sequence
        return self._grow(seq_id, request, num_tokens, computed)

    def _start(self, seq_id: int, request: Request, num_tokens: int, hit: PrefixHit) -> bool:
        """Give a new sequence its tables: the hit's blocks (NULLs where a window never needs them) and a
        page per mamba group, if every pool also has the blocks its first ``num_tokens`` tokens need (hit
        blocks nobody holds count as free until claimed)."""
        B = self.B
        hit_n = hit.tokens // B if hit.looked_up else 0
        if hit.looked_up and hit.stamp != self._stamp:
            raise ValueError(f"sequence {seq_id}: stale prefix hit (blocks were evicted since the lookup)")
        hits = [list(hit.blocks[i * hit_n : (i + 1) * hit_n]) for i in range(len(self._attn))]
        grow = max(0, -(-num_tokens // B) - hit_n)
        need = [0] * len(self.pools)
        for m in self.managers:
            need[m.group.pool] += m.start_blocks(grow)
        for m, h in zip(self._attn, hits):  # hit blocks nobody holds are counted free until claimed
            ref = m.pool.ref
            need[m.group.pool] += sum(1 for b in h if b != NULL and ref[b] == 0)
        if self._short(need):
            return False
        for m, h in zip(self._attn, hits):
            if hit_n:
                m.claim(seq_id, h, request)
            else:
                m.tables[seq_id] = []
        for m in self._mamba:
            m.tables[seq_id] = []
            m.take_one(m.tables[seq_id])
        self._tokens[seq_id] = hit_n * B
        if hit.looked_up:
            self.stats["lookup_blocks"] += request.prompt_tokens // B
            self.stats["hit_blocks"] += hit_n
        return True

    def _grow(self, seq_id: int, request: Request, num_tokens: int, computed: int | None) -> bool:
        """A sequence that holds memory asks for more tokens: windows free what they skip, fork-shared last
        blocks are copied before they are written, and every attention group takes the same number of new
        blocks (all or nothing)."""
        prev = self._tokens[seq_id]
        if self.windows:
            c = prev if computed is None else computed
            for m in self._windowed:
                self.stats["window_freed_blocks"] += m.free_skipped(seq_id, c)
        self._tokens[seq_id] = num_tokens
        if not self._attn:
            return True
        held = len(self._attn[0].tables[seq_id])
        n = -(-num_tokens // self.B) - held
        copies, own = [], False  # groups that must copy their shared last block; one became its own
        for m in self._attn:
            if m.partial_fill:
                t = m.tables[seq_id]
                if t and t[-1] in m.partial_fill:
                    if m.must_copy_last(t, num_tokens):
                        copies.append(m)
                    own = own or t[-1] not in m.partial_fill
        if n <= 0 and not copies:
            if own:
                self._note_overhang(seq_id, held, request.total_tokens)
            return True
        need = [max(0, n) * k for k in self._attn_per_pool]
        for m in copies:
            need[m.group.pool] += 1
        if self._short(need):
            self._tokens[seq_id] = prev  # nothing changed but the windows' frees
            return False
        for m in copies:
            self.copies.append(("cow", *m.copy_last(m.tables[seq_id])))
            self.stats["cow_copies"] += 1
        if n > 0:
            for m in self._attn:
                m.take(m.tables[seq_id], n)
        self._note_overhang(seq_id, held + max(0, n), request.total_tokens)
        return True

    def on_computed(self, seq_id: int, request: Request, computed_tokens: int) -> None:
        if not self.caches_prefixes or seq_id not in self._tokens:
            return
        chains = self._group_chains(seq_id, request)
        for m in self._attn:
            table = m.tables[seq_id]
            if table:
                upto = min(len(chains[m.key]), computed_tokens // self.B, len(table))
                m.pool.register(m.owner(seq_id), chains[m.key], table, upto, request)

    def free(self, seq_id: int) -> None:
        if self._tokens.pop(seq_id, None) is not None:
            for m in self.managers:
                m.free(seq_id)
        self._chains.pop(seq_id, None)
        self._drop_overhang(seq_id)

    def fork(self, parent_id: int, child_id: int, filled_tokens: int, request: Request) -> bool:
        """Attention blocks are shared (copy-on-write of the partial last ones); each mamba state is copied
        into a page of its own. False if a pool lacks those pages."""
        if parent_id not in self._tokens:
            return False
        need = [0] * len(self.pools)
        for m in self.managers:
            need[m.group.pool] += m.fork_pages()
        if self._short(need):
            return False
        for m in self.managers:
            copy = m.fork_into(parent_id, child_id, filled_tokens)
            if copy is not None:
                self.copies.append(("cow", *copy))
        self._tokens[child_id] = self._tokens[parent_id]
        # the shared last blocks' slots past the final length stay the parent's until the child writes
        self._set_overhang(child_id, 0, request.total_tokens)
        self.stats["forks"] += 1
        return True

    def release_tail(self, seq_id: int, request: Request, slots_needed: int) -> int:
        """Give back as many tail blocks in every attention group as free ``slots_needed`` units, keeping the
        head if every window the next token reads stays (else, or with a recurrent state, everything)."""
        if seq_id not in self._tokens or self._mamba or not self._attn:
            self.free(seq_id)
            return 0
        held = len(self._attn[0].tables[seq_id])
        drop = min(held, -(-slots_needed // sum(m.page_units for m in self._attn)))
        keep = (held - drop) * self.B
        if drop == held or not all(m.can_resume(seq_id, keep) for m in self._attn):
            self.free(seq_id)
            return 0
        for m in self._attn:
            m.drop_tail(seq_id, drop)
        self._tokens[seq_id] = min(self._tokens[seq_id], keep)
        self._note_overhang(seq_id, held - drop, request.total_tokens)
        return keep

    def held_slots(self, seq_id: int) -> int:
        return sum(len(m.live(seq_id)) * m.page_units for m in self.managers)

    @property
    def used_slots(self) -> int:
        return sum((p.num_blocks - p.num_free) * u for p, u in zip(self.pools, self.layout.pool_page_units))

    def block_table(self, seq_id: int) -> list[int]:
        """The first attention group's table (NULL where a window freed a block)."""
        return list(self._attn[0].tables[seq_id]) if self._attn and seq_id in self._tokens else []

    # the paged allocator's view of pool 0 (what block-level tests and the kernel replay read)
    @property
    def ref(self) -> list[int]:
        return self.pools[0].ref

    @property
    def num_blocks(self) -> int:
        return self.pools[0].num_blocks

    @property
    def num_free_blocks(self) -> int:
        return self.pools[0].num_free

    def group_tables(self, seq_id: int) -> list[list[int]]:
        return [list(m.tables[seq_id]) for m in self.managers] if seq_id in self._tokens else []

    def shortfall(self, seq_id: int, num_tokens: int) -> int:
        target = -(-num_tokens // self.B)
        need = [0] * len(self.pools)
        for m in self.managers:
            table = m.tables.get(seq_id)
            need[m.group.pool] += max(0, target - len(table or ())) if m.attention else int(not table)
        return sum(max(0, n - pool.num_free) * u for n, pool, u in zip(need, self.pools, self.layout.pool_page_units))

    @property
    def shared_slots(self) -> int:
        return sum(m.shared_units for m in self._attn)

    def counters(self) -> dict:
        out = dict(self.stats)
        if self.caches_prefixes:
            out["evictions"] = self._stamp
        return out

    # --- growth events -----------------------------------------------------------------------------
    def next_growth(self, seq_id: int, computed: int) -> Growth | None:
        if seq_id not in self._tokens:
            return Growth(computed + 1)
        if not self._attn:
            return None
        B = self.B
        first = self._attn[0]
        table = first.tables[seq_id]
        if (
            first.partial_fill and table and table[-1] in first.partial_fill
        ):  # the next write copies a shared last block
            shared = first.pool.ref[table[-1]] > 1
            return Growth(computed + 1, len(self._attn) if shared else 0, shared, 0)
        grow_at = len(table) * B + 1
        if not self.windows:
            return Growth(grow_at, 1, False, B)
        event = grow_at
        for m in self._windowed:
            event = min(event, m.next_free(seq_id, computed))
        return Growth(event, 1 if event == grow_at else 0, False, 0)

    @property
    def freed_while_growing(self) -> int:
        return self.stats["window_freed_blocks"]

    def growth_capacity(self) -> int:
        caps = [p.num_free // n for p, n in zip(self.pools, self._attn_per_pool) if n]
        return min(caps) if caps else 1 << 62

    # --- swap ------------------------------------------------------------------------------------------
    def _units(self, pool: int, pages: list[int]) -> list[int]:
        """Copy units of ``pages`` of a pool (a page of k copy units is units k*page .. k*page + k - 1)."""
        k = self.layout.pool_page_units[pool] // self.copy_unit
        return pages if k == 1 else [p * k + j for p in pages for j in range(k)]

    def swap_out(self, seq_id: int) -> SwapMapping | None:
        if seq_id not in self._tokens or not self.swaps:
            return None
        live = [[] for _ in self.pools]
        for m in self.managers:
            live[m.group.pool] += m.live(seq_id)
        if any(len(pages) > space.num_free for pages, space in zip(live, self.swaps)):
            return None
        mapping = []
        for p, (pages, space) in enumerate(zip(live, self.swaps)):
            cpu = space.store(seq_id, len(pages))
            mapping += zip(self._units(p, pages), self._units(p, cpu))
        self._swapped_shape[seq_id] = (
            [(len(m.tables[seq_id]), m.first.get(seq_id, 0)) for m in self.managers],
            self._tokens[seq_id],
        )
        return self._swapped_out(seq_id, mapping, sum(map(len, live)))

    def swap_in(self, seq_id: int, request: Request) -> SwapMapping | None:
        if seq_id not in self._swapped_shape:
            return None
        cpu = [space.held(seq_id) for space in self.swaps]
        if any(len(c) > pool.num_free for c, pool in zip(cpu, self.pools)):
            return None
        gpu = [pool.take(len(c)) for c, pool in zip(cpu, self.pools)]
        for space in self.swaps:
            space.release(seq_id)
        shape, tokens = self._swapped_shape.pop(seq_id)
        taken = [iter(g) for g in gpu]
        for m, (length, f) in zip(self.managers, shape):
            it = taken[m.group.pool]
            m.restore(seq_id, [next(it) for _ in range(length - f)], f)
        self._tokens[seq_id] = tokens
        self._note_overhang(seq_id, len(self._attn[0].tables[seq_id]) if self._attn else 0, request.total_tokens)
        mapping = []
        for p, (c, g) in enumerate(zip(cpu, gpu)):
            mapping += zip(self._units(p, c), self._units(p, g))
        return self._swapped_in(mapping, sum(map(len, cpu)))

    # --- accounting ------------------------------------------------------------------------------------
    def external_fragmentation(self, next_request: Request | None) -> int:
        """The rounding remainder, plus, with split pools, free memory stranded in pools that could serve
        the next request while another pool cannot."""
        ext = self.pool_tokens - self.usable_tokens
        if next_request is None or len(self.pools) == 1:
            return ext
        chunk = min(next_request.prompt_tokens, self.prefill_chunk or next_request.prompt_tokens)
        need = [0] * len(self.pools)
        for m in self.managers:
            need[m.group.pool] += m.start_blocks(-(-chunk // self.B))
        short = [n > p.num_free for n, p in zip(need, self.pools)]
        if any(short):
            ext += sum(p.num_free * u for p, u, s in zip(self.pools, self.layout.pool_page_units, short) if not s)
        return ext

    def memory_breakdown(self, filled_tokens: int, next_request: Request | None) -> Breakdown:
        used = self.used_slots
        pad = state = dropped = shared = 0
        for m in self.managers:
            pad += m.in_use * m.pad_per_block
            state += m.in_use * m.state_per_block
            dropped += m.dropped_units
            shared += m.shared_units
        tokens = filled_tokens * self.token_slots - dropped - shared
        internal = self._overhang_total
        external = self.external_fragmentation(next_request)
        return Breakdown(
            tokens,
            used - tokens - internal - pad - state,
            internal,
            external,
            self.pool_tokens - used - external,
            state,
            pad,
        )

    def check_invariants(self) -> None:
        counts = [[0] * len(p.ref) for p in self.pools]
        for m in self.managers:
            m.count_refs(counts[m.group.pool])
            m.check_invariants()
            assert set(m.tables) == set(self._tokens), "a group's tables are not the sequences'"
        for p, pool in enumerate(self.pools):
            assert counts[p] == pool.ref, "reference counts != block-table entries"
            pool.check_invariants()
        assert sum(m.extra_refs for m in self.managers) == sum(r - 1 for p in self.pools for r in p.ref if r > 1)
        for sid in self._tokens:
            assert len({len(m.tables[sid]) for m in self._attn}) <= 1, "attention tables of unequal length"
        assert self._overhang_total == sum(self._overhang.values())
