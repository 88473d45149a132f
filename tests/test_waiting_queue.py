"""The waiting queue's scheduling policies (kvsim/engine/waiting.py): fcfs is today's deque exactly; priority is
vLLM V1's --scheduling-policy priority (lower `priority` first, then arrival; the victim is the least
important running request), and the incremental scheduler gives the stepping reference's results under it."""

import math
from collections import deque

import pytest
from hypothesis import assume, given, settings, strategies as st

from helpers import FixedLatency, req, sched
from kvsim.allocators import make_allocator
from kvsim.frontend import FRONTEND_PRESETS
from kvsim.engine.preemption import get_victim_policy
from kvsim.engine.sequence import Sequence
from kvsim.engine.simulator import Simulation, SwapTiming
from kvsim.engine.waiting import FCFSQueue, PriorityQueue, make_waiting_queue, priority_key
from kvsim.errors import ConfigError
from kvsim.hardware import get_gpu, get_model
from kvsim.latency.roofline import RooflineModel
from kvsim.options import config_from_args
from kvsim.trace.request import Request


def _seqs(*prios):
    return [Sequence(i, Request(str(i), 0.1 * i, 16, 4, priority=p)) for i, p in enumerate(prios)]


def test_fcfs_is_a_deque_with_the_same_order():
    a, b, c, d = _seqs(3, 0, 1, 2)
    q, ref = make_waiting_queue("fcfs"), deque()
    assert isinstance(q, FCFSQueue) and isinstance(q, deque) and not q
    for op, s in (("push", a), ("push", b), ("push_front", c), ("push", d)):
        assert getattr(q, op)(s) is None
        (ref.append if op == "push" else ref.appendleft)(s)
    assert list(q) == list(ref) == [c, a, b, d] and q.peek() is c and len(q) == 4
    assert q.pop_next() is c and list(q) == [a, b, d]
    holding = {d.sid: d, a.sid: a}
    assert list(q.reclaim_order(holding)) == [d, a]  # the earliest preempted (held longest) first


def test_priority_queue_orders_by_priority_then_arrival():
    a, b, c, d, e = _seqs(1, 2, 0, 1, 0)
    q = make_waiting_queue("priority")
    assert isinstance(q, PriorityQueue) and not q
    assert q.push(a) is True  # the head of an empty queue
    assert q.push(b) is False  # behind a
    assert q.push(c) is True  # priority 0 overtakes the head
    q.push(d)
    assert [s.sid for s in q] == [2, 0, 3, 1] and len(q) == 4
    q.push_front(e)  # no front under priority: by its key (0, 0.4) behind c (0, 0.2)
    assert [s.sid for s in q] == [2, 4, 0, 3, 1] and q.peek() is c and q[0] is c
    with pytest.raises(IndexError):
        q[1]  # only the head shows
    assert [q.pop_next().sid for _ in range(5)] == [2, 4, 0, 3, 1] and not q
    holding = {x.sid: x for x in (a, b, c)}
    assert list(q.reclaim_order(holding)) == [b, a, c]  # the least important gives its memory back first
    same_time = [Sequence(i, Request(str(i), 1.0, 16, 4)) for i in (7, 5)]
    assert sorted(same_time, key=priority_key)[0].sid == 5  # equal times: arrival order (sid)
    with pytest.raises(ValueError, match="unknown scheduling policy"):
        make_waiting_queue("sjf")


def test_the_option_sets_the_queue_and_the_victim():
    cfg = config_from_args(["--scheduling-policy", "priority"])
    assert cfg.scheduler.scheduling_policy == "priority" and cfg.victim_policy == "priority"
    cfg = config_from_args(["--scheduling-policy", "priority", "--victim-policy", "lifo"])
    assert cfg.victim_policy == "lifo"  # said otherwise
    cfg = config_from_args([])
    assert cfg.scheduler.scheduling_policy == "fcfs" and cfg.victim_policy == "lifo"
    with pytest.raises(ConfigError):
        sched(scheduling_policy="sjf")
    from kvsim.vllm_flags import VLLM_FLAGS

    assert "--scheduling-policy" not in VLLM_FLAGS  # modelled now: kvsim's own option


def _simulate(reqs, policy, pool=10_000, victim=None, cfg=None, fast=True, spec="paged:16", latency=None):
    cfg = cfg or sched(scheduling_policy=policy)
    alloc = make_allocator(spec, pool, cfg.max_model_len)
    victim = get_victim_policy(victim or ("priority" if policy == "priority" else "lifo"))
    return Simulation(reqs, alloc, latency or FixedLatency(), cfg, victim, fast_forward=fast).run()


@pytest.mark.parametrize("fast", [True, False])
def test_priority_golden_admission_order(fast):
    """One seat. A (priority 1) arrives alone and runs 0-0.14 s (a 0.1 s prefill, four 0.01 s decodes); B (2),
    C (0) and D (1) arrive meanwhile. Priority admits C, D, B as seats free; fcfs admits B, C, D."""
    reqs = [
        req("a", 0.0, 100, 5, priority=1),
        req("b", 0.01, 100, 5, priority=2),
        req("c", 0.02, 100, 5, priority=0),
        req("d", 0.03, 100, 5, priority=1),
    ]
    for policy, order in (("priority", "acdb"), ("fcfs", "abcd")):
        res = _simulate(reqs, policy, cfg=sched(max_num_seqs=1, scheduling_policy=policy), fast=fast)
        admitted = {s.req.id: s.admitted_s for s in res.sequences}
        assert [admitted[r] for r in order] == pytest.approx([0.0, 0.14, 0.28, 0.42]), policy


@pytest.mark.parametrize("fast", [True, False])
def test_priority_victim_is_the_least_important_running_request(fast):
    """Four blocks of 16 tokens; X (priority 5) and Y (priority 0) arrive together, X first, each growing to 56
    tokens (four blocks): they cannot both finish in the pool. Under priority X, the least important, is the
    victim; under fcfs (lifo victim, vLLM's default) Y, the last admitted."""
    reqs = [req("x", 0.0, 16, 40, priority=5), req("y", 0.0, 16, 40, priority=0)]
    for policy, victim in (("priority", "x"), ("fcfs", "y")):
        res = _simulate(reqs, policy, pool=64, fast=fast)
        pre = {s.req.id: s.preemptions for s in res.sequences}
        assert pre[victim] >= 1 and sum(pre.values()) == pre[victim], (policy, pre)
        assert all(s.status == "finished" for s in res.sequences)


@pytest.mark.parametrize("fast", [True, False])
def test_an_arrival_overtakes_a_blocked_head(fast):
    """A decodes (16-token prompt, 200 tokens out) in a 512-token pool; B (priority 5) arrived with it but its
    500-token prompt cannot fit beside A. C (priority 0, small) arrives at 0.505 s: under priority it goes ahead of
    B and is admitted at the next iteration boundary (0.51 s: a decode run must end there); under fcfs it waits
    behind B until A has finished and B with it."""
    reqs = [req("a", 0.0, 16, 200, priority=0), req("b", 0.0, 500, 5, priority=5), req("c", 0.505, 16, 5, priority=0)]
    res = {p: _simulate(reqs, p, pool=512, fast=fast) for p in ("priority", "fcfs")}
    c = {p: next(s for s in r.sequences if s.req.id == "c") for p, r in res.items()}
    assert c["priority"].admitted_s == pytest.approx(0.51)
    assert c["fcfs"].admitted_s > 2.0


# --- properties -------------------------------------------------------------------------------------

LATENCIES = {
    "fixed": FixedLatency(),
    "roofline": RooflineModel(get_model("llama-2-7b"), get_gpu("a100-40gb")),
}
FAMILIES = [[9000 + 100 * f + i for i in range(40)] for f in range(3)]
request = st.tuples(
    st.floats(0, 3),
    st.integers(1, 300),
    st.integers(1, 120),
    st.integers(0, 2),  # prefix family
    st.sampled_from([1, 1, 1, 2, 3]),  # parallel samples
    st.integers(0, 3),  # priority
)
setup = st.fixed_dictionaries(
    {
        "spec": st.sampled_from(["paged:16", "paged:8", "paged:16+prefix", "radix:8", "max", "oracle"]),
        "victim": st.sampled_from(["priority", "priority", "lifo", "lru"]),
        "mode": st.sampled_from(["recompute", "swap", "partial"]),
        "static": st.sampled_from([False, False, False, True]),
        "max_seqs": st.sampled_from([2, 4, 8, 32]),
        "budget": st.sampled_from([16, 64, 512, 4096]),
        "horizon": st.one_of(st.none(), st.floats(0.5, 10)),
        "pool": st.integers(200, 3000),
        "latency": st.sampled_from(sorted(LATENCIES)),
        "chunked": st.sampled_from([True, True, False]),
        "multi_step": st.sampled_from([1, 1, 1, 4]),
        "frontend": st.sampled_from(["none", "none", "vllm", "vllm-v0"]),
        "async": st.booleans(),
    }
)


def _requests(items):
    reqs = []
    for i, (t, p, o, f, n, prio) in enumerate(items):
        nb = -(-p // 16)
        ids = tuple(FAMILIES[f][: nb // 2] + [10**6 + 100 * i + j for j in range(nb - nb // 2)])
        reqs.append(Request(str(i), t, p, o, priority=prio, hash_ids=ids, hash_block_tokens=16, n=n))
    return reqs


def _sim(reqs, s, fast, observer=None):
    budget = max(s["budget"], s["max_seqs"], 0 if s["chunked"] else 512)
    cfg = sched(
        max_model_len=512,
        max_num_seqs=s["max_seqs"],
        max_num_batched_tokens=budget,
        enable_chunked_prefill=s["chunked"],
        batching="static" if s["static"] else "continuous",
        horizon_s=s["horizon"],
        preemption_mode="swap" if s["mode"] == "swap" else "recompute",
        partial_preemption=s["mode"] == "partial",
        scheduling_policy="priority",
        num_scheduler_steps=s["multi_step"],
        api_server=FRONTEND_PRESETS[s["frontend"]],
        async_scheduling=s["async"] and s["multi_step"] == 1,
    )
    swap = s["mode"] == "swap"
    try:
        alloc = make_allocator(s["spec"], s["pool"], 512, 16 * 40 if swap else 0)
    except ConfigError:
        assume(False)
    sim = Simulation(
        reqs,
        alloc,
        LATENCIES[s["latency"]],
        cfg,
        get_victim_policy(s["victim"]),
        fast_forward=fast,
        swap_timing=SwapTiming(1000, 1e6, 1e-3) if swap else None,
    )
    if observer is not None:
        observer(sim.engine.sched)
    return sim.run()


def _watch_admissions(bad):
    """Wrap the scheduler's admission: whatever it takes out of the queue in one pass goes before everything it
    leaves there, by priority and then arrival."""

    def install(sched_):
        admit = sched_._admit

        def checked(budget, scheduled, now):
            before = list(sched_.waiting)
            admit(budget, scheduled, now)
            left = {id(s) for s in sched_.waiting}
            taken = [s for s in before if id(s) not in left]
            kept = [s for s in before if id(s) in left]
            if taken and kept:
                worst = max(taken, key=priority_key)
                best = min(kept, key=priority_key)
                if priority_key(best) < priority_key(worst):  # (a strictly better priority is a smaller key)
                    bad.append((now, worst.sid, best.sid))

        sched_._admit = checked

    return install


@settings(max_examples=60, deadline=None)
@given(st.lists(request, min_size=1, max_size=25), setup)
def test_priority_never_admits_past_a_more_important_waiting_request(items, s):
    """Admission takes the queue in priority order: no request is admitted while one of strictly better
    priority (or equal priority and earlier arrival) waits, whatever fits (a head that does not fit blocks
    those behind it)."""
    bad = []
    _sim(_requests(items), s, True, _watch_admissions(bad))
    assert not bad


@settings(max_examples=80, deadline=None)
@given(st.lists(request, min_size=1, max_size=25), setup)
def test_incremental_scheduler_equals_stepping_under_priority(items, s):
    """As tests/test_incremental.py, with the priority queue: arrivals that overtake a blocked head end decode
    runs, preempted requests re-enter by priority."""
    reqs = _requests(items)
    fast, slow = _sim(reqs, s, True), _sim(reqs, s, False)
    assert fast.steps == slow.steps and fast.preemptions == slow.preemptions
    assert fast.extra == pytest.approx(slow.extra, rel=1e-9)
    pairs = [(a, b) for x, y in zip(fast.sequences, slow.sequences) for a, b in zip([x, *x.samples], [y, *y.samples])]
    for a, b in pairs:
        assert (a.status, a.preemptions, a.cached_tokens, a.generated, a.computed) == (
            b.status,
            b.preemptions,
            b.cached_tokens,
            b.generated,
            b.computed,
        )
        for f in ("admitted_s", "first_token_s", "finish_s"):
            x, y = getattr(a, f), getattr(b, f)
            assert (x is None and y is None) or math.isclose(x, y, rel_tol=1e-9, abs_tol=1e-9)
    fa, fb = fast.memory.time_weighted_fractions(), slow.memory.time_weighted_fractions()
    for k in fa:
        assert math.isclose(fa[k], fb[k], abs_tol=1e-9), k
    assert fast.memory.max_batch == slow.memory.max_batch and fast.memory.peak_held == slow.memory.peak_held


def test_priority_with_one_priority_and_no_preemption_is_fcfs():
    """Without priorities and without memory pressure the two policies admit in the same order: the same run."""
    reqs = [req(i, 0.03 * i, 50 + 37 * i % 200, 20 + 11 * i % 60) for i in range(60)]
    cfg = {p: sched(max_num_seqs=8, max_num_batched_tokens=256, scheduling_policy=p) for p in ("fcfs", "priority")}
    a = _simulate(reqs, "fcfs", cfg=cfg["fcfs"], latency=LATENCIES["roofline"])
    b = _simulate(reqs, "priority", cfg=cfg["priority"], latency=LATENCIES["roofline"])
    assert a.preemptions == b.preemptions == 0 and a.steps == b.steps
    # (to rounding: priority ends decode runs at arrivals a blocked fcfs head would not have seen)
    times = [[(s.admitted_s, s.finish_s) for s in r.sequences] for r in (a, b)]
    assert [x for t in times[0] for x in t] == pytest.approx([x for t in times[1] for x in t], rel=1e-12)
