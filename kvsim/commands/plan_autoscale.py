"""`kvsim plan --autoscaler SPEC`: per GPU type and allocator, what one replica serves within the SLOs (the
capacity search, on the busiest --plan-requests requests), then the whole trace through a fleet that the
autoscaler sizes from that rate, against the fixed fleet of its peak: GPU-hours, cost, SLO attainment, the
5-minute windows meeting the SLOs, cold-start misses, and the replicas and TTFT p99 over time (a plot)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

FILES = ("autoscale.csv", "autoscale_timeline.csv", "replicas_over_time.png")


def with_rate(spec: str, rate: float) -> str:
    """The SLA planner's spec with ``rate=`` (requests/s one replica serves) filled in when the user left it out."""
    kind, _, rest = spec.strip().partition(":")
    if kind != "sla" or any(p.strip().startswith("rate=") for p in rest.split(",")):
        return spec
    return f"sla:rate={rate:.6g}" + (f",{rest}" if rest.strip() else "")


def autoscaled_plan(a: argparse.Namespace, rows: list[dict], slos, out: Path) -> list[dict]:
    """Each configuration that meets the SLOs, autoscaled and fixed over the whole trace; the table's rows."""
    import pandas as pd

    from kvsim.commands.fleet_time import changing_and_fixed
    from kvsim.fleet.cluster import ReplicaGroup
    from kvsim.fleet.routers import RouterOptions
    from kvsim.options import config_from_options, values_from_namespace
    from kvsim.output.table import Column, print_rows
    from kvsim.sim.autoscalers import parse_autoscaler
    from kvsim.sim.fleet import Pools
    from kvsim.sim.report import against_fixed, plot_over_time
    from kvsim.trace import load_trace

    parse_autoscaler(with_rate(a.autoscaler, 1.0), "check")  # a bad spec fails before any run
    requests = load_trace(a.trace, skip_invalid=bool(getattr(a, "skip_invalid", False))).requests
    values = values_from_namespace(a)
    table: list[dict] = []
    timelines = {}
    for r in rows:
        label = f"{r['gpu']} {r['allocator']}"
        rate = r.get("max_rate_req_s")
        if not r.get("meets_slo") or not rate:
            print(f"{label}: no rate meets the SLOs on one replica; not autoscaled", file=sys.stderr)
            continue
        cfg = config_from_options({**values, "gpu": r["gpu"]})
        group = ReplicaGroup(r["gpu"], cfg, r["allocator"], 1)
        spec = with_rate(a.autoscaler, rate)
        price = r.get("cost_per_gpu_hour")
        for kind, run in changing_and_fixed(
            a, requests, Pools((group,)), "least-requests", RouterOptions(), slos, spec
        ):
            s = run.summary
            table.append(
                {
                    "gpu": r["gpu"],
                    "allocator": r["allocator"],
                    "fleet": kind,
                    "autoscaler": spec if kind == "autoscaled" else "",
                    "replica_rate_req_s": rate,
                    "gpu_hours": s["gpu_hours"],
                    "cost": None if price is None else s["gpu_hours"] * price,
                    "peak_replicas": s["max_replicas"],
                    "finished": s["finished"],
                    "unfinished": s["unfinished"],
                    "ttft_p99_s": s["ttft_p99_s"],
                    "tpot_p99_s": s["tpot_p99_s"],
                    "slo_attainment": s.get("slo_attainment"),
                    "slo_windows_met": s.get("slo_windows_met"),
                    "cold_start_misses": s.get("cold_start_misses"),
                }
            )
            timelines[f"{label}: {kind}"] = run.scrapes.assign(run=f"{label}: {kind}")
    if not table:
        return table
    df = pd.DataFrame(table)
    df.to_csv(out / "autoscale.csv", index=False)
    pd.concat(timelines.values(), ignore_index=True).to_csv(out / "autoscale_timeline.csv", index=False)
    plot_over_time(timelines, out / "replicas_over_time.png", slos)
    key = lambda k: lambda s: s.get(k)  # noqa: E731
    cols = [
        Column("config", "configuration", "", "text", "", lambda s: f"{s['gpu']} {s['allocator']}"),
        Column("fleet", "fleet", "", "text", "", key("fleet")),
        Column("gpu_h", "GPU", "hours", "float2", "", key("gpu_hours")),
        Column("cost", "cost", "$", "money", "", key("cost"), optional=True),
        Column("peak", "peak", "replicas", "int", "", key("peak_replicas")),
        Column("attain", "SLO", "attain%", "pct", "", key("slo_attainment")),
        Column("win", "5-min", "met%", "pct", "", key("slo_windows_met")),
        Column("cold", "cold", "misses", "int", "", key("cold_start_misses")),
    ]
    print_rows(table, cols, f"autoscaled ({a.autoscaler}) vs the fixed fleet of its peak, on the whole trace")
    for i in range(0, len(table), 2):
        auto, fixed = table[i], table[i + 1]
        print(
            f"{auto['gpu']} {auto['allocator']}: {auto['gpu_hours']:.3g} GPU-hours autoscaled, "
            f"{against_fixed(auto['gpu_hours'], fixed['gpu_hours'])} than {fixed['fleet']} ({fixed['gpu_hours']:.3g})",
            file=sys.stderr,
        )
    return table
