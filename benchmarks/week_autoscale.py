"""How long a week of traffic takes through an autoscaled fleet (issue 39, deliverable 5): one run of
`kvsim.sim.Fleet` under the SLA planner, timed, with its peak memory.

    python benchmarks/week_autoscale.py WEEK.jsonl [--rate 7.17] [--out result.json]

WEEK.jsonl: e.g. ServeGen's m-large day (traces/servegen_m_large_day_rates.csv) repeated over seven days,
`kvsim trace generate --rate-profile week.csv --rate-scale 0.025 --lengths-csv traces/azure_conv_lengths.csv`;
Llama-3.1-70B on 4 x H100 per replica, the planner at `rate` requests/s per replica (kvsim plan's figure for
that model and these lengths), headroom 0.7, a 600 s scale-down window.
"""

from __future__ import annotations

import argparse
import json
import resource
import time


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("trace")
    p.add_argument("--rate", type=float, default=7.17)
    p.add_argument("--out", default="week_autoscale.json")
    a = p.parse_args()
    from kvsim.fleet.cluster import ReplicaGroup
    from kvsim.options import config_from_args
    from kvsim.sim import Fleet, SlaPlanner
    from kvsim.trace import load_trace

    t0 = time.perf_counter()
    requests = load_trace(a.trace).requests
    t_load = time.perf_counter() - t0
    cfg = config_from_args(["--model", "llama-3.1-70b", "--gpu", "h100-80gb", "--tensor-parallel-size", "4"])
    t1 = time.perf_counter()
    fleet = Fleet(requests, [ReplicaGroup("h100", cfg, "paged:16+prefix", 2)], "least-requests")
    fleet.process(SlaPlanner("h100", replica_rate=a.rate, headroom=0.7, down_window_s=600.0).run(fleet))
    run = fleet.run()
    t_run = time.perf_counter() - t1
    s = run.summary
    out = {
        "requests": len(requests),
        "span_days": (max(r.arrival_s for r in requests) - min(r.arrival_s for r in requests)) / 86400,
        "load_s": t_load,
        "run_s": t_run,
        "requests_per_s": len(requests) / t_run,
        "peak_rss_gib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20,
        "finished": s["finished"],
        "unfinished": s["unfinished"],
        "gpu_hours": s["gpu_hours"],
        "max_replicas": s["max_replicas"],
        "ttft_p99_s": s["ttft_p99_s"],
        "tpot_p99_s": s["tpot_p99_s"],
    }
    with open(a.out, "w") as f:
        json.dump(out, f, indent=1)
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
