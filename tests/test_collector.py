"""The garbage collector's settings around a run are put back as they were (kvsim/collector.py)."""

import gc

from kvsim.collector import kept_apart, paused


def test_kept_apart_freezes_then_restores():
    before = gc.get_threshold()
    objects = [[i] for i in range(100)]  # noqa: F841 (exist on entry: frozen within)
    with kept_apart():
        assert gc.get_freeze_count() >= 100
        assert gc.get_threshold()[0] == 1_000_000
        with kept_apart():  # nested: the outer block's settings stand
            assert gc.get_threshold()[0] == 1_000_000
        assert gc.get_freeze_count() >= 100
    assert gc.get_freeze_count() == 0 and gc.get_threshold() == before


def test_paused_restores_the_collector_as_it_was():
    assert gc.isenabled()
    with paused():
        assert not gc.isenabled()
        with paused():
            assert not gc.isenabled()
        assert not gc.isenabled()
    assert gc.isenabled()
    gc.disable()
    try:
        with paused():
            pass
        assert not gc.isenabled()  # it was off before: it stays off
    finally:
        gc.enable()


def _cyclic_garbage(run) -> list[str]:
    """The types of the objects ``run()``'s result leaves in reference cycles once dropped (freed only by the
    collector's next full pass instead of at once)."""
    gc.collect()
    out = run()
    del out
    flags = gc.get_debug()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        gc.collect()
        return sorted({type(o).__name__ for o in gc.garbage})
    finally:
        gc.garbage.clear()
        gc.set_debug(flags)


def test_a_run_leaves_no_reference_cycle():
    """An engine's run, behind an API server or not, a fleet and a disaggregated fleet: their engines, schedulers
    and sequences go by reference counting when the result is dropped (the scheduler held its engine through a
    bound method, so a million-request run's state waited for a full collection: 1.5 s at exit, and `kvsim
    compare` kept every allocator's run until one)."""
    from kvsim.fleet.cluster import ReplicaGroup, simulate_fleet
    from kvsim.fleet.disagg import simulate_disagg
    from kvsim.options import config_from_args
    from kvsim.runner import simulate
    from kvsim.trace.request import Request

    from kvsim.sim import Fleet, ThresholdAutoscaler

    reqs = [Request(str(i), 0.01 * i, 300, 20) for i in range(40)]
    api, bare = config_from_args([]), config_from_args(["--frontend", "none"])
    simpy = config_from_args(["--clock", "simpy"])
    moe_dp = config_from_args(["--model", "qwen3-30b-a3b", "--gpu", "h100", "--data-parallel-size", "2"])

    def changing_fleet(decode: bool):
        """kvsim.sim's fleet, with an autoscaler and a client process (their generators refer to the fleet)."""
        groups = [ReplicaGroup("p" if decode else "a", simpy, "paged:16", 1)]
        fleet = Fleet(reqs, groups, decode=[ReplicaGroup("d", simpy, "paged:16", 1)] if decode else None)
        fleet.process(ThresholdAutoscaler(groups[0].name, target=4).run(fleet))

        def client():
            for _ in range(3):
                yield fleet.send(200, 10).done

        fleet.client(client())
        return fleet.run()

    runs = {
        "behind an API server": lambda: simulate(reqs, api, "paged:16"),
        "engine alone": lambda: simulate(reqs, bare, "paged:16+prefix"),
        "SimPy clock": lambda: simulate(reqs, simpy, "paged:16"),
        "fleet": lambda: simulate_fleet(reqs, [ReplicaGroup("a", api, "paged:16", 2)], "least-requests"),
        "data-parallel MoE ranks": lambda: simulate_fleet(
            reqs, [ReplicaGroup("a", moe_dp, "paged:16", 1)], "least-requests"
        ),
        "disaggregated": lambda: simulate_disagg(
            reqs, [ReplicaGroup("p", api, "paged:16", 1)], [ReplicaGroup("d", api, "paged:16", 1)], "round-robin"
        ),
        "kvsim.sim fleet": lambda: changing_fleet(decode=False),
        "kvsim.sim P/D fleet": lambda: changing_fleet(decode=True),
    }
    for label, run in runs.items():
        left = [
            t
            for t in _cyclic_garbage(run)
            if t in ("Sequence", "Request", "Engine", "Scheduler", "IncrementalScheduler", "Fleet", "Driver")
        ]
        assert not left, f"{label}: {left} left in reference cycles"
