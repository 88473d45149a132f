"""`kvsim cluster --autoscaler ...` / `--fail-at ...`: a fleet that changes while it runs (kvsim.sim), reported
against the fixed fleet sized for its peak: GPU-hours, SLO attainment and the share of 5-minute windows meeting
the SLOs, misses while replicas started, and the replicas and TTFT p99 over time (a plot)."""

from __future__ import annotations

import argparse
import math
import sys
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from kvsim.errors import ConfigError

if TYPE_CHECKING:
    from kvsim.sim.fleet import FleetRun

OVER_TIME_FILES = ("timeline", "replicas_over_time.png")


def add_options(c: argparse.ArgumentParser) -> None:
    from kvsim.commands.args import non_negative, positive

    g = c.add_argument_group("a fleet over time (kvsim.sim; docs/autoscaling.md)")
    g.add_argument(
        "--autoscaler",
        metavar="SPEC",
        help="size the replica group while the trace runs, starting from --replicas (several settings separated "
        "by ';' run side by side, over --workers processes or Ray: kvsim cluster): threshold[:metric=waiting|kv,"
        "target=8,min=1,max=64,down=300,interval=15] (Kubernetes HPA's rule), sla:rate=R[,headroom=0.8,"
        "lookback=4,interval=60,down=0] (replicas for the predicted arrival rate, R requests/s a replica serves within "
        "the SLOs as `kvsim plan` finds it; Dynamo's SLA planner) or schedule:SECONDS=REPLICAS,...; the run is "
        "compared with a fixed fleet of its peak size",
    )
    g.add_argument(
        "--startup-load-gbs",
        type=positive,
        default=2.0,
        metavar="GB_S",
        help="a new replica reads its weights at this many GB/s (all its GPUs together) [default: 2]",
    )
    g.add_argument(
        "--startup-fixed-s",
        type=non_negative,
        default=60.0,
        metavar="S",
        help="seconds a new replica takes besides its weights (process, compile, CUDA graphs, warm-up) [default: 60]",
    )
    g.add_argument(
        "--scrape-interval-s",
        type=positive,
        default=15.0,
        metavar="S",
        help="how often the metrics an autoscaler reads are scraped [default: 15]",
    )
    g.add_argument(
        "--fail-at",
        metavar="SECONDS,...",
        help="a replica (the newest serving) fails at each of these times; its requests are sent again to the others",
    )
    g.add_argument(
        "--lose-failed",
        action="store_true",
        help="with --fail-at: a failed replica's requests are lost (reported unfinished) instead of retried",
    )


def over_time_asked(a: argparse.Namespace) -> bool:
    return bool(getattr(a, "autoscaler", None) or getattr(a, "fail_at", None))


def _fail_times(text: str | None) -> list[float]:
    if not text:
        return []
    out = []
    for part in filter(None, (p.strip() for p in text.split(","))):
        try:
            t = float(part)
        except ValueError:
            raise ConfigError(f"--fail-at: times in seconds, e.g. 600,1800; got {part!r}") from None
        if not (t >= 0 and math.isfinite(t)):
            raise ConfigError(f"--fail-at: a time must be a finite number >= 0, got {part!r}")
        out.append(t)
    if len(out) > 1000:
        raise ConfigError(f"--fail-at: {len(out):,} failures; at most 1,000")
    return sorted(out)


def run_over_time(a, layouts, routers, requests, options, slos, out: Path, title: str, marker) -> int:
    """Each router: the changing fleet, then the fixed fleet of its peak size; tables, summary.md and the plot."""
    from kvsim.commands.fleet_results import write_fleet_results
    from kvsim.output.table import print_rows
    from kvsim.sim.autoscalers import autoscalers_for

    pools = _pools(a, layouts)
    specs = [x.strip() for x in (a.autoscaler or "").split(";") if x.strip()]
    for spec in specs:
        autoscalers_for(spec, pools.names)  # a bad spec fails before any run
    if len(specs) > 1:
        return _sweep(a, pools, routers, requests, options, slos, specs, out, title)
    runs, timelines = [], {}
    for r in routers:
        for kind, x in changing_and_fixed(a, requests, pools, r, options, slos, a.autoscaler):
            runs.append(x)
            timelines[f"{r}: {kind}"] = x.scrapes
    cols = over_time_columns(slos)
    print_rows([x.summary for x in runs], cols, title)
    written = write_fleet_results(out, runs, title, a.format, cols, marker, extra=(timelines, slos))
    print(f"wrote {len(written)} files to {out}/ (summary.md, fleet, replicas, requests, timeline, a plot)")
    from kvsim.sim.report import against_fixed

    auto, fixed = runs[0].summary["gpu_hours"], runs[1].summary["gpu_hours"]
    print(
        f"{runs[0].summary['layout']}: {auto:.3g} GPU-hours, {against_fixed(auto, fixed)} than the fixed fleet of "
        f"its peak ({fixed:.3g})",
        file=sys.stderr,
    )
    return 0


def _pools(a, layouts):
    """The one replica group, or the prefill and decode groups (named ``prefill:GPU`` and ``decode:GPU``, as
    `kvsim cluster` names pools), that --autoscaler / --fail-at change."""
    from kvsim.fleet.disagg import parse_link
    from kvsim.sim.fleet import Pools

    if len(layouts) != 1:
        raise ConfigError("--autoscaler / --fail-at: one layout (not --also-aggregated)")
    kind, groups = layouts[0]
    if kind != "disagg":
        if len(groups) != 1:
            raise ConfigError("--autoscaler / --fail-at: one replica group (one --groups entry, or --replicas)")
        return Pools(tuple(groups))
    pre, dec = groups
    if len(pre) != 1 or len(dec) != 1:
        raise ConfigError("--autoscaler / --fail-at with pools: one group per pool (one GPU:COUNT in each)")
    named = (replace(pre[0], name=f"prefill:{pre[0].name}"), replace(dec[0], name=f"decode:{dec[0].name}"))
    return Pools(named, a.decode_router, parse_link(a.kv_link), a.kv_link_shared)


def _sweep(a, pools, routers, requests, options, slos, specs: list[str], out: Path, title: str) -> int:
    """Several autoscaler settings (kvsim.sim.sweep, over --workers local processes or Ray), each router: one
    row per setting and the fixed fleet of the largest peak, the timelines and the plot."""
    import pandas as pd

    from kvsim.files import prepare_results_dir, results_folder
    from kvsim.output.table import print_rows
    from kvsim.sim import Startup
    from kvsim.sim.report import plot_over_time
    from kvsim.sim.sweep import sweep_autoscalers

    if a.fail_at:
        raise ConfigError("--fail-at with several --autoscaler settings: run them one at a time")
    rows, timelines = [], {}
    for r in routers:
        results = sweep_autoscalers(
            requests,
            pools,
            specs,
            r,
            options,
            Startup(a.startup_load_gbs, a.startup_fixed_s),
            a.scrape_interval_s,
            tuple(slos),
            a.workers,
            a.backend,
            a.address,
        )
        for res in results:
            rows.append({**res.summary, "autoscaler": res.spec or ""})
            timelines[f"{r}: {res.summary['layout']}"] = res.scrapes
    folder = prepare_results_dir(out, "--out", writes=("autoscalers.csv", "timeline.csv", "replicas_over_time.png"))
    with results_folder(folder, "--out") as stage:
        pd.DataFrame(rows).to_csv(stage / "autoscalers.csv", index=False)
        frames = [tl.assign(run=name) for name, tl in timelines.items()]
        pd.concat(frames, ignore_index=True).to_csv(stage / "timeline.csv", index=False)
        plot_over_time(timelines, stage / "replicas_over_time.png", slos)
    print_rows(rows, over_time_columns(slos), title + f" · {len(specs)} autoscaler settings")
    print(f"wrote {folder}/autoscalers.csv, timeline.csv, replicas_over_time.png")
    return 0


def changing_and_fixed(
    a, requests, pools, router: str, options, slos, autoscaler: str | None
) -> list[tuple[str, FleetRun]]:
    """The fleet of ``pools`` (kvsim.sim.fleet.Pools: one group, or prefill and decode pools) behind ``router``
    while it changes (``autoscaler``, a.fail_at), then the fixed fleet of its peak size (each group at its
    peak): [(kind, FleetRun)], each summary with its SLO attainment, 5-minute windows met and misses while
    replicas started (a: the --startup-*, --scrape-interval-s, --fail-at and --lose-failed options). A failure
    takes the newest serving replica (of either pool)."""
    from kvsim.output.progress import Progress
    from kvsim.sim import Startup
    from kvsim.sim.autoscalers import autoscalers_for
    from kvsim.sim.report import add_over_time_columns

    startup = Startup(a.startup_load_gbs, a.startup_fixed_s)
    fails = _fail_times(a.fail_at)
    t0 = min(r.arrival_s for r in requests)
    kw = dict(
        router_options=options,
        startup=startup,
        scrape_interval_s=a.scrape_interval_s,
        retry_failed=not a.lose_failed,
    )

    def faults(fleet):
        for t in fails:
            yield fleet.env.timeout(max(0.0, t - fleet.now))
            fleet.fail_replica(pools.names[0] if len(pools.names) == 1 else None)

    with Progress(len(requests), f"changing {router}"[:24].rjust(18)) as bar:
        fleet = pools.fleet(requests, router, progress=bar.update, **kw)
        for scaler in autoscalers_for(autoscaler, pools.names) if autoscaler else []:
            fleet.process(scaler.run(fleet))
        if fails:
            fleet.process(faults(fleet))
        run = fleet.run()
    peak = run.peaks
    label = pools.label(peak)
    with Progress(len(requests), f"fixed {label} {router}"[:24].rjust(18)) as bar:
        fixed = pools.fleet(requests, router, peak, progress=bar.update, **kw).run()
    out = []
    name = pools.names[0] if len(pools.names) == 1 else pools.groups[0].name.partition(":")[2]
    for kind, x in (("autoscaled" if autoscaler else "with failures", run), (f"fixed {label}", fixed)):
        add_over_time_columns(x, f"{kind} {name}", slos, pools.gpus(peak), t0)
        out.append((kind, x))
    return out


def over_time_columns(slos) -> list:
    """The run's layout and router, requests done and unfinished, TTFT and TPOT p99, GPU-hours and the peak
    replicas; with SLOs the attainment, the share of 5-minute windows meeting them and the misses while replicas
    started; retried and lost requests."""
    from kvsim.output.table import BY_NAME, Column

    key = lambda k: lambda s: s.get(k)  # noqa: E731
    cols = [
        Column("layout", "fleet", "", "text", "", key("layout")),
        Column("router", "router", "", "text", "", key("router"), drop_order=2),
        BY_NAME["done"],
        BY_NAME["unfin"],
        BY_NAME["ttft_p99"],
        BY_NAME["tpot_p99"] if "tpot_p99" in BY_NAME else BY_NAME["tpot_p50"],
        Column("gpu_h", "GPU", "hours", "float2", "", key("gpu_hours")),
        Column("peak", "peak", "replicas", "int", "", key("max_replicas"), drop_order=1),
    ]
    if slos:
        cols += [
            Column("attain", "SLO", "attain%", "pct", "", key("slo_attainment"), drop_order=1),
            Column("win", "5-min", "met%", "pct", "", key("slo_windows_met")),
            Column("cold", "cold", "misses", "int", "", key("cold_start_misses")),
        ]
    return cols + [
        Column("retried", "retried", "", "int", "", key("retried"), optional=True),
        Column("lost", "lost", "", "int", "", key("lost"), optional=True),
    ]
