"""The shared clock: feeds a trace's arrivals to engines and advances them in time order.

One loop serves a single engine and a fleet alike. Events are taken earliest first; an arrival goes
before an engine event at the same instant (vLLM sees requests that arrived by the start of an
iteration), and engines at the same instant go in index order, so runs are deterministic. A request is
routed when it arrives, so the router sees every engine as it is at that instant.
"""

from __future__ import annotations

import heapq
import math
from dataclasses import replace
from typing import Callable, Sequence as Seq

from kvsim.collector import paused
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
        with paused():  # a million requests become sequences: no cycles among them (kvsim/collector.py)
            self.seqs = [Sequence(i, r) for i, r in enumerate(self.requests)]
        # a benchmark client's warm-up requests: all sent first (ClientLimit's barrier)
        self.warmups = sum(r.warmup for r in self.requests)
        if any(r.warmup for r in self.requests[self.warmups :]):
            raise ValueError("warm-up requests must come before every measured request")
        # the memory timeline keeps about 2,000 points over the trace's span
        self.resolution_s = max(self.times[-1] if self.times else 0.0, 1.0) / 2000

    def horizon(self, horizon_s: float | None) -> float | None:
        """A horizon in trace time on the engines' clock."""
        return None if horizon_s is None else horizon_s - self.t0


class ClientLimit:
    """Clients that keep at most ``limit`` requests in flight, as ``vllm bench serve --max-concurrency``: the
    requests go in trace order, each at its trace time or, when ``limit`` earlier ones are still in flight,
    at the instant one of them finishes or is rejected (its client then sends the next). ``times`` holds the
    send times on the engines' clock, ``inf`` for requests whose turn has not come; they never decrease,
    because the driver meets completions in time order. ``limit`` None: an open loop, every request at its
    trace time (``times`` is the trace's own list).

    ``barrier``: the first ``barrier`` requests are a warm-up the clients drain before sending the others: no
    request after them goes before every one of them finished or was rejected (``start_s`` says when)."""

    def __init__(self, trace_times: Seq[float], limit: int | None, barrier: int = 0):
        if limit is not None and limit < 1:
            raise ValueError("a client limit must be at least 1")
        if barrier and limit is None:
            raise ValueError("a warm-up drained before the measured requests needs a client limit")
        self.trace_times = trace_times
        self.limit = limit
        self.barrier = barrier
        first = len(trace_times) if limit is None else min(limit, barrier or limit, len(trace_times))
        self.times = (
            trace_times if limit is None else list(trace_times[:first]) + [math.inf] * (len(trace_times) - first)
        )
        self._next = first  # the first request still waiting for a free client
        self._done = 0  # requests finished or rejected so far
        self._idle = 0 if limit is None else limit - first  # clients waiting for the warm-up to drain
        self.start_s = 0.0  # when the requests after the warm-up began (seconds, the engines' clock)

    def freed(self, n: int, t: float) -> None:
        """``n`` requests in flight finished or were rejected at ``t``: as many waiting ones are sent (past a
        warm-up, only once all of it is done)."""
        self._done += n
        free, self._idle = n + self._idle, 0
        while free:
            j = self._next
            if j >= len(self.times):
                return
            if j == self.barrier and j and self._done < self.barrier:
                self._idle = free  # these clients wait for the warm-up's last requests
                return
            if j == self.barrier and j:
                self.start_s = t
            self.times[j] = max(self.trace_times[j], t)
            self._next = j + 1
            free -= 1

    def stamp(self, seqs: Seq[Sequence], t0: float) -> None:
        """Give each request sent later than its trace time that time as its arrival (``seqs[j]`` was sent
        at ``times[j]``; ``t0``: the clock's zero in trace time): latencies count from sending, as a
        benchmark client measures them."""
        if self.limit is None:
            return
        for seq, sent, planned in zip(seqs, self.times, self.trace_times):
            if sent != planned and sent != math.inf:
                seq.req = replace(seq.req, arrival_s=t0 + sent)


class Completions:
    """Counts requests that finished or were rejected (a call per engine event: how many, at what time),
    calling ``progress`` at every 256th and freeing a client of ``clients`` for each."""

    def __init__(self, progress: Callable[[int], None] | None = None, clients: ClientLimit | None = None):
        self.progress = progress
        self.clients = clients
        self.done = 0

    def __call__(self, n: int, t: float) -> None:
        before, self.done = self.done, self.done + n
        if self.progress is not None:
            for k in range(before // 256 + 1, self.done // 256 + 1):
                self.progress(256 * k)
        if self.clients is not None:
            self.clients.freed(n, t)


def driver(clock: str) -> Callable[..., int]:
    """The function that runs engines over arrivals (:func:`drive`'s arguments) for ``--clock``: ``heap``, this
    module's loop, or ``simpy``, the same run as SimPy processes (kvsim/engine/processes.py)."""
    if clock == "simpy":
        from kvsim.engine.processes import drive_processes

        return drive_processes
    return drive


def close_engines(engines: Seq[Engine]) -> list[Sequence]:
    """End the run on every engine (and drop its hooks: :meth:`Engine.detach`); the parallel samples they forked
    (which no trace lists)."""
    samples = []
    for e in engines:
        e.close()
        e.detach()
        samples += e.sched.samples
    return samples


def drive(
    engines: Seq[Engine],
    arrivals: Seq[float],
    seqs: Seq[Sequence],
    route: Callable[[Sequence, float], int],
    horizon: float | None,
    hints: bool | None = None,
    touched: list[int] | None = None,
) -> int:
    """Run ``engines`` over the arrivals (times in seconds after the first, sorted; ``seqs[i]`` arrives at
    ``arrivals[i]``) until nothing is left to do or the horizon passes. ``route(seq, t)`` picks the engine
    index of each arrival. Returns how many requests arrived (were routed); the rest never did.

    ``arrivals`` may be :attr:`ClientLimit.times`: an ``inf`` is a request not sent yet, whose time the
    engines' completions set while the loop runs.

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

    def hint() -> float | None:  # the next arrival, when the engine it goes to (the only one) may know it
        return arrivals[i] if single and i < n and arrivals[i] != math.inf else None

    i = 0
    while i < n and arrivals[i] <= 0.0:
        engines[route(seqs[i], arrivals[i])].receive(seqs[i], arrivals[i])
        i += 1
    for e, eng in enumerate(engines):
        eng.start(0.0, hint())
        push(e)
    while True:
        while heap and heap[0][2] != version[heap[0][1]]:
            heapq.heappop(heap)  # superseded: the engine's next event moved
        t_eng = heap[0][0] if heap else None
        if i < n and arrivals[i] != math.inf:
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
        engines[e].advance(hint())
        push(e)
        if touched:
            repush_touched()
