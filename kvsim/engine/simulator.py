"""The SimPy simulation loop.

Work happens only where state changes. A *step* is one scheduled iteration (prefill chunks, admissions,
preemptions, completions). When every running sequence is decoding and nothing can be admitted, the
engine fast-forwards a *decode run* of k identical-shape iterations in one event, k bounded by the next
completion, the next arrival that could be admitted, the allocator's growth headroom (e.g. a paged
sequence needing a block that is not free) and the horizon. Within a run the latency model sums the
k iterations in closed form, so the result is the same as stepping one iteration at a time.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable

import simpy

from kvsim.allocators.base import KVAllocator
from kvsim.config import SchedulerConfig
from kvsim.engine.eviction import VictimPolicy, lifo
from kvsim.engine.latency import LatencyModel, StepShape, chunk_shape_terms
from kvsim.engine.memory_tracker import MemoryTracker
from kvsim.engine.scheduler import Scheduler
from kvsim.engine.sequence import FINISHED, REJECTED, RUNNING, Sequence
from kvsim.trace.request import Request

# Called after each executed iteration group, before finished sequences are freed:
# (start_s, duration_s, [(seq, new tokens per iteration)], iterations, block copies, allocator).
# Sequences' `computed` already include the group's tokens.
StepObserver = Callable[[float, float, list, int], None]


@dataclass(frozen=True)
class SwapTiming:
    """Cost of copying KV between GPU and host: per block one copy call, then bytes over PCIe."""

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
    end_s: float
    steps: int  # iterations simulated
    events: int  # step events + decode-run events processed
    preemptions: int
    wall_s: float
    extra: dict = field(default_factory=dict)  # allocator and scheduler counters


class Simulation:
    def __init__(self, requests: list[Request], allocator: KVAllocator, latency: LatencyModel,
                 cfg: SchedulerConfig, victim_policy: VictimPolicy = lifo,
                 observer: StepObserver | None = None, progress: Callable[[int], None] | None = None,
                 fast_forward: bool = True, swap_timing: SwapTiming | None = None):
        self.requests = sorted(requests, key=lambda r: r.arrival_s)
        self.alloc = allocator
        self.latency = latency
        self.cfg = cfg
        self.sched = Scheduler(cfg, allocator, victim_policy)
        self.observer = observer
        self.progress = progress
        self.fast_forward = fast_forward  # False: step every iteration (the reference the fast path must match)
        self.seqs = [Sequence(i, r) for i, r in enumerate(self.requests)]
        self.samples: list[Sequence] = []  # forked parallel samples (n > 1), after the trace's requests
        self.swap_timing = swap_timing
        self.swap_s = 0.0
        self._next = 0  # index of the next request to arrive
        span = self.requests[-1].arrival_s - self.requests[0].arrival_s if self.requests else 0.0
        self.memory = MemoryTracker(allocator.pool_tokens, resolution_s=max(span, 1.0) / 2000)
        self.steps = self.events = self.done = 0

    # --- helpers --------------------------------------------------------------------------
    def _release_arrivals(self, now: float) -> None:
        while self._next < len(self.seqs) and self.requests[self._next].arrival_s <= now:
            seq = self.seqs[self._next]
            self._next += 1
            r = seq.req
            if r.n > self.cfg.max_num_seqs:
                self._reject(seq, f"n={r.n} parallel samples exceed max_num_seqs {self.cfg.max_num_seqs}")
            elif r.total_tokens > self.cfg.max_seq_len:
                self._reject(seq, f"prompt+output {r.total_tokens} tokens exceeds max_seq_len {self.cfg.max_seq_len}")
            elif not self.alloc.fits_alone(r):
                self._reject(seq, f"needs {self.alloc.footprint(r)} KV slots; the pool holds {self.alloc.usable_tokens}")
            else:
                self.sched.waiting.append(seq)

    def _reject(self, seq: Sequence, reason: str) -> None:
        seq.status, seq.reason = REJECTED, reason
        self._count_done()

    def _count_done(self) -> None:
        self.done += 1
        if self.progress is not None and self.done % 256 == 0:
            self.progress(self.done)

    def _observe(self, t: float) -> None:
        w = self.sched.waiting
        self.memory.observe(t, self.alloc.memory_breakdown(self.sched.filled_tokens, w[0].req if w else None),
                            self.alloc.shared_slots)

    def _next_arrival(self) -> float | None:
        return self.requests[self._next].arrival_s if self._next < len(self.requests) else None

    def _finish(self, seq: Sequence, t: float) -> None:
        self.sched.finish(seq)
        seq.status, seq.finish_s = FINISHED, t
        head = seq.parent or seq
        if head.status == FINISHED and all(c.status == FINISHED for c in head.samples):
            self._count_done()

    def _fork(self, parent: Sequence, t: float) -> None:
        """Parallel sampling: after the prompt, the request's other samples fork off and share its KV."""
        parent.forked = True
        sched = self.sched
        sched.seats -= parent.seats - 1
        parent.seats = 1
        for _ in range(parent.req.n - 1):
            child = Sequence(len(self.seqs) + len(self.samples), parent.req)
            self.samples.append(child)
            child.parent, child.seats, child.forked = parent, 1, True
            child.generated, child.first_token_s, child.admitted_s = 1, t, t
            parent.samples.append(child)
            if child.generated == child.target:  # a one-token answer: the prefill's sampling was all of it
                child.status, child.finish_s = FINISHED, t
            elif self.alloc.fork(parent.sid, child.sid, parent.computed, parent.req):
                child.computed = parent.computed
                child.status = RUNNING
                sched.add_running(child)
            else:  # no sharing: the sample computes its own prompt later
                sched.waiting.appendleft(child)
                sched.admission_blocked = False  # a new queue head: try to admit it

    # --- decode runs ------------------------------------------------------------------------
    def _plan_decode_run(self, now: float) -> tuple[int, int] | None:
        """(k, s0) for a fast-forwarded run of k pure-decode iterations, or None for a normal step."""
        sched = self.sched
        running = sched.running
        if not self.fast_forward or not running or (sched.waiting and not sched.admission_blocked):
            return None
        s0 = 0
        k = 1 << 62
        for s in running:
            if s.prompt + s.generated - s.computed != 1 or s.generated == 0:
                return None  # a prefill chunk (even a one-token one) emits the first token: step it
            s0 += s.computed + 1
            left = s.target - s.generated
            if left < k:
                k = left
        n = len(running)
        t_arr = self._next_arrival()
        if t_arr is not None and not sched.waiting:
            k = self.latency.decode_steps_until(n, s0, t_arr - now, k)
        if self.cfg.horizon_s is not None:
            k = self.latency.decode_steps_until(n, s0, self.cfg.horizon_s - now, k)
        k = self.alloc.decode_headroom([(s.sid, s.computed) for s in running], k)
        return (k, s0) if k >= 1 else None

    # --- the process --------------------------------------------------------------------------
    def _process(self, env: simpy.Environment):
        sched = self.sched
        horizon = self.cfg.horizon_s
        stalls = 0  # consecutive iterations that scheduled nothing (preemption-only passes)
        while True:
            now = env.now
            self._release_arrivals(now)
            if horizon is not None and now >= horizon:
                break
            if not sched.running and not sched.waiting:
                t_arr = self._next_arrival()
                if t_arr is None or (horizon is not None and t_arr > horizon):
                    break
                self._observe(now)
                yield env.timeout(t_arr - now)
                self._observe(env.now)
                continue
            run = self._plan_decode_run(now)
            if run is not None:
                done = yield from self._decode_run(env, *run)
            else:
                batch = sched.schedule(now)
                if not batch:
                    stalls += 1
                    if stalls > len(self.seqs) + len(self.samples) + 2:
                        raise RuntimeError(f"engine stalled at t={now}: nothing can run "
                                           f"({len(sched.running)} running, {len(sched.waiting)} waiting)")
                    continue  # only preemptions happened; reschedule at the same instant
                stalls = 0
                done = yield from self._step(env, batch)
            t1 = env.now
            self.events += 1
            self._observe(t1)
            for s in done:
                self._finish(s, t1)
            if done:
                self._observe(t1)

    def _decode_run(self, env: simpy.Environment, k: int, s0: int):
        """k pure-decode iterations of the whole running batch as one event; returns who finished."""
        sched, alloc = self.sched, self.alloc
        now = env.now
        running = list(sched.running)
        for s in running:
            s.last_scheduled_s = now
        self._observe(now)  # slots for the run's tokens are claimed at its end, counted in its integral
        dt = self.latency.decode_run_time(len(running), s0, k)
        yield env.timeout(dt)
        used_sum, internal_sum = alloc.decode_run_integrals([(s.sid, s.computed, s.final_tokens) for s in running], k)
        done = []
        for s in running:
            alloc.allocate(s.sid, s.req, s.computed + k)
            s.computed += k
            s.generated += k
            if s.generated == s.target:
                done.append(s)
        sched.filled_tokens += k * len(running)
        if self.observer is not None:
            self.observer(now, dt, [(s, 1) for s in running], k, [], alloc)
        w = sched.waiting
        self.memory.add_decode_run(now, env.now, k, len(running), used_sum, internal_sum,
                                   alloc.memory_breakdown(sched.filled_tokens, w[0].req if w else None))
        self.memory.busy(dt, len(running))
        self.steps += k
        return done

    def _step(self, env: simpy.Environment, batch: list[tuple[Sequence, int]]):
        """One scheduled iteration (prefill chunks, decodes); returns who finished."""
        sched, alloc = self.sched, self.alloc
        now = env.now
        new = pairs = kv = 0
        for s, n in batch:
            p, r = chunk_shape_terms(s.computed, n)
            new += n
            pairs += p
            kv += r
        self._observe(now)
        dt = self.latency.step_time(StepShape(new, len(batch), pairs, kv))
        if self.swap_timing is not None and (sched.step_swap_out or sched.step_swap_in):
            # Swaps are synchronous copies before the forward pass (vLLM V0): they stall it.
            unit = getattr(alloc, "block_size", 1)
            swap_s = (self.swap_timing.seconds(sched.step_swap_out, unit)
                      + self.swap_timing.seconds(sched.step_swap_in, unit))
            self.swap_s += swap_s
            dt += swap_s
        copies = alloc.drain_copies()
        yield env.timeout(dt)
        t1 = env.now
        done, forks = [], []
        for s, n in batch:
            if s.computed < s.prompt:
                alloc.on_computed(s.sid, s.req, min(s.computed + n, s.prompt))
                # newly cached prompt blocks can make the queue head's prefix hit, so it may fit now
                sched.admission_blocked = False
            s.computed += n
            if s.computed == s.prompt + s.generated:
                s.generated += 1
                if s.first_token_s is None:
                    s.first_token_s = t1
                if s.generated == s.target:
                    done.append(s)
                if not s.forked:
                    forks.append(s)
        if self.observer is not None:
            self.observer(now, dt, batch, 1, copies, alloc)
        for s in forks:
            self._fork(s, t1)
        sched.filled_tokens += new
        self.memory.busy(dt, len(batch))
        self.steps += 1
        return done

    def run(self) -> SimResult:
        wall0 = time.perf_counter()
        env = simpy.Environment(initial_time=self.requests[0].arrival_s if self.requests else 0.0)
        env.process(self._process(env))
        env.run()
        self.memory.finish()
        for seq in self.seqs + self.samples:
            if seq.status not in (FINISHED, REJECTED):
                where = seq.status if seq.sid < self._next or seq.parent else "not arrived"
                seq.reason = f"{where} at end of simulation"
        extra = {**self.alloc.counters(), **{k: v for k, v in self.sched.counts.items() if k != "preemptions"}}
        if self.swap_timing is not None:
            extra["swap_time_s"] = self.swap_s
        return SimResult(self.alloc.name, self.alloc.pool_tokens, self.seqs, self.memory, env.now, self.steps,
                         self.events, self.sched.preemptions, time.perf_counter() - wall0, extra=extra)
