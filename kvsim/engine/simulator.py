"""The SimPy simulation loop: it moves time and prices iterations; the scheduler owns the serving state.

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
from kvsim.config import SchedulerConfig
from kvsim.latency.base import LatencyModel
from kvsim.engine.clock import drive
from kvsim.engine.engine import Engine, StepObserver, SwapTiming
from kvsim.engine.memory_tracker import MemoryTracker
from kvsim.engine.preemption import VictimPolicy, lifo
from kvsim.engine.sequence import Sequence, Status
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


class Simulation:
    """One engine serving a trace: the engine (engine.py) on the shared clock (clock.py)."""

    def __init__(self, requests: list[Request], allocator: KVAllocator, latency: LatencyModel,
                 cfg: SchedulerConfig, victim_policy: VictimPolicy = lifo,
                 observer: StepObserver | None = None, progress: Callable[[int], None] | None = None,
                 fast_forward: bool = True, swap_timing: SwapTiming | None = None):
        self.requests = sorted(requests, key=lambda r: r.arrival_s)
        # Time runs from the first arrival: traces with large absolute times (1e15 s) keep their precision.
        self.t0 = self.requests[0].arrival_s if self.requests else 0.0
        self._arrivals = [r.arrival_s - self.t0 for r in self.requests]
        self.horizon = None if cfg.horizon_s is None else cfg.horizon_s - self.t0
        self.alloc = allocator
        self.seqs = [Sequence(i, r) for i, r in enumerate(self.requests)]
        self.progress = progress
        self.done = 0
        span = self._arrivals[-1] if self.requests else 0.0
        self.engine = Engine(allocator, latency, cfg, victim_policy, first_sample_id=len(self.seqs),
                             resolution_s=max(span, 1.0) / 2000, horizon=self.horizon, observer=observer,
                             fast_forward=fast_forward, swap_timing=swap_timing, on_complete=self._count_done)

    def _count_done(self, n: int) -> None:
        for _ in range(n):
            self.done += 1
            if self.progress is not None and self.done % 256 == 0:
                self.progress(self.done)

    def run(self) -> SimResult:
        wall0 = time.perf_counter()
        eng = self.engine
        arrived = drive([eng], self._arrivals, self.seqs, lambda seq, t: 0, self.horizon)
        eng.close()
        mark_unfinished(self.seqs, eng.sched.samples, arrived)
        return SimResult(self.alloc.name, self.alloc.pool_tokens, self.seqs, eng.memory, eng.now, eng.steps,
                         eng.events, eng.sched.preemptions, time.perf_counter() - wall0, extra=eng.counters(),
                         shares_kv=self.alloc.shares_kv, t0=self.t0)


def mark_unfinished(seqs: list[Sequence], samples: list[Sequence], arrived: int) -> None:
    """Give every sequence that did not finish or get rejected its reason (``seqs[:arrived]`` arrived)."""
    for seq in seqs + samples:
        if seq.status not in (Status.FINISHED, Status.REJECTED):
            where = seq.status.value if seq.sid < arrived or seq.parent else "not arrived"
            seq.reason = f"{where} at end of simulation"
