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
budget each). Lazy decoders with an event in the same iteration and no explicit sequence between them form a
*run*, whose blocks the allocator grants in one call when it can (:meth:`IncrementalScheduler._serve_running`).

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
from kvsim.engine.scheduler import IterationPlan, Scheduler, StepResult, seq_key
from kvsim.engine.sequence import Sequence, Status
from kvsim.latency.base import StepShape


class LazyDecoder:
    """A running sequence advancing one token per iteration untouched: at iteration i it has
    ``c0 + (i - base)`` computed and ``g0 + (i - base)`` generated tokens."""

    __slots__ = ("seq", "key", "base", "c0", "g0", "grow_iter", "finish_iter", "lazy_from", "grow_periodic")

    def __init__(self, seq: Sequence, it: int, plans: int):
        self.seq = seq
        self.key = seq.key
        self.base, self.c0, self.g0 = it, seq.computed, seq.generated
        self.grow_iter = -1  # the iteration of its next allocation (-1: none before it finishes)
        self.finish_iter = it + seq.target - seq.generated - 1  # the iteration emitting its last token
        self.lazy_from = plans  # the first plan it was scheduled in as a lazy decoder
        self.grow_periodic = False  # its next allocation recurs every period (else the allocator is asked again)


def _bucket_add(buckets: dict[int, list[LazyDecoder]], heap: list[int], it: int, d: LazyDecoder) -> None:
    """File ``d`` under iteration ``it`` (a heap keeps the iterations that have a bucket)."""
    lst = buckets.get(it)
    if lst is None:
        buckets[it] = [d]
        heapq.heappush(heap, it)
    else:
        lst.append(d)


def _by_key(d: LazyDecoder) -> int:
    return d.key


class IncrementalScheduler(Scheduler):
    def __init__(
        self,
        cfg: SchedulerConfig,
        allocator: KVAllocator,
        victim_policy: VictimPolicy,
        first_sample_id: int = 0,
        windows: tuple[tuple[str, int], ...] = (),
        decode_runs: bool = True,
    ):
        super().__init__(cfg, allocator, victim_policy, first_sample_id, windows)
        self.decode_runs = decode_runs
        self.it = 0  # iterations executed
        self._explicit: list[Sequence] = []  # running sequences that are not lazy, admission order
        self._keys: list[int] = []  # keys of the lazy decoders, sorted
        self._lazy: dict[int, LazyDecoder] = {}  # by key
        self._lazy_sum = 0  # sum over lazy decoders of (c0 - base)
        self._offsets: list[int] = []  # each lazy decoder's (c0 - base), kept when windowed reads are counted
        self._grow_at: dict[int, list[LazyDecoder]] = {}  # iteration -> lazy decoders allocating in it
        self._special_at: set[int] = set()  # iterations whose growth events are not one plain unit
        # iterations with an event the allocator re-times (not periodic): it may free memory (a window), which
        # a queue blocked on memory must see, so decode runs stop there while requests wait
        self._reask_at: set[int] = set()
        self._grow_heap: list[int] = []  # iterations of _grow_at (stale entries are skipped)
        self._finish_at: dict[int, list[LazyDecoder]] = {}  # iteration -> lazy decoders emitting their last token
        self._finish_heap: list[int] = []
        self._period = 0  # tokens between plain growth events (the block size), 0 while unknown
        self._plans = 0  # plans scheduled so far
        self._last_plan_start = 0.0
        self._reads_state = victim_policy.reads_schedule_state
        self._prompts_step = False  # the plan in flight holds prompts alone: the lazy decoders do not advance

    # --- lazy decoders -------------------------------------------------------------------------
    def _materialize(self, d: LazyDecoder) -> None:
        s = d.seq
        n = self.it - d.base
        s.computed = d.c0 + n
        s.generated = d.g0 + n
        if d.lazy_from < self._plans:  # it ran in the last plan
            s.last_scheduled_s = self._last_plan_start

    def _schedule_growth(self, d: LazyDecoder) -> None:
        """Register the lazy decoder's next allocation event (its fields are current as of self.it)."""
        s = d.seq
        g = self.alloc.next_growth(s.sid, s.computed)
        d.grow_iter = -1
        if g is None:
            return
        e = self.it + g.tokens - 1 - s.computed
        plain = g.units == 1 and not g.copy and g.every > 0
        if plain and not self._period:
            self._period = g.every
        d.grow_periodic = plain and g.every == self._period
        # A copy, or more than one unit, gets an iteration of its own; an event of at most one unit (a window
        # freeing blocks, a growth the allocator re-times) runs inside a decode run like a plain one.
        if self._add_growth(d, e):
            if g.copy or g.units > 1:
                self._special_at.add(e)
            elif not d.grow_periodic:
                self._reask_at.add(e)

    def _regrow(self, d: LazyDecoder) -> None:
        """After the lazy decoder's allocation at self.it: its next event. A periodic growth (one unit)
        recurs every period; anything else asks the allocator again."""
        if d.grow_periodic:  # _add_growth, inlined: every decode's block boundary comes here
            e = self.it + self._period
            if e > d.finish_iter:
                d.grow_iter = -1
            else:
                d.grow_iter = e
                lst = self._grow_at.get(e)  # _bucket_add, inlined
                if lst is None:
                    self._grow_at[e] = [d]
                    heapq.heappush(self._grow_heap, e)
                else:
                    lst.append(d)
        else:
            self._materialize(d)
            self._schedule_growth(d)

    def _add_growth(self, d: LazyDecoder, e: int) -> bool:
        if e > d.finish_iter:
            d.grow_iter = -1
            return False  # it finishes before it needs anything
        d.grow_iter = e
        _bucket_add(self._grow_at, self._grow_heap, e, d)
        return True

    def _attach(self, s: Sequence) -> None:
        """Make a running, decoding sequence lazy from the current iteration on."""
        it = self.it
        d = LazyDecoder(s, it, self._plans)
        insort(self._keys, d.key)
        self._lazy[d.key] = d
        self._lazy_sum += d.c0 - it
        if self.windows:
            self._offsets.append(d.c0 - it)
        _bucket_add(self._finish_at, self._finish_heap, d.finish_iter, d)
        self._schedule_growth(d)

    def _detach(self, s: Sequence) -> None:
        d = self._lazy.pop(s.key, None)
        if d is None:
            if s in self._explicit:
                self._explicit.remove(s)
            return
        self._materialize(d)
        del self._keys[bisect_left(self._keys, d.key)]
        self._lazy_sum -= d.c0 - d.base
        if self.windows:
            self._offsets.remove(d.c0 - d.base)
        for table, attr in ((self._grow_at, "grow_iter"), (self._finish_at, "finish_iter")):
            e = getattr(d, attr)
            if e >= 0:
                lst = table[e]
                lst.remove(d)
                if not lst:
                    del table[e]
                    if table is self._grow_at:
                        self._special_at.discard(e)
                        self._reask_at.discard(e)
                setattr(d, attr, -1)

    def _joined(self, s: Sequence) -> None:
        self._explicit.append(s)

    def _settle(self) -> None:
        """Running explicit sequences that are now plain decoders become lazy."""
        keep = []
        for s in self._explicit:
            if (
                s.status == Status.RUNNING
                and s.generated
                and s.generated < s.target
                and s.computed == s.prompt + s.generated - 1
            ):
                self._attach(s)
            else:
                keep.append(s)
        self._explicit = keep

    def _finishing(self, it: int) -> list[Sequence]:
        """The lazy decoders that emit their last token in iteration ``it``, fields current, admission order."""
        fin = self._finish_at.pop(it, None)
        if not fin:
            return []
        for d in fin:
            d.finish_iter = -1
            self._materialize(d)
        fin.sort(key=_by_key)
        return [d.seq for d in fin]

    # --- the hooks of the running-batch pass (Scheduler._serve_running) ---------------------------
    def _to_visit(self) -> tuple[list[Sequence], dict[int, LazyDecoder] | None]:
        """The explicit sequences and the lazy decoders that allocate in this iteration (brought up to date
        now: nothing changes their fields before the pass reaches them), and those decoders by key."""
        it = self.it
        events = self._grow_at.pop(it, None)
        self._special_at.discard(it)
        self._reask_at.discard(it)
        self._pop_stale(self._grow_heap, self._grow_at, it + 1)
        if not events:
            return list(self._explicit), None
        plans, start = self._plans, self._last_plan_start
        woken = {}
        for d in events:
            d.grow_iter = -1
            s = d.seq  # _materialize, inlined: this runs for every growth event
            n = it - d.base
            s.computed = d.c0 + n
            s.generated = d.g0 + n
            if d.lazy_from < plans:
                s.last_scheduled_s = start
            woken[d.key] = d
        todo = [d.seq for d in events] + self._explicit
        todo.sort(key=seq_key)
        return todo, woken

    def _serve_running(
        self, todo: list[Sequence], lazy_of: dict[int, LazyDecoder] | None, scheduled: dict[int, tuple[Sequence, int]]
    ) -> tuple[int, bool]:
        """The reference's pass (:meth:`Scheduler._serve_running`), with *runs*: lazy decoders next to each other
        in ``todo`` (crossing a block boundary in this iteration, no explicit sequence between them) are served
        at once when the budget and the pool cover the whole run: the same blocks in the same order as one by
        one, which remains the way when they do not. Explicit sequences go one by one as the reference serves
        them."""
        serve = self._serve_seqs
        if lazy_of is None or not self.alloc.grows_in_bulk:  # the reference's pass (Scheduler._serve_running)
            budget, done_key, preempted = serve(todo, lazy_of, scheduled, self.cfg.max_num_batched_tokens, -1)
            return (self._serve_rest(budget, done_key) if budget else 0), preempted
        budget, done_key, preempted = self.cfg.max_num_batched_tokens, -1, False
        grow_decodes = self.alloc.grow_decodes
        i, end = 0, len(todo)
        while i < end:
            k = i  # the next lazy decoder: a run may start there
            while k < end and todo[k].key not in lazy_of:
                k += 1
            if k > i:  # the explicit sequences before it
                budget, done_key, p = serve(todo[i:k], lazy_of, scheduled, budget, done_key)
                preempted = preempted or p
                if not budget:
                    return 0, preempted
                if k == end:
                    break
            j = k + 1
            while j < end and todo[j].key in lazy_of:
                j += 1
            run = [x for x in todo[k:j] if x.status == Status.RUNNING]  # (a victim earlier in the pass is out)
            c = self._lazy_between(done_key, run[-1].key) + 1 if len(run) > 1 else 0  # lazy decoders to its end
            if 0 < c <= budget and grow_decodes(run):
                self._grew_run([lazy_of[x.key] for x in run])
                budget -= c
                done_key = run[-1].key
                if budget == 0:
                    self._starve_after(done_key, 0)
                    return 0, preempted
            else:  # one by one
                budget, done_key, p = serve(todo[k:j], lazy_of, scheduled, budget, done_key)
                preempted = preempted or p
                if not budget:
                    return 0, preempted
            i = j
        return self._serve_rest(budget, done_key), preempted

    def _lazy_between(self, lo: int, hi: int) -> int:
        return bisect_left(self._keys, hi) - bisect_right(self._keys, lo)

    def _starve_after(self, key: int, keep: int) -> None:
        """Of the lazy decoders after ``key`` only the first ``keep`` run this iteration; the others wait
        (they become explicit and unscheduled)."""
        i = bisect_right(self._keys, key) + keep
        for k in self._keys[i:]:
            s = self._lazy[k].seq
            self._detach(s)
            insort(self._explicit, s, key=seq_key)

    def _is_lazy(self, s: Sequence) -> bool:
        return s.key in self._lazy

    _grew = _regrow

    def _grew_run(self, lazies: list[LazyDecoder]) -> None:
        """:meth:`_regrow` of each, in order, with the periodic ones' next event (all at the same
        iteration) filed into one bucket looked up once: every decode's block boundary comes here."""
        e = self.it + self._period
        grow_at = self._grow_at
        bucket = None
        for d in lazies:
            if not d.grow_periodic:
                self._materialize(d)
                self._schedule_growth(d)  # may file into iteration e too: the same bucket, in order
                continue
            if e > d.finish_iter:
                d.grow_iter = -1
                continue
            d.grow_iter = e
            if bucket is None:
                bucket = grow_at.get(e)
                if bucket is None:
                    bucket = grow_at[e] = []
                    heapq.heappush(self._grow_heap, e)
            bucket.append(d)

    def _victim(self) -> Sequence:
        if self._reads_state:
            for d in self._lazy.values():
                self._materialize(d)
        return self.pick_victim(self.running)

    def _iteration_done(self, done: list[Sequence]) -> None:
        if self._prompts_step:  # the lazy decoders sat it out: the iteration count (their clock) stays
            self._prompts_step = False
            self._settle()
            return
        it = self.it
        self.it = it + 1
        fin = self._finishing(it)
        self._pop_stale(self._finish_heap, self._finish_at, it + 1)
        if fin:
            done.extend(fin)
            done.sort(key=seq_key)
        self._settle()

    @staticmethod
    def _pop_stale(heap: list[int], live: dict, upto: int) -> None:
        while heap and (heap[0] not in live or heap[0] < upto):
            heapq.heappop(heap)

    def finalize(self) -> None:
        for d in self._lazy.values():
            self._materialize(d)

    def batch(self, plan: IterationPlan) -> list[tuple[Sequence, int]]:
        lazy = []
        for d in self._lazy.values() if plan.lazy_n else ():
            if d.lazy_from < self._plans:  # lazy during the plan (not made lazy after it)
                self._materialize(d)
                lazy.append((d.seq, 1))
        out = lazy + list(plan.entries)
        out.sort(key=lambda e: e[0].key)
        return out

    # --- one iteration ----------------------------------------------------------------------
    def schedule(self, now: float) -> IterationPlan:
        run = self._plan_decode_run(now)
        return run if run is not None else super().schedule(now)

    def _plan(self, scheduled: dict[int, tuple[Sequence, int]], now: float, *_) -> IterationPlan:
        n = len(self._keys)
        plan = super()._plan(
            scheduled, now, n, self._lazy_sum + n * (self.it + 1), self._lazy_contexts() if self.windows else ()
        )
        self._last_plan_start = now
        self._plans += 1
        return plan

    def _plan_prompts(self, scheduled: dict[int, tuple[Sequence, int]], now: float) -> IterationPlan:
        # Without the lazy decoders, and not counted as a plan they ran in (their last_scheduled_s stays)
        self._prompts_step = True
        return Scheduler._plan(self, scheduled, now)

    def _lazy_contexts(self):
        """The lazy decoders' contexts in the current iteration (numpy)."""
        import numpy as np

        return np.asarray(self._offsets, dtype=np.int64) + (self.it + 1)

    def update_after_step(self, plan: IterationPlan, t_end: float) -> StepResult:
        return self._apply_run(plan) if plan.decode_run else super().update_after_step(plan, t_end)

    # --- decode runs ------------------------------------------------------------------------------
    def _needed(self, events: list[tuple[int, int]], k: int) -> int:
        """Plain growth units the lazy decoders need over the next k iterations (each recurs every period)."""
        p = self._period or 1
        return sum(cnt * (1 + (k - 1 - o) // p) for o, cnt in events if o < k)

    def _plan_decode_run(self, now: float) -> IterationPlan | None:
        if (
            not self.decode_runs
            or not self.running
            or self._explicit
            or (self.waiting and not self.admission_blocked and not self.hold_admission)
        ):
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
        return IterationPlan(
            [],
            StepShape.decode(n, s0),
            lazy_n=n,
            decode_run=True,
            max_steps=k,
            start_breakdown=self.memory_breakdown(filled=0),
            contexts=self._lazy_contexts() if self.windows else None,
        )

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
            lst.sort(key=_by_key)  # admission order, as stepping allocates
            for d in lst:
                c = d.c0 + (e - d.base)
                if not self.alloc.allocate(d.seq.sid, d.seq.req, c + 1, computed=c):
                    raise AssertionError(f"decode run: sequence {d.seq.sid} could not grow (headroom was checked)")
                self._regrow(d)
            segments.append((e - it0, self.memory_breakdown(filled=0), self.alloc.shared_slots))
        self.it = end
        done = self._finishing(end - 1)
        self.filled_tokens += plan.lazy_n * k
        return StepResult(done, segments)
