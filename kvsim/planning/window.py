"""The stretch of a long trace that plans search on (``--plan-requests``).

Capacity and fleet plans simulate a trace many times; a trace of more than N requests is searched on its
busiest N consecutive arrivals instead, and the answer is then run on the whole trace (planning/plan.py,
planning/fleet_plan.py). Which stretch is busiest does not change when a plan scales the trace's gaps, so the
window is chosen once, at the trace's own timing.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

WINDOW_FILE = "plan_window.jsonl"
PLAN_REQUESTS = 20_000  # requests of the window a longer trace is searched on (--plan-requests)


@dataclass(frozen=True)
class TraceWindow:
    path: str  # the window, written as a kvsim trace
    size: int  # requests in it
    total: int  # requests in the whole trace
    rate: float  # the window's mean arrival rate at the trace's own timing, req/s
    rate_ratio: float  # the whole trace's mean rate over the window's (1 for the first ``size``: clients set the load)


def busiest_window(requests: list, n: int) -> list:
    """The ``n`` consecutive requests (arrival order) that arrive within the shortest time: the trace's busiest
    stretch of ``n`` requests (the earliest on ties); all of them when there are no more than ``n``."""
    if n >= len(requests):
        return requests
    import numpy as np

    t = np.fromiter((r.arrival_s for r in requests), float, len(requests))
    i = int(np.argmin(t[n - 1 :] - t[: len(t) - n + 1]))
    return requests[i : i + n]


def trace_window(trace: str, n: int, folder, first: bool = False, skip_invalid: bool = False) -> TraceWindow | None:
    """The window of ``trace`` a plan searches on, written to ``folder``/plan_window.jsonl: its busiest ``n``
    arrivals, or with ``first`` (clients or --request-rate set the load, the trace's times do not matter) its
    first ``n``. None for a trace of at most ``n`` requests (``n`` 0: never) or one whose arrivals have no gaps
    to compare."""
    from kvsim.planning.point import trace_rate
    from kvsim.trace import load_trace
    from kvsim.trace.jsonl import write_trace

    path = Path(folder) / WINDOW_FILE
    reqs = load_trace(trace, skip_invalid=skip_invalid).requests
    if 0 < n < len(reqs):
        window = reqs[:n] if first else busiest_window(reqs, n)
        rate = trace_rate(window)
        ratio = 1.0 if first else trace_rate(reqs) / rate
        if first or math.isfinite(ratio) and ratio > 0:
            write_trace(window, path)
            return TraceWindow(str(path), n, len(reqs), rate, ratio)
    return None
