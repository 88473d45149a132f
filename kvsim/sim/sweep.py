"""Autoscaler settings side by side: the same trace and replica group (or prefill and decode pools) under each
setting, fanned out over local processes or a Ray cluster (kvsim/planning/parallel.py), and the fixed fleet of the
largest peak they reached (`kvsim cluster --autoscaler 'A;B;...' --workers N [--backend ray]`)."""

from __future__ import annotations

from dataclasses import dataclass, replace

import pandas as pd

from kvsim.fleet.cluster import ReplicaGroup
from kvsim.fleet.routers import RouterOptions
from kvsim.planning.slo import Slo
from kvsim.sim.fleet import Pools
from kvsim.sim.startup import Startup
from kvsim.trace.request import Request


@dataclass(frozen=True)
class AutoscaleJob:
    """One fleet: ``spec`` (an autoscaler, or None for the fixed fleet of each group's ``count``)."""

    requests: list[Request]
    pools: Pools
    router: str
    options: RouterOptions
    spec: str | None
    startup: Startup
    scrape_interval_s: float
    slos: tuple[Slo, ...]


@dataclass
class AutoscaleResult:
    spec: str | None
    summary: dict
    scrapes: pd.DataFrame  # the fleet over time, one row per scrape
    peaks: dict[str, int]  # per group: the most replicas it had alive


def run_autoscale_job(job: AutoscaleJob) -> AutoscaleResult:
    """The fleet of ``job`` over the whole trace; its summary with the SLO figures (picklable: a worker's job)."""
    from kvsim.sim.autoscalers import autoscalers_for
    from kvsim.sim.report import add_over_time_columns

    pools = job.pools
    fleet = pools.fleet(
        job.requests,
        job.router,
        router_options=job.options,
        startup=job.startup,
        scrape_interval_s=job.scrape_interval_s,
    )
    for scaler in autoscalers_for(job.spec, pools.names) if job.spec else []:
        fleet.process(scaler.run(fleet))
    run = fleet.run()
    t0 = min((r.arrival_s for r in job.requests), default=0.0)
    start = {g.name: g.count for g in pools.groups}
    layout = job.spec or f"fixed {pools.label(start)}"  # (the group is the table's title)
    add_over_time_columns(run, layout, list(job.slos), pools.gpus(run.peaks), t0)
    return AutoscaleResult(job.spec, run.summary, run.scrapes, run.peaks)


def sweep_autoscalers(
    requests: list[Request],
    pools: Pools | ReplicaGroup,
    specs: list[str],
    router: str = "least-requests",
    options: RouterOptions = RouterOptions(),
    startup: Startup = Startup(),
    scrape_interval_s: float = 15.0,
    slos: tuple[Slo, ...] = (),
    workers: int = 1,
    backend: str = "local",
    address: str | None = None,
) -> list[AutoscaleResult]:
    """Each autoscaler setting of ``specs`` (starting from each group's ``count`` replicas), then the fixed fleet of
    the largest peak any reached (per group): results in that order, the same whatever the backend."""
    from kvsim.planning.parallel import run_jobs

    if isinstance(pools, ReplicaGroup):
        pools = Pools((pools,))
    base = AutoscaleJob(requests, pools, router, options, None, startup, scrape_interval_s, tuple(slos))
    jobs = [replace(base, spec=s) for s in specs]
    results = run_jobs(run_autoscale_job, jobs, workers, backend, address, label="autoscalers")
    peak = {g.name: max([g.count, *(r.peaks[g.name] for r in results)]) for g in pools.groups}
    grown = replace(pools, groups=tuple(replace(g, count=peak[g.name]) for g in pools.groups))
    fixed = run_autoscale_job(replace(base, pools=grown))
    return [*results, fixed]
