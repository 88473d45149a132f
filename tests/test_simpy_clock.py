"""The SimPy clock (kvsim/engine/processes.py) runs engines exactly as the heap clock does: bit for bit on random
single engines and fleets (closed-loop clients, horizons, every router, disaggregated pools), and its absolute-time
events keep the order the heap clock keeps (arrivals before engines at the same instant, engines by index)."""

import simpy
from hypothesis import given, settings, strategies as st

from helpers import assert_same_run

from kvsim.engine.processes import ARRIVAL, Clock
from kvsim.fleet.cluster import ReplicaGroup, simulate_fleet
from kvsim.fleet.disagg import simulate_disagg
from kvsim.fleet.routers import ROUTERS
from kvsim.options import config_from_args
from kvsim.runner import simulate
from kvsim.trace.request import Request

# arrival times and horizons on a grid of 0.25 s, so that arrivals meet engine events (a decode run cut at an
# arrival, the horizon) at the same instant, where the order of events decides the run
request = st.tuples(
    st.integers(0, 20).map(lambda k: k / 4), st.integers(1, 300), st.integers(1, 120), st.integers(0, 2)
)


def _requests(items):
    out = []
    for i, (t, p, o, f) in enumerate(items):
        nb = -(-p // 16)
        ids = tuple([9000 + 100 * f + j for j in range(nb // 2)] + [10**6 + 100 * i + j for j in range(nb - nb // 2)])
        out.append(Request(str(i), t, p, o, hash_ids=ids, hash_block_tokens=16))
    return out


setup = st.fixed_dictionaries(
    {
        "spec": st.sampled_from(["paged:16", "paged:16+prefix", "radix:16", "max"]),
        "blocks": st.integers(20, 200),
        "max_seqs": st.sampled_from([2, 8, 64]),
        "horizon": st.one_of(st.none(), st.integers(1, 32).map(lambda k: k / 4)),
        "clients": st.one_of(st.none(), st.integers(1, 6)),
        "chunked": st.booleans(),
    }
)


def _args(s, clock):
    args = [
        *s.get("extra", ()),
        "--max-model-len",
        "512",
        "--num-blocks",
        str(s["blocks"]),
        "--max-num-seqs",
        str(s["max_seqs"]),
    ]
    args += ["--max-num-batched-tokens", "512", "--clock", clock]
    if s["horizon"] is not None:
        args += ["--horizon-s", str(s["horizon"])]
    if s["clients"] is not None:
        args += ["--max-concurrency", str(s["clients"])]
    if not s["chunked"]:
        args += ["--no-enable-chunked-prefill"]
    return config_from_args(args)


_same = assert_same_run


@settings(max_examples=40, deadline=None)
@given(st.lists(request, min_size=1, max_size=30), setup)
def test_one_engine_on_simpy_is_the_heap_run_bit_for_bit(items, s):
    reqs = _requests(items)
    heap = simulate(reqs, _args(s, "heap"), s["spec"])
    procs = simulate(reqs, _args(s, "simpy"), s["spec"])
    _same(heap, procs)
    assert heap.timeline.equals(procs.timeline)


@settings(max_examples=30, deadline=None)
@given(
    st.lists(request, min_size=1, max_size=30),
    setup,
    st.integers(1, 4),
    st.sampled_from(sorted(set(ROUTERS) - {"dp-lb"})),
)
def test_a_fleet_on_simpy_is_the_heap_run_bit_for_bit(items, s, replicas, router):
    reqs = _requests(items)
    runs = [
        simulate_fleet(reqs, [ReplicaGroup("g", _args(s, clock), s["spec"], replicas)], router)
        for clock in ("heap", "simpy")
    ]
    _same(*runs)
    assert runs[0].replica_table.equals(runs[1].replica_table)


@settings(max_examples=15, deadline=None)
@given(st.lists(request, min_size=1, max_size=25), setup, st.integers(1, 2), st.integers(1, 2))
def test_disaggregated_pools_on_simpy_are_the_heap_run_bit_for_bit(items, s, p, d):
    reqs = _requests(items)
    runs = []
    for clock in ("heap", "simpy"):
        cfg = _args({**s, "spec": "paged:16"}, clock)
        runs.append(
            simulate_disagg(
                reqs, [ReplicaGroup("p", cfg, "paged:16", p)], [ReplicaGroup("d", cfg, "paged:16", d)], "least-requests"
            )
        )
    _same(*runs)


def test_absolute_times_and_priorities_order_events_as_the_heap_clock():
    """An event queued for t fires at exactly t (a delay added to now could round), arrivals (priority 0) go
    before engines at the same instant, and engines go in index order whatever order they were queued in."""
    env = Clock()
    seen = []
    t = 0.1 + 0.2  # 0.30000000000000004: now + (t - now) after a step to 0.1 need not give it back

    def log(name):
        return lambda ev: seen.append((env.now, name))

    env.at(0.1, 1).callbacks.append(log("engine0"))
    env.run()
    env.at(t, 3).callbacks.append(log("engine2"))
    env.at(t, 1).callbacks.append(log("engine0"))
    env.at(t, ARRIVAL).callbacks.append(log("arrival"))
    env.run()
    assert seen == [(0.1, "engine0"), (t, "arrival"), (t, "engine0"), (t, "engine2")]
    assert isinstance(env, simpy.Environment)


def test_a_user_process_shares_the_clock():
    """A SimPy process of the user's own sees the engines' times: here a clock tick every second."""
    env = Clock()
    ticks = []

    def ticker():
        while env.now < 3:
            ticks.append(env.now)
            yield env.timeout(1)

    env.process(ticker())
    env.run()
    assert ticks == [0, 1, 2]


def test_an_arrival_at_an_engine_event_goes_first_on_both_clocks():
    """A request arriving at exactly the end of an iteration joins the next one (vLLM sees what arrived by the
    start of an iteration): the same on both clocks, and not what the engine stepping first would give."""
    cfg = {c: _args({**_PLAIN}, c) for c in ("heap", "simpy")}
    first = simulate([Request("a", 0.0, 100, 50)], cfg["heap"], "paged:16")
    t = float(first.requests.first_token_s.iloc[0])  # the end of the prefill iteration
    reqs = [Request("a", 0.0, 100, 50), Request("b", t, 20, 5)]
    heap, procs = (simulate(reqs, cfg[c], "paged:16") for c in ("heap", "simpy"))
    _same(heap, procs)
    assert heap.requests.admitted_s.iloc[1] == t  # admitted in the iteration that starts as it arrives


def test_engines_at_the_same_instant_go_in_index_order_on_both_clocks():
    """Two replicas finish at the same instant; the client freed by the first (replica 0) sends its next request
    before replica 1 steps, so least-requests sees replica 1 still busy and picks replica 0."""
    reqs = [Request(str(i), 0.0, 64, 8) for i in range(3)]
    runs = [
        simulate_fleet(reqs, [ReplicaGroup("g", _args({**_PLAIN, "clients": 2}, c), "paged:16", 2)], "least-requests")
        for c in ("heap", "simpy")
    ]
    _same(*runs)
    assert list(runs[0].requests.replica) == [0, 1, 0]


# the engine alone (no API server delays, no async scheduling): a first token comes at the end of its iteration,
# and a request that arrives then joins the next
_PLAIN = {
    "spec": "paged:16",
    "blocks": 200,
    "max_seqs": 8,
    "horizon": None,
    "clients": None,
    "chunked": True,
    "extra": ("--frontend", "none", "--no-async-scheduling"),
}


def test_closing_the_clock_ends_its_waiting_processes():
    """Clock.close ends the processes still waiting (their clean-up runs then; one that raises is reported, not
    raised) and drops the queued events."""
    import pytest

    from kvsim.engine.processes import Clock

    env = Clock()
    cleaned = []

    def waits(name, fail):
        try:
            yield env.timeout(10)
        finally:
            cleaned.append(name)
            if fail:
                raise ValueError(f"{name} failed")

    env.process(waits("a", False))
    env.process(waits("b", True))
    env.run(until=1)
    with pytest.warns(RuntimeWarning, match="b failed"):
        env.close()
    assert cleaned == ["a", "b"] and not env._queue
