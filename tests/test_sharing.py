"""Prefix caching, radix cache, copy-on-write forks and swap: stateful tests with content tracking."""

import random

import pytest
from hypothesis import strategies as st
from hypothesis.stateful import Bundle, RuleBasedStateMachine, consumes, invariant, rule

from kvsim.allocators import example_specs, make_allocator, parse_allocator
from kvsim.allocators.block_keys import prompt_block_hashes
from kvsim.allocators.cache_eviction import CACHE_EVICTION_POLICIES
from kvsim.allocators.hashed_pool import HashedBlockPool
from kvsim.allocators.radix_pool import RadixBlockPool
from kvsim.trace.request import Request

B = 8
BLOCKS = 40
FAMILIES = [[1000 * f + i for i in range(12)] for f in range(3)]  # prompts in a family share a prefix


class Live:
    def __init__(self, req, tags):
        self.req, self.tags, self.computed, self.swapped = req, tags, 0, False


class SharingMachine(RuleBasedStateMachine):
    spec = "paged:8+prefix"
    eviction = "lru"
    seqs = Bundle("seqs")

    def __init__(self):
        super().__init__()
        self.alloc = make_allocator(self.spec, BLOCKS * B, 4096, cpu_swap_tokens=20 * B, cache_eviction=self.eviction)
        self.live: dict[int, Live] = {}
        self.gpu: dict[tuple[int, int], tuple] = {}  # (block, slot) -> content tag written there
        self.cpu: dict[tuple[int, int], tuple] = {}
        self.next_id = 0

    # --- helpers ---------------------------------------------------------------------------
    def _apply_copy_on_write(self) -> None:
        """Do the block copies the allocator asked for (the copy_blocks kernel's job)."""
        for kind, src, dst in self.alloc.drain_copies():
            if kind == "cow":
                for slot in range(B):
                    if (src, slot) in self.gpu:
                        self.gpu[(dst, slot)] = self.gpu[(src, slot)]

    def _write(self, sid: int, upto: int) -> None:
        """Simulate the forward pass writing KV for positions [computed, upto)."""
        self._apply_copy_on_write()
        s = self.live[sid]
        table = self.alloc.block_table(sid)
        for p in range(s.computed, upto):
            b = table[p // B]
            assert self.alloc.ref[b] == 1, "wrote into a block another sequence holds"
            self.gpu[(b, p % B)] = s.tags[p]
        s.computed = upto
        self.alloc.on_computed(sid, s.req, min(upto, s.req.prompt_tokens))

    # --- rules ----------------------------------------------------------------------------------
    @rule(
        target=seqs,
        fam=st.integers(0, 2),
        shared=st.integers(0, 12),
        prompt=st.integers(1, 90),
        out=st.integers(1, 20),
        chunk=st.integers(1, 90),
    )
    def start(self, fam, shared, prompt, out, chunk):
        sid = self.next_id
        self.next_id += 1
        nb = -(-prompt // B)
        ids = FAMILIES[fam][: min(shared, nb)] + [10**6 + 100 * sid + i for i in range(nb - min(shared, nb))]
        req = Request(str(sid), 0.0, prompt, out, hash_ids=tuple(ids), hash_block_tokens=B)
        chain = prompt_block_hashes(req, B)
        tags = [("c", chain[p // B], p % B) if p // B < len(chain) else ("u", sid, p) for p in range(prompt + out)]
        found = self.alloc.lookup_prefix(sid, req, prompt - 1)
        hit = found.tokens
        assert hit % B == 0 and hit <= prompt - 1 and len(found.blocks) * B == hit
        n = min(prompt, hit + chunk)
        if not self.alloc.allocate(sid, req, n, found):
            assert self.alloc.held_slots(sid) == 0
            return sid
        self.live[sid] = s = Live(req, tags)
        table = self.alloc.block_table(sid)
        for p in range(hit):  # every hit block holds exactly the content this prompt needs
            assert self.gpu[(table[p // B], p % B)] == tags[p]
        s.computed = hit
        self._write(sid, n)
        return sid

    @rule(sid=seqs, extra=st.integers(1, 30))
    def grow(self, sid, extra):
        s = self.live.get(sid)
        if s is None or s.swapped:
            return
        n = min(s.req.total_tokens - 1, s.computed + extra)
        if n > s.computed and self.alloc.allocate(sid, s.req, n):
            self._write(sid, n)

    @rule(target=seqs, sid=seqs)
    def fork(self, sid):
        s = self.live.get(sid)
        if s is None or s.swapped or s.computed < s.req.prompt_tokens:
            return -1
        child = self.next_id
        self.next_id += 1
        forked = self.alloc.fork(sid, child, s.computed, s.req)
        assert forked == self.alloc.forks  # every block allocator shares a parent's blocks with its samples
        if not forked:
            return -1
        tags = s.tags[: s.computed] + [("u", child, p) for p in range(s.computed, len(s.tags))]
        self.live[child] = c = Live(s.req, tags)
        c.computed = s.computed
        return child

    @rule(sid=consumes(seqs))
    def free(self, sid):
        s = self.live.pop(sid, None)
        if s is not None and s.swapped:
            self.live[sid] = s  # the host copy stays until swapped in
            return
        self.alloc.free(sid)

    @rule(sid=seqs)
    def swap_out(self, sid):
        s = self.live.get(sid)
        if s is None or s.swapped:
            return
        mapping = self.alloc.swap_out(sid)
        if mapping is None:
            return
        for g, c in mapping:
            for slot in range(B):
                if (g, slot) in self.gpu:
                    self.cpu[(c, slot)] = self.gpu[(g, slot)]
        s.swapped = True

    @rule(sid=seqs)
    def swap_in(self, sid):
        s = self.live.get(sid)
        if s is None or not s.swapped:
            return
        mapping = self.alloc.swap_in(sid, s.req)
        if mapping is None:
            return
        for c, g in mapping:
            for slot in range(B):
                if (c, slot) in self.cpu:
                    self.gpu[(g, slot)] = self.cpu[(c, slot)]
        s.swapped = False
        table = self.alloc.block_table(sid)
        assert len(table) == len(mapping)
        for p in range(s.computed):  # the round trip preserved every token's KV and its position
            assert self.gpu[(table[p // B], p % B)] == s.tags[p]

    # --- invariants ---------------------------------------------------------------------------------
    @invariant()
    def ref_counts_match_tables(self):
        a = self.alloc
        count = [0] * a.num_blocks
        for sid, s in self.live.items():
            if not s.swapped:
                for b in a.block_table(sid):
                    count[b] += 1
        # ids past len(ref) were never handed out (pools create blocks lazily)
        assert count == a.ref + [0] * (a.num_blocks - len(a.ref))
        a.check_invariants()  # the pool's own structure: free + evictable + in use == total, cache maps

    @invariant()
    def content_is_intact(self):
        for sid, s in self.live.items():
            if s.swapped:
                continue
            table = self.alloc.block_table(sid)
            for p in range(s.computed):
                assert self.gpu[(table[p // B], p % B)] == s.tags[p], "a shared block changed under a sequence"

    @invariant()
    def memory_adds_up(self):
        a = self.alloc
        filled = sum(s.computed for s in self.live.values() if not s.swapped)
        b = a.memory_breakdown(filled, None)
        assert sum(b.as_tuple()) == a.pool_tokens and min(b.as_tuple()) >= 0

    def teardown(self):
        for sid, s in list(self.live.items()):
            if s.swapped:
                assert self.alloc.swap_in(sid, s.req) is not None or True
            self.alloc.free(sid)
        assert all(r == 0 for r in self.alloc.ref)
        assert self.alloc.num_free_blocks == self.alloc.num_blocks  # nothing leaks


def _machines():
    """Every registered allocator kind with blocks, at B = 8, and the caches under every eviction policy."""
    specs = []
    for e in example_specs():
        spec = parse_allocator(e)
        if spec.has_blocks and str(spec.with_block_size(B)) not in specs:
            specs.append(str(spec.with_block_size(B)))
    for spec in specs:
        policies = CACHE_EVICTION_POLICIES if make_allocator(spec, B, 64).caches_prefixes else ["lru"]
        for pol in policies:
            name = "Test_" + "".join(c if c.isalnum() else "_" for c in spec) + "_" + pol
            yield name, type(name, (SharingMachine,), {"spec": spec, "eviction": pol}).TestCase


for _name, _case in _machines():
    globals()[_name] = _case


# --- block-level LRU against a reference model -------------------------------------------------------
def reference_v1_hits(requests, num_blocks, block):
    """An independent model of V1's cache for requests served one at a time: every free block has a
    recency stamp (never used: -1); a take removes the smallest stamp, evicting its key if it has one;
    a finished request's blocks get new stamps tail first. Returns the cached tokens of each request."""
    stamp = {b: -1.0 for b in range(num_blocks)}  # free blocks only
    key_of, block_of = {}, {}
    clock = 0
    hits = []
    for r in requests:
        keys = [
            tuple([*r.hash_ids[: ((j + 1) * block - 1) // r.hash_block_tokens + 1], (j + 1) * block])
            for j in range(r.prompt_tokens // block)
        ]
        run = []
        for k in keys[: (r.prompt_tokens - 1) // block]:
            if k not in block_of:
                break
            run.append(block_of[k])
        hits.append(len(run) * block)
        for b in run:
            del stamp[b]
        table = list(run)
        for _ in range(-(-r.total_tokens // block) - len(run)):
            b = min(stamp, key=lambda x: (stamp[x], x if stamp[x] < 0 else 0))
            del stamp[b]
            if b in key_of:
                del block_of[key_of.pop(b)]
            table.append(b)
        for j, k in enumerate(keys):
            if j >= len(run) and k not in block_of and table[j] not in key_of:
                block_of[k], key_of[table[j]] = table[j], k
        for b in reversed(table):
            clock += 1
            stamp[b] = clock
    return hits


def test_v1_lru_matches_reference_model():
    rng = random.Random(5)
    fams = [[rng.randrange(10**9) for _ in range(30)] for _ in range(4)]
    reqs = []
    for i in range(120):
        p = rng.randint(1, 200)
        nb = -(-p // 16)
        k = rng.randint(0, nb)
        ids = tuple(rng.choice(fams)[:k] + [rng.randrange(10**9, 2 * 10**9) for _ in range(nb - k)])
        reqs.append(Request(str(i), 0.0, p, rng.randint(1, 60), hash_ids=ids, hash_block_tokens=16))
    blocks = 30
    a = make_allocator("paged:8+prefix", blocks * 8, 4096)
    got = []
    for i, r in enumerate(reqs):
        if r.total_tokens > blocks * 8:
            continue
        hit = a.lookup_prefix(i, r, r.prompt_tokens - 1)
        got.append(hit.tokens)
        assert a.allocate(i, r, r.total_tokens, hit)
        a.on_computed(i, r, r.prompt_tokens)
        a.free(i)
    want = reference_v1_hits([r for r in reqs if r.total_tokens <= blocks * 8], blocks, 8)
    assert got == want
    assert sum(got) > 0  # the case exercises hits and evictions
    assert a.counters()["evictions"] > 0


def test_block_keys_mapping_when_block_does_not_divide_hash_chunk():
    """B=48 over H=512 chunks: a block straddling a chunk boundary is keyed by the later chunk."""
    a = Request("a", 0, 1100, 1, hash_ids=(1, 2, 3), hash_block_tokens=512)
    b = Request("b", 0, 1100, 1, hash_ids=(1, 2, 9), hash_block_tokens=512)
    c = Request("c", 0, 1100, 1, hash_ids=(1, 7, 9), hash_block_tokens=512)
    ka, kb, kc = (prompt_block_hashes(r, 48) for r in (a, b, c))
    assert len(ka) == 1100 // 48 == 22
    # blocks ending at or before token 1024 lie in chunks 0-1: identical for a and b
    same = sum(1 for x, y in zip(ka, kb) if x == y)
    assert same == 1024 // 48  # 21 blocks; block 21 (tokens 1008-1056) straddles into chunk 2
    assert sum(1 for x, y in zip(ka, kc) if x == y) == 512 // 48  # 10 blocks inside chunk 0
    assert prompt_block_hashes(Request("d", 0, 100, 1), 16) == []  # no hash_ids: shares nothing


def test_hits_at_the_head_of_the_free_queue_are_claimed_before_new_blocks_are_taken():
    """X's prefix blocks sit at the head of the LRU free queue (freed first), so the very next blocks a
    take would evict are exactly the ones Y's lookup just found. Y's allocate must claim them first."""
    a = make_allocator(f"paged:{B}+prefix", 6 * B, 4096)
    x = Request("x", 0, 2 * B + 1, 1, hash_ids=(1, 2, 3), hash_block_tokens=B)
    z = Request("z", 0, 3 * B - 1, 1, hash_ids=(7, 8, 9), hash_block_tokens=B)
    assert a.allocate(0, x, x.total_tokens) and a.allocate(1, z, z.total_tokens)  # all 6 blocks in use
    a.on_computed(0, x, x.prompt_tokens)
    x_prefix = a.block_table(0)[:2]
    a.free(0)
    a.free(1)
    head = a.pool.free_order()[:3]
    assert set(x_prefix) <= set(head)  # X's blocks (tail first) lead the queue
    y = Request("y", 0, 2 * B + 5, 3 * B, hash_ids=(1, 2, 4), hash_block_tokens=B)
    hit = a.lookup_prefix(2, y, y.prompt_tokens - 1)
    assert hit.tokens == 2 * B
    assert a.allocate(2, y, y.total_tokens, hit)  # needs 4 more blocks: all of the queue but the hits
    assert a.block_table(2)[:2] == x_prefix and all(a.pool.is_cached(b) for b in x_prefix)
    assert a.counters()["hit_blocks"] == 2


@pytest.mark.parametrize("pool_cls", [HashedBlockPool, RadixBlockPool])
@pytest.mark.parametrize("policy,evicted", [("lru", 2), ("lfu", 1), ("fifo", 0), ("priority", 1)])
def test_cache_eviction_policies_drop_the_block_their_key_names(pool_cls, policy, evicted):
    """Three cached blocks: 0 (priority 0), 1 (priority 5), 2 (priority 1), cached in that order, then
    reused: block 2 three times, block 1 once, block 0 twice (the last). LRU drops 2 (used longest ago),
    LFU drops 1 (fewest reuses), FIFO drops 0 (cached first), priority drops 1 (least important)."""
    pool = pool_cls(3, policy)
    blocks = pool.take(3)
    for i, prio in enumerate((0, 5, 1)):
        pool.register(i, [100 + i], [blocks[i]], 1, Request(str(i), 0, 8, 1, priority=prio))
    for b in blocks:
        pool.ref[b] = 0
        pool.on_unreferenced(b)

    def reuse(h, times):
        for _ in range(times):
            (b,) = pool.lookup([h])
            pool.claim(b)
            pool.ref[b] += 1
            pool.after_claim(99, [b], Request("x", 0, 8, 1, priority=9))
            pool.ref[b] -= 1
            pool.on_unreferenced(b)
            pool.check_invariants()

    reuse(102, 3)
    reuse(101, 1)
    reuse(100, 2)
    (taken,) = pool.take(1)
    assert taken == blocks[evicted] and not pool.is_cached(taken) and pool.evictions == 1
    assert pool.cached_block_count() == 2


def test_a_stale_prefix_hit_is_refused():
    a = make_allocator(f"paged:{B}+prefix", 3 * B, 4096)
    x = Request("x", 0, 2 * B + 1, 1, hash_ids=(1, 2, 3), hash_block_tokens=B)
    assert a.allocate(0, x, x.total_tokens)
    a.on_computed(0, x, x.prompt_tokens)
    a.free(0)
    hit = a.lookup_prefix(1, x, x.prompt_tokens - 1)
    assert hit.tokens == 2 * B
    other = Request("o", 0, 3 * B, 1)
    assert a.allocate(2, other, 3 * B)  # takes every block, evicting the two that were found
    a.free(2)
    with pytest.raises(ValueError, match="stale prefix hit"):
        a.allocate(1, x, x.total_tokens, hit)
