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
from typing import Callable, Protocol

import simpy

from kvsim.allocators.base import KVAllocator
from kvsim.config import SchedulerConfig
from kvsim.latency.base import LatencyModel
from kvsim.engine.memory_tracker import MemoryTracker
from kvsim.engine.preemption import VictimPolicy, lifo
from kvsim.engine.incremental import IncrementalScheduler
from kvsim.engine.scheduler import IterationPlan, SteppingScheduler
from kvsim.engine.sequence import Sequence, Status
from kvsim.trace.request import Request


class StepObserver(Protocol):
    """Called after each executed iteration group, before finished sequences are freed. Sequences'
    ``computed`` already include the group's tokens."""

    def __call__(self, start_s: float, duration_s: float, batch: list[tuple[Sequence, int]], steps: int,
                 copies: list[tuple[str, int, int]], allocator: KVAllocator) -> None: ...


@dataclass(frozen=True)
class SwapTiming:
    """Cost of copying KV between GPU and host: per copy unit one copy call, then bytes over PCIe."""

    bytes_per_slot: int
    pcie_bandwidth: float  # bytes/s, one direction
    per_block_s: float = 10e-6

    def seconds(self, blocks: int, block_slots: int) -> float:
        if blocks <= 0:
            return 0.0
        return blocks * self.per_block_s + blocks * block_slots * self.bytes_per_slot / self.pcie_bandwidth


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
        self.latency = latency
        self.cfg = cfg
        self.seqs = [Sequence(i, r) for i, r in enumerate(self.requests)]
        # fast_forward=False: the stepping reference the incremental scheduler is tested against
        self.sched = IncrementalScheduler(cfg, allocator, victim_policy, len(self.seqs)) if fast_forward else \
            SteppingScheduler(cfg, allocator, victim_policy, len(self.seqs))
        self.sched.windows = tuple(getattr(latency, "windows", ()))
        self.observer = observer
        self.progress = progress
        self.swap_timing = swap_timing
        self.swap_s = 0.0
        self._next = 0  # index of the next request to arrive
        span = self._arrivals[-1] if self.requests else 0.0
        self.memory = MemoryTracker(allocator.pool_tokens, resolution_s=max(span, 1.0) / 2000,
                                    token_slots=allocator.token_slots)
        self.steps = self.events = self.done = 0

    # --- helpers --------------------------------------------------------------------------
    def _release_arrivals(self, now: float) -> None:
        while self._next < len(self.seqs) and self._arrivals[self._next] <= now:
            seq = self.seqs[self._next]
            self._next += 1
            if not self.sched.add_arrival(seq):
                self._count_done(1)

    def _count_done(self, n: int) -> None:
        for _ in range(n):
            self.done += 1
            if self.progress is not None and self.done % 256 == 0:
                self.progress(self.done)

    def _observe(self, t: float) -> None:
        self.memory.observe(t, self.sched.memory_breakdown(), self.alloc.shared_slots)

    def _next_arrival(self) -> float | None:
        return self._arrivals[self._next] if self._next < len(self.requests) else None

    def _duration(self, plan: IterationPlan, now: float) -> float:
        """Seconds the plan takes; for a decode run, first cut it at the next arrival and the horizon."""
        lat = self.latency
        if plan.decode_run:
            n, s0, k = plan.lazy_n, plan.shape.kv_tokens, plan.max_steps
            ctx = () if plan.contexts is None else (plan.contexts,)  # windowed models: every context
            t_arr = self._next_arrival()
            if t_arr is not None and not self.sched.waiting:
                k = lat.decode_steps_until(n, s0, t_arr - now, k, *ctx)
            if self.horizon is not None:
                k = lat.decode_steps_until(n, s0, self.horizon - now, k, *ctx)
            plan.steps = k
            return lat.decode_run_time(n, s0, k, *ctx)
        dt = lat.step_time(plan.shape)
        if self.swap_timing is not None and (plan.swap_out_blocks or plan.swap_in_blocks):
            # Swaps are synchronous copies before the forward pass (vLLM V0): they stall it.
            unit = self.alloc.copy_unit
            swap_s = self.swap_timing.seconds(plan.swap_out_blocks, unit) + self.swap_timing.seconds(plan.swap_in_blocks, unit)
            self.swap_s += swap_s
            dt += swap_s
        return dt

    # --- the process --------------------------------------------------------------------------
    def _process(self, env: simpy.Environment):
        sched = self.sched
        horizon = self.horizon
        stalls = 0  # consecutive iterations that scheduled nothing (preemption-only passes)
        while True:
            now = env.now
            self._release_arrivals(now)
            if horizon is not None and now >= horizon:
                break
            if sched.idle:
                t_arr = self._next_arrival()
                if t_arr is None or (horizon is not None and t_arr > horizon):
                    break
                self._observe(now)
                yield env.timeout(t_arr - now)
                self._observe(env.now)
                continue
            plan = sched.schedule(now)
            if plan.empty:
                stalls += 1
                if stalls > len(self.seqs) + len(sched.samples) + 2:
                    raise RuntimeError(f"engine stalled at t={now}: nothing can run "
                                       f"({len(sched.running)} running, {len(sched.waiting)} waiting)")
                continue  # only preemptions happened; reschedule at the same instant
            stalls = 0
            dt = self._duration(plan, now)
            self._observe(now)
            filled0 = sched.filled_tokens
            yield env.timeout(dt)
            t1 = env.now
            result = sched.update_after_step(plan, t1)
            if self.observer is not None:
                self.observer(now, dt, sched.batch(plan), plan.steps, plan.copies, self.alloc)
            n = plan.num_seqs
            if plan.decode_run:
                ctx = () if plan.contexts is None else (plan.contexts,)
                weights = self.latency.decode_step_times(n, plan.shape.kv_tokens, plan.steps, *ctx)
                self.memory.add_run(now, t1, weights, n, filled0, plan.start_breakdown, result.segments,
                                    sched.memory_breakdown())
            self.memory.busy(dt, n)
            self.steps += plan.steps
            self.events += 1
            self._observe(t1)
            self._count_done(sched.retire(result.finished, t1))
            if result.finished:
                self._observe(t1)

    def run(self) -> SimResult:
        wall0 = time.perf_counter()
        env = simpy.Environment(initial_time=0.0)
        env.process(self._process(env))
        env.run()
        self.memory.finish()
        self.sched.finalize()
        for seq in self.seqs + self.sched.samples:
            if seq.status not in (Status.FINISHED, Status.REJECTED):
                where = seq.status.value if seq.sid < self._next or seq.parent else "not arrived"
                seq.reason = f"{where} at end of simulation"
        extra = {**self.alloc.counters(), **{k: v for k, v in self.sched.counts.items() if k != "preemptions"}}
        if self.swap_timing is not None:
            extra["swap_time_s"] = self.swap_s
        return SimResult(self.alloc.name, self.alloc.pool_tokens, self.seqs, self.memory, env.now, self.steps,
                         self.events, self.sched.preemptions, time.perf_counter() - wall0, extra=extra,
                         shares_kv=self.alloc.shares_kv, t0=self.t0)
