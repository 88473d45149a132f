"""Autoscaler settings side by side: the same trace and replica group under each setting, fanned out over local
processes or a Ray cluster (kvsim/planning/parallel.py), and the fixed fleet of the largest peak they reached
(`kvsim cluster --autoscaler 'A;B;...' --workers N [--backend ray]`)."""

from __future__ import annotations

from dataclasses import dataclass, replace

import pandas as pd

from kvsim.fleet.cluster import ReplicaGroup
from kvsim.fleet.routers import RouterOptions
from kvsim.planning.slo import Slo
from kvsim.sim.startup import Startup
from kvsim.trace.request import Request


@dataclass(frozen=True)
class AutoscaleJob:
    """One fleet: ``spec`` (an autoscaler, or None for the fixed fleet of ``group.count``)."""

    requests: list[Request]
    group: ReplicaGroup
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


def run_autoscale_job(job: AutoscaleJob) -> AutoscaleResult:
    """The fleet of ``job`` over the whole trace; its summary with the SLO figures (picklable: a worker's job)."""
    from kvsim.sim.autoscalers import parse_autoscaler
    from kvsim.sim.fleet import Fleet
    from kvsim.sim.report import add_over_time_columns

    fleet = Fleet(
        job.requests,
        [job.group],
        job.router,
        router_options=job.options,
        startup=job.startup,
        scrape_interval_s=job.scrape_interval_s,
    )
    if job.spec:
        fleet.process(parse_autoscaler(job.spec, job.group.name).run(fleet))
    run = fleet.run()
    t0 = min((r.arrival_s for r in job.requests), default=0.0)
    peak = max(run.summary["max_replicas"], job.group.count)
    layout = job.spec or f"fixed {job.group.count}x"  # (the group is the table's title)
    add_over_time_columns(run, layout, list(job.slos), peak * job.group.cfg.gpus, t0)
    return AutoscaleResult(job.spec, run.summary, run.scrapes)


def sweep_autoscalers(
    requests: list[Request],
    group: ReplicaGroup,
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
    """Each autoscaler setting of ``specs`` (starting from ``group.count`` replicas), then the fixed fleet of the
    largest peak any reached: results in that order, the same whatever the backend."""
    from kvsim.planning.parallel import run_jobs

    base = AutoscaleJob(requests, group, router, options, None, startup, scrape_interval_s, tuple(slos))
    jobs = [replace(base, spec=s) for s in specs]
    results = run_jobs(run_autoscale_job, jobs, workers, backend, address, label="autoscalers")
    peak = max([group.count, *(r.summary["max_replicas"] for r in results)])
    fixed = run_autoscale_job(replace(base, group=replace(group, count=peak)))
    return [*results, fixed]
