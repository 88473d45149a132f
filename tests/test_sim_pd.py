"""Disaggregated prefill and decode pools in a fleet that changes (kvsim.sim.Fleet with decode=): nobody changing
them gives `kvsim cluster --prefill --decode`'s run bit for bit; a prompt finished while no decode replica serves
waits with its KV parked; a draining prefill replica stops only once its parked KV is read; failures of either
pool lose or retry their requests and every request is counted once, no KV left behind; the pools' autoscaler
specs; `kvsim cluster --prefill --decode --autoscaler`."""

import math

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from helpers import chaos, chat_head, send_then_cancel
from kvsim.errors import ConfigError
from kvsim.fleet.cluster import ReplicaGroup
from kvsim.fleet.disagg import simulate_disagg
from kvsim.options import config_from_args
from kvsim.sim import Fleet, Startup
from kvsim.sim.autoscalers import ScheduleAutoscaler, SlaPlanner, ThresholdAutoscaler, parse_pool_autoscalers
from kvsim.trace import load_trace
from kvsim.trace.request import Request

CHAT = load_trace("traces/chat.jsonl").requests[:300]
CFG = config_from_args(["--kv-pool-gb", "2"])


def _pools(p=1, d=1, cfg=CFG, requests=CHAT, router="least-requests", **kw):
    return Fleet(
        requests,
        [ReplicaGroup("p", cfg, "paged:16+prefix", p)],
        router,
        decode=[ReplicaGroup("d", cfg, "paged:16+prefix", d)],
        **kw,
    )


def _accounted(run, n):
    s = run.summary
    assert len(run.requests) == n and run.requests.id.is_unique
    assert s["finished"] + s["rejected"] + s["unfinished"] + s["cancelled"] == n


def _nothing_left(fleet):
    """Every replica still up holds no KV and no request, and no prefill replica parks KV for anyone."""
    for rep, e in zip(fleet.replicas, fleet.engines):
        if rep.state != "failed":
            assert e.alloc.used_slots == 0 and e.outstanding == 0 and not e.sched.parked, rep


@pytest.mark.parametrize("router", ["least-requests", "prefix+load", "round-robin"])
@pytest.mark.parametrize("args", [["--kv-pool-gb", "2"], ["--kv-pool-gb", "2", "--max-concurrency", "16"]])
def test_pools_nobody_changes_are_the_cluster_run_bit_for_bit(router, args):
    cfg = config_from_args(args)
    pre, dec = [ReplicaGroup("p", cfg, "paged:16+prefix", 2)], [ReplicaGroup("d", cfg, "paged:16+prefix", 2)]
    ref = simulate_disagg(CHAT, pre, dec, router, shared_link=True)
    run = Fleet(CHAT, pre, router, decode=dec, shared_link=True).run()
    assert ref.requests.equals(run.requests.drop(columns="retries"))
    cols = [c for c in ref.replica_table.columns if c != "group"]
    assert ref.replica_table[cols].equals(run.replica_table[cols])
    assert list(run.replica_table.pool) == ["prefill", "prefill", "decode", "decode"]
    assert run.summary["kv_transfer_gb"] == ref.summary["kv_transfer_gb"] > 0


def test_a_prompt_waits_with_its_kv_parked_until_a_decode_replica_serves():
    fleet = _pools(d=0, requests=CHAT[:20], startup=Startup(load_gbs=10.0, fixed_s=40.0))

    def grow(fleet):
        fleet.add_replica("d")
        yield fleet.env.timeout(1.0)
        assert len(fleet.pd.held) > 0  # prompts done, nowhere to decode
        prefill = fleet.engines[0]
        assert prefill.sched.parked  # their KV stays on the prefill replica

    fleet.process(grow(fleet))
    run = fleet.run()
    _accounted(run, 20)
    assert run.summary["finished"] == 20
    ready = fleet.replicas[1].ready_s
    assert ready == pytest.approx(fleet.startup.seconds(CFG))
    r = run.requests
    assert (r.handoff_s - r.arrival_s.min() < ready).any()  # handed off before any decode replica served
    assert ((r.first_token_s - r.arrival_s.min()) >= ready).all()
    _nothing_left(fleet)


def test_a_draining_prefill_replica_stops_only_once_its_parked_kv_is_read():
    fleet = _pools(p=2, d=1, requests=CHAT[:120])
    seen = {}

    def drain(fleet):
        yield fleet.env.timeout(5.0)
        rep = fleet.remove_replica("p")
        seen["rep"] = rep
        seen["parked_at_remove"] = len(fleet.engines[rep.index].sched.parked)

    fleet.process(drain(fleet))
    run = fleet.run()
    _accounted(run, 120)
    rep = seen["rep"]
    assert rep.state == "stopped" and run.summary["finished"] == 120
    mine = run.requests[run.requests.prefill_replica == rep.index]
    last_read = (mine.handoff_s + mine.decode_wait_s + mine.kv_transfer_s).max() - run.requests.arrival_s.min()
    assert rep.stopped_s >= last_read - 1e-9  # it stayed up until the last KV it parked had been read
    assert not (run.requests.prefill_replica == rep.index)[run.requests.arrival_s - CHAT[0].arrival_s > 5.0].any()
    _nothing_left(fleet)


@pytest.mark.parametrize("retry", [True, False])
@pytest.mark.parametrize("pool", ["p", "d"])
def test_a_failed_replica_of_either_pool_retries_or_loses_its_requests(retry, pool):
    fleet = _pools(p=2, d=2, requests=CHAT[:200], retry_failed=retry)

    def fail(fleet):
        yield fleet.env.timeout(10.0)
        fleet.fail_replica(pool)

    fleet.process(fail(fleet))
    run = fleet.run()
    _accounted(run, 200)
    s = run.summary
    if retry:
        assert s["finished"] == 200 and s["retried"] > 0 and s["lost"] == 0
    else:
        assert s["lost"] > 0 and s["finished"] + s["lost"] == 200
        lost = run.requests[run.requests.reason.str.startswith("lost")]
        assert len(lost) == s["lost"] and (lost.status == "unfinished").all()
    _nothing_left(fleet)


@settings(max_examples=15, deadline=None)
@given(
    st.lists(
        st.tuples(st.floats(0, 150), st.sampled_from(["add", "remove", "fail"]), st.sampled_from(["p", "d"])),
        max_size=7,
    ),
    st.booleans(),
    st.booleans(),
    st.sampled_from(["least-requests", "prefix+load", "round-robin"]),
)
def test_whatever_happens_to_the_pools_every_request_is_counted_once(events, retry, shared, router):
    reqs = CHAT[:150]
    fleet = _pools(
        2, 2, requests=reqs, router=router, retry_failed=retry, shared_link=shared, startup=Startup(fixed_s=5)
    )

    fleet.process(chaos(fleet, events))
    run = fleet.run()
    _accounted(run, len(reqs))
    s = run.summary
    assert s["finished"] == len(reqs) if retry else s["finished"] + s["lost"] == len(reqs)
    _nothing_left(fleet)
    assert math.isclose(s["gpu_hours"], sum(r.gpu_seconds(s["duration_s"]) for r in run.replicas) / 3600)


@settings(max_examples=20, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.floats(0, 20),
            st.integers(1, 3000),
            st.integers(1, 1500),
            st.one_of(st.none(), st.floats(0, 10)),
            st.sampled_from([1, 1, 2]),
        ),
        min_size=1,
        max_size=20,
    ),
    st.integers(1, 2),
    st.integers(1, 2),
)
def test_requests_sent_and_cancelled_in_pools_are_accounted_and_free_their_kv(plan, p, d):
    fleet = _pools(p, d, cfg=config_from_args(["--kv-pool-gb", "0.5"]), requests=[])
    calls = []

    for at, prompt, output, cancel_after, n in plan:
        fleet.client(send_then_cancel(fleet, calls, at, prompt, output, cancel_after, n=n))
    run = fleet.run()
    _accounted(run, len(plan))
    _nothing_left(fleet)
    by_id = run.requests.set_index("id")
    for c in calls:
        assert c.ended and c.status == by_id.loc[c.seq.req.id].status


def test_a_request_no_decode_replica_could_hold_is_rejected_before_its_prefill():
    small = config_from_args(["--num-blocks", "20", "--max-model-len", "4096"])  # 320 tokens of KV
    reqs = [Request("fits", 0.0, 100, 10), Request("too-long", 0.1, 1000, 10)]
    fleet = Fleet(
        reqs,
        [ReplicaGroup("p", CFG, "paged:16", 1)],
        decode=[ReplicaGroup("d", small, "paged:16", 1)],
    )
    run = fleet.run()
    r = run.requests.set_index("id")
    assert r.loc["fits", "status"] == "finished"
    assert r.loc["too-long", "status"] == "rejected" and r.loc["too-long", "prefill_replica"] == -1
    assert r.loc["too-long", "reason"].startswith("no decode replica can hold it")


def test_pool_autoscaler_specs():
    t = parse_pool_autoscalers("threshold:target=4,max=8", "P", "D")
    assert [type(a) for a in t] == [ThresholdAutoscaler] * 2 and [a.group for a in t] == ["P", "D"]
    s = parse_pool_autoscalers("sla:prefill_rate=12,decode_rate=3,headroom=0.7", "P", "D")
    assert [(type(a), a.group, a.replica_rate, a.headroom) for a in s] == [
        (SlaPlanner, "P", 12.0, 0.7),
        (SlaPlanner, "D", 3.0, 0.7),
    ]
    c = parse_pool_autoscalers("schedule:0=1/2,3600=2/5", "P", "D")
    assert [type(a) for a in c] == [ScheduleAutoscaler] * 2
    assert c[0].schedule == [(0.0, 1), (3600.0, 2)] and c[1].schedule == [(0.0, 2), (3600.0, 5)]
    for bad, msg in (
        ("sla:rate=3", "prefill_rate=A,decode_rate=B"),
        ("sla:prefill_rate=3", "needs prefill_rate=A and decode_rate=B"),
        ("schedule:0=2", "SECONDS=PREFILL/DECODE"),
        ("hpa", "expected threshold, sla, schedule"),
    ):
        with pytest.raises(ConfigError, match=msg):
            parse_pool_autoscalers(bad, "P", "D")


def test_the_sla_planner_sizes_each_pool_from_the_same_prediction():
    burst = [Request(f"a{i}", i * 0.1, 400, 60) for i in range(1200)]  # 10 req/s for 2 minutes
    fleet = _pools(1, 1, requests=burst, startup=Startup(fixed_s=5.0))
    planners = parse_pool_autoscalers("sla:prefill_rate=6,decode_rate=2.5,headroom=1,lookback=1,interval=30", "p", "d")
    for a in planners:
        fleet.process(a.run(fleet))
    run = fleet.run()
    _accounted(run, 1200)
    assert run.peaks == {"p": 2, "d": 5}  # ceil(10 / 6) and ceil(10 / 2.5) (10.07 req/s: both ends counted)


def test_cluster_autoscales_pools_against_the_peak_pools(tmp_path):
    import pandas as pd

    from kvsim.cli import main

    out = tmp_path / "o"
    trace = chat_head(tmp_path, 300)
    args = ["cluster", "--trace", str(trace), "--kv-pool-gb", "2", "--prefill", "a100-40gb:1", "--decode"]
    args += ["a100-40gb:1", "--routers", "least-requests", "--autoscaler", "threshold:target=4,max=3"]
    args += ["--slo", "ttft_p99=5s", "--fail-at", "60", "--startup-fixed-s", "10", "--out", str(out)]
    assert main(args) == 0
    fleet = pd.read_csv(out / "fleet.csv")
    assert fleet.layout[0] == "autoscaled a100-40gb" and fleet.layout[1].startswith("fixed ")
    assert fleet.layout[1].endswith("D a100-40gb") and "P" in fleet.layout[1]
    assert (fleet.finished + fleet.rejected + fleet.unfinished == 300).all()
    assert fleet.retried[0] > 0 and (fleet["mode"] == "disaggregated").all()
    reps = pd.read_csv(out / "replicas.csv")
    assert set(reps.pool) == {"prefill", "decode"}
    assert set(reps.group) == {"prefill:a100-40gb", "decode:a100-40gb"}
    peak_p = int(fleet.layout[1].split()[1].split("P")[0])
    assert 1 <= peak_p <= 3 and np.isfinite(fleet.gpu_hours).all()
