"""Iteration-level scheduler (continuous batching, vLLM V1 style) with a static-batching baseline.

The scheduler owns the serving state: the waiting queue, the running batch (admission order), seats,
the tokens with computed KV, and every sequence's progress. The engine only moves time:

    plan = scheduler.schedule(now)              # what the next iteration(s) compute; memory allocated
    ... the latency model prices plan.shape; time advances ...
    result = scheduler.update_after_step(plan)  # tokens computed and emitted, prefix blocks cached, forks
    scheduler.retire(result.finished, t)        # finished sequences leave and free their memory

Each iteration has a token budget (max_num_batched_tokens). Running sequences are served first,
in admission order: a decode takes one token, an unfinished prefill takes the next chunk. Then, if
nothing was preempted, waiting sequences are admitted first-come-first-served while the budget,
max_num_seqs and memory allow. A running sequence that cannot get memory first reclaims memory
that waiting (partially preempted) sequences still hold, then preempts victims chosen by the preemption
victim policy until it fits or is itself the victim. A victim is swapped out to the CPU pool (`swap`),
keeps its head blocks (partial preemption), or loses its KV and recomputes it later (`recompute`); it
rejoins the front of the queue.

When every running sequence is decoding and nothing can be admitted, the plan is a *decode run*: up to
``max_steps`` identical-shape iterations (bounded by the next completion and the allocator's growth
headroom), whose memory is allocated when the run is applied. The engine may cut it shorter (next
arrival, horizon) by setting ``plan.steps``.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from kvsim.allocators.base import NO_HIT, Breakdown, KVAllocator
from kvsim.config import SchedulerConfig
from kvsim.latency.base import StepShape
from kvsim.engine.preemption import VictimPolicy
from kvsim.engine.sequence import Sequence, Status


@dataclass
class IterationPlan:
    """What the next iteration computes. For a decode run, ``steps`` identical-shape iterations."""

    batch: list[tuple[Sequence, int]]  # (sequence, tokens it computes per iteration)
    shape: StepShape  # of the first iteration
    decode_run: bool = False  # all decodes; memory is claimed when the run is applied
    max_steps: int = 1  # most iterations the scheduler allows (decode runs)
    steps: int = 1  # iterations the engine chose (<= max_steps)
    swap_out_blocks: int = 0  # copy units moved to / from the CPU pool before the iteration runs
    swap_in_blocks: int = 0
    copies: list = field(default_factory=list)  # allocator copies (kind, src, dst) made for this iteration

    @property
    def kv_tokens0(self) -> int:
        """KV tokens the first iteration reads (decode runs: step i reads kv_tokens0 + i * batch size)."""
        return self.shape.kv_tokens


@dataclass
class StepResult:
    finished: list[Sequence]  # sequences that emitted their last token (still holding memory)
    used_sum: int = 0  # decode runs: slots held, summed over the run's iterations
    internal_sum: int = 0  # decode runs: internal fragmentation, summed likewise


class Scheduler:
    def __init__(self, cfg: SchedulerConfig, allocator: KVAllocator, victim_policy: VictimPolicy,
                 fast_forward: bool = True, first_sample_id: int = 0):
        self.cfg = cfg
        self.alloc = allocator
        self.pick_victim = victim_policy
        self.fast_forward = fast_forward  # offer decode runs (False: the stepping reference)
        self.waiting: deque[Sequence] = deque()
        self.running: list[Sequence] = []  # admission order
        self.samples: list[Sequence] = []  # forked parallel samples (n > 1)
        self._next_sample_id = first_sample_id
        self.seats = 0  # seats taken in the running batch (a request with n samples takes n)
        self.filled_tokens = 0  # sum of `computed` over sequences whose KV is in GPU memory
        self.counts = {"preemptions": 0, "preempt_recompute": 0, "preempt_swap": 0, "preempt_partial": 0,
                       "swap_fallback_recompute": 0, "swap_out_blocks": 0, "swap_in_blocks": 0,
                       "reclaimed_partial": 0, "lookup_tokens": 0, "hit_tokens": 0}
        # Waiting sequences that still hold KV here (partial preemption), oldest first: kept apart so that
        # reclaiming their memory never scans a long queue.
        self._holding: dict[int, Sequence] = {}
        self._swap_out = self._swap_in = 0  # copy units moved during the iteration being planned
        # True when the last schedule() left the queue head unadmitted for lack of seats or memory.
        # Neither loosens during a pure-decode run, so a decode run may be planned.
        self.admission_blocked = False

    @property
    def preemptions(self) -> int:
        return self.counts["preemptions"]

    @property
    def idle(self) -> bool:
        return not self.running and not self.waiting

    def memory_breakdown(self) -> Breakdown:
        """The KV pool now, the waiting queue's head deciding what free memory is usable."""
        w = self.waiting
        return self.alloc.memory_breakdown(self.filled_tokens, w[0].req if w else None)

    # --- arrivals ------------------------------------------------------------------------------
    def add_arrival(self, seq: Sequence) -> bool:
        """Queue an arriving request, or reject it (status and reason set) if it can never run."""
        r = seq.req
        if r.n > self.cfg.max_num_seqs:
            reason = f"n={r.n} parallel samples exceed max_num_seqs {self.cfg.max_num_seqs}"
        elif r.total_tokens > self.cfg.max_seq_len:
            reason = f"prompt+output {r.total_tokens} tokens exceeds max_seq_len {self.cfg.max_seq_len}"
        elif not self.alloc.fits_alone(r):
            reason = f"needs {self.alloc.footprint(r)} KV slots; the pool holds {self.alloc.usable_tokens}"
        else:
            self.waiting.append(seq)
            return True
        seq.status, seq.reason = Status.REJECTED, reason
        return False

    # --- transitions ----------------------------------------------------------------------
    def preempt(self, seq: Sequence, slots_needed: int) -> None:
        """Take ``seq`` out of the running batch to free memory (``slots_needed`` is the shortfall)."""
        self.running.remove(seq)
        self.seats -= seq.seats
        self.counts["preemptions"] += 1
        seq.preemptions += 1
        seq.status = Status.WAITING
        kept = 0
        if self.cfg.preemption_mode == "swap":
            mapping = self.alloc.swap_out(seq.sid)
            if mapping is not None:
                seq.swapped = True
                self.filled_tokens -= seq.computed
                self._swap_out += len(mapping)
                self.counts["swap_out_blocks"] += len(mapping)
                self.counts["preempt_swap"] += 1
                self.waiting.appendleft(seq)
                return
            self.counts["swap_fallback_recompute"] += 1
        elif self.cfg.partial_preemption:
            kept = min(seq.computed, self.alloc.release_tail(seq.sid, seq.req, slots_needed))
        if kept:
            self.counts["preempt_partial"] += 1
            self._holding[seq.sid] = seq
        else:
            self.alloc.free(seq.sid)
            self.counts["preempt_recompute"] += 1
        self.filled_tokens -= seq.computed - kept
        seq.computed = kept
        self.waiting.appendleft(seq)

    def _reclaim_waiting(self, keep: Sequence | None = None) -> bool:
        """Free the memory of one waiting sequence (other than ``keep``) that still holds some, the one
        furthest back in the queue (the earliest preempted) first."""
        for seq in self._holding.values():
            if seq is not keep:
                del self._holding[seq.sid]
                self.alloc.free(seq.sid)
                self.filled_tokens -= seq.computed
                seq.computed = 0
                self.counts["reclaimed_partial"] += 1
                return True
        return False

    def retire(self, finished: list[Sequence], t: float) -> int:
        """Finished sequences leave the batch and free their memory; returns how many requests are now
        complete (all their samples finished)."""
        complete = 0
        for seq in finished:
            self.running.remove(seq)
            self.seats -= seq.seats
            self.filled_tokens -= seq.computed
            self.alloc.free(seq.sid)
            self.admission_blocked = False  # freed memory and a seat: the queue head may fit now
            seq.status, seq.finish_s = Status.FINISHED, t
            head = seq.parent or seq
            if head.status == Status.FINISHED and all(c.status == Status.FINISHED for c in head.samples):
                complete += 1
        return complete

    def _fork(self, parent: Sequence, t: float) -> None:
        """Parallel sampling: after the prompt, the request's other samples fork off and share its KV."""
        parent.forked = True
        self.seats -= parent.seats - 1
        parent.seats = 1
        for _ in range(parent.req.n - 1):
            child = Sequence(self._next_sample_id, parent.req)
            self._next_sample_id += 1
            self.samples.append(child)
            child.parent, child.seats, child.forked = parent, 1, True
            child.generated, child.first_token_s, child.admitted_s = 1, t, t
            parent.samples.append(child)
            if child.generated == child.target:  # a one-token answer: the prefill's sampling was all of it
                child.status, child.finish_s = Status.FINISHED, t
            elif self.alloc.fork(parent.sid, child.sid, parent.computed, parent.req):
                child.computed = parent.computed
                child.status = Status.RUNNING
                self.running.append(child)
                self.seats += child.seats
                self.filled_tokens += child.computed
            else:  # no sharing: the sample computes its own prompt later
                self.waiting.appendleft(child)
                self.admission_blocked = False  # a new queue head: try to admit it

    # --- one iteration ----------------------------------------------------------------------
    def schedule(self, now: float) -> IterationPlan:
        """Plan the next iteration (or decode run) and allocate its memory. An empty batch means only
        preemptions happened; call again at the same instant."""
        run = self._plan_decode_run(now)
        if run is not None:
            return run
        self._swap_out = self._swap_in = 0
        budget = self.cfg.max_num_batched_tokens
        scheduled: dict[int, tuple[Sequence, int]] = {}
        preempted = False
        i = 0
        alloc = self.alloc
        while i < len(self.running) and budget > 0:
            seq = self.running[i]
            n = min(seq.to_compute, budget)
            while not alloc.allocate(seq.sid, seq.req, seq.computed + n):
                if self._reclaim_waiting():
                    continue
                victim = self.pick_victim(self.running)
                vi = self.running.index(victim)
                if victim.sid in scheduled:  # un-schedule: refund its tokens
                    budget += scheduled.pop(victim.sid)[1]
                self.preempt(victim, alloc.shortfall(seq.sid, seq.computed + n))
                preempted = True
                if vi < i:
                    i -= 1
                if victim is seq:
                    break
            else:
                scheduled[seq.sid] = (seq, n)
                budget -= n
                i += 1
        self.admission_blocked = False
        if not preempted:
            self._admit(budget, scheduled, now)
        batch = list(scheduled.values())
        for seq, _ in batch:
            seq.last_scheduled_s = now
        return IterationPlan(batch, StepShape.of([(n, seq.computed) for seq, n in batch]), swap_out_blocks=self._swap_out,
                             swap_in_blocks=self._swap_in, copies=alloc.drain_copies())

    def _plan_decode_run(self, now: float) -> IterationPlan | None:
        """A decode run of the whole batch, if every running sequence is decoding, nothing can be
        admitted meanwhile and the allocator lets every sequence grow by at least one token."""
        running = self.running
        if not self.fast_forward or not running or (self.waiting and not self.admission_blocked):
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
        k = self.alloc.decode_headroom([(s.sid, s.computed) for s in running], k)
        if k < 1:
            return None
        n = len(running)
        for s in running:
            s.last_scheduled_s = now
        return IterationPlan([(s, 1) for s in running], StepShape.decode(n, s0), decode_run=True, max_steps=k)

    def _try_place(self, seq: Sequence, budget: int, static: bool) -> int | None:
        """Look the head's prefix up and allocate what its first chunk needs: the tokens it starts from,
        or None if it does not fit (the unclaimed lookup is dropped). A sequence starting from scratch
        looks its prompt up, leaving at least one token to compute so the step that completes the prompt
        emits. Static batching forms the whole batch at once, so it must hold every prompt now."""
        hit = NO_HIT
        if not seq.computed and not seq.swapped:
            hit = self.alloc.lookup_prefix(seq.sid, seq.req, seq.known - 1)
        start = seq.computed or hit.tokens
        need = seq.known if static else start + min(seq.known - start, budget)
        return start if self.alloc.allocate(seq.sid, seq.req, need, hit) else None

    def _admit(self, budget: int, scheduled: dict[int, tuple[Sequence, int]], now: float) -> None:
        static = self.cfg.batching == "static"
        if static and self.running:
            self.admission_blocked = bool(self.waiting)  # the batch runs until its last request ends
            return
        blocked = False
        alloc = self.alloc
        while self.waiting and (budget > 0 or static):
            seq = self.waiting[0]
            if self.seats + seq.seats > self.cfg.max_num_seqs:
                blocked = True
                break
            if seq.swapped:
                mapping = alloc.swap_in(seq.sid, seq.req)
                if mapping is None:
                    blocked = True
                    break
                seq.swapped = False
                self._holding[seq.sid] = seq  # holds KV here until admitted
                self.filled_tokens += seq.computed
                self._swap_in += len(mapping)
                self.counts["swap_in_blocks"] += len(mapping)
            in_gpu = seq.computed  # KV it already holds here (swapped back in, or kept by partial preemption)
            fresh = seq.computed == 0  # starting from scratch (not resumed from swap or a kept head)
            start = self._try_place(seq, budget, static)
            # partially preempted sequences behind the head give their memory back first (FCFS)
            while start is None and self._reclaim_waiting(keep=seq):
                start = self._try_place(seq, budget, static)
            if start is None:
                blocked = True
                break
            self.waiting.popleft()
            self._holding.pop(seq.sid, None)
            if fresh:  # a (re)start from scratch looked the prompt up in the prefix cache
                self.counts["lookup_tokens"] += seq.prompt
                self.counts["hit_tokens"] += start
                seq.cached_tokens += start
            self.filled_tokens += start - in_gpu
            seq.computed = start
            seq.status = Status.RUNNING
            if seq.admitted_s is None:
                seq.admitted_s = now
            self.running.append(seq)
            self.seats += seq.seats
            n = min(seq.to_compute, budget)
            if n > 0:
                scheduled[seq.sid] = (seq, n)
                budget -= n
        # Seats and memory stay short through a pure-decode run; a spent token budget does not (the
        # next iteration may be all decodes), so only the first two let a decode run be planned.
        self.admission_blocked = blocked

    # --- applying an iteration's result --------------------------------------------------------
    def update_after_step(self, plan: IterationPlan, t_end: float) -> StepResult:
        """The plan's iterations ran and ended at ``t_end``: advance every scheduled sequence, register
        computed prompt blocks, record emitted tokens and fork parallel samples. Finished sequences are
        returned still holding their memory (see :meth:`retire`)."""
        if plan.decode_run:
            return self._apply_decode_run(plan)
        alloc = self.alloc
        done, forks = [], []
        for s, n in plan.batch:
            if s.computed < s.prompt:
                alloc.on_computed(s.sid, s.req, min(s.computed + n, s.prompt))
                # newly cached prompt blocks can make the queue head's prefix hit, so it may fit now
                self.admission_blocked = False
            s.computed += n
            if s.computed == s.prompt + s.generated:
                s.generated += 1
                if s.first_token_s is None:
                    s.first_token_s = t_end
                if s.generated == s.target:
                    done.append(s)
                if not s.forked:
                    forks.append(s)
        for s in forks:
            self._fork(s, t_end)
        self.filled_tokens += plan.shape.new_tokens
        return StepResult(done)

    def _apply_decode_run(self, plan: IterationPlan) -> StepResult:
        alloc, k = self.alloc, plan.steps
        running = [s for s, _ in plan.batch]
        used_sum, internal_sum = alloc.decode_run_integrals([(s.sid, s.computed, s.final_tokens) for s in running], k)
        done = []
        for s in running:
            alloc.allocate(s.sid, s.req, s.computed + k)
            s.computed += k
            s.generated += k
            if s.generated == s.target:
                done.append(s)
        self.filled_tokens += k * len(running)
        return StepResult(done, used_sum, internal_sum)
