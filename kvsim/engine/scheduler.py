"""Iteration-level scheduler (continuous batching, vLLM V1 style) with a static-batching baseline.

Each iteration has a token budget (max_num_batched_tokens). Running sequences are served first,
in admission order: a decode takes one token, an unfinished prefill takes the next chunk. Then, if
nothing was preempted, waiting sequences are admitted first-come-first-served while the budget,
max_num_seqs and memory allow. A running sequence that cannot get memory first reclaims memory
that waiting (partially evicted) sequences still hold, then preempts victims chosen by the eviction
policy until it fits or is itself the victim. A victim is swapped out to the CPU pool (`swap`), keeps
its head blocks (partial eviction), or loses its KV and recomputes it later (`recompute`); it rejoins
the front of the queue.
"""

from __future__ import annotations

from collections import deque

from kvsim.allocators.base import KVAllocator
from kvsim.config import SchedulerConfig
from kvsim.engine.eviction import VictimPolicy
from kvsim.engine.sequence import RUNNING, WAITING, Sequence


class Scheduler:
    def __init__(self, cfg: SchedulerConfig, allocator: KVAllocator, victim_policy: VictimPolicy):
        self.cfg = cfg
        self.alloc = allocator
        self.pick_victim = victim_policy
        self.waiting: deque[Sequence] = deque()
        self.running: list[Sequence] = []  # admission order
        self.seats = 0  # seats taken in the running batch (a request with n samples takes n)
        self.filled_tokens = 0  # sum of `computed` over sequences whose KV is in GPU memory
        self.counts = {"preemptions": 0, "preempt_recompute": 0, "preempt_swap": 0, "preempt_partial": 0,
                       "swap_fallback_recompute": 0, "swap_out_blocks": 0, "swap_in_blocks": 0,
                       "reclaimed_partial": 0, "lookup_tokens": 0, "hit_tokens": 0}
        # Waiting sequences that still hold KV here (partial eviction), oldest first: kept apart so that
        # reclaiming their memory never scans a long queue.
        self._holding: dict[int, Sequence] = {}
        self.step_swap_out = 0  # blocks copied out / in during the current iteration
        self.step_swap_in = 0
        # True when the last schedule() left the queue head unadmitted for lack of seats or memory.
        # Neither loosens during a pure-decode run, so the engine may fast-forward.
        self.admission_blocked = False

    @property
    def preemptions(self) -> int:
        return self.counts["preemptions"]

    # --- transitions ----------------------------------------------------------------------
    def _lookup_prefix(self, seq: Sequence) -> int:
        """Cached leading tokens a sequence starting from scratch can skip. The lookup and the allocation
        that claims those blocks happen in the same call sequence, so no lookup is pending across
        iterations. At least one token is left to compute, so the step that completes the prompt emits."""
        if seq.computed or seq.swapped:
            return seq.computed
        return self.alloc.cached_prefix_tokens(seq.sid, seq.req, seq.known - 1)

    def preempt(self, seq: Sequence, slots_needed: int) -> None:
        """Take ``seq`` out of the running batch to free memory (``slots_needed`` is the shortfall)."""
        self.running.remove(seq)
        self.seats -= seq.seats
        self.counts["preemptions"] += 1
        seq.preemptions += 1
        seq.status = WAITING
        kept = 0
        if self.cfg.preemption == "swap":
            mapping = self.alloc.swap_out(seq.sid)
            if mapping is not None:
                seq.swapped = True
                self.filled_tokens -= seq.computed
                self.step_swap_out += len(mapping)
                self.counts["swap_out_blocks"] += len(mapping)
                self.counts["preempt_swap"] += 1
                self.waiting.appendleft(seq)
                return
            self.counts["swap_fallback_recompute"] += 1
        elif self.cfg.partial_eviction:
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
        furthest back in the queue (the earliest evicted) first."""
        for seq in self._holding.values():
            if seq is not keep:
                del self._holding[seq.sid]
                self.alloc.free(seq.sid)
                self.filled_tokens -= seq.computed
                seq.computed = 0
                self.counts["reclaimed_partial"] += 1
                return True
        return False

    def finish(self, seq: Sequence) -> None:
        self.running.remove(seq)
        self.seats -= seq.seats
        self.filled_tokens -= seq.computed
        self.alloc.free(seq.sid)
        self.admission_blocked = False  # freed memory and a seat: the queue head may fit now

    def add_running(self, seq: Sequence) -> None:
        """A sequence forked off a running one (parallel sampling) joins the batch."""
        self.running.append(seq)
        self.seats += seq.seats
        self.filled_tokens += seq.computed

    # --- one iteration ----------------------------------------------------------------------
    def schedule(self, now: float) -> list[tuple[Sequence, int]]:
        """Choose (sequence, tokens to compute) for the next iteration and allocate their memory."""
        self.step_swap_out = self.step_swap_in = 0
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
        for seq, _ in scheduled.values():
            seq.last_scheduled_s = now
        return list(scheduled.values())

    def _try_place(self, seq: Sequence, budget: int, static: bool) -> int | None:
        """Look the head's prefix up and allocate what its first chunk needs: the tokens it starts from,
        or None if it does not fit (the unclaimed lookup is dropped, never left pending). Static
        batching forms the whole batch at once, so it must hold every prompt now."""
        start = self._lookup_prefix(seq)
        need = seq.known if static else start + min(seq.known - start, budget)
        return start if self.alloc.allocate(seq.sid, seq.req, need) else None

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
                self.step_swap_in += len(mapping)
                self.counts["swap_in_blocks"] += len(mapping)
            in_gpu = seq.computed  # KV it already holds here (swapped back in, or kept by partial eviction)
            fresh = seq.computed == 0  # starting from scratch (not resumed from swap or a kept head)
            start = self._try_place(seq, budget, static)
            # partially evicted sequences behind the head give their memory back first (FCFS)
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
            seq.status = RUNNING
            if seq.admitted_s is None:
                seq.admitted_s = now
            self.running.append(seq)
            self.seats += seq.seats
            n = min(seq.to_compute, budget)
            if n > 0:
                scheduled[seq.sid] = (seq, n)
                budget -= n
        # Seats and memory stay short through a pure-decode run; a spent token budget does not (the
        # next iteration may be all decodes), so only the first two let the engine fast-forward.
        self.admission_blocked = blocked
