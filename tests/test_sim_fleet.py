"""kvsim.sim: a fleet that changes while it runs. A fleet nobody changes is kvsim cluster's run bit for bit; a new
replica serves only after its start-up; a removed one drains and takes nothing new; a failed one's requests are
retried or lost, and every request is in the result once; GPU-hours by hand; the HPA rule by hand; a process of
the user's own drives the fleet."""

import math

import pytest
from hypothesis import given, settings, strategies as st

from helpers import chaos, chat_head
from kvsim.errors import ConfigError
from kvsim.fleet.cluster import ReplicaGroup, simulate_fleet
from kvsim.options import config_from_args
from kvsim.sim import Fleet, ScheduleAutoscaler, SlaPlanner, Startup, ThresholdAutoscaler
from kvsim.sim.startup import replica_weight_bytes
from kvsim.trace import load_trace
from kvsim.trace.request import Request

CHAT = load_trace("traces/chat.jsonl").requests[:600]
CFG = config_from_args(["--kv-pool-gb", "2"])


def _group(count, cfg=CFG, name="g"):
    return ReplicaGroup(name, cfg, "paged:16+prefix", count)


def _accounted(run, n):
    s = run.summary
    assert len(run.requests) == n and run.requests.id.is_unique
    assert s["finished"] + s["rejected"] + s["unfinished"] == n


@pytest.mark.parametrize("router", ["least-requests", "prefix+load", "round-robin"])
@pytest.mark.parametrize("args", [["--kv-pool-gb", "2"], ["--kv-pool-gb", "2", "--max-concurrency", "16"]])
def test_a_fleet_nobody_changes_is_the_cluster_run_bit_for_bit(router, args):
    cfg = config_from_args(args)
    ref = simulate_fleet(CHAT, [_group(3, cfg)], router)
    run = Fleet(CHAT, [_group(3, cfg)], router).run()
    assert ref.requests.equals(run.requests.drop(columns="retries"))
    assert ref.replica_table.equals(run.replica_table[ref.replica_table.columns])
    assert (run.requests.retries == 0).all()


def test_gpu_hours_count_every_replica_from_asked_for_to_stopped():
    cfg = config_from_args(["--kv-pool-gb", "2", "--tensor-parallel-size", "2"])
    run = Fleet(CHAT, [_group(2, cfg)]).run()
    assert run.summary["gpu_hours"] == pytest.approx(2 * 2 * run.summary["duration_s"] / 3600)


def test_a_new_replica_serves_only_after_its_startup():
    startup = Startup(load_gbs=4.0, fixed_s=30.0)
    fleet = Fleet(CHAT, [_group(1)], startup=startup)
    added = []

    def grow(fleet):
        yield fleet.env.timeout(20)
        added.append(fleet.add_replica("g"))

    fleet.process(grow(fleet))
    run = fleet.run()
    rep = added[0]
    expect = replica_weight_bytes(CFG) / 4e9 + 30.0
    assert rep.started_s == 20 and rep.ready_s == pytest.approx(20 + expect)
    on_new = run.requests[run.requests.replica == rep.index]
    assert len(on_new) > 0 and (on_new.admitted_s - CHAT[0].arrival_s >= rep.ready_s - 1e-9).all()
    _accounted(run, len(CHAT))


def test_requests_wait_at_the_router_while_no_replica_serves():
    fleet = Fleet(CHAT[:50], [_group(0)], startup=Startup(fixed_s=10.0, load_gbs=1e6))

    def first(fleet):
        fleet.add_replica("g")
        yield fleet.env.timeout(0)

    fleet.process(first(fleet))
    run = fleet.run()
    assert run.summary["finished"] == 50
    rel = run.requests.admitted_s - CHAT[0].arrival_s
    assert (rel >= 10.0 - 1e-6).all()


def test_a_removed_replica_drains_and_takes_nothing_new():
    fleet = Fleet(CHAT, [_group(3)])
    removed = []

    def shrink(fleet):
        yield fleet.env.timeout(60)
        removed.append(fleet.remove_replica("g"))

    fleet.process(shrink(fleet))
    run = fleet.run()
    rep = removed[0]
    assert rep.state == "stopped" and rep.stopped_s >= 60
    t0 = CHAT[0].arrival_s
    mine = run.requests[run.requests.replica == rep.index]
    assert (mine.arrival_s - t0 <= 60).all()  # nothing routed to it after it began draining
    assert (mine.status == "finished").all()  # what it had, it finished
    assert rep.stopped_s == pytest.approx(max(mine.finish_s - t0), abs=0.05)  # (less the API server's delivery)
    _accounted(run, len(CHAT))


@pytest.mark.parametrize("retry", [True, False])
def test_a_failed_replicas_requests_are_retried_or_lost_and_each_counted_once(retry):
    fleet = Fleet(CHAT, [_group(3)], retry_failed=retry)
    failed = []

    def fault(fleet):
        yield fleet.env.timeout(100)
        held = [s.sid for s in fleet.engines[0].received if s.status not in ("finished", "rejected")]
        failed.append((fleet.fail_replica(index=0), held))

    fleet.process(fault(fleet))
    run = fleet.run()
    rep, held = failed[0]
    assert rep.state == "failed" and rep.stopped_s == 100 and held
    _accounted(run, len(CHAT))
    req = run.requests
    if retry:
        assert run.summary["finished"] == len(CHAT) and run.summary["lost"] == 0
        assert (req.retries.iloc[held] == 1).all() and (req.replica.iloc[held] != 0).all()
    else:
        assert run.summary["lost"] == len(held)
        lost = req.iloc[held]
        assert (lost.status == "unfinished").all() and lost.reason.str.startswith("lost: replica 0").all()
        assert run.summary["finished"] == len(CHAT) - len(held)


def test_the_hpa_rule_by_hand():
    """desired = ceil(replicas x metric / target); within 10% no change; down only to the window's highest."""

    class Scrape:
        def __init__(self, waiting):
            self.held = 0
            self.reps = [type("R", (), {"state": "serving", "waiting": w, "kv_usage": 0.5})() for w in waiting]

        def in_group(self, group):
            return self.reps

    class FakeFleet:
        now = 0.0
        scrape = None

    a = ThresholdAutoscaler("g", target=8.0, down_window_s=300)
    f = FakeFleet()
    f.scrape = Scrape([20, 20])  # 20 a replica, target 8: ceil(2 x 2.5) = 5
    assert a.desired(f, 2) == 5
    f.now, f.scrape = 15.0, Scrape([8.5, 8.5])  # within 10%: keep
    assert a.desired(f, 5) == 5
    f.now, f.scrape = 30.0, Scrape([1, 1, 1, 1, 1])  # wants 1, but 5 was asked within 300 s
    assert a.desired(f, 5) == 5
    f.now = 400.0
    assert a.desired(f, 5) == 1


def test_an_autoscaler_follows_a_burst_and_costs_less_than_the_peak_fleet():
    """Requests in two bursts with a quiet hour between: the autoscaler grows for each burst and shrinks between,
    so it uses fewer GPU-hours than the fleet sized for the peak, and every request is served."""
    burst = [Request(f"a{i}", i * 0.05, 400, 100) for i in range(400)]
    quiet = [Request(f"q{i}", 40 + i * 20.0, 400, 100) for i in range(180)]
    late = [Request(f"b{i}", 3700 + i * 0.05, 400, 100) for i in range(400)]
    reqs = burst + quiet + late
    peak = Fleet(reqs, [_group(6)]).run()
    fleet = Fleet(reqs, [_group(1)], startup=Startup(fixed_s=20.0))
    auto = ThresholdAutoscaler("g", target=4.0, max_replicas=6, down_window_s=120)
    fleet.process(auto.run(fleet))
    run = fleet.run()
    assert run.summary["finished"] == len(reqs)
    assert run.summary["max_replicas"] > 1
    assert run.summary["gpu_hours"] < 0.7 * peak.summary["gpu_hours"]
    assert any(n < 3 for t, n in auto.decisions if 60 < t < 3600)  # shrank in the quiet hour
    assert run.scrapes.set_index("t_s").loc[1995.0, "serving"] == 1


def test_a_schedule_and_the_sla_planner_size_the_group():
    fleet = Fleet(CHAT, [_group(1)], startup=Startup(fixed_s=1.0))
    sched = ScheduleAutoscaler("g", schedule=[(30.0, 3), (90.0, 2)])
    fleet.process(sched.run(fleet))
    run = fleet.run()
    assert [n for _, n in sched.decisions] == [3, 2]
    assert run.scrapes.set_index("t_s").loc[60.0, "serving"] == 3
    fleet = Fleet(CHAT, [_group(1)], startup=Startup(fixed_s=1.0))
    rate = len(CHAT) / (CHAT[-1].arrival_s - CHAT[0].arrival_s)
    planner = SlaPlanner("g", replica_rate=rate / 4, headroom=1.0, interval_s=60, lookback=1)
    fleet.process(planner.run(fleet))
    fleet.run()
    assert planner.decisions and 3 <= max(n for _, n in planner.decisions) <= 6


def test_a_process_of_the_users_own_drives_the_fleet():
    """A custom controller in a few lines: one replica per 10 waiting requests, read from the scrape."""
    fleet = Fleet(CHAT, [_group(1)], startup=Startup(fixed_s=5.0))
    seen = []

    def mine(fleet):
        while True:
            yield fleet.env.timeout(30)
            m = fleet.scrape
            seen.append((m.t, m.waiting))
            if m.waiting > 10 * fleet.count("g") and fleet.count("g") < 4:
                fleet.add_replica("g")

    fleet.process(mine(fleet))
    run = fleet.run()
    assert seen and all(t <= now for (t, _), now in zip(seen, range(30, 10**6, 30)))
    assert run.summary["max_replicas"] > 1
    _accounted(run, len(CHAT))


def test_the_same_fleet_gives_the_same_run():
    def once():
        fleet = Fleet(CHAT, [_group(2)], "prefix+load")
        fleet.process(ThresholdAutoscaler("g", target=2.0, max_replicas=5).run(fleet))
        return fleet.run()

    a, b = once(), once()
    assert a.requests.equals(b.requests) and a.scrapes.equals(b.scrapes)


@settings(max_examples=15, deadline=None)
@given(
    st.lists(st.tuples(st.floats(0, 200), st.sampled_from(["add", "remove", "fail"])), max_size=6),
    st.booleans(),
    st.sampled_from(["least-requests", "prefix+load", "round-robin", "prefix-approx", "llm-d"]),
)
def test_whatever_happens_every_request_is_counted_once(events, retry, router):
    reqs = CHAT[:200]
    fleet = Fleet(reqs, [_group(2)], router, retry_failed=retry, startup=Startup(fixed_s=5.0))

    fleet.process(chaos(fleet, [(t, what, "g") for t, what in events]))
    run = fleet.run()
    _accounted(run, len(reqs))
    if retry:
        assert run.summary["lost"] == 0
    assert math.isclose(
        run.summary["gpu_hours"], sum(r.gpu_seconds(run.summary["duration_s"]) for r in run.replicas) / 3600
    )


def test_bad_fleets_are_refused_with_the_reason():
    with pytest.raises(ConfigError, match="no replica group 'x'"):
        Fleet(CHAT, [_group(1)]).add_replica("x")
    with pytest.raises(ConfigError, match="hold_grace_s"):
        Fleet(CHAT, [_group(1)], hold_grace_s=-1)
    with pytest.raises(ConfigError, match="min_replicas"):
        ThresholdAutoscaler("g", min_replicas=3, max_replicas=2)
    with pytest.raises(ConfigError, match="load_gbs"):
        Startup(load_gbs=0)


def test_the_guides_example_autoscaler_runs_as_a_users_own_file(tmp_path):
    """docs/examples/my_autoscaler.py: a controller written outside kvsim, run as a user would."""
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    trace = chat_head(tmp_path, 300)
    r = subprocess.run(
        [sys.executable, str(root / "docs/examples/my_autoscaler.py"), str(trace)],
        capture_output=True,
        text=True,
        cwd=root,
        timeout=600,
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.count("GPU-hours") == 2 and "mine" in r.stdout


def _cluster_args(tmp_path, extra, requests=300, startup_fixed_s=20):
    """`kvsim cluster` of one a100 replica on the head of chat.jsonl, with an SLO, and ``extra`` arguments."""
    trace = chat_head(tmp_path, requests)
    return ["cluster", "--trace", str(trace), "--kv-pool-gb", "2", "--replicas", "1", "--routers", "least-requests"] + [
        "--slo",
        "ttft_p99=5s",
        "--startup-fixed-s",
        str(startup_fixed_s),
        *extra,
    ]


def test_cluster_with_an_autoscaler_reports_against_the_peak_fleet(tmp_path, capsys):
    from kvsim.cli import main

    out = tmp_path / "o"
    extra = ["--autoscaler", "threshold:target=4,max=4", "--fail-at", "60", "--out", str(out)]
    rc = main(_cluster_args(tmp_path, extra, requests=400, startup_fixed_s=10))
    assert rc == 0
    import pandas as pd

    fleet = pd.read_csv(out / "fleet.csv")
    assert list(fleet.layout) == ["autoscaled a100-40gb", f"fixed {int(fleet.max_replicas.iloc[0])}x a100-40gb"]
    assert {"gpu_hours", "slo_windows_met", "cold_start_misses", "retried"} <= set(fleet.columns)
    assert (fleet.finished + fleet.rejected + fleet.unfinished == 400).all()
    assert fleet.retried.iloc[0] > 0  # the failure's requests went again
    tl = pd.read_csv(out / "timeline.csv")
    assert set(tl.run) == {"least-requests: autoscaled", f"least-requests: fixed {int(fleet.max_replicas.iloc[0])}x"}
    assert (out / "replicas_over_time.png").stat().st_size > 10_000


@pytest.mark.parametrize(
    "spec, msg",
    [
        ("hpa", "expected threshold, sla, schedule"),
        ("threshold:target", "expected KEY=VALUE"),
        ("threshold:goal=3", "unknown setting 'goal'"),
        ("threshold:target=x", "target must be a number"),
        ("sla:headroom=0.5", "needs rate=R"),
        ("schedule:soon=3", "SECONDS=REPLICAS"),
        ("threshold:min=5,max=2", "min_replicas"),
    ],
)
def test_bad_autoscaler_specs_are_named(spec, msg, tmp_path, capsys):
    from kvsim.cli import main

    rc = main(["cluster", "--trace", "traces/chat.jsonl", "--autoscaler", spec, "--out", str(tmp_path / "o")])
    assert rc == 2 and msg in capsys.readouterr().err


def test_several_autoscaler_settings_are_each_the_single_run(tmp_path):
    """`--autoscaler 'A;B'` over two processes: each row is that setting's own `kvsim cluster` run."""
    import pandas as pd

    from kvsim.cli import main

    specs = ["threshold:target=4,max=4", "schedule:0=1,60=3"]
    out = tmp_path / "sweep"
    assert main(_cluster_args(tmp_path, ["--autoscaler", ";".join(specs), "--workers", "2", "--out", str(out)])) == 0
    table = pd.read_csv(out / "autoscalers.csv")
    assert list(table.autoscaler.fillna("")) == [*specs, ""]
    assert list(table.layout) == [*specs, f"fixed {max(1, int(table.max_replicas.iloc[:-1].max()))}x"]
    for i, spec in enumerate(specs):
        one = tmp_path / f"one{i}"
        assert main(_cluster_args(tmp_path, ["--autoscaler", spec, "--out", str(one)])) == 0
        single = pd.read_csv(one / "fleet.csv").iloc[0]
        for col in ("gpu_hours", "ttft_p99_s", "finished", "max_replicas", "slo_windows_met", "cold_start_misses"):
            assert table[col].iloc[i] == single[col], col
    assert (out / "replicas_over_time.png").stat().st_size > 0
    assert set(pd.read_csv(out / "timeline.csv").run) == {f"least-requests: {x}" for x in table.layout}


def test_autoscaler_settings_fan_out_over_ray_as_locally(tmp_path):
    pytest.importorskip("ray")
    import pandas as pd

    from kvsim.cli import main

    spec = "threshold:target=4,max=4;sla:rate=3"
    assert main(_cluster_args(tmp_path, ["--autoscaler", spec, "--out", str(tmp_path / "l")])) == 0
    assert (
        main(
            _cluster_args(
                tmp_path, ["--autoscaler", spec, "--backend", "ray", "--workers", "2", "--out", str(tmp_path / "r")]
            )
        )
        == 0
    )
    local, ray = (pd.read_csv(tmp_path / d / "autoscalers.csv").drop(columns="wall_s") for d in ("l", "r"))
    pd.testing.assert_frame_equal(local, ray)


def test_the_planners_down_window_keeps_replicas_through_a_dip():
    """sla with down=S: it scales down only once every recommendation of the last S seconds allows it (HPA's
    stabilization): with 150 s, the 5 asked for at 120 s holds until 300 s (at 180 and 240 s the window still
    holds it)."""

    class FakeFleet:
        def __init__(self):
            self.now = 0.0
            self.scrape = type("S", (), {"arrival_rate": 0.0})()

    rates = [10.0, 10.0, 2.0, 2.0, 2.0, 2.0, 2.0]
    for down, expected in ((0.0, [5, 5, 1, 1, 1, 1, 1]), (150.0, [5, 5, 5, 5, 1, 1, 1])):
        planner = SlaPlanner("g", replica_rate=2.5, headroom=0.8, lookback=1, interval_s=60.0, down_window_s=down)
        fleet, got, current = FakeFleet(), [], 1
        for i, r in enumerate(rates):
            fleet.now, fleet.scrape.arrival_rate = 60.0 * (i + 1), r
            current = planner.desired(fleet, current)
            got.append(current)
        assert got == expected, down


@pytest.mark.parametrize("notice, state", [(1e6, "stopped"), (2.0, "failed")])
def test_a_spot_replica_reclaimed_with_notice_drains_then_fails_at_the_deadline(notice, state):
    fleet = Fleet(CHAT[:300], [_group(2)])
    seen = {}

    def spot(fleet):
        yield fleet.env.timeout(5.0)
        seen["rep"] = fleet.reclaim_replica("g", notice_s=notice)
        seen["t"] = fleet.now

    fleet.process(spot(fleet))
    run = fleet.run()
    rep = seen["rep"]
    _accounted(run, 300)
    assert run.summary["finished"] == 300 and rep.state == state
    if state == "failed":
        assert rep.stopped_s == pytest.approx(seen["t"] + notice) and run.summary["retried"] > 0
    else:
        assert rep.stopped_s < seen["t"] + notice and run.summary["retried"] == 0
    late = run.requests.arrival_s - CHAT[0].arrival_s > 5.0
    assert not (run.requests.replica == rep.index)[late].any()  # draining from the notice on: nothing new


def test_a_fleet_runs_once():
    """After its run a fleet's processes are closed and its engines let go of it (no reference cycle): running it
    again is refused, not a second run on a half-dismantled fleet."""
    fleet = Fleet(CHAT[:20], [_group(1)])
    _accounted(fleet.run(), 20)
    with pytest.raises(ConfigError, match="has run"):
        fleet.run()


def test_a_process_failing_in_its_clean_up_does_not_lose_the_run():
    """The run closes the processes still waiting when it ends (their ``finally`` runs then, as when Python collects
    a generator); one that raises there is reported, and the run's results stand."""
    fleet = Fleet(CHAT[:20], [_group(1)])

    def waits_forever():
        try:
            yield fleet.env.timeout(1e9)
        finally:
            raise ValueError("clean-up failed")

    fleet.process(waits_forever())
    with pytest.warns(RuntimeWarning, match="clean-up failed"):
        run = fleet.run(until_s=5.0)
    assert len(run.requests) == 20
