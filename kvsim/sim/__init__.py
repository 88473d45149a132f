"""Fleets over time on SimPy: replicas that start, serve, drain and fail behind a router, and the processes that
drive them (autoscalers, clients, faults) written as ordinary SimPy generators on the fleet's clock.

    from kvsim.sim import Fleet, ThresholdAutoscaler
    fleet = Fleet(requests, groups, "least-requests")
    fleet.process(ThresholdAutoscaler("h100", target=8).run(fleet))
    run = fleet.run()          # run.summary["gpu_hours"], run.scrapes (replicas over time), run.requests

docs/autoscaling.md is the guide.
"""

from kvsim.sim.autoscalers import ScheduleAutoscaler, SlaPlanner, ThresholdAutoscaler
from kvsim.sim.clients import Call, ClientBehaviour, behaving_client
from kvsim.sim.fleet import Fleet, FleetRun, Pools, Replica
from kvsim.sim.metrics import ReplicaScrape, Scrape
from kvsim.sim.startup import Startup

__all__ = [
    "Call",
    "ClientBehaviour",
    "behaving_client",
    "Fleet",
    "FleetRun",
    "Pools",
    "Replica",
    "ReplicaScrape",
    "Scrape",
    "ScheduleAutoscaler",
    "SlaPlanner",
    "Startup",
    "ThresholdAutoscaler",
]
