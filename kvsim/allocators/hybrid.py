"""Paged KV cache for models whose layers keep different caches (`hybrid`, `static-split`, `naive`).

Every sequence has one block table per KV cache group (kv_groups.py). Attention groups grow a block
every ``block_size`` tokens, all at the same token; a mamba group holds one page per sequence (its
recurrent state) from its first allocation to its end. Sliding-window and chunked-local groups free the
blocks no later token attends to when the sequence next allocates (vLLM V1: ``remove_skipped_blocks``
before ``allocate_slots``), leaving a null entry in the table.

Prefix caching (``+prefix``) keeps vLLM V1's hashed pool (hashed_pool.py) with per-group keys, and its
per-group hit rules: full attention needs every block of the hit; a sliding window only the last
cdiv(W - 1, B) blocks before the hit point; a chunked layer only those of the current chunk; the hit is
the longest length every group accepts. Mamba states are not cached at token boundaries, so a model
with mamba layers gets no hits (as vLLM V1 without its experimental mamba prefix caching).

Units: see kv_groups.py. The memory breakdown adds ``recurrent_state`` (mamba states) and
``page_padding`` (page units that hold nothing: padding layers of a partial group, a state page padded
to the attention page size) to the five categories, all adding to the pool.
"""

from __future__ import annotations

from kvsim.allocators.base import NO_HIT, Breakdown, Growth, KVAllocator, PrefixHit
from kvsim.allocators.block_keys import prompt_block_hashes
from kvsim.allocators.block_pool import BlockPool, FreeStackPool
from kvsim.allocators.kv_groups import KVGroup, KVLayout
from kvsim.allocators.swap import SwapSpace
from kvsim.trace.request import Request

NULL = -1  # a table entry whose block a window freed (or a prefix hit never needed)


class HybridAllocator(KVAllocator):
    shares_kv = True

    def __init__(self, layout: KVLayout, pool_units: int, windows: bool = True, prefix: bool = False,
                 cache_eviction: str = "lru", cpu_swap_units: int = 0, name: str = "hybrid", prefill_chunk: int = 0):
        super().__init__(pool_units)
        self.layout, self.name = layout, name
        self.groups: tuple[KVGroup, ...] = layout.groups
        self.B = self.block_size = layout.block_size
        self.windows = windows and any(g.windowed for g in self.groups)
        self.unit_bytes = self.slot_bytes = layout.unit_bytes
        self.token_slots = sum(g.token_units for g in self.groups)
        self._attn = [i for i, g in enumerate(self.groups) if g.attention]
        self._mamba = [i for i, g in enumerate(self.groups) if not g.attention]
        # groups that hold alike (same kind, window, pool and page): (one of them, how many)
        alike: dict[tuple, list] = {}
        for g in self.groups:
            alike.setdefault((g.kind, g.window, g.pool, g.page_units), [g, 0])[1] += 1
        self._alike = [tuple(v) for v in alike.values()]
        if prefix:
            from kvsim.allocators.hashed_pool import HashedBlockPool

            self.pools: list[BlockPool] = [HashedBlockPool(n, cache_eviction) for n in layout.pool_blocks]
        else:
            self.pools = [FreeStackPool(n) for n in layout.pool_blocks]
        self.caches_prefixes = prefix
        self.copy_unit = layout.pool_page_units[0]
        # attention groups per pool: one growth "unit" takes a page in each of them
        self._attn_per_pool = [sum(1 for i in self._attn if self.groups[i].pool == p) for p in range(len(self.pools))]
        self._tables: dict[int, list[list[int]]] = {}
        self._first: dict[int, list[int]] = {}  # leading null entries per group
        self._tokens: dict[int, int] = {}  # tokens of the last allocation (the computed count of the next one)
        self._phys = [0] * len(self.groups)  # blocks in use (ref > 0) per group
        # units of a block in use that hold nothing (padding), and that hold a recurrent state, per group
        self._pad_per_block = [g.page_units - (g.state_units if not g.attention else self.B * g.token_units)
                               for g in self.groups]
        self._state_per_block = [g.state_units for g in self.groups]
        self._dropped = 0  # token units of computed tokens whose blocks the windows freed (live sequences)
        self._shared_extra = 0
        self._extra_refs = 0
        self._chains: dict[int, list[list[int]]] = {}
        self.prefill_chunk = prefill_chunk  # tokens a prompt is computed in at most (0: whole); for footprints
        self.swap = SwapSpace(cpu_swap_units // self.copy_unit) if cpu_swap_units > 0 and len(self.pools) == 1 \
            else None
        self._swapped_shape: dict[int, tuple[list[tuple[int, int]], int]] = {}  # tables' shapes, tokens
        self.stats = {"window_freed_blocks": 0}
        if prefix:
            self.stats.update(hit_blocks=0, lookup_blocks=0)

    # --- helpers -----------------------------------------------------------------------------------
    def _pool(self, g: int) -> BlockPool:
        return self.pools[self.groups[g].pool]

    def _release(self, g: int, b: int) -> None:
        pool = self._pool(g)
        r = pool.ref[b]
        if r > 1:
            pool.ref[b] = r - 1
            self._shared_extra -= self.B * self.groups[g].token_units
            self._extra_refs -= 1
            return
        pool.ref[b] = 0
        self._phys[g] -= 1
        pool.on_unreferenced(b)

    def _free_skipped(self, tables: list[list[int]], first: list[int], computed: int) -> None:
        """Free window blocks no later token attends to (vLLM: remove_skipped_blocks)."""
        B = self.B
        for g in self._attn:
            grp = self.groups[g]
            if not grp.windowed:
                continue
            skip = grp.skipped_tokens(computed) // B
            table = tables[g]
            f = first[g]
            if skip <= f:
                continue
            upto = min(skip, len(table))
            for j in range(f, upto):
                b = table[j]
                if b != NULL:
                    self._release(g, b)
                    table[j] = NULL
                    self.stats["window_freed_blocks"] += 1
            self._dropped += (upto - f) * B * grp.token_units
            first[g] = upto

    def _note_overhang(self, seq_id: int, held_blocks: int, final: int) -> None:
        """Every attention table holds ``held_blocks`` entries: slots past the final length, in all groups."""
        self._set_overhang(seq_id, max(0, held_blocks * self.B - final) * self.token_slots, 0)

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
        # before): the peak is within a block of the request's end or of a window's end (for chunked groups,
        # the first chunk boundary after the prompt, or the last before the end)
        ends = set()
        for grp, _ in self._alike:
            if grp.windowed:
                w = grp.window
                ends.add(w - 1)
                if grp.kind == "chunked":
                    ends.update((-(-(P + 1) // w) * w - 1, (L - 1) // w * w - 1))
        cands = {L - 1 - k for k in range(2 * B + 2)} | {e + k for e in ends for k in range(-B, B + 1)}
        steps += [(c, c + 1) for c in sorted(cands) if P <= c < L]
        out = []
        npools = len(self.pools)
        for c, n in steps:
            units, per_pool = 0, [0] * npools
            for grp, count in self._alike:
                if not grp.attention:
                    k = 1
                else:
                    skipped = grp.skipped_tokens(c) if self.windows else 0
                    k = -(-n // B) - skipped // B
                units += k * grp.page_units * count
                per_pool[grp.pool] += k * count
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
        return {"num_blocks": sum(self.layout.pool_blocks), "block_size": self.B, "kv_groups": len(self.groups),
                "page_bytes": self.layout.pool_page_units[0] * self.unit_bytes, "slot_bytes": self.unit_bytes}

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
        windowed = [g for g in self._attn if self.windows and self.groups[g].windowed]
        for g in self._attn:  # full attention: the longest run of cached blocks from the start
            if g not in windowed:
                L = len(self._pool(g).lookup(chains[g][:L]))
        while True:  # each windowed group may shorten the hit, which the others must accept again
            lower = L
            for g in windowed:
                lower = min(lower, self._window_hit(g, chains[g], lower))
            if lower == L:
                break
            L = lower
        blocks: list[int] = []
        for g in self._attn:
            need = self.groups[g].needed_hit_blocks(L, self.B) if g in windowed else L
            pool = self._pool(g)
            blocks += [NULL] * (L - need) + [pool.cached_block(h) for h in chains[g][L - need:L]]
        return PrefixHit(tuple(blocks), L * self.B, True, self._stamp)

    def _window_hit(self, g: int, chain: list[int], L: int) -> int:
        """The longest hit of at most L blocks whose needed blocks windowed group g has cached: scanning from
        the right, the first run of cached blocks long enough for the window ending where the run ends."""
        grp, pool = self.groups[g], self._pool(g)
        run = right = 0
        for j in range(L - 1, -1, -1):
            if pool.cached_block(chain[j]) is None:
                run = 0
                continue
            if run == 0:
                right = j + 1
            run += 1
            if run >= grp.needed_hit_blocks(right, self.B):
                return right
        return 0

    # --- ownership -------------------------------------------------------------------------------------
    def allocate(self, seq_id: int, request: Request, num_tokens: int, hit: PrefixHit = NO_HIT,
                 computed: int | None = None) -> bool:
        tables = self._tables.get(seq_id)
        if tables is None:  # a prefix hit only ever starts a sequence
            if not self._start(seq_id, request, num_tokens, hit):
                return False
            tables = self._tables[seq_id]
        return self._grow(seq_id, request, tables, num_tokens, computed)

    def _start(self, seq_id: int, request: Request, num_tokens: int, hit: PrefixHit) -> bool:
        """Give a new sequence its tables: the hit's blocks (nulls where a window never needs them) and a
        page per mamba group, if every pool also has the blocks its first ``num_tokens`` tokens need (hit
        blocks nobody holds count as free until claimed)."""
        B = self.B
        hit_n = hit.tokens // B if hit.looked_up else 0
        if hit.looked_up and hit.stamp != self._stamp:
            raise ValueError(f"sequence {seq_id}: stale prefix hit (blocks were evicted since the lookup)")
        hits = self._split_hit(hit.blocks, hit_n)
        grow = max(0, -(-num_tokens // B) - hit_n)
        need = [0] * len(self.pools)
        evictable = [0] * len(self.pools)
        for g, grp in enumerate(self.groups):
            pool = self.pools[grp.pool]
            need[grp.pool] += grow if grp.attention else 1
            evictable[grp.pool] += sum(1 for b in hits[g] if b != NULL and pool.ref[b] == 0)
        if any(n > pool.num_free - e for n, e, pool in zip(need, evictable, self.pools)):
            return False
        tables: list[list[int]] = [[] for _ in self.groups]
        first = [0] * len(self.groups)
        if hit_n:
            self._claim(seq_id, request, tables, first, hits)
        for g in self._mamba:
            tables[g].append(self._pool(g).take_one())
            self._phys[g] += 1
        self._tables[seq_id], self._first[seq_id], self._tokens[seq_id] = tables, first, hit_n * B
        if hit.looked_up:
            self.stats["lookup_blocks"] += request.prompt_tokens // B
            self.stats["hit_blocks"] += hit_n
        return True

    def _grow(self, seq_id: int, request: Request, tables: list[list[int]], num_tokens: int,
              computed: int | None) -> bool:
        """A sequence that holds memory asks for more tokens: every attention table has the same length,
        windows have freed what they skip, so each attention group needs the same number of new blocks."""
        prev = self._tokens[seq_id]
        if self.windows:
            self._free_skipped(tables, self._first[seq_id], prev if computed is None else computed)
        self._tokens[seq_id] = num_tokens
        if not self._attn:
            return True
        held = len(tables[self._attn[0]])
        n = -(-num_tokens // self.B) - held
        if n <= 0:
            return True
        for pool, k in zip(self.pools, self._attn_per_pool):
            if k and n * k > pool.num_free:
                self._tokens[seq_id] = prev  # nothing changed but the windows' frees
                return False
        for g in self._attn:
            tables[g].extend(self._pool(g).take(n))
            self._phys[g] += n
        self._note_overhang(seq_id, held + n, request.total_tokens)
        return True

    def _split_hit(self, blocks: tuple[int, ...], n: int) -> list[list[int]]:
        out, i = [[] for _ in self.groups], 0
        for g in self._attn:
            out[g] = list(blocks[i:i + n])
            i += n
        return out

    def _claim(self, seq_id: int, request: Request, tables, first, hit_blocks: list[list[int]]) -> None:
        B = self.B
        for g in self._attn:
            pool, grp = self._pool(g), self.groups[g]
            real = []
            for b in hit_blocks[g]:
                if b == NULL:
                    continue
                if pool.ref[b] == 0:
                    pool.claim(b)
                    self._phys[g] += 1
                else:
                    self._shared_extra += B * grp.token_units
                    self._extra_refs += 1
                pool.ref[b] += 1
                real.append(b)
            nulls = len(hit_blocks[g]) - len(real)
            tables[g][:] = hit_blocks[g]
            first[g] = nulls
            self._dropped += nulls * B * grp.token_units
            pool.after_claim((seq_id, g), real, request)

    def on_computed(self, seq_id: int, request: Request, computed_tokens: int) -> None:
        if not self.caches_prefixes:
            return
        tables = self._tables.get(seq_id)
        if not tables:
            return
        chains = self._group_chains(seq_id, request)
        for g in self._attn:
            upto = min(len(chains[g]), computed_tokens // self.B, len(tables[g]))
            self._pool(g).register((seq_id, g), chains[g], tables[g], upto, request)

    def free(self, seq_id: int) -> None:
        tables = self._tables.pop(seq_id, None)
        if tables is not None:
            first = self._first.pop(seq_id)
            for g in range(len(self.groups)):
                pool = self._pool(g)
                live = [b for b in reversed(tables[g]) if b != NULL]  # tail first, as vLLM frees a request
                if self._extra_refs:
                    for b in live:
                        self._release(g, b)
                else:  # nothing is shared: every block goes back
                    ref = pool.ref
                    for b in live:
                        ref[b] = 0
                    self._phys[g] -= len(live)
                    pool.on_unreferenced_many(live)
                self._dropped -= first[g] * self.B * self.groups[g].token_units
                pool.forget((seq_id, g))
        self._tokens.pop(seq_id, None)
        self._chains.pop(seq_id, None)
        self._drop_overhang(seq_id)

    def held_slots(self, seq_id: int) -> int:
        tables = self._tables.get(seq_id)
        if not tables:
            return 0
        return sum(sum(1 for b in t if b != NULL) * self.groups[g].page_units for g, t in enumerate(tables))

    @property
    def used_slots(self) -> int:
        return sum((p.num_blocks - p.num_free) * u for p, u in zip(self.pools, self.layout.pool_page_units))

    def block_table(self, seq_id: int) -> list[int]:
        """The first attention group's table (NULL where a window freed a block)."""
        tables = self._tables.get(seq_id)
        return list(tables[self._attn[0]]) if tables and self._attn else []

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
        return [list(t) for t in self._tables.get(seq_id, ())]

    def shortfall(self, seq_id: int, num_tokens: int) -> int:
        tables = self._tables.get(seq_id)
        target = -(-num_tokens // self.B)
        short = 0
        for p, pool in enumerate(self.pools):
            need = sum(max(0, target - (len(tables[g]) if tables else 0)) for g in self._attn if self.groups[g].pool == p)
            need += sum(1 for g in self._mamba if self.groups[g].pool == p and not (tables and tables[g]))
            short += max(0, need - pool.num_free) * self.layout.pool_page_units[p]
        return short

    @property
    def shared_slots(self) -> int:
        return self._shared_extra

    def counters(self) -> dict:
        out = dict(self.stats)
        if self.caches_prefixes:
            out["evictions"] = self._stamp
        return out

    # --- growth events -----------------------------------------------------------------------------
    def next_growth(self, seq_id: int, computed: int) -> Growth | None:
        tables = self._tables.get(seq_id)
        if not tables or not self._attn:
            return Growth(computed + 1) if not tables else None
        B = self.B
        grow_at = len(tables[self._attn[0]]) * B + 1
        if not self.windows:
            return Growth(grow_at, 1, False, B)
        event = grow_at
        first = self._first[seq_id]
        for g in self._attn:
            grp = self.groups[g]
            if not grp.windowed:
                continue
            c = grp.computed_skipping((first[g] + 1) * B)  # when its next block is freed
            event = min(event, max(c, computed) + 1)
        return Growth(event, 1 if event == grow_at else 0, False, 0)

    def growth_capacity(self) -> int:
        caps = [p.num_free // n for p, n in zip(self.pools, self._attn_per_pool) if n]
        return min(caps) if caps else 1 << 62

    # --- swap (one shared pool) ----------------------------------------------------------------------
    def swap_out(self, seq_id: int) -> list[tuple[int, int]] | None:
        tables = self._tables.get(seq_id)
        if not tables or self.swap is None:
            return None
        live = [(g, j, b) for g, t in enumerate(tables) for j, b in enumerate(t) if b != NULL]
        cpu = self.swap.store(seq_id, len(live))
        if cpu is None:
            return None
        self._swapped_shape[seq_id] = ([(len(t), self._first[seq_id][g]) for g, t in enumerate(tables)],
                                       self._tokens[seq_id])
        mapping = [(b, c) for (_, _, b), c in zip(live, cpu)]
        self.copies.extend(("swap_out", b, c) for b, c in mapping)
        self.free(seq_id)
        return mapping

    def swap_in(self, seq_id: int, request: Request) -> list[tuple[int, int]] | None:
        cpu = self.swap.held(seq_id) if self.swap else None
        if cpu is None or len(cpu) > self.pools[0].num_free:
            return None
        gpu = self.pools[0].take(len(cpu))
        self.swap.release(seq_id)
        shape, tokens = self._swapped_shape.pop(seq_id)
        tables, first, it = [], [], iter(gpu)
        for g, (length, f) in enumerate(shape):
            t = [NULL] * f + [next(it) for _ in range(length - f)]
            tables.append(t)
            first.append(f)
            self._phys[g] += length - f
            self._dropped += f * self.B * self.groups[g].token_units
        self._tables[seq_id], self._first[seq_id] = tables, first
        self._tokens[seq_id] = tokens
        self._note_overhang(seq_id, len(tables[self._attn[0]]) if self._attn else 0, request.total_tokens)
        mapping = list(zip(cpu, gpu))
        self.copies.extend(("swap_in", c, b) for c, b in mapping)
        return mapping

    # --- accounting ------------------------------------------------------------------------------------
    def _padding_and_state(self) -> tuple[int, int]:
        phys = self._phys
        return (sum(n * p for n, p in zip(phys, self._pad_per_block)),
                sum(n * s for n, s in zip(phys, self._state_per_block)))

    def external_fragmentation(self, next_request: Request | None) -> int:
        """The rounding remainder, plus, with split pools, free memory stranded in pools that could serve
        the next request while another pool cannot."""
        ext = self.pool_tokens - self.usable_tokens
        if next_request is None or len(self.pools) == 1:
            return ext
        chunk = min(next_request.prompt_tokens, self.prefill_chunk or next_request.prompt_tokens)
        need = [0] * len(self.pools)
        for g, grp in enumerate(self.groups):
            need[grp.pool] += -(-chunk // self.B) if grp.attention else 1
        short = [n > p.num_free for n, p in zip(need, self.pools)]
        if any(short):
            ext += sum(p.num_free * u for p, u, s in zip(self.pools, self.layout.pool_page_units, short) if not s)
        return ext

    def memory_breakdown(self, filled_tokens: int, next_request: Request | None) -> Breakdown:
        used = self.used_slots
        pad, state = self._padding_and_state()
        tokens = filled_tokens * self.token_slots - self._dropped - self._shared_extra
        internal = self._overhang_total
        external = self.external_fragmentation(next_request)
        return Breakdown(tokens, used - tokens - internal - pad - state, internal, external,
                         self.pool_tokens - used - external, state, pad)

    def check_invariants(self) -> None:
        counts = [[0] * len(p.ref) for p in self.pools]
        phys = [set() for _ in self.groups]
        for tables in self._tables.values():
            for g, t in enumerate(tables):
                for b in t:
                    if b != NULL:
                        counts[self.groups[g].pool][b] += 1
                        phys[g].add(b)
        for p, pool in enumerate(self.pools):
            assert counts[p] == pool.ref, "reference counts != block-table entries"
            pool.check_invariants()
        assert self._phys == [len(s) for s in phys], "blocks in use per group are off"
        assert self._extra_refs == sum(r - 1 for p in self.pools for r in p.ref if r > 1)
        dropped = sum(f[g] * self.B * self.groups[g].token_units for f in self._first.values()
                      for g in range(len(self.groups)))
        assert dropped == self._dropped, "window-dropped tokens are off"
        for sid, tables in self._tables.items():
            f = self._first[sid]
            for g, t in enumerate(tables):
                assert all(b == NULL for b in t[:f[g]]) and all(b != NULL for b in t[f[g]:]), "nulls not leading"
        assert self._overhang_total == sum(self._overhang.values())
