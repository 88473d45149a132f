"""Routers that behave like the real ones (issue 37, deliverable 7).

- ``sglang-cache-aware`` decides as SGLang's router (policies/cache_aware.rs): imbalanced loads -> the least
  loaded; balanced and a cached prefix over the cache threshold -> that replica; below it -> the least loaded
  (or, as sgl-router did, the smallest tree). Golden decisions by hand on small states.
- ``llm-d`` is a weighted sum of llm-d's default scorers (queue 2, KV utilisation 2, prefix 3), max score wins;
  golden scores by hand; its approximate index is an LRU per replica.
- The issue's failure: a multi-turn trace whose every prompt starts with the same block once sent every request
  of ``prefix-approx`` to one replica; with SGLang's balance guard no replica gets everything, and no decision
  adds to a replica more loaded than the thresholds allow (checked at every decision of a real fleet run).
- A property over random request streams and replica counts, for every router in ``ROUTERS``: each decision
  keeps the router's documented promise about load (:class:`kvsim.fleet.routers.Balance`), or the router says
  why it promises nothing.
"""

from __future__ import annotations

import collections
import random
from types import SimpleNamespace

import pytest
from hypothesis import given, settings, strategies as st

import kvsim.fleet.cluster as cluster
from kvsim.errors import ConfigError
from kvsim.fleet.cluster import ReplicaGroup, simulate_fleet
from kvsim.fleet.routers import ROUTERS, LlmD, RouterOptions, SGLangCacheAware, make_router, parse_router_params
from kvsim.options import config_from_args
from kvsim.trace.generate import ArrivalSpec, LengthSpec
from kvsim.trace.request import Request
from kvsim.trace.scenarios import ScenarioSpec, generate_scenario


def _req(ids, prompt=None, rid="r", session=None):
    ids = tuple(ids)
    return Request(
        rid,
        0.0,
        prompt if prompt is not None else 16 * len(ids),
        8,
        hash_ids=ids or None,
        hash_block_tokens=16,
        session=session,
    )


def _engines(loads, queues=None, kv=None):
    queues = queues or [0] * len(loads)
    kv = kv or [0.0] * len(loads)
    return [SimpleNamespace(outstanding=o, queue_len=q, kv_usage=u) for o, q, u in zip(loads, queues, kv)]


PROMPT = tuple(range(100, 110))  # 10 blocks of 16 tokens: 160 tokens


# --- SGLang's cache-aware policy, decisions by hand ----------------------------------------------------------


def _sglang(loads, options=RouterOptions(), taught=()):
    """A router whose tree has replica r holding the first n blocks of PROMPT, for each (r, n) in ``taught``."""
    rt = SGLangCacheAware(_engines(loads), options)
    for r, n in taught:
        rt.routed(_req(PROMPT[:n]), r, 0.0)
    return rt


def test_sglang_defaults_are_those_its_command_line_ships():
    o = RouterOptions()
    assert (o.cache_threshold, o.balance_abs_threshold, o.balance_rel_threshold) == (0.3, 64, 1.5)
    assert (o.eviction_interval_s, o.max_tree_size, o.cache_miss) == (120.0, 2**26, "least-load")
    assert (o.llmd_prefix_weight, o.llmd_queue_weight, o.llmd_kv_weight, o.llmd_max_prefix_blocks) == (3, 2, 2, 256)


@pytest.mark.parametrize(
    "loads,taught,want,why",
    [
        # imbalanced: 100 - 10 = 90 > 64 and 100 > 1.5 x 10: the least loaded, though replica 0 holds the whole prompt
        ([100, 10, 30], [(0, 10)], 1, "imbalanced -> shortest queue"),
        # 70 - 10 = 60 is not > 64: balanced, the prefix decides
        ([70, 10, 30], [(0, 10)], 0, "balanced (abs) + match 1.0 > 0.3 -> prefix"),
        # 300 - 210 = 90 > 64 but 300 is not > 1.5 x 210 = 315: balanced
        ([300, 210, 250], [(0, 10)], 0, "balanced (rel) + match -> prefix"),
        # 4 of 10 blocks: 64 / 160 = 0.4 > 0.3: replica 2 although it is the most loaded
        ([5, 1, 9], [(2, 4)], 2, "match 0.4 > 0.3 -> prefix"),
        # 3 of 10 blocks: 48 / 160 = 0.3, not > 0.3 (the code's strict test): a miss, the least loaded
        ([5, 1, 9], [(2, 3)], 1, "match 0.3 = threshold -> miss -> least loaded"),
        # two replicas hold a prefix: the longer one wins (replica 1: 6 blocks, replica 0: 5)
        ([0, 3, 0], [(0, 5), (1, 6)], 1, "longest match"),
        # nothing anywhere: the least loaded, ties to the lowest index
        ([2, 1, 1], [], 1, "no match -> least loaded, lowest index"),
    ],
)
def test_sglang_cache_aware_decides_as_its_code(loads, taught, want, why):
    assert _sglang(loads, taught=taught).pick(_req(PROMPT), [0, 1, 2], 1.0) == want, why


def test_sglang_cache_miss_goes_to_the_smallest_tree_as_sgl_router_did():
    # sgl-router (before the gateway) sent a miss to the smallest tree (get_smallest_tenant): replica 2 holds
    # nothing, replica 1 a 2-block and replica 0 a 3-block prompt: replica 2 though it is the most loaded
    o = RouterOptions(cache_miss="smallest-tree")
    rt = SGLangCacheAware(_engines([0, 0, 9]), o)
    rt.routed(_req((1, 2, 3)), 0, 0.0)
    rt.routed(_req((4, 5)), 1, 0.0)
    assert rt.pick(_req(PROMPT), [0, 1, 2], 1.0) == 2
    assert rt.pick(_req(PROMPT), [0, 1], 1.0) == 1  # among the candidates only
    # with the gateway's rule the same miss goes to the least loaded
    rt = SGLangCacheAware(_engines([0, 0, 9]), RouterOptions())
    rt.routed(_req((1, 2, 3)), 0, 0.0)
    assert rt.pick(_req(PROMPT), [0, 1, 2], 1.0) == 0


def test_sglang_imbalanced_decisions_still_teach_the_tree_and_eviction_keeps_trees_small():
    rt = _sglang([100, 0])
    r = _req(PROMPT)
    assert rt.pick(r, [0, 1], 0.0) == 1
    rt.routed(r, 1, 0.0)
    rt.engines[0].outstanding = 0  # balanced again: the prompt is now where the imbalanced decision sent it
    assert rt.pick(r, [0, 1], 1.0) == 1
    # eviction every 10 s down to 5 blocks (80 tokens = 320 characters): least recently used leaves go first
    rt = SGLangCacheAware(_engines([0, 0]), RouterOptions(eviction_interval_s=10, max_tree_size=320))
    rt.routed(_req(PROMPT), 0, 0.0)
    assert rt.affinity(_req(PROMPT), 0) == 1.0
    rt.pick(_req((7,)), [0, 1], 9.9)  # before the first eviction
    assert rt._size[0] == 160
    rt.pick(_req((7,)), [0, 1], 10.0)
    assert rt._size[0] == 80 and rt.affinity(_req(PROMPT), 0) == 0.5  # the first 5 blocks stay


# --- llm-d's default profile, scores by hand -----------------------------------------------------------------


def test_llm_d_picks_the_max_weighted_score_of_its_default_scorers():
    # queues 0, 4, 2 -> queue scores 1, 0, 0.5; KV 0.5, 0.1, 0.2 -> 0.5, 0.9, 0.8; replica 1 holds 4 of 8 blocks
    eng = _engines([1, 6, 3], queues=[0, 4, 2], kv=[0.5, 0.1, 0.2])
    rt = LlmD(eng, RouterOptions())
    r8 = _req(range(8))
    rt.routed(_req(range(4)), 1, 0.0)
    # 2 x 1 + 2 x 0.5 = 3.0;  0 + 2 x 0.9 + 3 x 0.5 = 3.3;  2 x 0.5 + 2 x 0.8 = 2.6
    assert rt.affinity(r8, 1) == 0.5 and rt.pick(r8, [0, 1, 2], 1.0) == 1
    rt = LlmD(eng, RouterOptions())
    rt.routed(_req(range(2)), 1, 0.0)
    # replica 1 now 1.8 + 3 x 0.25 = 2.55 < 3.0
    assert rt.pick(r8, [0, 1, 2], 1.0) == 0
    # every score equal: the max-score picker shuffles, so ties are spread (seeded)
    rt = LlmD(_engines([0, 0, 0]), RouterOptions(seed=3))
    assert len({rt.pick(_req((), prompt=50), [0, 1, 2], 0.0) for _ in range(60)}) == 3


def test_llm_d_index_is_an_lru_per_replica_the_size_of_its_kv_pool():
    rt = LlmD(_engines([0, 0]), RouterOptions(llmd_lru_blocks=4))
    r8 = _req(range(8))
    rt.routed(r8, 0, 0.0)
    assert rt.affinity(_req(range(4, 8)), 0) == 1.0  # the last 4 blocks stay
    assert rt.affinity(r8, 0) == 0.0  # the first block is gone: the match stops at once
    # autoTune: the replica's KV pool in blocks (here 64 tokens = 4 blocks of 16)
    eng = [SimpleNamespace(outstanding=0, queue_len=0, kv_usage=0.0, alloc=SimpleNamespace(pool_tokens=64))]
    rt = LlmD(eng, RouterOptions())
    rt.routed(r8, 0, 0.0)
    assert rt._cap[0] == 4 and len(rt._lru[0]) == 4
    # a prompt's first 256 blocks only
    rt = LlmD(_engines([0]), RouterOptions())
    rt.routed(_req(range(300)), 0, 0.0)
    assert len(rt._lru[0]) == 256 and rt.affinity(_req(range(300)), 0) == 1.0


def test_prefix_approx_has_sglangs_balance_guard():
    rt = make_router("prefix-approx", _engines([100, 10]), RouterOptions())
    rt.routed(_req(PROMPT), 0, 0.0)
    assert rt.pick(_req(PROMPT), [0, 1], 1.0) == 1  # 90 > 64 and 100 > 15: the least loaded
    rt.engines[0].outstanding = 70
    assert rt.pick(_req(PROMPT), [0, 1], 1.0) == 0  # 60 <= 64: its prefix


def test_router_params_parse_and_check():
    assert parse_router_params("cache_threshold=0.5,balance-abs-threshold=32,cache_miss=smallest-tree") == {
        "cache_threshold": 0.5,
        "balance_abs_threshold": 32.0,
        "cache_miss": "smallest-tree",
    }
    for bad in (
        "nope=1",
        "cache_threshold",
        "cache_threshold=x",
        "seed=1",
        "approx_ttl_s=5",
        "cache_threshold=1,cache_threshold=2",
    ):
        with pytest.raises(ConfigError, match="--router-params"):
            parse_router_params(bad)
    for bad in (
        {"cache_threshold": 2.0},
        {"balance_rel_threshold": 0.5},
        {"cache_miss": "tree"},
        {"llmd_queue_weight": -1.0},
        {"llmd_max_prefix_blocks": 0.5},
    ):
        with pytest.raises(ConfigError):
            RouterOptions(**bad).validate()


# --- the issue's failure, in a real fleet --------------------------------------------------------------------


def _shared_block_multi_turn(n: int) -> list[Request]:
    """Multi-turn conversations (the scenario generator's), every prompt starting with one shared 16-token
    block (a system prompt): a chained prefix id in front of each prompt's own."""
    reqs = generate_scenario(
        ScenarioSpec("multi-turn", think_s=5.0, turns_per_s=20.0),
        n,
        ArrivalSpec(rate=20.0),
        LengthSpec(prompt_mean=300, output_mean=100, max_total=4096),
        seed=1,
    )
    shared = 10**9
    return [
        Request(
            r.id,
            r.arrival_s,
            r.prompt_tokens + 16,
            r.output_tokens,
            hash_ids=(shared,) + r.hash_ids,
            hash_block_tokens=16,
            session=r.session,
        )
        for r in reqs
    ]


@pytest.fixture(scope="module")
def shared_trace():
    return _shared_block_multi_turn(1500)


def _recording(monkeypatch):
    """Every decision of the next fleet runs: (outstanding of each candidate, the pick)."""
    seen = []
    make = cluster.make_router

    def recording(name, engines, options):
        rt = make(name, engines, options)
        pick = rt.pick

        def pick_and_record(request, candidates, now):
            i = pick(request, candidates, now)
            seen.append(([engines[c].outstanding for c in candidates], candidates.index(i)))
            return i

        rt.pick = pick_and_record
        return rt

    monkeypatch.setattr(cluster, "make_router", recording)
    return seen


def test_the_issue_reproduced_one_replica_gets_everything_without_the_guard(shared_trace):
    cfg = config_from_args(["--model", "llama-3-8b", "--gpu", "a100-40gb"])
    f = simulate_fleet(
        shared_trace,
        [ReplicaGroup("g", cfg, "paged:16+prefix", 4)],
        "prefix-approx",
        RouterOptions(balance_abs_threshold=1e9),
    )
    assert f.requests.replica.nunique() == 1  # what issue 37 saw: every request on one replica


@pytest.mark.parametrize("router", ["prefix-approx", "sglang-cache-aware", "prefix", "llm-d"])
def test_no_replica_gets_everything_and_none_idles_while_one_is_overloaded(shared_trace, router, monkeypatch):
    cfg = config_from_args(["--model", "llama-3-8b", "--gpu", "a100-40gb"])
    seen = _recording(monkeypatch)
    f = simulate_fleet(shared_trace, [ReplicaGroup("g", cfg, "paged:16+prefix", 4)], router)
    share = collections.Counter(f.requests.replica)
    assert len(share) == 4 and max(share.values()) < 0.4 * len(shared_trace), share
    assert f.summary["prefix_hit_rate_tokens"] > 0.5  # conversations still find their context
    assert len(seen) == len(shared_trace)
    bound = make_router(router, [], RouterOptions()).balance()
    if bound is not None and not bound.idle_first:
        for loads, k in seen:
            assert bound.holds(loads[k], min(loads)), (router, loads, k)
    # never a decision that adds to a replica 65 or more requests ahead of an idle one
    assert not any(min(loads) == 0 and loads[k] > 64 for loads, k in seen)


# --- every router keeps its promise, over random streams -----------------------------------------------------


class FakeReplica:
    """What a router reads of an engine, with simple dynamics: up to ``seats`` requests run, the rest wait; a
    running request holds its prompt's KV; the blocks of every prompt that ran stay cached."""

    def __init__(self, seats: int, pool: int = 20_000):
        self.seats, self.running, self.waiting, self.cached = seats, [], [], set()
        self.alloc = SimpleNamespace(pool_tokens=pool)

    @property
    def outstanding(self):
        return len(self.running) + len(self.waiting)

    @property
    def queue_len(self):
        return len(self.waiting)

    @property
    def kv_usage(self):
        return sum(r.prompt_tokens for r in self.running) / self.alloc.pool_tokens

    def cached_prefix_tokens(self, r):
        n = 0
        for h in r.hash_ids or ():
            if h not in self.cached:
                break
            n += 1
        return min(16 * n, r.prompt_tokens - 1) if n else 0

    def admit(self):
        while self.waiting and len(self.running) < self.seats:
            r = self.waiting.pop(0)
            self.running.append(r)
            self.cached.update(r.hash_ids or ())

    def finish(self, k):
        del self.running[:k]
        self.admit()


def test_every_router_states_a_promise_or_why_not():
    for name, cls in ROUTERS.items():
        rt = cls([FakeReplica(1)], RouterOptions())
        b = rt.balance()
        assert (b is None) == bool(cls.balance_excuse), name  # exactly one of the two
        assert b is None or b.text()


stream = st.lists(
    st.tuples(
        st.integers(0, 5),  # which conversation / prefix
        st.integers(1, 12),  # prompt blocks after the shared one
        st.integers(0, 3),  # running requests that finish before it arrives
        st.integers(0, 7),
    ),  # a random replica that finishes them
    min_size=1,
    max_size=70,
)


@settings(max_examples=40, deadline=None)
@given(
    stream,
    st.integers(2, 6),
    st.integers(1, 4),
    st.sampled_from([(64, 1.5), (2, 1.5), (0, 1.0001)]),
    st.booleans(),
    st.integers(0, 99),
)
def test_no_router_overloads_a_replica_beyond_its_documented_bound(events, n, seats, guard, subsets, seed):
    """At every decision of every router in ROUTERS, on a random stream: the pick is within the router's
    :class:`Balance` (measured over the replicas that could take the request), or the router is excused."""
    options = RouterOptions(balance_abs_threshold=guard[0], balance_rel_threshold=guard[1], seed=seed)
    for name in ROUTERS:
        reps = [FakeReplica(seats) for _ in range(n)]
        rt = make_router(name, reps, options)
        b = rt.balance()
        rng = random.Random(seed)
        for t, (conv, blocks, done, who) in enumerate(events):
            reps[who % n].finish(done)
            ids = (10**6, *range(1000 * conv, 1000 * conv + blocks))  # every prompt: the same first block
            r = Request(str(t), float(t), 16 * len(ids), 4, hash_ids=ids, hash_block_tokens=16, session=f"s{conv}")
            cands = sorted(rng.sample(range(n), rng.randint(1, n))) if subsets else list(range(n))
            before = {i: (reps[i].outstanding, reps[i].kv_usage, rt.affinity(r, i)) for i in cands}
            i = rt.pick(r, cands, float(t))
            assert i in cands, name
            if b is not None and b.idle_first:
                idle = [c for c in cands if before[c][0] == 0]
                assert not idle or before[i][0] == 0 or before[i][2] > max(before[c][2] for c in idle), (
                    name,
                    before,
                    i,
                )
            elif b is not None:
                m = 0 if b.measure == "outstanding" else 1
                least = min(before[c][m] for c in cands)
                assert b.holds(before[i][m], least), (name, b.text(), before, i)
            rt.routed(r, i, float(t))
            reps[i].waiting.append(r)
            reps[i].admit()
