"""Iteration-level scheduler (continuous batching, vLLM V1 style) with a static-batching baseline.

The scheduler owns the serving state: the waiting queue, the running batch (admission order), seats,
the tokens with computed KV, and every sequence's progress. The engine only moves time:

    plan = scheduler.schedule(now)              # what the next iteration(s) compute; memory allocated
    ... the latency model prices plan.shape; time advances ...
    result = scheduler.update_after_step(plan)  # tokens computed and emitted, prefix blocks cached, forks
    scheduler.retire(result.finished, t)        # finished sequences leave and free their memory

Each iteration has a token budget (max_num_batched_tokens). Running sequences are served first,
in admission order: a decode takes one token, an unfinished prefill takes the next chunk. Then, if
nothing was preempted, waiting sequences are admitted in the waiting queue's order (its scheduling
policy, first-come-first-served or by priority: kvsim/engine/waiting.py) while the budget, max_num_seqs
and memory allow; a head that does not fit blocks the sequences behind it. A running sequence that cannot
get memory first reclaims memory that waiting (partially preempted) sequences still hold, then preempts
victims chosen by the preemption victim policy until it fits or is itself the victim. A victim is swapped
out to the CPU pool (`swap`), keeps its head blocks (partial preemption), or loses its KV and recomputes it
later (`recompute`); it rejoins the queue (at the front under fcfs, by its priority under priority).

Two schedulers implement this. :class:`SteppingScheduler` here visits every running sequence every
iteration: the plain reference. :class:`~kvsim.engine.incremental.IncrementalScheduler` (the default)
gives the same results touching a sequence only when its state changes, serves runs of decoders crossing
block boundaries together, and plans *decode runs* of many identical-shape iterations when nothing else can
happen; property tests hold the two to each other.
"""

from __future__ import annotations

import heapq
from bisect import bisect_left
from dataclasses import dataclass, field, replace
from typing import Callable

from kvsim.allocators.base import NO_HIT, Breakdown, KVAllocator, PrefixHit
from kvsim.config import SchedulerConfig
from kvsim.engine.preemption import VictimPolicy
from kvsim.engine.sequence import Sequence, Status
from kvsim.engine.waiting import WaitingQueue, make_waiting_queue
from kvsim.latency.base import StepShape
from kvsim.trace.request import Request


WAIT_FOR_BUDGET = -1  # _try_place: the head fits memory but not this iteration's token budget
LOADING = -2  # _try_place: the head's prefix hit lies partly in a lower cache tier, which loads first
_NO_KEY = 1 << 62  # larger than every admission key


def seq_key(seq: Sequence) -> int:
    """A running sequence's admission key (sort key of the running batch)."""
    return seq.key


@dataclass
class IterationPlan:
    """What the next iteration computes. For a decode run, ``steps`` identical-shape iterations."""

    entries: list[tuple[Sequence, int]]  # (sequence, tokens it computes) of sequences scheduled explicitly
    shape: StepShape  # of the first iteration
    lazy_n: int = 0  # decoders scheduled without being listed (incremental scheduler)
    decode_run: bool = False  # all decodes; the engine may cut it at ``steps`` <= ``max_steps``
    max_steps: int = 1
    steps: int = 1
    swap_out_blocks: int = 0  # copy units moved to / from the CPU pool before the iteration runs
    swap_in_blocks: int = 0
    swap_out_calls: int = 0  # copy calls moving them: one per page (a split layout's page spans several units)
    swap_in_calls: int = 0
    copies: list = field(default_factory=list)  # allocator copies (kind, src, dst) made for this iteration
    start_breakdown: Breakdown | None = None  # decode runs: the pool at the start, tokens excluded
    contexts: object = None  # decode runs of models with windowed layers: the contexts at the first step (numpy)

    @property
    def context_args(self) -> tuple:
        """Extra arguments of the latency model's decode-run methods: the contexts, for windowed models."""
        return () if self.contexts is None else (self.contexts,)

    @property
    def num_seqs(self) -> int:
        return self.lazy_n + len(self.entries)

    @property
    def empty(self) -> bool:
        return self.num_seqs == 0


@dataclass
class StepResult:
    finished: list[Sequence]  # sequences that emitted their last token (still holding memory)
    # decode runs: (iteration offset, pool breakdown with tokens excluded, slots saved by sharing) from which
    # each state holds
    segments: list[tuple[int, Breakdown, int]] = field(default_factory=list)


def fixed_delivery(deliver_s: float) -> Callable[..., float]:
    """When the client gets a token of ``seq`` the engine made at ``t``: a fixed ``deliver_s`` seconds later."""

    def delivered(seq: Sequence, t: float, first: bool = False) -> float:
        return t + deliver_s

    return delivered


class Scheduler:
    """The serving state and the transitions both schedulers share."""

    def __init__(
        self,
        cfg: SchedulerConfig,
        allocator: KVAllocator,
        victim_policy: VictimPolicy,
        first_sample_id: int = 0,
        windows: tuple[tuple[str, int], ...] = (),
    ):
        self.cfg = cfg
        self.alloc = allocator
        # first tokens and finishes are stamped when the client gets them: the API server's delivery later (the
        # engine replaces this with one that also waits for its API server's event loop: engine.loop_delivery)
        self.deliver_s = cfg.api_server.deliver_s
        # (seq, t, first=False) -> seconds; a function holding no reference to the scheduler (a bound method would
        # make every run a reference cycle, its millions of objects left for the collector's next full pass)
        self.delivered: Callable[..., float] = fixed_delivery(self.deliver_s)
        # windowed kinds of layer whose decode reads the latency model wants counted (LatencyModel.windows)
        self.windows = windows
        self.pick_victim = victim_policy
        self.waiting: WaitingQueue = make_waiting_queue(cfg.scheduling_policy)
        self.running: list[Sequence] = []  # admission order (increasing `key`)
        self.samples: list[Sequence] = []  # forked parallel samples (n > 1)
        self._next_sample_id = first_sample_id
        self._next_key = 0
        self.seats = 0  # seats taken in the running batch (a request with n samples takes n)
        self.filled_tokens = 0  # sum of `computed` over sequences whose KV is in GPU memory
        self.counts = {
            "preemptions": 0,
            "preempt_recompute": 0,
            "preempt_swap": 0,
            "preempt_partial": 0,
            "swap_fallback_recompute": 0,
            "swap_out_blocks": 0,
            "swap_in_blocks": 0,
            "reclaimed_partial": 0,
            "lookup_tokens": 0,
            "hit_tokens": 0,
        }
        # Waiting sequences that still hold KV here (partial preemption), oldest first: kept apart so that
        # reclaiming their memory never scans a long queue.
        self._holding: dict[int, Sequence] = {}
        self._swap_out = self._swap_in = 0  # copy units moved during the iteration being planned
        self._swap_out_calls = self._swap_in_calls = 0  # and the copy calls that move them (one per page)
        # True when the last schedule() left the queue head unadmitted for lack of seats or memory.
        # Neither loosens during a pure-decode run, so a decode run may be planned.
        self.admission_blocked = False
        # Set by the engine inside a multi-step window: only the running batch is served, nothing is admitted.
        self.hold_admission = False
        # KV that moves between engines or cache tiers. A prefill engine parks finished sequences: their KV
        # stays until a decode engine has read it (``releases``: (time, sid) when it may be freed). A sequence
        # whose prompt KV arrives from elsewhere (a prefill engine: ``kv_loader(seq, tokens, now)`` starts the
        # transfer and returns when it ends; a lower cache tier) holds its memory in ``loading`` (ready time,
        # sid, sequence) meanwhile, not in the batch.
        self.park_finished = False
        self.parked: dict[int, Sequence] = {}
        self.releases: list[tuple[float, int]] = []
        self.kv_loader: Callable[[Sequence, int, float], float] | None = None
        self.loading: list[tuple[float, int, Sequence]] = []

    @property
    def preemptions(self) -> int:
        return self.counts["preemptions"]

    @property
    def idle(self) -> bool:
        return not self.running and not self.waiting

    def memory_breakdown(self, filled: int | None = None) -> Breakdown:
        """The KV pool now (with ``filled`` token states instead of the current ones, if given), the waiting
        queue's head deciding what free memory is usable."""
        w = self.waiting
        return self.alloc.memory_breakdown(self.filled_tokens if filled is None else filled, w[0].req if w else None)

    # --- hooks for the incremental scheduler ------------------------------------------------------
    # The reference visits every running sequence; the incremental scheduler leaves plain decoders *lazy*
    # (not visited, only counted) and overrides these.
    def _detach(self, seq: Sequence) -> None:
        """Bring ``seq``'s fields up to date and stop tracking it lazily (it is about to change state)."""

    def _joined(self, seq: Sequence) -> None:
        """``seq`` was appended to the running batch."""

    def _to_visit(self) -> tuple[list[Sequence], dict | None]:
        """The running sequences this iteration's pass visits, in admission order, and the lazy state (fields
        brought up to date) of those that are lazy decoders, by key (None: none are)."""
        return list(self.running), None

    def _lazy_between(self, lo: int, hi: int) -> int:
        """Lazy decoders with ``lo < key < hi``: counted by the pass (one token each), not visited."""
        return 0

    def _starve_after(self, key: int, keep: int) -> None:
        """The token budget ran out: of the lazy decoders after ``key`` only the first ``keep`` run."""

    def _is_lazy(self, seq: Sequence) -> bool:
        """``seq`` is a lazy decoder."""
        return False

    def _grew(self, lazy: object) -> None:
        """A lazy decoder (its state from :meth:`_to_visit`'s map) got memory for its next token."""

    def _grew_run(self, lazies: list) -> None:
        """:meth:`_grew` of each of a run of lazy decoders that got memory together, in order."""
        for lazy in lazies:
            self._grew(lazy)

    def _victim(self) -> Sequence:
        """The running sequence the victim policy gives up (fields it reads up to date)."""
        return self.pick_victim(self.running)

    def _iteration_done(self, done: list[Sequence]) -> None:
        """An iteration's explicit entries were applied; ``done`` (finished so far) may grow."""

    def finalize(self) -> None:
        """Bring every sequence's fields up to date (the simulation ended)."""

    def batch(self, plan: IterationPlan) -> list[tuple[Sequence, int]]:
        """Every (sequence, tokens per iteration) the plan ran, in admission order, with current fields."""
        return list(plan.entries)

    # --- arrivals ------------------------------------------------------------------------------
    def rejection(self, r: Request) -> str | None:
        """Why this engine could never run the request (seats, length limit, its KV pool), or None."""
        if r.n > self.cfg.max_num_seqs:
            return f"n={r.n} parallel samples exceed max_num_seqs {self.cfg.max_num_seqs}"
        if r.total_tokens > self.cfg.max_model_len:
            return f"prompt+output {r.total_tokens} tokens exceeds max_model_len {self.cfg.max_model_len}"
        return self.alloc.alone_problem(r)

    def add_arrival(self, seq: Sequence) -> bool:
        """Queue an arriving request, or reject it (status and reason set) if it can never run."""
        reason = self.rejection(seq.req)
        if reason is None:
            if self.waiting.push(seq):  # it went ahead of the head (priority): the new head may fit
                self.admission_blocked = False
            return True
        seq.status, seq.reason = Status.REJECTED, reason
        return False

    # --- transitions ----------------------------------------------------------------------
    def _append_running(self, seq: Sequence) -> None:
        seq.key = self._next_key
        self._next_key += 1
        self.running.append(seq)
        self.seats += seq.seats
        self._joined(seq)

    def _leave_running(self, seq: Sequence) -> None:
        """Take ``seq`` out of the running batch, found by its key: the batch is in key order (list.remove
        would compare it with every sequence before it)."""
        running = self.running
        i = bisect_left(running, seq.key, key=seq_key)
        assert running[i] is seq, "the running batch is out of admission order"
        del running[i]

    def preempt(self, seq: Sequence, slots_needed: int) -> None:
        """Take ``seq`` out of the running batch to free memory (``slots_needed`` is the shortfall)."""
        self._detach(seq)
        self._leave_running(seq)
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
                self._swap_out_calls += mapping.calls
                self.counts["swap_out_blocks"] += len(mapping)
                self.counts["preempt_swap"] += 1
                self.waiting.push_front(seq)
                return
            self.counts["swap_fallback_recompute"] += 1
        elif self.cfg.partial_preemption:
            kept = min(seq.computed, self.alloc.release_tail(seq.sid, seq.req, slots_needed))
        if kept:
            self.counts["preempt_partial"] += 1
            self._holding[seq.sid] = seq
        else:
            self.alloc.keep_for_restart(seq.sid, seq.req, seq.computed)
            self.alloc.free(seq.sid)
            self.counts["preempt_recompute"] += 1
        self.filled_tokens -= seq.computed - kept
        seq.computed = kept
        self.waiting.push_front(seq)

    def _reclaim_waiting(self, keep: Sequence | None = None) -> bool:
        """Free the memory of one waiting sequence (other than ``keep``) that still holds some, the one
        furthest back in the queue first (fcfs: the earliest preempted; priority: the least important)."""
        for seq in self.waiting.reclaim_order(self._holding):
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
            self._detach(seq)
            self._leave_running(seq)
            self.seats -= seq.seats
            if self.park_finished:  # its KV waits for the decode engine to read it
                self.parked[seq.sid] = seq
            else:
                self.filled_tokens -= seq.computed
                self.alloc.free(seq.sid)
            self.admission_blocked = False  # freed memory and a seat: the queue head may fit now
            seq.status, seq.finish_s = Status.FINISHED, self.delivered(seq, t)
            head = seq.parent or seq
            if head.request_finished:
                complete += 1
        return complete

    def abort(self, seq: Sequence) -> bool:
        """Take request ``seq`` out because its client cancelled it (vLLM's abort): it and its parallel samples
        still going, out of the running batch or the waiting queue, their memory freed (full prefix-cached blocks
        stay cached, as when they finish). False while any of them is elsewhere (swapped out, or its KV
        loading): nothing is taken out, and the caller tries again at a later boundary."""
        live = [m for m in (seq, *seq.samples) if m.status in (Status.RUNNING, Status.WAITING)]
        if not all(self._abortable(m) for m in live):
            return False
        for m in live:
            self._abort_one(m)
        return True

    def _abortable(self, seq: Sequence) -> bool:
        if seq.status == Status.RUNNING:
            return not any(s is seq for _, _, s in self.loading)
        return seq.status == Status.WAITING and not seq.swapped

    def _abort_one(self, seq: Sequence) -> None:
        if seq.status == Status.RUNNING:
            self._detach(seq)
            self._leave_running(seq)
            self.seats -= seq.seats
        else:
            found = self.waiting.discard(seq)
            assert found, f"sequence {seq.sid} is waiting but not in the queue"
            self._holding.pop(seq.sid, None)  # a partly preempted one holds the head of its KV
        if seq.parent is not None:
            seq.status = Status.CANCELLED  # (a request's own sequence: its engine sets it, with the reason)
        self.filled_tokens -= seq.computed
        seq.computed = 0
        if self.alloc.held_slots(seq.sid):
            self.alloc.free(seq.sid)
        else:  # a preempted one: what its prefix cache kept for a restart that will not come
            self.alloc.forget_lookup(seq.sid)
        self.admission_blocked = False  # freed memory (and a seat): the queue head may fit now

    # --- KV transfers ---------------------------------------------------------------------------
    def release_at(self, sid: int, t: float) -> None:
        """A decode engine will have read the parked sequence's KV at ``t``: free it then."""
        heapq.heappush(self.releases, (t, sid))

    @property
    def next_transfer(self) -> float | None:
        """When the next transfer ends (a parked sequence's release, a load), or None."""
        r = self.releases[0][0] if self.releases else None
        d = self.loading[0][0] if self.loading else None
        return r if d is None else d if r is None else min(r, d)

    @property
    def transfers_pending(self) -> bool:
        """Memory is held for KV in flight (parked, loading, or about to be released)."""
        return bool(self.parked or self.releases or self.loading)

    def settle_transfers(self, now: float) -> bool:
        """Apply the releases and loads that ended by ``now``; True if any did. Loaded sequences rejoin the
        front of the queue holding their prompt KV (a decode engine computes the last prompt token itself,
        which emits the first output token, as vLLM's does)."""
        changed = False
        while self.releases and self.releases[0][0] <= now:
            seq = self.parked.pop(heapq.heappop(self.releases)[1])
            self.filled_tokens -= seq.computed
            self.alloc.free(seq.sid)
            changed = True
        ready = []
        while self.loading and self.loading[0][0] <= now:
            ready.append(heapq.heappop(self.loading)[2])
        for seq in reversed(ready):
            self.filled_tokens += seq.remote - seq.computed
            seq.computed = seq.remote
            seq.remote = 0
            self.alloc.on_computed(seq.sid, seq.req, seq.computed)
            self._holding[seq.sid] = seq
            self.waiting.push_front(seq)
        if changed or ready:
            self.admission_blocked = False
        return changed or bool(ready)

    def _begin_load(self, seq: Sequence, target: int, now: float, hit: PrefixHit | None = None) -> bool:
        """Give the queue head memory for its first ``target`` tokens' KV, claim what the prefix cache holds in
        GPU memory, and start loading the rest: from lower cache tiers, and the tokens no cache holds from the
        engine that computed them (``kv_loader``; without one, every token of ``target`` is a cache hit). The
        sequence waits in ``loading`` until both ends; False: memory does not hold it yet. ``hit``: the
        lookup already made for ``target`` tokens, if any."""
        alloc = self.alloc
        while True:
            if hit is None:
                hit = alloc.lookup_prefix(seq.sid, seq.req, target)
            gpu = hit.tokens - hit.tier_tokens
            if alloc.allocate(seq.sid, seq.req, target, hit, computed=gpu):
                break
            if not self._reclaim_waiting(keep=seq):
                return False
            hit = None  # memory was freed: look again
        ready = now
        if hit.tier_hits:
            load = alloc.tier_load_seconds(hit)
            layers = self.cfg.kv_load_layers
            if layers:  # layer by layer: it may start once the first layer is in
                seq.loaded_s = now + load
                load /= layers
            ready = now + load
        if self.kv_loader is not None:
            counts = self.counts
            counts["kv_load_tokens"] = counts.get("kv_load_tokens", 0) + target - hit.tokens
            counts["kv_load_local_hit_tokens"] = counts.get("kv_load_local_hit_tokens", 0) + hit.tokens
            ready = max(ready, self.kv_loader(seq, target - hit.tokens, now))
        seq.computed = gpu
        self.filled_tokens += gpu
        seq.remote = target
        heapq.heappush(self.loading, (ready, seq.sid, seq))
        return True

    def _fork(self, parent: Sequence, t: float) -> None:
        """Parallel sampling: after the prompt, the request's other samples fork off and share its KV."""
        parent.forked = True
        self.seats -= parent.seats - 1
        parent.seats = 1
        parent.samples = []
        for _ in range(parent.req.n - 1):
            child = Sequence(self._next_sample_id, parent.req)
            self._next_sample_id += 1
            self.samples.append(child)
            child.parent, child.seats, child.forked, child.api_server = parent, 1, True, parent.api_server
            child.generated, child.first_token_s, child.admitted_s = 1, self.delivered(child, t, True), t
            parent.samples.append(child)
            if child.generated == child.target:  # a one-token answer: the prefill's sampling was all of it
                child.status, child.finish_s = Status.FINISHED, child.first_token_s
            elif self.alloc.fork(parent.sid, child.sid, parent.computed, parent.req):
                child.computed = parent.computed
                child.status = Status.RUNNING
                self._append_running(child)
                self.filled_tokens += child.computed
            else:  # no sharing: the sample computes its own prompt later
                self.waiting.push_front(child)
                self.admission_blocked = False  # a new queue head: try to admit it

    # --- admission --------------------------------------------------------------------------
    def _try_place(self, seq: Sequence, budget: int, static: bool, now: float = 0.0) -> int | None:
        """Look the head's prefix up and allocate what its first chunk needs: the tokens it starts from,
        None if memory does not hold it, or WAIT_FOR_BUDGET if, without chunked prefill, the rest of its
        prompt exceeds this iteration's budget (either way the unclaimed lookup is dropped). A sequence starting from scratch
        looks its prompt up, leaving at least one token to compute so the step that completes the prompt
        emits. Static batching forms the whole batch at once, so it must hold every prompt now."""
        hit = NO_HIT
        if not seq.computed and not seq.swapped:
            hit = self.alloc.lookup_prefix(seq.sid, seq.req, seq.known - 1)
            if hit.tier_hits:
                if not static:  # the lower-tier part loads first
                    return LOADING if self._begin_load(seq, hit.tokens, now, hit) else None
                # static batching forms its batch at once and waits for no load: the GPU part only
                hit = replace(hit, tokens=hit.tokens - hit.tier_tokens, tier_hits=(), tier_tokens=0)
        start = seq.computed or hit.tokens
        if not static and not self.cfg.enable_chunked_prefill and seq.known - start > budget:
            return WAIT_FOR_BUDGET  # without chunking the whole rest must fit this iteration's budget
        need = seq.known if static else start + min(seq.known - start, budget)
        return start if self.alloc.allocate(seq.sid, seq.req, need, hit, computed=start) else None

    def _admit(self, budget: int, scheduled: dict[int, tuple[Sequence, int]], now: float) -> None:
        static = self.cfg.batching == "static"
        if static and self.running:
            self.admission_blocked = bool(self.waiting)  # the batch runs until its last request ends
            return
        blocked = False
        alloc = self.alloc
        waiting = self.waiting
        while waiting and (budget > 0 or static):
            seq = waiting[0]  # its head (peek: deque's own for fcfs)
            if self.seats + seq.seats > self.cfg.max_num_seqs:
                blocked = True
                break
            if seq.remote:  # handed off by a prefill engine: load its KV first (takes no seat or budget yet)
                if self._begin_load(seq, seq.remote, now):
                    waiting.pop_next()
                    continue
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
                self._swap_in_calls += mapping.calls
                self.counts["swap_in_blocks"] += len(mapping)
            in_gpu = seq.computed  # KV it already holds here (swapped back in, or kept by partial preemption)
            fresh = seq.computed == 0  # starting from scratch (not resumed from swap or a kept head)
            start = self._try_place(seq, budget, static, now)
            if start == WAIT_FOR_BUDGET:
                break  # the budget, not memory, is short: the next iteration may have it (not admission_blocked)
            # partially preempted sequences behind the head give their memory back first (FCFS)
            while start is None and self._reclaim_waiting(keep=seq):
                start = self._try_place(seq, budget, static, now)
            chunk = budget
            if start is None and not self.running and not static and self.cfg.enable_chunked_prefill:
                # Nothing else holds memory to give back, yet the chunk does not fit: a chunk's peak can exceed
                # the pool where windowed layers hold two windows at once (a kept head that ends mid-chunk).
                # A smaller chunk is the only way forward.
                while start is None and chunk > 1:
                    chunk //= 2
                    start = self._try_place(seq, chunk, static, now)
            if start is None:
                blocked = True
                break
            waiting.pop_next()
            self._holding.pop(seq.sid, None)
            if fresh:  # a (re)start from scratch looked the prompt up in the prefix cache
                hit = seq.remote if start == LOADING else start
                self.counts["lookup_tokens"] += seq.prompt
                self.counts["hit_tokens"] += hit
                seq.cached_tokens += hit
                seq.last_cached_tokens = hit
            if start == LOADING:  # it rejoins the queue when its lower-tier blocks are in
                continue
            self.filled_tokens += start - in_gpu
            seq.computed = start
            seq.status = Status.RUNNING
            if seq.admitted_s is None:
                seq.admitted_s = now
            self._append_running(seq)
            n = min(seq.to_compute, chunk)
            if n > 0:
                scheduled[seq.sid] = (seq, n)
                budget -= n
        # Seats and memory stay short through a pure-decode run; a spent token budget does not (the
        # next iteration may be all decodes), so only the first two let a decode run be planned.
        self.admission_blocked = blocked

    # --- applying a step's explicit entries ------------------------------------------------------
    def _apply_entries(self, entries: list[tuple[Sequence, int]], t_end: float, done: list[Sequence]) -> None:
        """Advance the explicitly scheduled sequences by one iteration: register computed prompt blocks,
        record emitted tokens, fork parallel samples."""
        alloc = self.alloc
        forks = []
        for s, n in entries:
            if s.computed < s.prompt:
                alloc.on_computed(s.sid, s.req, min(s.computed + n, s.prompt))
                # newly cached prompt blocks can make the queue head's prefix hit, so it may fit now
                self.admission_blocked = False
            s.computed += n
            if s.computed == s.prompt + s.generated:
                s.generated += 1
                if s.first_token_s is None:
                    s.first_token_s = self.delivered(s, t_end, True)
                if s.generated == s.target:
                    done.append(s)
                if not s.forked:
                    forks.append(s)
        for s in forks:
            self._fork(s, t_end)

    # --- one iteration ----------------------------------------------------------------------------
    def schedule(self, now: float) -> IterationPlan:
        """Plan the next iteration and allocate its memory. An empty plan means only preemptions happened;
        call again at the same instant."""
        self._swap_out = self._swap_in = self._swap_out_calls = self._swap_in_calls = 0
        scheduled: dict[int, tuple[Sequence, int]] = {}
        if self.cfg.prompts_alone and self.waiting and not self.hold_admission:
            # vLLM V0 without chunked prefill: prompts first, in a step of their own (the running batch waits);
            # decodes run only in a step that admits none
            self._admit(self.cfg.max_num_batched_tokens, scheduled, now)
            if scheduled:
                return self._plan_prompts(scheduled, now)
            blocked, freed = self.admission_blocked, self._freed_marks()
            _, preempted = self._serve_running(*self._to_visit(), scheduled)
            # still blocked unless the pass freed memory (a preemption, a reclaimed head, a window left behind)
            self.admission_blocked = blocked and not preempted and self._freed_marks() == freed
            return self._plan(scheduled, now)
        budget, preempted = self._serve_running(*self._to_visit(), scheduled)
        self.admission_blocked = False
        if not preempted and not self.hold_admission:
            self._admit(budget, scheduled, now)
        return self._plan(scheduled, now)

    def _serve_running(
        self, todo: list[Sequence], lazy_of: dict | None, scheduled: dict[int, tuple[Sequence, int]]
    ) -> tuple[int, bool]:
        """Serve the running batch in admission order within the token budget: a decode takes one token, an
        unfinished prefill its next chunk. ``todo`` are the sequences visited (see :meth:`_to_visit`); lazy decoders between them
        take one token each without a visit. A sequence that cannot get memory reclaims what waiting
        sequences hold, then preempts victims until it fits or is itself the victim; a victim served
        earlier in the pass gives its tokens back. Returns (budget left, whether anything was preempted)."""
        budget, done_key, preempted = self._serve_seqs(todo, lazy_of, scheduled, self.cfg.max_num_batched_tokens, -1)
        return (self._serve_rest(budget, done_key) if budget else 0), preempted

    def _serve_seqs(
        self,
        seqs: list[Sequence],
        lazy_of: dict | None,
        scheduled: dict[int, tuple[Sequence, int]],
        budget: int,
        done_key: int,
    ) -> tuple[int, int, bool]:
        """Serve ``seqs`` (part of the pass, in admission order) one by one with ``budget`` tokens left, lazy
        decoders with keys up to ``done_key`` counted already. Returns (budget left, the key counted up to,
        whether anything was preempted); a budget of 0 ends the pass (the lazy decoders it leaves starve)."""
        preempted = False
        alloc = self.alloc
        lazy_between = self._lazy_between  # bound once: this loop is the hot path
        for s in seqs:
            if s.status != Status.RUNNING:
                continue  # preempted earlier in this pass
            c = lazy_between(done_key, s.key)
            if c >= budget:  # the budget runs out among the lazy decoders before s
                self._starve_after(done_key, budget)
                return 0, done_key, preempted
            budget -= c
            lazy = lazy_of.get(s.key) if lazy_of else None
            n = 1 if lazy is not None else min(s.to_compute, budget)
            while not alloc.allocate(s.sid, s.req, s.computed + n, computed=s.computed):
                if self._reclaim_waiting():
                    continue
                victim = self._victim()
                if victim.key < s.key:  # served earlier in this pass: refund its tokens
                    if self._is_lazy(victim):
                        budget += 1
                    elif victim.sid in scheduled:
                        budget += scheduled.pop(victim.sid)[1]
                self.preempt(victim, alloc.shortfall(s.sid, s.computed + n))
                preempted = True
                if victim is s:
                    break
            else:
                if lazy is not None:
                    self._grew(lazy)
                else:
                    scheduled[s.sid] = (s, n)
                budget -= n
            done_key = s.key
            if budget == 0:
                self._starve_after(done_key, 0)
                return 0, done_key, preempted
        return budget, done_key, preempted

    def _serve_rest(self, budget: int, done_key: int) -> int:
        """The pass visited its last sequence: the lazy decoders after ``done_key`` take one token each, as far
        as the budget goes. Returns the budget left."""
        c = self._lazy_between(done_key, _NO_KEY)
        if c > budget:
            self._starve_after(done_key, budget)
            return 0
        return budget - c

    def _plan(
        self,
        scheduled: dict[int, tuple[Sequence, int]],
        now: float,
        lazy_n: int = 0,
        lazy_kv: int = 0,
        lazy_contexts=(),
    ) -> IterationPlan:
        """The iteration of the ``scheduled`` (sequence, tokens) entries plus ``lazy_n`` lazy decoders
        attending to ``lazy_kv`` KV tokens in all (their contexts ``lazy_contexts``, for windowed reads)."""
        entries = list(scheduled.values())
        for seq, _ in entries:
            seq.last_scheduled_s = now
        shape = StepShape.of([(n, seq.computed) for seq, n in entries], self.windows, lazy_n, lazy_kv, lazy_contexts)
        return IterationPlan(
            entries,
            shape,
            lazy_n=lazy_n,
            swap_out_blocks=self._swap_out,
            swap_in_blocks=self._swap_in,
            swap_out_calls=self._swap_out_calls,
            swap_in_calls=self._swap_in_calls,
            copies=self.alloc.drain_copies(),
        )

    def _freed_marks(self) -> tuple[int, int]:
        """Counters that move when the running-batch pass frees memory other than by preempting."""
        return self.counts["reclaimed_partial"], self.alloc.freed_while_growing

    def _plan_prompts(self, scheduled: dict[int, tuple[Sequence, int]], now: float) -> IterationPlan:
        """A step of the ``scheduled`` prompts alone: the running batch does not advance in it."""
        return self._plan(scheduled, now)

    def update_after_step(self, plan: IterationPlan, t_end: float) -> StepResult:
        """The plan's iteration ran and ended at ``t_end``: advance every scheduled sequence. Finished
        sequences are returned still holding their memory (see :meth:`retire`)."""
        done: list[Sequence] = []
        self._apply_entries(plan.entries, t_end, done)
        self.filled_tokens += plan.shape.new_tokens
        self._iteration_done(done)
        return StepResult(done)


class SteppingScheduler(Scheduler):
    """The reference: every iteration visits every running sequence (no lazy state, no decode runs)."""
