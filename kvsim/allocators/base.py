"""The allocator interface: the spine every KV memory policy plugs in behind.

All sizes are in token slots (one slot = the KV of one token across all layers on one GPU).
The engine talks to allocators only through this interface and never special-cases one: what an
allocator can do (block tables, sharing, a prefix cache, swap) it says through the members below.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import NamedTuple

from kvsim.trace.request import Request

MEMORY_CATEGORIES = (
    "token_states",
    "reserved",
    "internal_frag",
    "external_frag",
    "free",
    "recurrent_state",
    "page_padding",
)


class Breakdown(NamedTuple):  # a tuple: built several times per iteration, and integrated as one
    """Pool slots by category (vLLM paper, Fig. 2). The fields sum to the pool size.

    token_states: slots holding a computed KV. reserved: held for future tokens of the same request.
    internal_frag: held but never to be filled (beyond the request's final length).
    external_frag: free, but unusable for the next allocation. free: free and usable.
    Hybrid models (hybrid.py) add recurrent_state: mamba layers' per-sequence states; page_padding: page
    slots that hold nothing (padding layers, state pages padded to the attention page size).
    """

    token_states: int
    reserved: int
    internal_frag: int
    external_frag: int
    free: int
    recurrent_state: int = 0
    page_padding: int = 0

    @property
    def held(self) -> int:
        """Slots sequences hold (everything but fragmentation outside them and free memory)."""
        return self.token_states + self.reserved + self.internal_frag + self.recurrent_state + self.page_padding

    def as_tuple(self) -> tuple[int, ...]:
        """The categories in MEMORY_CATEGORIES order."""
        return self


@dataclass(frozen=True, slots=True)
class PrefixHit:
    """What a prefix-cache lookup found: a value the caller hands to :meth:`KVAllocator.allocate`.

    ``blocks`` cache the request's first ``tokens - tier_tokens`` tokens, in order. ``looked_up`` says a cache was
    consulted (a lookup that found nothing still counts towards the hit rate). ``stamp`` is the cache's
    eviction count at the lookup: once a block has been evicted since, the hit is stale and allocate
    refuses it, so a hit must be claimed before anything else takes blocks.
    """

    blocks: tuple[int, ...] = ()
    tokens: int = 0
    looked_up: bool = False
    stamp: int = 0
    # lower cache tiers (kv_tier.py): the tier index of each block found there after ``blocks``, and the
    # tokens they hold (part of ``tokens``); they load into fresh GPU blocks before the request computes
    tier_hits: tuple[int, ...] = ()
    tier_tokens: int = 0


NO_HIT = PrefixHit()
PROBE_ID = -1  # the sequence id of lookups that only ask (cached_prefix_tokens); never a real sequence


@dataclass(frozen=True, slots=True)
class Growth:
    """The next allocation a growing sequence needs: at ``tokens`` tokens it takes ``units`` copy units;
    ``copy``: it copies a block it shares (copy-on-write) rather than taking a fresh one; ``every``: after
    it, another such growth every this many tokens (0: not known in advance, the engine asks again).

    The engine runs events of at most one unit without a copy inside decode runs (it checks headroom
    counting one unit per sequence per period), so an allocator may announce zero-unit events (a window
    freeing blocks) between its growths, but never more than one unit per ``every`` tokens of a sequence."""

    tokens: int
    units: int = 1
    copy: bool = False
    every: int = 1


class SwapMapping(list):
    """The (source unit, destination unit) copies of one swap, in ``copy_unit`` slots, and ``calls``:
    how many copy calls move them (one per page; a page of a split layout may span several units)."""

    def __init__(self, pairs, calls: int | None = None):
        super().__init__(pairs)
        self.calls = len(self) if calls is None else calls


class KVAllocator(ABC):
    """Owns a pool of ``pool_tokens`` slots and hands them to sequences."""

    name: str
    #: Slots one copy moves (a block for paged allocators): the unit of swap and copy-on-write traffic.
    copy_unit: int = 1
    #: Sequences can share KV (parallel-sampling forks, prefix hits): report the memory sharing saved.
    shares_kv: bool = False
    #: :meth:`fork` shares the parent's memory (parallel sampling); otherwise samples start on their own.
    forks: bool = False
    #: A prefix cache answers lookups: report hit rates.
    caches_prefixes: bool = False
    #: Slots one computed token fills (hybrid layouts count a token once per layer group; see hybrid.py).
    token_slots: int = 1
    #: Bytes of one slot when the allocator decides it (hybrid layouts); None: the model's KV bytes per token.
    slot_bytes: int | None = None
    #: :meth:`grow_decodes` can serve a run of decoding sequences at once.
    grows_in_bulk: bool = False

    def __init__(self, pool_tokens: int):
        self.pool_tokens = pool_tokens
        # Slots held beyond each live request's final length (internal fragmentation), kept
        # incrementally so that a memory snapshot costs O(1), not O(live sequences).
        self._overhang: dict[int, int] = {}
        self._overhang_total = 0
        self.copies: list[tuple[str, int, int]] = []  # (kind, src unit, dst unit) since the last drain
        self._chains: dict = {}  # per sequence: the prompt block hashes its lookups computed (prefix caches)

    def grow_decodes(self, seqs: list) -> bool:
        """Each of ``seqs`` (decoding sequences, each one token further than it holds) gets that token's
        memory, in order, exactly as :meth:`allocate` would one by one; all or none: False (nothing done) where
        that would not succeed for every one or is not a plain growth. Allocators with ``grows_in_bulk``."""
        return False

    def _set_overhang(self, seq_id: int, held: int, final_tokens: int) -> None:
        new = max(0, held - final_tokens)
        self._overhang_total += new - self._overhang.get(seq_id, 0)
        self._overhang[seq_id] = new

    def _drop_overhang(self, seq_id: int) -> None:
        self._overhang_total -= self._overhang.pop(seq_id, 0)

    # --- capacity questions -------------------------------------------------------------
    @abstractmethod
    def footprint(self, request: Request) -> int:
        """Slots this request holds at its largest, alone (its reservation, or its rounded-up blocks)."""

    def alone_problem(self, request: Request) -> str | None:
        """Why the request could not run to completion even in an otherwise empty pool, or None."""
        need = self.footprint(request)
        return f"needs {need} KV slots; the pool holds {self.usable_tokens}" if need > self.usable_tokens else None

    def fits_alone(self, request: Request) -> bool:
        """Could the request run to completion in an otherwise empty pool?"""
        return self.alone_problem(request) is None

    @property
    def usable_tokens(self) -> int:
        """Slots that can ever be handed out (the pool less any rounding remainder)."""
        return self.pool_tokens

    # --- ownership ----------------------------------------------------------------------
    def lookup_prefix(self, seq_id: int, request: Request, max_tokens: int) -> PrefixHit:
        """Leading tokens (at most ``max_tokens``) of the request whose KV is already cached. The result
        is claimed by passing it to the next :meth:`allocate` of ``seq_id``; allocators without a
        prefix cache find nothing."""
        return NO_HIT

    def cached_prefix_tokens(self, request: Request) -> int:
        """Leading prompt tokens of ``request`` whose KV the prefix cache holds now: what a router's exact
        index of this engine (vLLM's KV-cache events) would answer. Changes nothing."""
        if not self.caches_prefixes:
            return 0
        hit = self.lookup_prefix(PROBE_ID, request, request.prompt_tokens)
        self.forget_lookup(PROBE_ID)
        return hit.tokens

    def forget_lookup(self, seq_id: int) -> None:
        """Drop whatever a lookup for ``seq_id`` kept (a probe that will never allocate)."""
        self._chains.pop(seq_id, None)

    def attach_tier(self, tier) -> None:
        """Put a lower cache tier (kv_tier.KVTier) under the prefix cache; ValueError if there is none to put
        it under."""
        raise ValueError(
            f"allocator {self.name}: a lower tier of the prefix cache needs a paged prefix cache "
            f"(paged+prefix or radix)"
        )

    def tier_load_seconds(self, hit: PrefixHit) -> float:
        """Time to load ``hit``'s lower-tier blocks into GPU memory (none without tiers)."""
        return 0.0

    @abstractmethod
    def allocate(
        self, seq_id: int, request: Request, num_tokens: int, hit: PrefixHit = NO_HIT, computed: int | None = None
    ) -> bool:
        """Make ``seq_id`` hold slots for its first ``num_tokens`` tokens, starting from the cached blocks
        of ``hit`` (a fresh sequence's first allocate). ``computed``: tokens whose KV is already computed
        (None: those of the previous allocation); windowed layers free what no later token needs.
        All or nothing: False changes nothing it holds for future tokens."""

    @abstractmethod
    def free(self, seq_id: int) -> None:
        """Return everything ``seq_id`` holds."""

    @abstractmethod
    def held_slots(self, seq_id: int) -> int:
        """Slots ``seq_id`` holds now (0 if none)."""

    @property
    @abstractmethod
    def used_slots(self) -> int:
        """Slots held by any sequence."""

    def block_table(self, seq_id: int) -> list[int] | None:
        """The sequence's block table (block ids in token order), or None for allocators without one."""
        return None

    def describe(self) -> dict:
        """Layout facts for run summaries (e.g. number and size of blocks)."""
        return {}

    def on_computed(self, seq_id: int, request: Request, computed_tokens: int) -> None:  # noqa: B027
        """The sequence's first ``computed_tokens`` tokens now have KV (prefix caches register blocks)."""

    def keep_for_restart(self, seq_id: int, request: Request, computed_tokens: int) -> None:  # noqa: B027
        """``seq_id`` is about to be freed by a recompute preemption with its first ``computed_tokens`` tokens'
        KV computed: a prefix cache keeps what its restart can reuse."""

    def fork(self, parent_id: int, child_id: int, filled_tokens: int, request: Request) -> bool:
        """Let ``child_id`` share everything ``parent_id`` holds (parallel sampling). False: unsupported
        or no memory; the child then starts on its own."""
        return False

    def release_tail(self, seq_id: int, request: Request, slots_needed: int) -> int:
        """Partial preemption: free tail memory worth ``slots_needed`` slots and return the tokens whose KV
        it keeps. Allocators that cannot split a sequence free all of it and return 0."""
        self.free(seq_id)
        return 0

    def shortfall(self, seq_id: int, num_tokens: int) -> int:
        """Slots that must be freed before ``seq_id`` can hold ``num_tokens`` tokens (an upper bound here)."""
        return num_tokens

    def swap_out(self, seq_id: int) -> SwapMapping | None:
        """Copy the sequence's KV to host memory and free it here: (device unit, host unit) pairs, or
        None when unsupported or the host pool is full (the caller then recomputes)."""
        return None

    def swap_in(self, seq_id: int, request: Request) -> SwapMapping | None:
        return None

    def _swapped_out(self, seq_id: int, mapping: list[tuple[int, int]], calls: int | None = None) -> SwapMapping:
        """Record the copies of a swap-out (device unit, host unit) and free the sequence here."""
        self.copies.extend(("swap_out", g, c) for g, c in mapping)
        self.free(seq_id)
        return SwapMapping(mapping, calls)

    def _swapped_in(self, mapping: list[tuple[int, int]], calls: int | None = None) -> SwapMapping:
        """Record the copies of a swap-in (host unit, device unit)."""
        self.copies.extend(("swap_in", c, g) for c, g in mapping)
        return SwapMapping(mapping, calls)

    def drain_copies(self) -> list[tuple[str, int, int]]:
        """Copies (kind, src, dst) of ``copy_unit`` slots made since the last call: copy-on-write and swaps."""
        out, self.copies = self.copies, []
        return out

    def counters(self) -> dict:
        """Allocator-specific totals for the run summary."""
        return {}

    @property
    def shared_slots(self) -> int:
        """Token states stored once but held by several sequences (memory saved by sharing)."""
        return 0

    def check_invariants(self) -> None:  # noqa: B027
        """Raise AssertionError if the allocator's bookkeeping is inconsistent (for tests)."""

    def next_growth(self, seq_id: int, computed: int) -> "Growth | None":
        """For a sequence growing one token per iteration from ``computed`` tokens: the next
        ``allocate(seq_id, n)`` that may change anything, or None if none will (its memory covers it to the
        end). The engine calls allocate only then, so this must never miss a change. Default: every token."""
        return Growth(computed + 1)

    def growth_capacity(self) -> int:
        """How many one-unit growths (see :meth:`next_growth`) can succeed now without preempting anyone."""
        return 1 << 62

    @property
    def freed_while_growing(self) -> int:
        """Pages freed so far by allocations themselves (windowed layers dropping what no later token reads):
        a change tells a scheduler that memory may have loosened while only running sequences grew."""
        return 0

    # --- accounting ---------------------------------------------------------------------
    def external_fragmentation(self, next_request: Request | None) -> int:
        """Free slots that cannot serve the next allocation (the waiting queue's head, if any)."""
        return self.pool_tokens - self.usable_tokens

    def memory_breakdown(self, filled_tokens: int, next_request: Request | None) -> Breakdown:
        """Classify the pool. ``filled_tokens``: sum over live sequences of tokens with computed KV.

        Held slots up to a request's final length are token states or reserved; beyond it, internal
        fragmentation (allocators that share slots between sequences override this).
        """
        used = self.used_slots
        internal = self._overhang_total
        external = self.external_fragmentation(next_request)
        return Breakdown(
            filled_tokens, used - internal - filled_tokens, internal, external, self.pool_tokens - used - external
        )
