"""Re-timing a trace's arrivals as a benchmark client sends them (``vllm bench serve --request-rate``)."""

from __future__ import annotations

import math
from dataclasses import replace

from kvsim.trace.request import Request


def retime(requests: list[Request], rate: float | None, seed: int = 0) -> list[Request]:
    """``requests`` in arrival order with new arrival times (seconds from 0): every one at 0 when ``rate`` is
    inf, else a Poisson process of ``rate`` requests/s whose first request goes at 0 (vLLM's benchmark client
    sends the first at once and then waits exponential gaps); ``None``: unchanged. Deterministic in ``seed``."""
    if rate is None:
        return requests
    ordered = sorted(requests, key=lambda r: r.arrival_s)
    if rate == math.inf:
        return [replace(r, arrival_s=0.0) for r in ordered]
    import numpy as np

    gaps = np.random.default_rng(seed).exponential(1.0 / rate, len(ordered))
    times = np.concatenate(([0.0], np.cumsum(gaps[:-1]))) if ordered else gaps
    return [replace(r, arrival_s=float(t)) for r, t in zip(ordered, times)]
