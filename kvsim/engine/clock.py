"""The shared clock: feeds a trace's arrivals to engines and advances them in time order.

One loop serves a single engine and a fleet alike. Events are taken earliest first; an arrival goes
before an engine event at the same instant (vLLM sees requests that arrived by the start of an
iteration), and engines at the same instant go in index order, so runs are deterministic. A request is
routed when it arrives, so the router sees every engine as it is at that instant.
"""

from __future__ import annotations

import heapq
from typing import Callable, Sequence as Seq

from kvsim.engine.engine import Engine
from kvsim.engine.sequence import Sequence
from kvsim.trace.request import Request


class TraceArrivals:
    """A trace on the engines' clock: its requests as sequences in arrival order (``sid`` = index), and their
    arrival times in seconds after the first (traces with large absolute times, 1e15 s, keep precision)."""

    def __init__(self, requests: list[Request]):
        self.requests = sorted(requests, key=lambda r: r.arrival_s)
        self.t0 = self.requests[0].arrival_s if self.requests else 0.0
        self.times = [r.arrival_s - self.t0 for r in self.requests]
        self.seqs = [Sequence(i, r) for i, r in enumerate(self.requests)]
        # the memory timeline keeps about 2,000 points over the trace's span
        self.resolution_s = max(self.times[-1] if self.times else 0.0, 1.0) / 2000

    def horizon(self, horizon_s: float | None) -> float | None:
        """A horizon in trace time on the engines' clock."""
        return None if horizon_s is None else horizon_s - self.t0


class Completions:
    """Counts requests that finished or were rejected, calling ``progress`` at every 256th."""

    def __init__(self, progress: Callable[[int], None] | None = None):
        self.progress = progress
        self.done = 0

    def __call__(self, n: int) -> None:
        before, self.done = self.done, self.done + n
        if self.progress is not None:
            for k in range(before // 256 + 1, self.done // 256 + 1):
                self.progress(256 * k)


def drive(engines: Seq[Engine], arrivals: Seq[float], seqs: Seq[Sequence],
          route: Callable[[Sequence, float], int], horizon: float | None, hints: bool | None = None,
          touched: list[int] | None = None) -> int:
    """Run ``engines`` over the arrivals (times in seconds after the first, sorted; ``seqs[i]`` arrives at
    ``arrivals[i]``) until nothing is left to do or the horizon passes. ``route(seq, t)`` picks the engine
    index of each arrival. Returns how many requests arrived (were routed); the rest never did.

    ``hints``: tell engines the next arrival when they plan (default: only a single engine, to which every
    request goes); otherwise a decode run is cut when an arrival reaches its engine, with the same result.

    ``touched``: a list into which the engines' hooks (handoffs, releases) put the indices of other engines
    they changed; the driver re-reads those engines' next event after each step."""
    n = len(seqs)
    version = [0] * len(engines)
    heap: list[tuple[float, int, int]] = []
    # A single engine knows its next arrival when it plans: that request comes to it.
    single = len(engines) == 1 if hints is None else hints

    pushed: list[float | None] = [None] * len(engines)

    def push(e: int) -> None:
        version[e] += 1
        t = pushed[e] = engines[e].next_time
        if t is not None:
            heapq.heappush(heap, (t, e, version[e]))

    def repush_touched() -> None:
        for e in touched:
            if engines[e].next_time != pushed[e]:
                push(e)
        touched.clear()

    i = 0
    while i < n and arrivals[i] <= 0.0:
        engines[route(seqs[i], arrivals[i])].receive(seqs[i], arrivals[i])
        i += 1
    for e, eng in enumerate(engines):
        eng.start(0.0, arrivals[i] if single and i < n else None)
        push(e)
    while True:
        while heap and heap[0][2] != version[heap[0][1]]:
            heapq.heappop(heap)  # superseded: the engine's next event moved
        t_eng = heap[0][0] if heap else None
        if i < n:
            t = arrivals[i]
            if (t <= t_eng) if t_eng is not None else (horizon is None or t <= horizon):
                e = route(seqs[i], t)
                before = engines[e].next_time
                engines[e].receive(seqs[i], t)
                if engines[e].next_time != before:
                    push(e)
                i += 1
                if touched:
                    repush_touched()
                continue
        if t_eng is None:
            return i
        _, e, _ = heapq.heappop(heap)
        engines[e].advance(arrivals[i] if single and i < n else None)
        push(e)
        if touched:
            repush_touched()
