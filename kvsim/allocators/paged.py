"""vLLM-style paged KV cache: fixed-size blocks, a block table per sequence, allocated on demand as the
sequence grows and returned when it finishes.

Where blocks come from is a part, the block pool (block_pool.py): a plain free stack, vLLM V1's hashed
prefix cache (hashed_pool.py) or SGLang's radix tree (radix_pool.py). The tables and everything built on
reference counts (forks sharing the prompt's blocks with copy-on-write for the partial last block, prefix
hits sharing full prompt blocks between requests, tails given back) are the paged core
(block_tables.py), which the layer-group allocator (hybrid.py) uses too. This module decides when a
sequence takes blocks, and adds lower cache tiers and a CPU swap space (a preempted sequence's blocks
copied out and back instead of recomputed).
"""

from __future__ import annotations

from kvsim.allocators.base import NO_HIT, Breakdown, Growth, KVAllocator, PrefixHit, SwapMapping
from kvsim.allocators.block_keys import prompt_block_hashes
from kvsim.allocators.block_pool import BlockPool, FreeStackPool
from kvsim.allocators.block_tables import BlockTables
from kvsim.allocators.kv_tier import KVTier
from kvsim.allocators.swap import SwapSpace
from kvsim.trace.request import Request

RESTART_SALT = 0x72657374617274  # seeds the private block hashes of a preempted sequence (keep_for_restart)


def blocks_for(tokens: int, block_size: int) -> int:
    return -(-tokens // block_size)


class PagedAllocator(KVAllocator):
    shares_kv = True
    forks = True
    grows_in_bulk = True

    def __init__(
        self,
        pool_tokens: int,
        block_size: int = 16,
        cpu_swap_tokens: int = 0,
        pool: BlockPool | None = None,
        name: str | None = None,
    ):
        super().__init__(pool_tokens)
        if block_size <= 0:
            raise ValueError("block size must be > 0")
        self.block_size = self.copy_unit = block_size
        self.num_blocks = pool_tokens // block_size
        self.pool = pool if pool is not None else FreeStackPool(self.num_blocks)
        if self.pool.num_blocks != self.num_blocks:
            raise ValueError(f"pool of {self.pool.num_blocks} blocks for {self.num_blocks} blocks of memory")
        self.caches_prefixes = self.pool.caches_prefixes
        self.ref = self.pool.ref
        self.name = name or f"paged:{block_size}"
        self.core = BlockTables(self.pool, block_size)
        self._tables = self.core.tables
        self._chains: dict[int, list[int]] = {}  # seq_id -> its prompt block hashes (caching pools only)
        self._restarts: dict[int, list[int]] = {}  # seq_id -> the block hashes its restart looks up (keep_for_restart)
        self.swap = SwapSpace(cpu_swap_tokens // block_size) if cpu_swap_tokens > 0 else None
        self.tiers: list[KVTier] = []  # lower prefix-cache tiers, nearest first (kv_tier.py)
        self.stats = {"cow_copies": 0, "forks": 0}
        if self.caches_prefixes:
            self.stats.update(hit_blocks=0, lookup_blocks=0)

    @property
    def num_free_blocks(self) -> int:
        return self.pool.num_free

    # --- the allocator interface ------------------------------------------------------------
    @property
    def usable_tokens(self) -> int:
        return self.num_blocks * self.block_size

    def describe(self) -> dict:
        return {"num_blocks": self.num_blocks, "block_size": self.block_size}

    def footprint(self, request: Request) -> int:
        return blocks_for(request.total_tokens, self.block_size) * self.block_size

    def _chain(self, seq_id: int, request: Request) -> list[int]:
        chain = self._chains.get(seq_id)
        if chain is None:
            chain = self._restarts.pop(seq_id, None) or prompt_block_hashes(request, self.block_size)
            self._chains[seq_id] = chain
        return chain

    def keep_for_restart(self, seq_id: int, request: Request, computed_tokens: int) -> None:
        """Before a recompute preemption frees ``seq_id``: leave its computed full blocks in the prefix cache for
        its restart to find, as vLLM V1 does (it hashes every full block, prompt and output, and a freed block
        keeps its hash in the free queue until it is taken). The trace's hash ids name the prompt blocks they
        cover; the blocks beyond them (a request without hash ids: all) get hashes of this sequence alone, so
        only its own restart can hit them. Work done only when a sequence is preempted."""
        if not self.caches_prefixes:
            return
        table = self._tables.get(seq_id)
        if not table:
            return
        full = min(computed_tokens // self.block_size, len(table))
        chain = self._chain(seq_id, request)
        if len(chain) < full:  # (a block's private hash depends on its index alone: an earlier restart's agree)
            chain = self._chains[seq_id] = chain + [hash((RESTART_SALT, seq_id, j)) for j in range(len(chain), full)]
        self.pool.register(seq_id, chain, table, full, request)
        self._restarts[seq_id] = chain

    def forget_lookup(self, seq_id: int) -> None:
        super().forget_lookup(seq_id)
        self._restarts.pop(seq_id, None)

    def lookup_prefix(self, seq_id: int, request: Request, max_tokens: int) -> PrefixHit:
        if not self.caches_prefixes:
            return NO_HIT
        chain = self._chain(seq_id, request)
        limit = max_tokens // self.block_size
        hits = self.pool.lookup(chain[:limit])
        B = self.block_size
        if self.tiers and len(hits) < limit:
            below = self._tier_lookup(chain[len(hits) : limit])
            if below:
                return PrefixHit(
                    tuple(hits), (len(hits) + len(below)) * B, True, self.pool.evictions, below, len(below) * B
                )
        return PrefixHit(tuple(hits), len(hits) * B, True, self.pool.evictions)

    # --- lower tiers --------------------------------------------------------------------------
    def attach_tier(self, tier: KVTier) -> None:
        """Add a lower tier. Private tiers (a CPU tier, then slower ones) form a chain: cached blocks evicted
        from GPU memory spill into the first, each one's evictions into the next. A shared store takes every
        block evicted from GPU memory too (write on evict), so that other replicas find it. Lookups try the
        private tiers, nearest first, then the shared ones."""
        if not self.caches_prefixes:
            super().attach_tier(tier)
        private = [t for t in self.tiers if not t.spec.shared]
        shared = [t for t in self.tiers if t.spec.shared]
        if tier.spec.shared:
            shared.append(tier)
        else:
            if private:
                private[-1].lower = tier
            private.append(tier)
        self.tiers = private + shared
        if private:  # exclusive tiers: content cached in GPU memory again leaves the private ones

            def recached(h: int) -> None:
                for t in private:
                    t.discard(h)

            self.pool.recached = recached
        first = private[0].put if private else None
        if not shared:
            self.pool.spill = first
        else:

            def spill(h: int) -> None:
                if first is not None:
                    first(h)
                for t in shared:
                    t.put(h)

            self.pool.spill = spill

    def _tier_lookup(self, chain: list[int]) -> tuple[int, ...]:
        """The tier index of each leading block of ``chain`` that a lower tier holds (up to the first miss)."""
        out = []
        for h in chain:
            for k, tier in enumerate(self.tiers):
                if h in tier:
                    out.append(k)
                    break
            else:
                break
        return tuple(out)

    def tier_load_seconds(self, hit: PrefixHit) -> float:
        """Time to load ``hit``'s lower-tier blocks into GPU memory (tier by tier)."""
        return sum(t.seconds(hit.tier_hits.count(k)) for k, t in enumerate(self.tiers))

    def allocate(
        self, seq_id: int, request: Request, num_tokens: int, hit: PrefixHit = NO_HIT, computed: int | None = None
    ) -> bool:
        if not hit.looked_up:
            return self._grow(seq_id, request, num_tokens)
        if hit.stamp != self.pool.evictions:
            raise ValueError(f"sequence {seq_id}: stale prefix hit (blocks were evicted since the lookup)")
        hits = hit.blocks
        if hits:
            ref = self.ref
            evictable = sum(1 for b in hits if ref[b] == 0)  # counted as free until claimed
            if blocks_for(num_tokens, self.block_size) - len(hits) > self.pool.num_free - evictable:
                return False
            self.core.claim(seq_id, list(hits), request)
        below = ()
        if hit.tier_hits:
            below = self._chain(seq_id, request)[len(hits) : len(hits) + len(hit.tier_hits)]
            for h, k in zip(below, hit.tier_hits):
                self.tiers[k].touch(h)  # the GPU blocks taken below may spill: evict other entries first
        if not self._grow(seq_id, request, num_tokens):
            return False
        if below:  # the fresh blocks after the GPU hits now hold the loaded content: cached again
            for h, k in zip(below, hit.tier_hits):
                self.tiers[k].load(h)
            for k, tier in enumerate(self.tiers):
                if k in hit.tier_hits:
                    key = f"tier_{tier.name}_hit_blocks"
                    self.stats[key] = self.stats.get(key, 0) + hit.tier_hits.count(k)
            self.pool.register(
                seq_id, self._chain(seq_id, request), self._tables[seq_id], len(hits) + len(below), request
            )
        self.stats["lookup_blocks"] += request.prompt_tokens // self.block_size
        self.stats["hit_blocks"] += min(len(hits), request.prompt_tokens // self.block_size)
        return True

    def grow_decodes(self, seqs: list) -> bool:
        """The decode branch of :meth:`_grow` for a run of sequences at once (the block boundaries of an
        iteration's decodes): each that crosses a boundary takes one block, in order. All or none: a
        fork-shared last block, a growth of more than one block, or fewer free blocks than needed leave
        everything as it was (the caller then allocates one by one)."""
        tables, B, core = self._tables, self.block_size, self.core
        shared = core.partial_fill
        need = []
        for s in seqs:
            table = tables.get(s.sid)
            if not table or (shared and table[-1] in shared):
                return False
            held = len(table) * B
            n = s.computed + 1
            if n > held:
                if n > held + B:
                    return False
                need.append((s, table))
        if not need:
            return True
        if len(need) > self.pool.num_free:
            return False
        # one take for the run: the same blocks in the same order as one take per sequence
        core.in_use += len(need)
        for (s, table), block in zip(need, self.pool.take(len(need))):
            table.append(block)  # _add_decode_block, inlined: every decode's block boundary comes here
            req = s.req
            held, final = len(table) * B, req.prompt_tokens + req.output_tokens
            if held > final:
                self._set_overhang(s.sid, held, final)
        return True

    def _add_decode_block(self, seq_id: int, table: list[int], request: Request, block: int) -> None:
        """A decode's next block joins its table (what lies past the request's final length is its waste)."""
        table.append(block)
        self.core.in_use += 1
        held, final = len(table) * self.block_size, request.prompt_tokens + request.output_tokens
        if held > final:
            self._set_overhang(seq_id, held, final)

    def _grow(self, seq_id: int, request: Request, num_tokens: int) -> bool:
        table = self._tables.get(seq_id)
        core = self.core
        B = self.block_size
        if table and core.partial_fill and table[-1] in core.partial_fill:  # its last block is fork-shared
            if core.must_copy_last(table, num_tokens):
                if 1 + max(0, blocks_for(num_tokens, B) - len(table)) > self.pool.num_free:
                    return False
                self.copies.append(("cow", *core.copy_last(table)))
                self.stats["cow_copies"] += 1
            if table[-1] not in core.partial_fill:  # its own now: what lies past the final length is its waste
                self._set_overhang(seq_id, len(table) * B, request.total_tokens)
        if table is not None and num_tokens <= (len(table) + 1) * B:  # a decode's growth: at most one block
            if num_tokens <= len(table) * B:
                return True
            b = self.pool.take_one_if_free()  # one call, not two: every decode's block boundary is here
            if b < 0:
                return False
            self._add_decode_block(seq_id, table, request, b)
            return True
        need = blocks_for(num_tokens, B) - (len(table) if table is not None else 0)
        if need <= 0:
            return True
        if need > self.pool.num_free:
            return False
        if table is None:
            self._tables[seq_id] = table = []
        core.take(table, need)
        self._set_overhang(seq_id, len(table) * B, request.total_tokens)
        return True

    def on_computed(self, seq_id: int, request: Request, computed_tokens: int) -> None:
        """Offer the prompt blocks whose KV is now computed to the prefix cache."""
        if not self.caches_prefixes:
            return
        chain = self._chain(seq_id, request)
        table = self._tables.get(seq_id)
        if not table:
            return
        upto = min(len(chain), computed_tokens // self.block_size, len(table))
        self.pool.register(seq_id, chain, table, upto, request)

    def counters(self) -> dict:
        out = dict(self.stats)
        if self.caches_prefixes:
            out["evictions"] = self.pool.evictions
        for t in self.tiers:
            if not t.spec.shared:  # a shared store's totals are the fleet's
                out.update(t.counters())
        return out

    @property
    def shared_slots(self) -> int:
        return self.core.shared_units

    def fork(self, parent_id: int, child_id: int, filled_tokens: int, request: Request) -> bool:
        if not self.core.fork(parent_id, child_id, filled_tokens):
            return False
        # The shared last block's slots past the final length stay the parent's internal
        # fragmentation until the child writes (copy-on-write) or becomes the sole owner.
        self._set_overhang(child_id, 0, request.total_tokens)
        self.stats["forks"] += 1
        return True

    def free(self, seq_id: int) -> None:
        self.core.free(seq_id)
        self._drop_overhang(seq_id)
        self._chains.pop(seq_id, None)

    def release_tail(self, seq_id: int, request: Request, slots_needed: int) -> int:
        """Free tail blocks of ``seq_id`` worth at least ``slots_needed`` slots; returns the tokens it keeps."""
        table = self._tables.get(seq_id)
        if not table:
            return 0
        drop = min(len(table), blocks_for(slots_needed, self.block_size))
        if drop == len(table):
            self.free(seq_id)
            return 0
        self.core.drop_tail(seq_id, drop)
        self._set_overhang(seq_id, len(table) * self.block_size, request.total_tokens)
        return len(table) * self.block_size

    def shortfall(self, seq_id: int, num_tokens: int) -> int:
        """Slots that must be freed before ``seq_id`` can hold ``num_tokens`` tokens."""
        table = self._tables.get(seq_id)
        need = blocks_for(num_tokens, self.block_size) - (len(table) if table else 0)
        return max(0, need - self.pool.num_free) * self.block_size

    def held_slots(self, seq_id: int) -> int:
        table = self._tables.get(seq_id)
        return len(table) * self.block_size if table else 0

    def block_table(self, seq_id: int) -> list[int]:
        return list(self._tables.get(seq_id, ()))

    @property
    def used_slots(self) -> int:
        return (self.num_blocks - self.pool.num_free) * self.block_size

    def memory_breakdown(self, filled_tokens: int, next_request: Request | None) -> Breakdown:
        return super().memory_breakdown(filled_tokens - self.core.shared_units, next_request)

    def check_invariants(self) -> None:
        count = [0] * len(self.ref)
        self.core.count_refs(count)
        assert count == self.ref, "reference counts != block-table entries"
        assert self.core.extra_refs == sum(r - 1 for r in self.ref if r > 1), "shared-reference count is off"
        self.core.check_invariants()
        self.pool.check_invariants()
        assert self._overhang_total == sum(self._overhang.values())
        private = [t for t in self.tiers if not t.spec.shared]
        if private:  # exclusive tiers: no block's content is in GPU memory and a private tier at once
            gpu = {h for h in (self.pool.cached_hash(b) for b in range(len(self.ref))) if h is not None}
            for t in private:
                both = gpu & set(t._lru)
                assert not both, f"blocks in GPU memory and the {t.name} tier at once: {sorted(both)[:5]}"

    # --- swap -----------------------------------------------------------------------------------
    def swap_out(self, seq_id: int) -> SwapMapping | None:
        """Copy the sequence's blocks to the CPU pool and free them here; None if the CPU pool is full."""
        table = self._tables.get(seq_id)
        if not table or self.swap is None:
            return None
        cpu = self.swap.store(seq_id, len(table))
        if cpu is None:
            return None
        return self._swapped_out(seq_id, list(zip(table, cpu)))

    def swap_in(self, seq_id: int, request: Request) -> SwapMapping | None:
        """Bring a swapped-out sequence's blocks back; None if the GPU lacks free blocks."""
        cpu = self.swap.held(seq_id) if self.swap else None
        if cpu is None or len(cpu) > self.pool.num_free:
            return None
        gpu = self.pool.take(len(cpu))
        self.swap.release(seq_id)
        self.core.restore(seq_id, gpu, 0)
        self._set_overhang(seq_id, len(gpu) * self.block_size, request.total_tokens)
        return self._swapped_in(list(zip(cpu, gpu)))

    # --- growth events ------------------------------------------------------------------------
    def next_growth(self, seq_id: int, computed: int) -> Growth | None:
        table = self._tables.get(seq_id)
        if not table:
            return Growth(computed + 1)
        last = table[-1]
        if (
            last in self.core.partial_fill
        ):  # the next write into a shared partial block copies it (or, alone, frees it up)
            shared = self.ref[last] > 1
            return Growth(computed + 1, 1 if shared else 0, shared, 0)
        return Growth(len(table) * self.block_size + 1, 1, False, self.block_size)

    def growth_capacity(self) -> int:
        return self.pool.num_free
