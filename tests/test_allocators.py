"""Stateful property tests for every allocator, plus golden numbers worked by hand."""

import pytest
from hypothesis import given, strategies as st
from hypothesis.stateful import Bundle, RuleBasedStateMachine, consumes, invariant, rule

from kvsim.allocators import example_specs, make_allocator, parse_allocator, parse_allocator_list
from kvsim.allocators.contiguous import next_pow2
from kvsim.allocators.extents import ExtentAllocator
from kvsim.allocators.paged import PagedAllocator
from kvsim.errors import ConfigError
from kvsim.config import MemoryConfig, plan_pool
from kvsim.hardware import get_gpu, get_model
from kvsim.trace.request import Request

POOL, MAX_LEN = 600, 128


class AllocatorMachine(RuleBasedStateMachine):
    """Random admit / grow / free sequences against a model of what each sequence should hold."""

    spec = "paged:16"
    seqs = Bundle("seqs")

    def __init__(self):
        super().__init__()
        self.alloc = make_allocator(self.spec, POOL, MAX_LEN)
        self.live: dict[int, tuple[Request, int]] = {}  # sid -> (request, tokens it asked for)
        self.next_id = 0

    @rule(target=seqs, prompt=st.integers(1, 100), output=st.integers(1, 28), frac=st.floats(0, 1))
    def admit(self, prompt, output, frac):
        req = Request(str(self.next_id), 0.0, prompt, output)
        n = max(1, int(frac * req.total_tokens))
        sid = self.next_id
        self.next_id += 1
        used_before = self.alloc.used_slots
        if self.alloc.allocate(sid, req, n):
            self.live[sid] = (req, n)
            assert self.alloc.held_slots(sid) >= n
        else:
            assert self.alloc.used_slots == used_before and self.alloc.held_slots(sid) == 0
        return sid

    @rule(sid=seqs, extra=st.integers(1, 40))
    def grow(self, sid, extra):
        if sid not in self.live:
            return
        req, n = self.live[sid]
        want = min(req.total_tokens, n + extra)
        held_before, used_before = self.alloc.held_slots(sid), self.alloc.used_slots
        if self.alloc.allocate(sid, req, want):
            self.live[sid] = (req, want)
        else:
            assert self.alloc.held_slots(sid) == held_before and self.alloc.used_slots == used_before

    @rule(sid=consumes(seqs))
    def free(self, sid):
        self.alloc.free(sid)
        self.live.pop(sid, None)
        assert self.alloc.held_slots(sid) == 0

    @invariant()
    def accounting(self):
        a = self.alloc
        assert a.used_slots == sum(a.held_slots(s) for s in self.live)
        assert 0 <= a.used_slots <= a.usable_tokens <= a.pool_tokens
        filled = sum(n for _, n in self.live.values())
        b = a.memory_breakdown(filled, None)
        assert sum(b.as_tuple()) == a.pool_tokens
        assert min(b.as_tuple()) >= 0
        # internal fragmentation is exactly what is held beyond each request's final length
        assert b.internal_frag == sum(max(0, a.held_slots(s) - r.total_tokens) for s, (r, _) in self.live.items())

    @invariant()
    def ownership(self):
        a = self.alloc
        a.check_invariants()  # each allocator checks its own structure (pools: free + evictable + in use == total)
        tables = {s: a.block_table(s) for s in self.live}
        if any(t is None for t in tables.values()):
            return  # no block tables (contiguous reservations)
        owned = [b for t in tables.values() for b in t]
        assert len(owned) == len(set(owned))  # no block owned twice
        for s, (_, n) in self.live.items():
            assert a.held_slots(s) == len(tables[s]) * a.copy_unit
            assert a.held_slots(s) - n < a.copy_unit  # waste < one block per sequence

    def teardown(self):
        for sid in list(self.live):
            self.alloc.free(sid)
        assert self.alloc.used_slots == 0  # everything returns on free


def _machine(spec):
    cls = type(f"Machine_{spec}", (AllocatorMachine,), {"spec": spec})
    return cls.TestCase


# every registered allocator kind gets the property tests, through its example names
for _spec in example_specs():
    globals()["Test_" + "".join(c if c.isalnum() else "_" for c in _spec)] = _machine(_spec)


@given(st.lists(st.tuples(st.booleans(), st.integers(1, 40), st.integers(0, 30)), max_size=60))
def test_extent_allocator_matches_bitmap(ops):
    cap = 200
    ext = ExtentAllocator(cap)
    bitmap = [False] * cap
    live = []
    for is_alloc, size, pick in ops:
        if is_alloc or not live:
            start = ext.alloc(size)
            # first fit: the lowest start of a run of `size` free slots
            expect = next((i for i in range(cap - size + 1) if not any(bitmap[i : i + size])), None)
            assert start == expect
            if start is not None:
                bitmap[start : start + size] = [True] * size
                live.append((start, size))
        else:
            s, n = live.pop(pick % len(live))
            ext.release(s, n)
            bitmap[s : s + n] = [False] * n
        assert ext.free_total == bitmap.count(False)
        holes = ext.holes()
        assert all(a + n < b for (a, n), (b, _) in zip(holes, holes[1:]))  # coalesced: never adjacent


def test_extent_double_free_is_caught():
    e = ExtentAllocator(10)
    s = e.alloc(4)
    e.release(s, 4)
    with pytest.raises(ValueError):
        e.release(s, 4)


def test_golden_opt13b_max_on_12gib():
    """OPT-13B KV = 2 x 40 x 40 x 128 x 2 B = 800 KiB/token; 12 GiB / 800 KiB = 15,728 slots.
    `max` with max_model_len 2048 fits floor(15728 / 2048) = 7 requests and leaves 15728 - 14336 = 1,392
    slots (8.85% of the pool) that no further request can use."""
    m = get_model("opt-13b")
    pool = plan_pool(m, get_gpu("a100-40gb"), MemoryConfig(kv_pool_gb=12))
    assert m.kv_bytes_per_token == 800 * 1024 and pool.pool_tokens == 15728
    a = make_allocator("max", pool.pool_tokens, 2048)
    r = Request("r", 0.0, 100, 100)
    admitted = sum(a.allocate(i, r, 100) for i in range(10))
    assert admitted == 7
    b = a.memory_breakdown(7 * 100, r)
    assert b.external_frag == 1392 and b.free == 0
    assert round(100 * b.external_frag / pool.pool_tokens, 1) == 8.9
    # per request: 100 filled, 100 reserved for its own output, 2048 - 200 never to be filled
    assert (b.token_states, b.reserved, b.internal_frag) == (700, 700, 7 * 1848)


def test_golden_paged_and_pow2_sizes():
    r = Request("r", 0.0, 100, 30)
    assert make_allocator("paged:16", 1000, 2048).footprint(r) == 144  # ceil(130/16) = 9 blocks
    assert make_allocator("pow2", 1000, 2048).footprint(r) == 256
    assert make_allocator("oracle", 1000, 2048).footprint(r) == 130
    assert next_pow2(1) == 1 and next_pow2(129) == 256 and next_pow2(256) == 256
    paged = make_allocator("paged:16", 1000, 2048)
    assert paged.usable_tokens == 992  # 62 blocks; 8 slots of remainder are never usable
    assert paged.memory_breakdown(0, None).external_frag == 8


def test_next_growth_names_the_next_allocation_that_changes_anything():
    """A paged sequence holding 2 blocks of 16 next allocates at its 33rd token, then every 16; a fork's
    shared partial last block is copied at the next write; a contiguous reservation never grows."""
    a = PagedAllocator(16 * 10, 16)
    r = Request("r", 0.0, 20, 500)
    a.allocate(0, r, 20)
    g = a.next_growth(0, 20)
    assert (g.tokens, g.units, g.copy, g.every) == (33, 1, False, 16)
    assert a.allocate(0, r, 32) and a.held_slots(0) == 32  # nothing changes before it
    assert a.allocate(0, r, 33) and a.held_slots(0) == 48
    assert a.fork(0, 1, 33, r)
    g = a.next_growth(1, 33)
    assert (g.tokens, g.units, g.copy) == (34, 1, True)
    m = make_allocator("max", 1000, 200)
    assert m.next_growth(0, 5).tokens == 6 and m.allocate(0, r, 5) and m.next_growth(0, 5) is None


@pytest.mark.parametrize(
    "text,canonical",
    [
        ("max", "max"),
        ("paged", "paged:16"),
        ("PAGED:32", "paged:32"),
        ("paged+prefix", "paged:16+prefix"),
        ("radix", "radix:16"),
        ("radix:8", "radix:8"),
        ("paged:8+prefix", "paged:8+prefix"),
    ],
)
def test_allocator_names_round_trip(text, canonical):
    spec = parse_allocator(text).resolve()
    assert str(spec) == canonical and parse_allocator(canonical).resolve() == spec


def test_allocator_names_take_the_runs_block_size_and_prefix_switch():
    assert [str(s) for s in parse_allocator_list("paged,radix,max,paged:8", 32)] == [
        "paged:32",
        "radix:32",
        "max",
        "paged:8",
    ]
    assert [str(s) for s in parse_allocator_list("paged", 16, enable_prefix_caching=True)] == ["paged:16+prefix"]


@pytest.mark.parametrize(
    "text,msg",
    [
        ("paged16", "did you mean 'paged'"),
        ("max:16", "has no block size"),
        ("paged:x", "not an integer"),
        ("paged:0", "must be > 0"),
        ("radix+prefix", "not an option"),
        ("paged,paged:16", "both paged:16"),
    ],
)
def test_bad_allocator_names(text, msg):
    with pytest.raises(ConfigError, match=msg):
        parse_allocator_list(text)


def test_grow_decodes_is_allocate_one_by_one_or_nothing():
    """A run of decodes crossing block boundaries: the same blocks in the same order as allocate() one by one;
    with one block too few, nothing at all (the scheduler then goes one by one and preempts)."""
    from kvsim.allocators import make_allocator
    from kvsim.engine.sequence import Sequence
    from kvsim.trace.request import Request

    def setup(blocks):
        a = make_allocator("paged:16", blocks * 16, 4096)
        seqs = []
        for i, p in enumerate((32, 16, 40, 48)):  # 2, 1, 3, 3 blocks; the 3rd is mid-block
            s = Sequence(i, Request(str(i), 0.0, p, 10))
            assert a.allocate(i, s.req, p)
            s.computed = p
            seqs.append(s)
        return a, seqs

    bulk, seqs = setup(12)
    one, ref = setup(12)
    assert bulk.grow_decodes(seqs)
    for s in ref:
        assert one.allocate(s.sid, s.req, s.computed + 1)
    assert [bulk.block_table(s.sid) for s in seqs] == [one.block_table(s.sid) for s in ref]
    assert bulk.counters() == one.counters() and bulk.used_slots == one.used_slots
    short, seqs = setup(11)  # 9 held, 2 free, 3 needed
    before = [list(short.block_table(s.sid)) for s in seqs]
    assert not short.grow_decodes(seqs)
    assert [short.block_table(s.sid) for s in seqs] == before and short.pool.num_free == 2
