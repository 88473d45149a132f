"""A custom autoscaler in one file of your own (docs/autoscaling.md): one replica per 10 requests waiting, read
from the fleet's scrape every 30 s, beside kvsim's HPA-like threshold autoscaler for comparison.

    python docs/examples/my_autoscaler.py [trace.jsonl]
"""

import sys

from kvsim.fleet.cluster import ReplicaGroup
from kvsim.options import config_from_options
from kvsim.sim import Fleet, Startup, ThresholdAutoscaler
from kvsim.trace import load_trace


def per_ten_waiting(fleet, group="a100", most=6):
    """A SimPy process: every 30 s, as many replicas as 10s of requests waiting (at least one)."""
    while True:
        yield fleet.env.timeout(30)
        m = fleet.scrape  # what the last scrape saw (metrics are up to 15 s old, as Prometheus gives them)
        want = max(1, min(most, -(-m.waiting // 10)))
        have = fleet.count(group)
        for _ in range(want - have):
            fleet.add_replica(group)
        for _ in range(have - want):
            fleet.remove_replica(group)  # drains: no new requests, stops when its last is done


def main(trace: str = "traces/chat.jsonl") -> None:
    requests = load_trace(trace).requests
    cfg = config_from_options({"model": "llama-2-7b", "gpu": "a100-40gb", "kv_pool_gb": 2})
    startup = Startup(load_gbs=2.0, fixed_s=30.0)  # weights at 2 GB/s, 30 s for the rest
    for name, controller in (
        ("mine", per_ten_waiting),
        ("threshold", lambda fleet: ThresholdAutoscaler("a100", target=4, max_replicas=6).run(fleet)),
    ):
        fleet = Fleet(requests, [ReplicaGroup("a100", cfg, "paged:16+prefix", 1)], "least-requests", startup=startup)
        fleet.process(controller(fleet))
        run = fleet.run()
        s = run.summary
        print(
            f"{name:10s} {s['finished']} finished, TTFT p99 {s['ttft_p99_s']:.1f} s, "
            f"{s['gpu_hours']:.2f} GPU-hours, at most {s['max_replicas']} replicas"
        )


if __name__ == "__main__":
    main(*sys.argv[1:])
