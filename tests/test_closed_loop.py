"""Closed-loop load: clients that keep at most N requests in flight (`--max-concurrency`), and traces re-timed
as a benchmark client sends them (`--request-rate`).

The send times follow one rule, checked exactly on random traces for one engine and for fleets: request j
(j >= N) goes at the later of its trace time and the (j - N + 1)-th completion; so no more than N are ever
in flight. A limit no trace reaches changes nothing, bit for bit; a single client is hand-computed."""

import math

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from helpers import FixedLatency, req, sched
from kvsim.allocators import make_allocator
from kvsim.engine.clock import ClientLimit
from kvsim.engine.preemption import get_victim_policy
from kvsim.engine.simulator import Simulation
from kvsim.errors import ConfigError
from kvsim.fleet.cluster import ReplicaGroup, simulate_fleet
from kvsim.fleet.disagg import simulate_disagg
from kvsim.metrics import requests_frame
from kvsim.options import config_from_args
from kvsim.runner import simulate
from kvsim.trace import load_trace
from kvsim.trace.retime import retime

CHAT = load_trace("traces/chat.jsonl").requests


def test_a_freed_client_sends_the_next_request_in_trace_order():
    c = ClientLimit([0.0, 0.0, 5.0, 6.0, 7.0], 2)
    assert c.times == [0.0, 0.0, math.inf, math.inf, math.inf]  # two in flight: the third waits
    c.freed(1, 1.0)
    assert c.times[2] == 5.0  # a client was free before its trace time: it goes on time
    c.freed(1, 5.5)
    assert c.times[3] == 6.0
    c.freed(1, 9.0)
    assert c.times == [0.0, 0.0, 5.0, 6.0, 9.0]  # late: it waited for a client
    c.freed(3, 10.0)  # nothing left to send
    assert c.times[-1] == 9.0
    with pytest.raises(ValueError):
        ClientLimit([0.0], 0)


def test_one_client_sends_each_request_when_the_last_finishes():
    """Hand-computed: an idle engine admits a request the instant it arrives; the prompt takes one 0.1 s
    iteration (its first token), each further token 0.01 s."""
    outputs = [3, 1, 5, 2]
    reqs = [req(i, 0.0, 20, o) for i, o in enumerate(outputs)]
    sim = Simulation(
        reqs,
        make_allocator("paged:16", 4096, 4096),
        FixedLatency(0.1, 0.01),
        sched(),
        get_victim_policy("lifo"),
        max_concurrency=1,
    )
    df = requests_frame(sim.run())
    e2e = [0.1 + 0.01 * (o - 1) for o in outputs]
    assert df.e2e_s.tolist() == pytest.approx(e2e)
    assert df.ttft_s.tolist() == pytest.approx([0.1] * 4)
    assert df.arrival_s.tolist() == pytest.approx([0.0, *np.cumsum(e2e)[:-1]])
    assert df.finish_s.tolist() == pytest.approx(np.cumsum(e2e))


def _sent_by_rule(trace_times, finishes, n):
    """Send times by the rule: the j-th request (j >= n) waits for the (j - n + 1)-th completion."""
    done = sorted(finishes)
    return [t if j < n else max(t, done[j - n]) for j, t in enumerate(trace_times)]


def _max_in_flight(df) -> int:
    events = sorted([(t, 1) for t in df.arrival_s] + [(t, -1) for t in df.finish_s.dropna()])
    return int(max(np.cumsum([d for _, d in events])))  # a finish at t frees its client before a send at t


request = st.tuples(st.floats(0, 4), st.integers(1, 200), st.integers(1, 60))


@settings(max_examples=40, deadline=None)
@given(
    st.lists(request, min_size=1, max_size=30),
    st.integers(1, 5),
    st.integers(1, 3),
    st.sampled_from(["round-robin", "least-requests", "prefix+load"]),
    st.booleans(),
)
def test_send_times_follow_the_client_rule_for_an_engine_and_a_fleet(items, limit, replicas, router, at_once):
    reqs = [req(i, t, p, o) for i, (t, p, o) in enumerate(items)]
    args = [
        "--latency",
        "roofline",
        "--max-model-len",
        "512",
        "--max-num-seqs",
        "4",
        "--kv-pool-gb",
        "1",
        "--max-concurrency",
        str(limit),
    ] + (["--request-rate", "inf"] if at_once else [])
    cfg = config_from_args(args)
    df = (
        simulate(reqs, cfg, "paged:16").requests
        if replicas == 1
        else simulate_fleet(reqs, [ReplicaGroup("g", cfg, "paged:16", replicas)], router).requests
    )
    assert (df.status == "finished").all()
    order = sorted(retime(reqs, cfg.request_rate), key=lambda r: r.arrival_s)
    df = df.set_index("id").loc[[r.id for r in order]]
    expected = _sent_by_rule([r.arrival_s for r in order], df.finish_s.tolist(), limit)
    assert df.arrival_s.tolist() == pytest.approx(expected, abs=1e-9)
    assert _max_in_flight(df) <= limit
    assert (df.ttft_s > 0).all()  # latencies count from sending


def test_a_limit_no_trace_reaches_changes_nothing():
    reqs = CHAT[:400]
    base = simulate(reqs, config_from_args([]), "paged:16")
    limited = simulate(reqs, config_from_args(["--max-concurrency", "100000"]), "paged:16")
    assert base.requests.equals(limited.requests)
    assert base.timeline.equals(limited.timeline)


def test_disaggregated_clients_wait_for_the_decode_to_finish():
    cfg = config_from_args(["--gpu", "a100-80gb", "--max-concurrency", "6", "--request-rate", "inf"])
    f = simulate_disagg(
        CHAT[:200], [ReplicaGroup("p", cfg, "paged:16", 1)], [ReplicaGroup("d", cfg, "paged:16", 1)], "round-robin"
    )
    df = f.requests
    assert (df.status == "finished").all()
    assert _max_in_flight(df) == 6
    expected = _sent_by_rule([0.0] * len(df), df.finish_s.tolist(), 6)
    assert df.sort_values("arrival_s", kind="stable").arrival_s.tolist() == pytest.approx(sorted(expected))
    assert (df.ttft_s >= df.kv_transfer_s).all()
    # the prefill engine's record of a request counts from the same send time (its TTFT in replicas.csv)
    sent = df.set_index("id").arrival_s
    prefill = f.replicas[0].requests.set_index("id")
    assert (prefill.arrival_s == sent.loc[prefill.index]).all()
    assert (prefill.ttft_s >= 0).all()


def test_more_clients_raise_throughput_and_latency_until_the_engine_saturates():
    reqs = CHAT[:600]
    rows = []
    for n in (1, 8, 64):
        s = simulate(reqs, config_from_args(["--max-concurrency", str(n), "--request-rate", "inf"]), "paged:16").summary
        rows.append((s["throughput_tok_s"], s["tpot_p50_s"]))
    assert rows[0][0] < rows[1][0] < rows[2][0]
    assert rows[0][1] < rows[1][1] < rows[2][1]


def test_retime_sends_in_trace_order_at_a_poisson_rate():
    reqs = [req(i, 10.0 - i * 1e-3, 10, 10) for i in range(20000)]  # listed in reverse arrival order
    at_once = retime(reqs, math.inf)
    assert {r.arrival_s for r in at_once} == {0.0}
    assert [r.id for r in at_once] == [str(i) for i in reversed(range(20000))]
    poisson = retime(reqs, 50.0)
    times = np.array([r.arrival_s for r in poisson])
    assert times[0] == 0.0 and (np.diff(times) >= 0).all()
    assert np.diff(times).mean() == pytest.approx(1 / 50, rel=0.03)
    assert [r.arrival_s for r in retime(reqs, 50.0)] == times.tolist()  # seeded
    assert retime(reqs, None) is reqs


@pytest.mark.parametrize(
    "args,message",
    [
        (["--max-concurrency", "0"], "--max-concurrency: must be >= 1"),
        (["--request-rate", "0"], "--request-rate: must be >= 1e-06"),
        (["--request-rate", "nan"], "--request-rate"),
        (["--request-rate=-inf"], "--request-rate"),
    ],
)
def test_bad_load_options_are_refused(args, message):
    with pytest.raises(ConfigError, match=message):
        config_from_args(args)
