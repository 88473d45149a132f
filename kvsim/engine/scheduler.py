"""Iteration-level scheduler (continuous batching, vLLM V1 style) with a static-batching baseline.

Each iteration has a token budget (max_num_batched_tokens). Running sequences are served first,
in admission order: a decode takes one token, an unfinished prefill takes the next chunk. Then, if
nothing was preempted, waiting sequences are admitted first-come-first-served while the budget,
max_num_seqs and memory allow. A running sequence that cannot get memory preempts a victim
(recompute: its KV is dropped and it rejoins the front of the queue) until it fits or is itself the victim.
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
        self.filled_tokens = 0  # sum of `computed` over running sequences (KV slots in use)
        self.preemptions = 0
        # True when the last schedule() left the queue head unadmitted for lack of budget, seats or
        # memory. None of those loosen during a pure-decode run, so the engine may fast-forward.
        self.admission_blocked = False

    # --- transitions ----------------------------------------------------------------------
    def _lookup_prefix(self, seq: Sequence) -> int:
        """Cached prompt tokens a (re)starting sequence can skip. The lookup and the allocation that
        claims those blocks happen in the same call sequence, so no lookup is pending across iterations."""
        cached = self.alloc.cached_prefix_tokens(seq.sid, seq.req)
        # Leave at least one token to compute, so the step that completes the prompt emits a token.
        return min(cached, seq.known - 1)

    def preempt(self, seq: Sequence) -> None:
        self.running.remove(seq)
        self.filled_tokens -= seq.computed
        self.alloc.free(seq.sid)
        seq.computed = 0
        seq.status = WAITING
        seq.preemptions += 1
        self.preemptions += 1
        self.waiting.appendleft(seq)

    def finish(self, seq: Sequence) -> None:
        self.running.remove(seq)
        self.filled_tokens -= seq.computed
        self.alloc.free(seq.sid)
        self.admission_blocked = False  # freed memory and a seat: the queue head may fit now

    # --- one iteration ----------------------------------------------------------------------
    def schedule(self, now: float) -> list[tuple[Sequence, int]]:
        """Choose (sequence, tokens to compute) for the next iteration and allocate their memory."""
        budget = self.cfg.max_num_batched_tokens
        scheduled: dict[int, tuple[Sequence, int]] = {}
        preempted = False
        i = 0
        while i < len(self.running) and budget > 0:
            seq = self.running[i]
            n = min(seq.to_compute, budget)
            while not self.alloc.allocate(seq.sid, seq.req, seq.computed + n):
                victim = self.pick_victim(self.running)
                vi = self.running.index(victim)
                if victim.sid in scheduled:  # un-schedule: refund its tokens
                    budget += scheduled.pop(victim.sid)[1]
                self.preempt(victim)
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

    def _admit(self, budget: int, scheduled: dict[int, tuple[Sequence, int]], now: float) -> None:
        static = self.cfg.batching == "static"
        if static and self.running:
            self.admission_blocked = bool(self.waiting)  # the batch runs until its last request ends
            return
        blocked = False
        while self.waiting and (budget > 0 or static):
            if len(self.running) >= self.cfg.max_num_seqs:
                blocked = True
                break
            seq = self.waiting[0]
            cached = self._lookup_prefix(seq)
            # Static batching forms the whole batch at once: it must hold every prompt now.
            need = seq.known if static else cached + min(seq.known - cached, budget)
            if not self.alloc.allocate(seq.sid, seq.req, need):
                blocked = True
                break
            self.waiting.popleft()
            seq.computed = cached
            seq.cached_tokens += cached
            seq.status = RUNNING
            if seq.admitted_s is None:
                seq.admitted_s = now
            self.running.append(seq)
            self.filled_tokens += seq.computed
            n = min(seq.to_compute, budget)
            if n > 0:
                scheduled[seq.sid] = (seq, n)
                budget -= n
        # Seats and memory stay short through a pure-decode run; a spent token budget does not (the
        # next iteration may be all decodes), so only the first two let the engine fast-forward.
        self.admission_blocked = blocked
