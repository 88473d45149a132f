"""Replicas of data-parallel ranks in a fleet that changes (kvsim.sim.Fleet): nobody changing them gives `kvsim
cluster`'s run bit for bit (ranks routed to on their own; a MoE model's ranks in lockstep); a replica's ranks
start, drain and fail together and count as one replica; every request is counted once; a request held after the
last replica failed waits for the one an autoscaler asks for."""

import math

import pytest
from helpers import chaos
from hypothesis import given, settings, strategies as st

from kvsim.fleet.cluster import ReplicaGroup, simulate_fleet
from kvsim.options import config_from_args
from kvsim.sim import Fleet, Startup, ThresholdAutoscaler
from kvsim.sim.startup import replica_weight_bytes
from kvsim.trace import load_trace

CHAT = load_trace("traces/chat.jsonl").requests[:300]
SHORT = CHAT[:120]  # the MoE model's lockstep ranks step through every iteration: fewer requests keep it quick
DENSE = config_from_args(["--kv-pool-gb", "2", "-dp", "3"])
MOE = config_from_args(["--model", "gpt-oss-20b", "--gpu", "h100-80gb", "-dp", "2", "--kv-pool-gb", "2"])


@pytest.mark.parametrize(
    "cfg, router",
    [(DENSE, "least-requests"), (DENSE, "dp-lb"), (DENSE, "round-robin"), (MOE, "dp-lb")],
    ids=["dense-least-requests", "dense-dp-lb", "dense-round-robin", "moe-lockstep-dp-lb"],
)
def test_data_parallel_replicas_nobody_changes_are_the_cluster_run_bit_for_bit(cfg, router):
    groups = [ReplicaGroup("g", cfg, "paged:16+prefix", 2)]
    reqs = SHORT if cfg is MOE else CHAT
    ref = simulate_fleet(reqs, groups, router)
    run = Fleet(reqs, groups, router).run()
    assert ref.requests.equals(run.requests.drop(columns="retries"))
    assert ref.replica_table.equals(run.replica_table[ref.replica_table.columns])
    assert run.summary["max_replicas"] == 2 and run.peaks == {"g": 2}  # replicas, not ranks
    assert len(run.replicas) == 2 * cfg.dp


def test_a_replicas_ranks_start_drain_and_fail_together():
    fleet = Fleet(CHAT, [ReplicaGroup("g", DENSE, "paged:16+prefix", 2)], startup=Startup(fixed_s=5.0))
    seen = {}

    def steps(fleet):
        yield fleet.env.timeout(1.0)
        seen["added"] = fleet.add_replica("g")
        seen["count_starting"] = fleet.count("g")
        yield fleet.env.timeout(30.0)
        seen["removed"] = fleet.remove_replica("g")
        yield fleet.env.timeout(1.0)
        seen["failed"] = fleet.fail_replica(index=4)  # any rank names its replica: the second, ranks 3-5

    fleet.process(steps(fleet))
    run = fleet.run()
    s = run.summary
    assert s["finished"] + s["rejected"] + s["unfinished"] == len(CHAT) and s["finished"] == len(CHAT)
    assert seen["count_starting"] == 3
    for key, state in (("added", "stopped"), ("failed", "failed")):
        ranks = fleet.ranks(seen[key])
        assert len(ranks) == 3 and {r.state for r in ranks} == {state} and len({r.stopped_s for r in ranks}) == 1
    assert seen["removed"] is seen["added"]  # the newest replica drains, all its ranks
    assert seen["failed"].index == 3
    added = fleet.ranks(seen["added"])
    assert {r.ready_s for r in added} == {1.0 + fleet.startup.seconds(DENSE)}
    assert fleet.count("g", ("serving",)) == 1
    assert math.isclose(s["gpu_hours"], sum(r.gpu_seconds(s["duration_s"]) for r in run.replicas) / 3600)


def test_a_data_parallel_replica_loads_every_ranks_weights():
    one = config_from_args(["--model", "gpt-oss-20b", "--gpu", "h100-80gb", "--kv-pool-gb", "2"])
    assert replica_weight_bytes(MOE) > replica_weight_bytes(one)  # two ranks' GPUs, experts split between them
    assert replica_weight_bytes(DENSE) == 3 * replica_weight_bytes(config_from_args(["--kv-pool-gb", "2"]))


@settings(max_examples=8, deadline=None)
@given(
    st.lists(st.tuples(st.floats(0, 150), st.sampled_from(["add", "remove", "fail"])), max_size=6),
    st.booleans(),
    st.sampled_from([DENSE, MOE]),
)
def test_whatever_happens_to_data_parallel_replicas_every_request_is_counted_once(events, retry, cfg):
    reqs = SHORT
    fleet = Fleet(reqs, [ReplicaGroup("g", cfg, "paged:16+prefix", 2)], "dp-lb", retry_failed=retry)

    fleet.process(chaos(fleet, [(t, what, "g") for t, what in events]))
    run = fleet.run()
    s = run.summary
    assert s["finished"] + s["rejected"] + s["unfinished"] == len(reqs) == len(run.requests)
    assert s["finished"] == len(reqs) if retry else s["finished"] + s["lost"] == len(reqs)
    for rep, e in zip(fleet.replicas, fleet.engines):
        assert len({r.state for r in fleet.ranks(rep)}) == 1
        if rep.state != "failed":
            assert e.alloc.used_slots == 0 and e.outstanding == 0


def test_requests_held_after_the_last_replica_fails_wait_for_the_autoscalers_replacement():
    cfg = config_from_args(["--kv-pool-gb", "2"])
    fleet = Fleet(CHAT[:100], [ReplicaGroup("g", cfg, "paged:16+prefix", 1)], startup=Startup(fixed_s=5.0))
    fleet.process(ThresholdAutoscaler("g", target=4.0, max_replicas=2).run(fleet))

    def fail(fleet):
        yield fleet.env.timeout(3.0)
        fleet.fail_replica("g")

    fleet.process(fail(fleet))
    run = fleet.run()
    assert run.summary["finished"] == 100 and run.summary["retried"] > 0
    assert fleet.replicas[0].state == "failed" and any(r.ready_s and r.ready_s > 3.0 for r in fleet.replicas)
