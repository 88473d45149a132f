"""kvsim.sim's client processes: requests sent from a process, think time, timeouts that cancel (the replica
frees the request's KV at its next iteration), retries; every request sent is accounted for once."""

import math

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from helpers import send_then_cancel

from kvsim.errors import ConfigError
from kvsim.fleet.cluster import ReplicaGroup
from kvsim.options import config_from_args
from kvsim.sim import ClientBehaviour, Fleet, Startup, behaving_client
from kvsim.trace.request import Request

CFG = config_from_args(["--kv-pool-gb", "2"])
ONE = [Request("first", 0.0, 100, 10)]


def _fleet(count=1, cfg=CFG, requests=ONE, **kw):
    return Fleet(requests, [ReplicaGroup("g", cfg, "paged:16+prefix", count)], "least-requests", **kw)


def _accounted(run):
    s = run.summary
    assert s["finished"] + s["rejected"] + s["unfinished"] + s["cancelled"] == s["requests"] == len(run.requests)
    assert run.requests.id.is_unique


def _kv_free(fleet):
    for e in fleet.engines:
        assert e.alloc.used_slots == 0 and e.outstanding == 0


def test_a_cancelled_request_stops_generating_and_frees_its_kv():
    fleet = _fleet()
    seen = {}

    def client(fleet):
        long = fleet.send(500, 3000)
        yield fleet.env.timeout(2.0)
        assert fleet.cancel(long)
        yield long.done
        seen["long"] = long
        short = fleet.send(500, 20)
        yield short.done
        seen["short"] = short

    fleet.client(client(fleet))
    run = fleet.run()
    _accounted(run)
    _kv_free(fleet)
    long, short = seen["long"], seen["short"]
    assert long.status == "cancelled" and short.status == "finished"
    row = run.requests.set_index("id").loc["sent-1"]
    assert row.status == "cancelled" and "cancelled by its client at 2 s" in row.reason
    # it generated for 2 s only: at most as many tokens as 2 s of decoding allow, far from its 3,000
    tpot = run.requests.set_index("id").loc["sent-2"].tpot_s
    assert 0 < row.generated_tokens <= 2.0 / tpot + 2
    assert long.done.value is long and math.isnan(long.e2e_s)
    assert short.e2e_s > 0 and short.ttft_s < 1.0  # nothing was in its way
    assert run.summary["cancelled"] == 1 and run.summary["sent_by_processes"] == 2
    assert not fleet.cancel(long)  # ended already


def test_a_request_held_for_a_replica_is_cancelled_at_once():
    fleet = _fleet(count=0, requests=[], startup=Startup(load_gbs=10.0, fixed_s=100.0))
    calls = []

    def client(fleet):
        fleet.add_replica("g")
        call = fleet.send(100, 10)
        calls.append(call)
        yield fleet.env.timeout(5)
        assert fleet.cancel(call, "impatient")
        assert call.ended and call.status == "cancelled"
        yield fleet.env.timeout(200)  # the replica is up by now
        calls.append(fleet.send(100, 10))
        yield calls[-1].done

    fleet.client(client(fleet))
    run = fleet.run()
    _accounted(run)
    assert [c.status for c in calls] == ["cancelled", "finished"]
    assert run.requests.replica.tolist() == [-1, 0]  # the first never reached a replica
    assert run.requests.reason[0] == "impatient at 5 s"


def test_timeouts_cancel_and_retry_and_think_time_spaces_requests():
    fleet = _fleet()
    calls = []
    behaviour = ClientBehaviour(think_s=3.0, timeout_s=1.5, retries=2)
    work = iter([(300, 3000), (300, 10), (300, 10)])  # the first can never finish within 1.5 s
    fleet.client(behaving_client(fleet, work, behaviour, np.random.default_rng(0), lambda c, a: calls.append((c, a))))
    run = fleet.run()
    _accounted(run)
    _kv_free(fleet)
    assert [(c.status, a) for c, a in calls] == [
        ("cancelled", 0),
        ("cancelled", 1),
        ("cancelled", 2),
        ("finished", 0),
        ("finished", 0),
    ]
    sent = [c.sent_s for c, _ in calls]
    assert sent[1] - sent[0] >= 1.5 and sent[2] - sent[1] >= 1.5  # each attempt timed out first
    assert sent[4] > sent[3] + calls[3][0].e2e_s  # thought after the answer before sending the next


def test_an_error_in_a_process_is_raised_by_run():
    fleet = _fleet()

    def broken(fleet):
        yield fleet.env.timeout(1.0)
        raise ValueError("my client is broken")

    fleet.client(broken(fleet))
    with pytest.raises(ValueError, match="my client is broken"):
        fleet.run()


def test_a_client_limited_trace_takes_no_sent_requests():
    cfg = config_from_args(["--kv-pool-gb", "2", "--max-concurrency", "2"])
    fleet = _fleet(cfg=cfg)
    with pytest.raises(ConfigError, match="client limit"):
        fleet.send(10, 10)


def test_until_s_stops_endless_clients_and_counts_what_is_left():
    fleet = _fleet()

    def forever(fleet):
        while True:
            fleet.send(200, 400)
            yield fleet.env.timeout(0.05)  # far more than one replica serves

    fleet.client(forever(fleet))
    run = fleet.run(until_s=30.0)
    _accounted(run)
    assert run.summary["unfinished"] > 0 and run.summary["finished"] > 0
    assert (run.requests[run.requests.status == "unfinished"].reason.str.contains("at end of simulation")).all()
    assert not run.requests.reason.str.startswith("not arrived").any()


@settings(max_examples=25, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.floats(0, 20),  # send time
            st.integers(1, 3000),  # prompt
            st.integers(1, 1500),  # output
            st.one_of(st.none(), st.floats(0, 10)),  # cancel after
            st.sampled_from([1, 1, 2, 3]),  # parallel samples
        ),
        min_size=1,
        max_size=25,
    ),
    st.sampled_from(["fcfs", "priority"]),
    st.booleans(),
)
def test_any_sends_and_cancels_are_accounted_and_free_their_kv(plan, policy, async_sched):
    args = ["--kv-pool-gb", "0.5", "--scheduling-policy", policy]
    args += ["--async-scheduling"] if async_sched else ["--no-async-scheduling"]
    fleet = _fleet(count=2, cfg=config_from_args(args))
    calls = []

    for at, prompt, output, cancel_after, n in plan:
        fleet.client(send_then_cancel(fleet, calls, at, prompt, output, cancel_after, priority=prompt % 3, n=n))
    run = fleet.run()
    _accounted(run)
    _kv_free(fleet)
    by_id = run.requests.set_index("id")
    for c in calls:
        assert c.ended and c.status == by_id.loc[c.seq.req.id].status
        samples = {s.status.value for s in c.seq.samples}
        if c.status == "finished":
            assert by_id.loc[c.seq.req.id].generated_tokens == c.seq.req.output_tokens * c.seq.req.n
            assert samples <= {"finished"} and c.e2e_s >= max(s.finish_s for s in c.seq.samples or [c.seq]) - c.sent_s
        elif c.status == "cancelled":
            assert samples <= {"finished", "cancelled"}  # none left running


def test_the_guides_example_clients_run_as_a_users_own_file():
    """docs/examples/my_clients.py: clients written outside kvsim, run as a user would."""
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    r = subprocess.run(
        [sys.executable, str(root / "docs/examples/my_clients.py"), "12"], capture_output=True, text=True, timeout=600
    )
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].startswith("patient") and lines[1].startswith("impatient") and "cancelled" in lines[1]
