"""The incremental scheduler: the same decisions as the stepping reference, without visiting every running
sequence every iteration.

A running sequence that is decoding (one token per iteration, its prompt done) becomes a *lazy decoder*:
its fields are not updated each iteration; at iteration i it has ``c0 + (i - base)`` computed and
``g0 + (i - base)`` generated tokens. The scheduler keeps what an iteration needs as aggregates (how many
lazy decoders there are, the KV tokens they attend to) and touches a lazy decoder only when its state
changes:

- its next allocation (a block boundary, a copy-on-write), asked of the allocator once
  (:meth:`~kvsim.allocators.base.KVAllocator.next_growth`) and scheduled as an event at its iteration;
- its last token (an event computed when it became lazy);
- preemption (it is the victim), or starvation (a long prefill earlier in the batch used up the budget).

Everything else (prefill chunks, admissions, forks) is *explicit*, handled as the reference does. Running
sequences are visited in admission order exactly as the reference visits them, but only the explicit ones
and the lazy ones with an event; the lazy decoders in between are counted (they take one token of the
budget each).

When every running sequence is a lazy decoder and nothing can be admitted, the plan is a *decode run*:
up to the next completion, and as far as the allocator can satisfy the growth events inside it. The run
applies those events at their own iterations and returns the pool's state from each, so the engine
integrates memory exactly as stepping would.
"""

from __future__ import annotations

import heapq
from bisect import bisect_left, bisect_right, insort

from kvsim.allocators.base import KVAllocator
from kvsim.config import SchedulerConfig
from kvsim.engine.preemption import VictimPolicy
from kvsim.engine.scheduler import IterationPlan, Scheduler, StepResult
from kvsim.engine.sequence import Sequence, Status
from kvsim.latency.base import StepShape, chunk_shape_terms, decode_window_reads

_NO_KEY = 1 << 62


def _bucket_add(buckets: dict[int, list[Sequence]], heap: list[int], it: int, s: Sequence) -> None:
    """File ``s`` under iteration ``it`` (a heap keeps the iterations that have a bucket)."""
    lst = buckets.get(it)
    if lst is None:
        buckets[it] = [s]
        heapq.heappush(heap, it)
    else:
        lst.append(s)


class IncrementalScheduler(Scheduler):
    def __init__(self, cfg: SchedulerConfig, allocator: KVAllocator, victim_policy: VictimPolicy,
                 first_sample_id: int = 0, windows: tuple[tuple[str, int], ...] = (), decode_runs: bool = True):
        super().__init__(cfg, allocator, victim_policy, first_sample_id, windows)
        self.decode_runs = decode_runs
        self.it = 0  # iterations executed
        self._explicit: list[Sequence] = []  # running sequences that are not lazy, admission order
        self._keys: list[int] = []  # keys of the lazy decoders, sorted
        self._by_key: dict[int, Sequence] = {}
        self._lazy_sum = 0  # sum over lazy decoders of (c0 - base)
        self._offsets: list[int] = []  # each lazy decoder's (c0 - base), kept when windowed reads are counted
        self._grow_at: dict[int, list[Sequence]] = {}  # iteration -> lazy decoders allocating in it
        self._special_at: set[int] = set()  # iterations whose growth events are not one plain unit
        # iterations with an event the allocator re-times (not periodic): it may free memory (a window), which
        # a queue blocked on memory must see, so decode runs stop there while requests wait
        self._reask_at: set[int] = set()
        self._grow_heap: list[int] = []  # iterations of _grow_at (stale entries are skipped)
        self._finish_at: dict[int, list[Sequence]] = {}  # iteration -> lazy decoders emitting their last token
        self._finish_heap: list[int] = []
        self._period = 0  # tokens between plain growth events (the block size), 0 while unknown
        self._plans = 0  # plans scheduled so far
        self._last_plan_start = 0.0
        self._reads_state = victim_policy.reads_schedule_state

    # --- lazy decoders -------------------------------------------------------------------------
    def _materialize(self, s: Sequence) -> None:
        d = self.it - s.base
        s.computed = s.c0 + d
        s.generated = s.g0 + d
        if s.lazy_from < self._plans:  # it ran in the last plan
            s.last_scheduled_s = self._last_plan_start

    def _schedule_growth(self, s: Sequence) -> None:
        """Register the lazy decoder's next allocation event (its fields are current as of self.it)."""
        g = self.alloc.next_growth(s.sid, s.computed)
        s.grow_iter = -1
        if g is None:
            return
        e = self.it + g.tokens - 1 - s.computed
        plain = g.units == 1 and not g.copy and g.every > 0
        if plain and not self._period:
            self._period = g.every
        s.grow_periodic = plain and g.every == self._period
        # A copy, or more than one unit, gets an iteration of its own; an event of at most one unit (a window
        # freeing blocks, a growth the allocator re-times) runs inside a decode run like a plain one.
        if self._add_growth(s, e):
            if g.copy or g.units > 1:
                self._special_at.add(e)
            elif not s.grow_periodic:
                self._reask_at.add(e)

    def _regrow(self, s: Sequence) -> None:
        """After the lazy decoder's allocation at self.it: its next event. A periodic growth (one unit)
        recurs every period; anything else asks the allocator again."""
        if s.grow_periodic:
            s.grow_iter = -1
            self._add_growth(s, self.it + self._period)
        else:
            self._materialize(s)
            self._schedule_growth(s)

    def _add_growth(self, s: Sequence, e: int) -> bool:
        if e > s.finish_iter:
            s.grow_iter = -1
            return False  # it finishes before it needs anything
        s.grow_iter = e
        _bucket_add(self._grow_at, self._grow_heap, e, s)
        return True

    def _attach(self, s: Sequence) -> None:
        """Make a running, decoding sequence lazy from the current iteration on."""
        it = self.it
        s.lazy = True
        s.base, s.c0, s.g0 = it, s.computed, s.generated
        s.lazy_from = self._plans
        insort(self._keys, s.key)
        self._by_key[s.key] = s
        self._lazy_sum += s.c0 - it
        if self.windows:
            self._offsets.append(s.c0 - it)
        f = it + s.target - s.generated - 1
        s.finish_iter = f
        _bucket_add(self._finish_at, self._finish_heap, f, s)
        self._schedule_growth(s)

    def _detach(self, s: Sequence) -> None:
        if not s.lazy:
            if s in self._explicit:
                self._explicit.remove(s)
            return
        self._materialize(s)
        del self._keys[bisect_left(self._keys, s.key)]
        del self._by_key[s.key]
        self._lazy_sum -= s.c0 - s.base
        if self.windows:
            self._offsets.remove(s.c0 - s.base)
        for table, attr in ((self._grow_at, "grow_iter"), (self._finish_at, "finish_iter")):
            e = getattr(s, attr)
            if e >= 0:
                lst = table[e]
                lst.remove(s)
                if not lst:
                    del table[e]
                    if table is self._grow_at:
                        self._special_at.discard(e)
                        self._reask_at.discard(e)
                setattr(s, attr, -1)
        s.lazy = False

    def _joined(self, s: Sequence) -> None:
        self._explicit.append(s)

    def _settle(self) -> None:
        """Running explicit sequences that are now plain decoders become lazy."""
        keep = []
        for s in self._explicit:
            if s.status == Status.RUNNING and s.generated and s.generated < s.target and \
                    s.computed == s.prompt + s.generated - 1:
                self._attach(s)
            else:
                keep.append(s)
        self._explicit = keep

    def _starve_after(self, key: int, keep: int) -> None:
        """The token budget ran out: of the lazy decoders after ``key`` only the first ``keep`` run this
        iteration; the others wait (they become explicit and unscheduled)."""
        i = bisect_right(self._keys, key) + keep
        for k in self._keys[i:]:
            s = self._by_key[k]
            self._detach(s)
            insort(self._explicit, s, key=lambda x: x.key)

    def _lazy_between(self, lo: int, hi: int) -> int:
        """Lazy decoders with lo < key < hi."""
        return bisect_left(self._keys, hi) - bisect_right(self._keys, lo)

    def _victim(self) -> Sequence:
        if self._reads_state:
            for s in self.running:
                if s.lazy:
                    self._materialize(s)
        return self.pick_victim(self.running)

    @staticmethod
    def _pop_stale(heap: list[int], live: dict, upto: int) -> None:
        while heap and (heap[0] not in live or heap[0] < upto):
            heapq.heappop(heap)

    def finalize(self) -> None:
        for s in self.running:
            if s.lazy:
                self._materialize(s)

    def batch(self, plan: IterationPlan) -> list[tuple[Sequence, int]]:
        lazy = []
        for s in self.running:
            if s.lazy and s.lazy_from < self._plans:  # lazy during the plan (not made lazy after it)
                self._materialize(s)
                lazy.append((s, 1))
        out = lazy + list(plan.entries)
        out.sort(key=lambda e: e[0].key)
        return out

    # --- one iteration ----------------------------------------------------------------------
    def schedule(self, now: float) -> IterationPlan:
        run = self._plan_decode_run(now)
        if run is not None:
            return run
        self._swap_out = self._swap_in = 0
        it = self.it
        events = self._grow_at.pop(it, [])
        self._special_at.discard(it)
        self._reask_at.discard(it)
        self._pop_stale(self._grow_heap, self._grow_at, it + 1)
        for s in events:
            s.grow_iter = -1
        todo = sorted(events + self._explicit, key=lambda x: x.key) if events else list(self._explicit)
        budget = self.cfg.max_num_batched_tokens
        scheduled: dict[int, tuple[Sequence, int]] = {}
        preempted = stopped = False
        alloc = self.alloc
        done_key = -1  # lazy decoders with keys up to here have been counted
        for s in todo:
            if s.status != Status.RUNNING:
                continue  # preempted earlier in this pass
            c = self._lazy_between(done_key, s.key)
            if c >= budget:  # the budget runs out among the lazy decoders before s
                self._starve_after(done_key, budget)
                budget = 0
                stopped = True
                break
            budget -= c
            if s.lazy:
                self._materialize(s)
                n = 1
            else:
                n = min(s.to_compute, budget)
            while not alloc.allocate(s.sid, s.req, s.computed + n, computed=s.computed):
                if self._reclaim_waiting():
                    continue
                victim = self._victim()
                if victim.key < s.key:  # scheduled earlier in this pass: refund its tokens
                    if victim.lazy:
                        budget += 1
                    elif victim.sid in scheduled:
                        budget += scheduled.pop(victim.sid)[1]
                self.preempt(victim, alloc.shortfall(s.sid, s.computed + n))
                preempted = True
                if victim is s:
                    break
            else:
                if s.lazy:
                    self._regrow(s)
                else:
                    scheduled[s.sid] = (s, n)
                budget -= n
            done_key = s.key
            if budget == 0:
                self._starve_after(done_key, 0)
                stopped = True
                break
        if not stopped:
            c = self._lazy_between(done_key, _NO_KEY)
            if c > budget:
                self._starve_after(done_key, budget)
                budget = 0
            else:
                budget -= c
        self.admission_blocked = False
        if not preempted:
            self._admit(budget, scheduled, now)
        entries = list(scheduled.values())
        lazy_n = len(self._keys)
        kv = self._lazy_sum + lazy_n * (it + 1)
        new, pairs, kv_tokens, dn, dkv, prefill = lazy_n, kv, kv, lazy_n, kv, []
        contexts = []  # explicit decodes' contexts, for windowed reads
        for s, n in entries:
            s.last_scheduled_s = now
            p, r = chunk_shape_terms(s.computed, n)
            new, pairs, kv_tokens = new + n, pairs + p, kv_tokens + r
            if n == 1:
                dn, dkv = dn + 1, dkv + r
                contexts.append(r)
            else:
                prefill.append((n, s.computed))
        self._last_plan_start = now
        self._plans += 1
        reads = self._window_reads(contexts) if self.windows else ()
        shape = StepShape(new, lazy_n + len(entries), pairs, kv_tokens, dn, dkv, tuple(prefill), reads)
        return IterationPlan(entries, shape, lazy_n=lazy_n, swap_out_blocks=self._swap_out,
                             swap_in_blocks=self._swap_in, copies=alloc.drain_copies())

    def _lazy_contexts(self):
        """The lazy decoders' contexts in the current iteration (numpy)."""
        import numpy as np

        return np.asarray(self._offsets, dtype=np.int64) + (self.it + 1)

    def _window_reads(self, explicit: list[int]) -> tuple[int, ...]:
        """KV tokens every decode of this iteration (lazy, and ``explicit`` contexts) reads in each windowed
        kind of layer."""
        import numpy as np

        return decode_window_reads(self.windows, np.concatenate((self._lazy_contexts(), explicit)))

    def update_after_step(self, plan: IterationPlan, t_end: float) -> StepResult:
        if plan.decode_run:
            return self._apply_run(plan)
        done: list[Sequence] = []
        self._apply_entries(plan.entries, t_end, done)
        it = self.it
        self.it = it + 1
        fin = self._finish_at.pop(it, None)
        self._pop_stale(self._finish_heap, self._finish_at, it + 1)
        if fin:
            for s in fin:
                s.finish_iter = -1
                self._materialize(s)
            done.extend(fin)
            done.sort(key=lambda x: x.key)
        self.filled_tokens += plan.shape.new_tokens
        self._settle()
        return StepResult(done)

    # --- decode runs ------------------------------------------------------------------------------
    def _needed(self, events: list[tuple[int, int]], k: int) -> int:
        """Plain growth units the lazy decoders need over the next k iterations (each recurs every period)."""
        p = self._period or 1
        return sum(cnt * (1 + (k - 1 - o) // p) for o, cnt in events if o < k)

    def _plan_decode_run(self, now: float) -> IterationPlan | None:
        if not self.decode_runs or not self.running or self._explicit or (self.waiting and not self.admission_blocked):
            return None
        it = self.it
        self._pop_stale(self._finish_heap, self._finish_at, it)
        k = self._finish_heap[0] - it + 1  # up to and including the next completion
        cuts = self._special_at | self._reask_at if self.waiting else self._special_at
        specials = [e - it for e in cuts if e - it < k]
        if specials:
            k = min(specials)  # step the special allocation (copy-on-write) on its own
        events = [(e - it, len(lst)) for e, lst in self._grow_at.items() if e - it < k]
        cap = self.alloc.growth_capacity()
        if self._needed(events, k) > cap:
            lo, hi = 0, k  # needed(lo) <= cap < needed(hi)
            while hi - lo > 1:
                mid = (lo + hi) // 2
                if self._needed(events, mid) <= cap:
                    lo = mid
                else:
                    hi = mid
            k = lo
        if k < 1:
            return None
        n = len(self._keys)
        s0 = self._lazy_sum + n * (it + 1)
        self._last_plan_start = now
        self._plans += 1
        return IterationPlan([], StepShape.decode(n, s0), lazy_n=n, decode_run=True, max_steps=k,
                             start_breakdown=self.memory_breakdown(filled=0),
                             contexts=self._lazy_contexts() if self.windows else None)

    def _apply_run(self, plan: IterationPlan) -> StepResult:
        """Advance a decode run of plan.steps iterations, applying its growth events at their iterations."""
        it0, k = self.it, plan.steps
        end = it0 + k
        segments = []
        heap = self._grow_heap
        while heap and heap[0] < end:
            e = heapq.heappop(heap)
            lst = self._grow_at.pop(e, None)
            if not lst:
                continue
            self._special_at.discard(e)
            self._reask_at.discard(e)
            self.it = e
            lst.sort(key=lambda x: x.key)  # admission order, as stepping allocates
            for s in lst:
                c = s.c0 + (e - s.base)
                if not self.alloc.allocate(s.sid, s.req, c + 1, computed=c):
                    raise AssertionError(f"decode run: sequence {s.sid} could not grow (headroom was checked)")
                self._regrow(s)
            segments.append((e - it0, self.memory_breakdown(filled=0), self.alloc.shared_slots))
        self.it = end
        fin = self._finish_at.pop(end - 1, None)
        done = []
        if fin:
            for s in fin:
                s.finish_iter = -1
                self._materialize(s)
            done = sorted(fin, key=lambda x: x.key)
        self.filled_tokens += plan.lazy_n * k
        return StepResult(done, segments)
