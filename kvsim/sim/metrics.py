"""What a controller sees of a fleet: metrics as Prometheus scrapes them from vLLM's servers, every interval.

Per replica the gauges vLLM exports (``vllm:num_requests_waiting``, ``vllm:num_requests_running``,
``vllm:kv_cache_usage_perc``) and the share of the last interval its GPU was busy; per fleet the requests the
router holds (no replica serving yet), the arrival rate and the TTFT/TPOT percentiles of the requests that
finished within the window (as a ``histogram_quantile`` over ``rate(...[window])`` gives them).
A process reads the latest scrape, which is up to one interval old, never the engines themselves.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class ReplicaScrape:
    index: int
    group: str
    state: str  # starting, serving, draining, stopped, failed
    waiting: int  # requests waiting to be scheduled
    running: int  # requests in the running batch
    kv_usage: float  # fraction of the KV pool in use
    busy: float  # fraction of the last scrape interval the GPU computed


@dataclass(frozen=True)
class Scrape:
    """The fleet at time ``t`` (seconds on its clock), as the last scrape saw it."""

    t: float
    replicas: tuple[ReplicaScrape, ...]
    held: int  # requests the router holds because no replica serves yet
    arrival_rate: float  # requests/s over the window
    finished: int  # requests finished within the window
    ttft_p50_s: float
    ttft_p99_s: float
    tpot_p50_s: float
    tpot_p99_s: float
    held_decode: int = 0  # P/D: prompts handed off while no decode replica serves (their KV parked)

    def _count(self, state: str, group: str | None = None) -> int:
        return sum(1 for r in self.replicas if r.state == state and (group is None or r.group == group))

    @property
    def serving(self) -> int:
        return self._count("serving")

    @property
    def starting(self) -> int:
        return self._count("starting")

    @property
    def draining(self) -> int:
        return self._count("draining")

    def in_group(self, group: str) -> list[ReplicaScrape]:
        """The replicas of ``group`` that are starting, serving or draining."""
        return [r for r in self.replicas if r.group == group and r.state in ("starting", "serving", "draining")]

    @property
    def waiting(self) -> int:
        """Requests waiting anywhere: in the replicas' queues and held by the router."""
        return self.held + self.held_decode + sum(r.waiting for r in self.replicas)

    @property
    def running(self) -> int:
        return sum(r.running for r in self.replicas)

    @property
    def kv_usage(self) -> float:
        """Mean KV usage over the serving replicas (0 when none serves)."""
        v = [r.kv_usage for r in self.replicas if r.state == "serving"]
        return sum(v) / len(v) if v else 0.0

    @property
    def busy(self) -> float:
        """Mean busy share over the serving replicas (0 when none serves)."""
        v = [r.busy for r in self.replicas if r.state == "serving"]
        return sum(v) / len(v) if v else 0.0

    def row(self) -> dict:
        """A flat row for the over-time table."""
        return {
            "t_s": self.t,
            "serving": self.serving,
            "starting": self.starting,
            "draining": self.draining,
            "waiting": self.waiting,
            "running": self.running,
            "held": self.held + self.held_decode,
            "kv_usage": self.kv_usage,
            "busy": self.busy,
            "arrival_rate": self.arrival_rate,
            "finished": self.finished,
            "ttft_p50_s": self.ttft_p50_s,
            "ttft_p99_s": self.ttft_p99_s,
            "tpot_p50_s": self.tpot_p50_s,
            "tpot_p99_s": self.tpot_p99_s,
        }


def window_stats(finished: Iterable[tuple[float, float, float]]) -> tuple[int, float, float, float, float]:
    """(count, TTFT p50, p99, TPOT p50, p99) of (finish, ttft, tpot) entries (NaN without any)."""
    rows = list(finished)
    if not rows:
        return (0, math.nan, math.nan, math.nan, math.nan)
    a = np.asarray(rows, dtype=float)
    ttft, tpot = a[:, 1], a[:, 2]
    tpot = tpot[~np.isnan(tpot)]
    p = np.percentile(ttft, [50, 99])
    q = np.percentile(tpot, [50, 99]) if len(tpot) else (math.nan, math.nan)
    return (len(rows), float(p[0]), float(p[1]), float(q[0]), float(q[1]))
