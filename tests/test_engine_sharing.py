"""Engine-level behaviour of prefix caching, forks, swap and the victim policies."""

import math

import pytest
from hypothesis import given, settings, strategies as st

from helpers import FixedLatency, req, sched
from kvsim.allocators import make_allocator
from kvsim.latency.roofline import RooflineParams
from kvsim.engine.preemption import get_victim_policy, prefill_first
from kvsim.latency.roofline import RooflineModel
from kvsim.engine.sequence import Sequence
from kvsim.engine.simulator import Simulation, SwapTiming
from kvsim.hardware import get_gpu, get_model
from kvsim.metrics import requests_frame, run_summary
from kvsim.trace import load_trace
from kvsim.trace.request import Request


def run(reqs, spec, pool, cfg=None, policy="lifo", cpu=0, swap=False, latency=None, ff=True):
    cfg = cfg or sched(max_model_len=1 << 20)
    alloc = make_allocator(spec, pool, cfg.max_model_len, cpu)
    sim = Simulation(
        reqs,
        alloc,
        latency or FixedLatency(),
        cfg,
        get_victim_policy(policy),
        fast_forward=ff,
        swap_timing=SwapTiming(1000, 1e6, 1e-3) if swap else None,
    )
    return sim.run()


def ideal_hit_tokens(requests, block=16):
    """Independent oracle: a block is identified by the explicit tuple of hash ids up to the chunk
    holding its last token, plus its end offset; hits are the leading run of blocks seen before,
    capped at (prompt - 1) // block blocks (the last prompt token is always computed)."""
    seen, out = set(), []
    for r in requests:
        H = r.hash_block_tokens
        keys = [
            (tuple(r.hash_ids[: (end - 1) // H + 1]), end)
            for end in range(block, r.prompt_tokens + 1, block)
            if (end - 1) // H < len(r.hash_ids)
        ]
        run = 0
        for k in keys[: (r.prompt_tokens - 1) // block]:
            if k not in seen:
                break
            run += 1
        out.append(run * block)
        seen.update(keys)
    return out


def test_hit_rate_equals_ideal_with_a_pool_that_never_evicts():
    trace = load_trace("traces/mooncake_excerpt.jsonl").requests[:80]
    spaced = [
        Request(r.id, 1000.0 * i, r.prompt_tokens, 4, hash_ids=r.hash_ids, hash_block_tokens=r.hash_block_tokens)
        for i, r in enumerate(trace)
    ]
    want = ideal_hit_tokens(spaced)
    assert sum(want) > 0.25 * sum(r.prompt_tokens for r in spaced)  # a real-trace case with lots of sharing
    for spec in ("paged:16+prefix", "radix:16"):
        res = run(spaced, spec, pool=16 * 200_000)
        got = [s.cached_tokens for s in res.sequences]
        assert got == want, spec
        assert res.extra["evictions"] == 0


def test_preempted_request_only_hits_blocks_still_cached():
    """X is preempted (lifo) while A grows. With room to spare, X's four prompt blocks stay cached and
    its restart (prompt + generated tokens to recompute) hits all of them; in a tighter pool A's growth
    takes them first, and X's restart finds nothing: no stale hits from its own freed blocks."""
    x_ids = tuple(range(500, 504))

    def scenario(pool_blocks):
        reqs = [req("A", 0.0, 16, 150), Request("X", 0.001, 64, 100, hash_ids=x_ids, hash_block_tokens=16)]
        res = run(reqs, "paged:16+prefix", pool=16 * pool_blocks)
        return res.sequences[1], res

    x, res = scenario(pool_blocks=15)
    assert x.preemptions == 1 and x.status == "finished"
    # X's generated tokens' full blocks were cached too (vLLM hashes output blocks): A's growth takes those
    # four first (freed last, evicted first), the prompt's survive
    assert x.cached_tokens == 64 and res.extra["evictions"] == 4
    x, res = scenario(pool_blocks=11)
    assert x.preemptions == 1 and x.status == "finished"
    assert x.cached_tokens == 0 and res.extra["evictions"] >= 4
    # the plain paged allocator never reuses anything
    reqs = [req("A", 0.0, 16, 150), Request("X", 0.001, 64, 100, hash_ids=x_ids, hash_block_tokens=16)]
    assert run(reqs, "paged:16", pool=16 * 15).sequences[1].cached_tokens == 0


def test_a_restart_without_hash_ids_finds_its_own_blocks_and_no_one_else_does():
    """A request without hash ids shares nothing, but its restart after a recompute preemption hits the full
    blocks it computed (prompt and output), as vLLM V1's does: they keep hashes of that sequence alone. B, whose
    prompt is as long, never hits them; nor does the plain paged allocator."""

    def scenario(spec):
        reqs = [req("A", 0.0, 16, 150), req("X", 0.001, 64, 100), req("B", 0.002, 64, 4)]
        return run(reqs, spec, pool=16 * 15)

    res = scenario("paged:16+prefix")
    a, x, b = res.sequences
    assert x.preemptions == 1 and x.status == "finished"
    assert x.cached_tokens == 64  # its four prompt blocks (its output blocks went to A's growth, as above)
    assert b.cached_tokens == 0 and a.cached_tokens == 0
    assert scenario("paged:16").sequences[1].cached_tokens == 0


def test_blocks_of_a_sequence_preempted_before_its_prefill_ran_are_never_cached():
    a = make_allocator("paged:16+prefix", 16 * 20, 4096)
    r = Request("r", 0, 64, 10, hash_ids=(1, 2, 3, 4), hash_block_tokens=16)
    hit = a.lookup_prefix(0, r, 63)
    assert hit.tokens == 0 and hit.looked_up
    assert a.allocate(0, r, 64, hit)
    a.free(0)  # preempted in the same scheduling pass: its KV was never computed
    assert a.pool.cached_block_count() == 0
    assert a.lookup_prefix(1, r, 63).tokens == 0


def test_parallel_sampling_forks_share_and_copy_on_write():
    reqs = [Request("p", 0.0, 40, 20, n=3)]
    res = run(reqs, "paged:16", pool=16 * 40)
    df = requests_frame(res)
    assert df.status[0] == "finished" and df.generated_tokens[0] == 60
    assert res.extra["forks"] == 2
    assert res.extra["cow_copies"] == 2  # 40 % 16 = 8: the shared partial block is copied by two of three
    s = run_summary(res)
    # at the fork 3 samples hold the 40 prompt tokens stored once: 80 slots saved of a 640-slot pool
    assert s["peak_saved_by_sharing_x_pool"] == pytest.approx(2 * 40 / 640)
    assert 0 < s["sharing_dedup_frac"] < 1 and s["saved_by_sharing_x_pool"] > 0
    # contiguous reservations cannot share: the other samples recompute their prompt in their own ranges
    res2 = run(reqs, "oracle", pool=16 * 40)
    assert requests_frame(res2).generated_tokens[0] == 60
    assert [s.cached_tokens for s in res2.sequences] == [0]


def test_parallel_samples_of_a_one_token_answer_all_come_from_the_prefill():
    res = run([Request("p", 0.0, 40, 1, n=4)], "paged:16", pool=16 * 40)
    df = requests_frame(res)
    assert df.status[0] == "finished" and df.generated_tokens[0] == 4
    assert res.extra["forks"] == 0 and res.sequences[0].finish_s == pytest.approx(0.1)


def test_swap_preemption_moves_blocks_and_costs_time():
    reqs = [req(i, 0.0, 32, 60) for i in range(4)]
    cfg = sched(max_model_len=4096, preemption_mode="swap")
    res = run(reqs, "paged:16", pool=16 * 14, cfg=cfg, cpu=16 * 64, swap=True)
    ex = res.extra
    assert all(s.status == "finished" for s in res.sequences)
    assert ex["preempt_swap"] > 0 and ex["swap_out_blocks"] == ex["swap_in_blocks"] > 0
    # SwapTiming(1000 B/slot, 1e6 B/s, 1 ms per block): each block = 1 ms + 16 kB / 1 MB/s = 17 ms
    assert ex["swap_time_s"] == pytest.approx((ex["swap_out_blocks"] + ex["swap_in_blocks"]) * 0.017)
    # a CPU pool too small to hold a victim: fall back to recompute and count it
    res = run(reqs, "paged:16", pool=16 * 14, cfg=cfg, cpu=16 * 2, swap=True)
    assert res.extra["swap_fallback_recompute"] > 0 and res.extra["preempt_recompute"] > 0
    assert all(s.status == "finished" for s in res.sequences)


def test_partial_preemption_keeps_head_blocks_and_finishes():
    reqs = [req(i, 0.0, 40, 80) for i in range(5)]
    cfg = sched(max_model_len=4096, partial_preemption=True)
    res = run(reqs, "paged:16", pool=16 * 20, cfg=cfg, policy="hybrid")
    assert all(s.status == "finished" for s in res.sequences)
    assert res.extra["preempt_partial"] > 0
    full = run(reqs, "paged:16", pool=16 * 20, cfg=sched(max_model_len=4096), policy="hybrid")
    # recomputing only tails means fewer tokens computed in total
    assert res.steps <= full.steps


def test_hybrid_policy_prefers_prefills_then_lru():
    mk = lambda i, gen, last: _seq(i, gen, last)
    a, b, c = mk(0, 5, 1.0), mk(1, 0, 3.0), mk(2, 7, 0.5)
    assert prefill_first([a, b, c]) is b  # the one still in prefill goes first
    assert prefill_first([a, c]) is c  # then the least recently scheduled decode
    assert get_victim_policy("lifo")([a, b, c]) is c and get_victim_policy("fifo")([a, b, c]) is a


def _seq(i, generated, last):
    s = Sequence(i, Request(str(i), 0.0, 10, 10))
    s.generated, s.last_scheduled_s = generated, last
    return s


def test_priority_policy_evicts_least_important():
    reqs = [
        Request("hi", 0.0, 32, 80, priority=0),
        Request("lo", 0.0, 32, 80, priority=5),
        Request("mid", 0.0, 32, 80, priority=1),
    ]
    res = run(reqs, "paged:16", pool=16 * 14, policy="priority")
    pre = {s.req.id: s.preemptions for s in res.sequences}
    assert pre["lo"] >= 1 and pre["hi"] == 0
    assert all(s.status == "finished" for s in res.sequences)


lens = st.tuples(st.floats(0, 5), st.integers(1, 200), st.integers(1, 80), st.integers(0, 2), st.integers(1, 3))


@settings(max_examples=25, deadline=None)
@given(
    st.lists(lens, min_size=1, max_size=20),
    st.sampled_from(["paged:16+prefix", "radix:8", "paged:8"]),
    st.integers(300, 2000),
    st.sampled_from(["lifo", "lru", "hybrid"]),
    st.sampled_from(["recompute", "swap", "partial"]),
)
def test_fast_forward_matches_stepping_with_sharing(items, spec, pool, policy, mode):
    fam = [[7000 + 100 * f + i for i in range(20)] for f in range(3)]
    reqs = []
    for i, (t, p, o, f, n) in enumerate(items):
        nb = -(-p // 16)
        ids = tuple(fam[f][: nb // 2] + [10**6 + 100 * i + j for j in range(nb - nb // 2)])
        reqs.append(Request(str(i), t, p, o, hash_ids=ids, hash_block_tokens=16, n=n))
    lat = RooflineModel(get_model("llama-2-7b"), get_gpu("a100-40gb"), RooflineParams())
    cfg = sched(
        max_model_len=512,
        max_num_seqs=8,
        max_num_batched_tokens=128,
        preemption_mode="swap" if mode == "swap" else "recompute",
        partial_preemption=mode == "partial",
    )
    cpu = 16 * 40 if mode == "swap" else 0
    fast = run(reqs, spec, pool, cfg, policy, cpu, mode == "swap", lat, ff=True)
    slow = run(reqs, spec, pool, cfg, policy, cpu, mode == "swap", lat, ff=False)
    assert fast.steps == slow.steps and fast.preemptions == slow.preemptions
    for a, b in zip(fast.sequences, slow.sequences):
        assert a.status == b.status == "finished" or a.status == b.status == "rejected"
        assert a.cached_tokens == b.cached_tokens
        assert (a.finish_s is None) == (b.finish_s is None)
        if a.finish_s is not None:
            assert math.isclose(a.finish_s, b.finish_s, rel_tol=1e-9)
