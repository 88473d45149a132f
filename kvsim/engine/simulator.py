"""A single-engine run: one engine (engine.py) fed a trace by the clock (clock.py); the scheduler owns the
serving state, the engine moves time and prices iterations.

Work happens only where state changes. A *step* is one scheduled iteration (prefill chunks, admissions,
preemptions, completions). A *decode run* (planned by the scheduler when every running sequence is
decoding and nothing can be admitted) covers k identical-shape iterations in one event; the engine cuts
it at the next arrival that could be admitted and at the horizon, and the latency model sums the k
iterations in closed form, so the result is the same as stepping one iteration at a time.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable

from kvsim.allocators.base import KVAllocator
from kvsim.collector import kept_apart
from kvsim.config import SchedulerConfig
from kvsim.latency.base import LatencyModel
from kvsim.engine.clock import ClientLimit, Completions, TraceArrivals, close_engines, driver
from kvsim.engine.engine import Engine, StepObserver, SwapTiming
from kvsim.engine.memory_tracker import MemoryTracker
from kvsim.engine.step_gaps import StepGaps
from kvsim.engine.preemption import VictimPolicy, lifo
from kvsim.engine.sequence import Sequence, Status
from kvsim.errors import ConfigError
from kvsim.trace.request import Request


@dataclass
class SimResult:
    allocator: str
    pool_tokens: int
    sequences: list[Sequence]
    memory: MemoryTracker
    end_s: float  # seconds after t0
    steps: int  # iterations simulated
    events: int  # step events + decode-run events processed
    preemptions: int
    wall_s: float
    extra: dict = field(default_factory=dict)  # allocator and scheduler counters
    shares_kv: bool = False  # the allocator can share KV (report what sharing saved)
    t0: float = 0.0  # the first arrival: every time the engine keeps is seconds after it
    start_s: float = 0.0  # when the measured requests began, seconds after t0 (after a client's warm-up)
    gaps: StepGaps | None = None  # the engine's steps as inter-token latencies (None: not kept)


class Simulation:
    """One engine serving a trace: the engine (engine.py) on the shared clock (clock.py)."""

    def __init__(
        self,
        requests: list[Request],
        allocator: KVAllocator,
        latency: LatencyModel,
        cfg: SchedulerConfig,
        victim_policy: VictimPolicy = lifo,
        observer: StepObserver | None = None,
        progress: Callable[[int], None] | None = None,
        fast_forward: bool = True,
        swap_timing: SwapTiming | None = None,
        max_concurrency: int | None = None,
    ):
        self.trace = TraceArrivals(requests)
        self.seqs = self.trace.seqs
        self.alloc = allocator
        # a closed loop: at most max_concurrency requests in flight (None: every request at its trace time)
        if self.trace.warmups and max_concurrency is None:
            raise ConfigError("warm-up requests drained before the measured ones need --max-concurrency")
        self.clients = ClientLimit(self.trace.times, max_concurrency, self.trace.warmups)
        self.engine = Engine(
            allocator,
            latency,
            cfg,
            victim_policy,
            first_sample_id=len(self.seqs),
            resolution_s=self.trace.resolution_s,
            horizon=self.trace.horizon(cfg.horizon_s),
            observer=observer,
            fast_forward=fast_forward,
            swap_timing=swap_timing,
            on_complete=Completions(progress, self.clients),
        )

    def run(self) -> SimResult:
        wall0 = time.perf_counter()
        eng, trace = self.engine, self.trace
        drive = driver(self.engine.cfg.clock)
        with kept_apart():  # the requests and their sequences live the whole run
            arrived = drive([eng], self.clients.times, self.seqs, lambda seq, t: 0, eng.horizon)
        samples = close_engines([eng])
        self.clients.stamp(self.seqs, trace.t0)
        mark_unfinished(self.seqs, samples, arrived)
        w = self.trace.warmups  # the client's warm-up: run, then left out of the results
        extra = eng.counters()
        if w:
            extra["warmup_requests"] = w
        return SimResult(
            self.alloc.name,
            self.alloc.pool_tokens,
            self.seqs[w:],
            eng.memory,
            eng.now,
            eng.steps,
            eng.events,
            eng.sched.preemptions,
            time.perf_counter() - wall0,
            extra=extra,
            shares_kv=self.alloc.shares_kv,
            t0=trace.t0,
            start_s=self.clients.start_s if w else 0.0,
            gaps=eng.gaps,
        )


def mark_unfinished(seqs: list[Sequence], samples: list[Sequence], arrived: int) -> None:
    """Give every sequence that did not finish or get rejected its reason (``seqs[:arrived]`` arrived)."""
    for seq in seqs + samples:
        if seq.status not in (Status.FINISHED, Status.REJECTED, Status.CANCELLED):
            where = seq.status.value if seq.sid < arrived or seq.parent else "not arrived"
            seq.reason = f"{where} at end of simulation"
