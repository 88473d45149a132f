"""One serving engine driven by an external clock: the unit a single-engine run and a fleet are made of.

The engine owns a scheduler (the serving state), an allocator, a latency model and a memory tracker. It
never reads a trace: a driver on a shared clock hands it arrivals, asks when its current iteration
ends, and advances it to that instant::

    engine.receive(seq, t)     # a request arrives at t (it waits in the inbox until the next iteration)
    engine.next_time           # when the iteration in flight ends, or the wake-up after idling; None: idle
    engine.advance()           # finish what ends at next_time, then plan the next iteration

Arrivals enter the scheduler at iteration boundaries only, as in vLLM. A *decode run* (many identical
iterations as one event) is cut at the first iteration boundary after an arrival: by the driver's
``next_arrival`` hint when it knows that the next request comes here (a single engine), or when the
arrival is received (a fleet, whose router decides at arrival time). Both give the same cut.

What a router may see it only reads (the engine alone writes them): :attr:`outstanding`, :attr:`queue_len`,
:attr:`kv_usage` and :meth:`cached_prefix_tokens` (the exact index that vLLM's KV-cache events give a router).

Multi-step scheduling (vLLM V0's ``--num-scheduler-steps N``, ``cfg.num_scheduler_steps``): once the batch is
all decodes, the engine commits to a *window* of N decode steps run back to back. Nothing is admitted and no
arrival is seen until the window ends; tokens reach clients only then, so a sequence that emits its last token
inside the window is delivered (``finish_s``, its client told) at the window's end. A sequence finishing inside
a window leaves the batch and frees its memory at once (vLLM keeps computing discarded tokens for it until the
window ends: that GPU work is not priced, except when every sequence has finished, where the window's
remaining steps still take their time). Steps with a prompt chunk are single steps, as in vLLM 0.6.

Async scheduling (vLLM V1's ``--async-scheduling``, ``cfg.async_scheduling``): the engine schedules each step while
the one before it runs on the GPU, so the scheduler takes in a request that arrives during a step only when that
step ends, for the step after the next (vLLM's ``EngineCore.step_with_batch_queue``: the queue holds two steps).
An arrival is therefore seen at the end of the first step that *starts* at or after it; with nothing running (the
engine idle, or its last sequences just finished) it is seen at once.

Disaggregated serving adds two roles. A *prefill* engine (``handoff`` set) hands every finished sequence
to its driver and keeps its KV until :meth:`release` (the decode side has read it). A *decode* engine
(``kv_loader`` set) receives sequences whose ``remote`` prompt tokens it loads before running them (see
``Scheduler.settle_transfers``). Either may wait with nothing running for memory that a transfer holds: it
then wakes at the next load's end, at a release, or at an arrival.
"""

from __future__ import annotations

from collections import Counter

from dataclasses import dataclass
from typing import Callable, Protocol

from kvsim.allocators.base import KVAllocator
from kvsim.config import SchedulerConfig
from kvsim.frontend import Intake
from kvsim.engine.incremental import IncrementalScheduler
from kvsim.engine.memory_tracker import MemoryTracker
from kvsim.engine.preemption import VictimPolicy, lifo
from kvsim.engine.scheduler import IterationPlan, SteppingScheduler
from kvsim.engine.sequence import Sequence, Status
from kvsim.engine.step_gaps import StepGaps
from kvsim.errors import ConfigError
from kvsim.latency.base import LatencyModel
from kvsim.trace.request import Request


class StepObserver(Protocol):
    """Called after each executed iteration group, before finished sequences are freed. Sequences'
    ``computed`` already include the group's tokens."""

    def __call__(
        self,
        start_s: float,
        duration_s: float,
        batch: list[tuple[Sequence, int]],
        steps: int,
        copies: list[tuple[str, int, int]],
        allocator: KVAllocator,
    ) -> None: ...


@dataclass(frozen=True)
class SwapTiming:
    """Cost of copying KV between GPU and host: a fixed time per copy call, then bytes over PCIe."""

    bytes_per_slot: int
    pcie_bandwidth: float  # bytes/s, one direction
    per_block_s: float = 10e-6  # per copy call (one page: a block, or a split layout's larger page)

    def seconds(self, units: int, unit_slots: int, calls: int | None = None) -> float:
        """Moving ``units`` copy units of ``unit_slots`` token slots each in ``calls`` copies (default:
        one per unit)."""
        if units <= 0:
            return 0.0
        calls = units if calls is None else calls
        return calls * self.per_block_s + units * unit_slots * self.bytes_per_slot / self.pcie_bandwidth


def loop_delivery(intake: Intake, deliver_s: float) -> Callable[..., float]:
    """The scheduler's ``delivered`` in front of a V1 API server: the client gets a token of ``seq`` the engine
    made at ``t`` once ``intake``'s event loop is through the work that became ready before (:meth:`Intake.delivered`:
    handlers, earlier iterations' streaming), ``deliver_s`` later; the wait for the loop counts in the first
    token's front-end time. (A function, not a bound method of the engine: the scheduler holding its engine would
    make every run a reference cycle, its objects freed only by the collector's next full pass.)"""

    def delivered(seq: Sequence, t: float, first: bool = False) -> float:
        free = intake.delivered(seq.api_server, t)
        if first:
            seq.frontend_s += free - t
        return free + deliver_s

    return delivered


class Engine:
    """One engine on a clock shared with its driver (seconds after the run's first arrival)."""

    def __init__(
        self,
        allocator: KVAllocator,
        latency: LatencyModel,
        cfg: SchedulerConfig,
        victim_policy: VictimPolicy = lifo,
        *,
        first_sample_id: int,
        resolution_s: float,
        horizon: float | None = None,
        observer: StepObserver | None = None,
        fast_forward: bool = True,
        swap_timing: SwapTiming | None = None,
        on_complete: Callable[[int, float], None] | None = None,
        handoff: Callable[[Sequence, float], None] | None = None,
        kv_loader: Callable[[Sequence, int, float], float] | None = None,
        on_finished: Callable[[list[Sequence]], None] | None = None,
        on_dropped: Callable[[Sequence], None] | None = None,
    ):
        self.alloc = allocator
        self.latency = latency
        self.cfg = cfg
        # fast_forward=False: the stepping reference the incremental scheduler is tested against
        kind = IncrementalScheduler if fast_forward else SteppingScheduler
        self.sched = kind(cfg, allocator, victim_policy, first_sample_id, windows=latency.windows)
        self.horizon = horizon
        self.observer = observer
        self.swap_timing = swap_timing
        # called with the number of requests that finished or were rejected here, and the time; a prefill
        # engine's finished requests go on to a decode engine and are not counted
        self.on_complete = on_complete
        self.handoff = handoff  # prefill role: called with each finished sequence and the time it finished
        self.on_finished = on_finished  # called with the sequences each iteration finished (kvsim.sim's metrics)
        self.on_dropped = on_dropped  # called with each sequence rejected or cancelled here (kvsim.sim's calls)
        self.sched.park_finished = handoff is not None
        self.sched.kv_loader = kv_loader
        self.memory = MemoryTracker(allocator.pool_tokens, resolution_s=resolution_s, token_slots=allocator.token_slots)
        self.swap_s = 0.0
        self.steps = self.events = 0
        self.gaps = StepGaps()  # the steps' durations as inter-token latencies (step_gaps.py)
        self.received: list[Sequence] = []  # every sequence handed to this engine, in arrival order
        self.now = 0.0  # the instant of the engine's last event
        self.next_time: float | None = None
        self.done = False  # past the horizon: takes no more events
        self._started = False
        self._inbox: list[tuple[float, Sequence]] = []  # arrived, not yet seen by the scheduler
        self._inbox_head = 0
        self._plan: IterationPlan | None = None
        self._dt = 0.0  # seconds the iteration in flight takes
        self._filled0 = 0
        self._cuttable = False  # the decode run in flight ends at the next arrival (not known when planned)
        self._idle_observed = False  # the start of the current idle spell is in the memory timeline
        # requests received and not yet finished or rejected (vLLM's running + waiting requests): what a router
        # sees; only the engine writes it (a plain attribute: routers read every replica's for every request)
        self.outstanding = 0
        self._stalls = 0
        self.lockstep = None  # the data-parallel ranks this engine steps with (kvsim.engine.lockstep), if any
        # requests pass the API server first (a decode engine's own: vLLM's proxy sends it the request again once the
        # prefill is done, and its API server streams the output); the client hears of a finish (and sends its
        # next request) a delivery later
        fe = cfg.api_server
        self._intake = Intake(fe) if fe.active else None
        self._decode_side = kv_loader is not None
        self._deliver_s = fe.deliver_s
        # a token waits for its API server's event loop to finish the intake of requests sent before it
        self._loop_bound = self._intake is not None and self._intake.loop_bound
        self._streams = self._loop_bound and fe.streams_on_loop  # streaming each iteration's tokens takes the loop
        # steps of the decode run in flight already streamed (a request sent during it: those that ended before),
        # and when the last of them ended
        self._streamed_steps = 0
        self._streamed_until = 0.0
        self._run_steps_s: list[float] | None = None  # the decode run in flight's step durations, once asked for
        if self._loop_bound:
            self.sched.delivered = loop_delivery(self._intake, self._deliver_s)
        # multi-step scheduling: decode steps left in the window in flight (0: none), the seconds of its last
        # step, and the sequences finished in it, delivered at its end with their completed requests' count
        self._window = cfg.num_scheduler_steps
        if self._window > 1 and (handoff is not None or kv_loader is not None):
            raise ConfigError(
                "--num-scheduler-steps: multi-step scheduling is not modelled for disaggregated "
                "prefill and decode engines"
            )
        self._window_left = 0
        self._window_step_s = 0.0
        self._cancels: list[tuple[Sequence, str, bool]] = []  # (sequence, reason, final) cancelled, not yet dropped
        self._undelivered: list[Sequence] = []
        self._undelivered_n = 0
        # async scheduling: arrivals up to this instant are seen at the current boundary (the start of the step
        # that just ended; the boundary itself after idling)
        self._async = cfg.async_scheduling
        self._seen_until = 0.0

    # --- what a router sees ---------------------------------------------------------------------
    @property
    def queue_len(self) -> int:
        """Requests waiting to be scheduled (arrived, not running)."""
        return len(self._inbox) - self._inbox_head + len(self.sched.waiting)

    @property
    def kv_usage(self) -> float:
        """Fraction of the KV pool held by sequences (vLLM's kv_cache_usage metric)."""
        return self.alloc.used_slots / self.alloc.pool_tokens if self.alloc.pool_tokens else 0.0

    def cached_prefix_tokens(self, request: Request) -> int:
        """Leading prompt tokens of ``request`` whose KV this engine's prefix cache holds now."""
        return self.alloc.cached_prefix_tokens(request)

    def can_hold(self, request: Request) -> bool:
        """Could this engine ever run the request (seats, length limit, its KV pool)?"""
        return self.sched.rejection(request) is None

    # --- driving -------------------------------------------------------------------------------
    def receive(self, seq: Sequence, t: float, transit: float = 0.0) -> None:
        """``seq`` arrives at ``t`` (not before the engine's last event) and reaches the scheduler once the API
        server has taken it in (at once without one). An idle engine wakes then; a decode run planned without
        knowing of this arrival ends at the first iteration boundary after it. ``transit``: seconds after ``t``
        before the API server can start on it (a decode engine's request: the prefill side's response reaching
        vLLM's proxy, which then sends it here)."""
        if self._intake is not None:
            intake = self._intake
            if self._streams and self._plan is not None and self._plan.steps > 1:
                self._stream_before(t)
            joins = intake.frontend.batched and intake.busy_at(t)
            ready = intake.ready(seq.req.prompt_tokens, t, self.now, transit)
            seq.api_server = intake.last_server
            if self._decode_side:  # the prefill side's front-end time (its response's transit included), then this
                seq.frontend_s += ready - t - transit + self._deliver_s  # intake and the first token's delivery
            else:
                seq.frontend_s = ready - t + self._deliver_s
            if joins:  # it extends the burst in progress: the burst's earlier requests now come with it
                inbox = self._inbox
                for i in range(len(inbox) - 1, self._inbox_head - 1, -1):
                    r, s0 = inbox[i]
                    if r < t:
                        break  # reached the engine before this request was sent
                    s0.frontend_s += ready - r
                    inbox[i] = (ready, s0)
            elif intake.loop_bound:
                seq.tokenized_s = intake.last_tokenized
                self._behind_loop(seq.api_server, t + transit, intake.last_handled)
            t = ready
        elif transit:  # (in the order received, as the API server hands requests on)
            t = max(t + transit, self._inbox[-1][0]) if self._inbox_head < len(self._inbox) else t + transit
        self._inbox.append((t, seq))
        self.received.append(seq)
        self.outstanding += 1
        if self.done or not self._started:
            return
        if self.next_time is None:
            self._wake_for(t)
        elif self._cuttable:
            self._cuttable = False
            self._cut_run_at(t)

    def _behind_loop(self, server: int, t: float, handled: float) -> None:
        """API server ``server``'s event loop has work, ready at ``t`` (a request's handler, an iteration's
        tokens to stream), that keeps it busy until ``handled``: ahead of the hand-off to the engine of every
        request on that server whose prompt comes back from the tokenizer after ``t`` (Intake), which therefore
        reaches the engine no sooner; and the engine core reads its input in order, so none after such a
        request reaches it before it."""
        inbox = self._inbox
        lo = len(inbox)
        for i in range(len(inbox) - 1, self._inbox_head - 1, -1):
            r, s0 = inbox[i]
            if r <= t:
                break  # handed on before this request was sent
            if r < handled and s0.api_server == server and s0.tokenized_s > t:
                s0.frontend_s += handled - r
                inbox[i] = (handled, s0)
                lo = i
        last = None
        for i in range(lo, len(inbox)):
            r, s0 = inbox[i]
            if last is not None and r < last:
                s0.frontend_s += last - r
                inbox[i] = (last, s0)
            else:
                last = r

    def cancel(self, seq: Sequence, t: float, reason: str, final: bool = True) -> None:
        """The client of ``seq`` gives up at ``t`` (not before the engine's last event): as vLLM aborts a request,
        the scheduler drops it at the first iteration boundary at or after ``t`` (a multi-step window's end) and
        its KV is freed; one that finishes by then is not cancelled. A decode run planned past ``t`` is cut
        there, as for an arrival. ``final`` False: the request is not done (it was sent again elsewhere), so
        its drop is not counted as a completion."""
        self._cancels.append((seq, reason, final))
        if self.done or not self._started:
            return
        if self.next_time is None:
            self._wake_for(t)
            return
        plan = self._plan
        if plan is not None and plan.decode_run and not self._window_left and self.lockstep is None:
            self._cut_run_at(t)

    def _cut_run_at(self, t: float) -> None:
        """The decode run in flight ends at the first boundary where the scheduler sees what happens at ``t`` (an
        arrival, a cancel), if that is before its planned end."""
        plan = self._plan
        assert plan is not None
        k = self._steps_to_see(plan, t, plan.steps)
        if k < plan.steps:
            plan.steps = k
            self._dt = self.latency.decode_run_time(plan.lazy_n, plan.shape.kv_tokens, k, *plan.context_args)
            self.next_time = self.now + self._dt

    def _apply_cancels(self) -> None:
        """Drop the cancelled sequences the scheduler can let go of now; the others wait for a later boundary."""
        keep = []
        dropped = moved = 0
        for seq, reason, final in self._cancels:
            if seq.status in (Status.REJECTED, Status.CANCELLED) or seq.request_finished:
                continue  # it ended first (all its samples)
            if self._take_from_inbox(seq) or self.sched.abort(seq):
                seq.status, seq.reason = Status.CANCELLED, reason
                for sample in seq.samples:
                    if sample.status == Status.CANCELLED:
                        sample.reason = reason
                dropped += final
                moved += not final
                if self.on_dropped is not None:
                    self.on_dropped(seq)
            else:
                keep.append((seq, reason, final))
        self._cancels = keep
        if dropped or moved:
            self._observe(self.now)
            self._completed(dropped)
            self._completed(moved, final=False)

    def _take_from_inbox(self, seq: Sequence) -> bool:
        inbox = self._inbox
        for i in range(self._inbox_head, len(inbox)):
            if inbox[i][1] is seq:
                del inbox[i]
                return True
        return False

    def release(self, sid: int, t: float) -> None:
        """The parked KV of sequence ``sid`` has been read by a decode engine at ``t`` (not before the engine's
        last event): its memory is free from the first iteration boundary at or after ``t``."""
        self.sched.release_at(sid, t)
        if self._started and not self.done and self.next_time is None:
            self._wake_for(t)

    def _steps_within(self, plan: IterationPlan, budget_s: float, k: int) -> int:
        """Steps of the decode run (at most k) up to the first boundary at or after ``budget_s`` seconds."""
        return self.latency.decode_steps_until(plan.lazy_n, plan.shape.kv_tokens, budget_s, k, *plan.context_args)

    def _steps_to_see(self, plan: IterationPlan, arrival: float, k: int) -> int:
        """Steps of the decode run (at most k) after which the scheduler sees a request arriving at ``arrival``:
        up to the first boundary at or after it, or with async scheduling one step more (the step scheduled
        while the arrival came in runs first)."""
        if not self._async:
            return self._steps_within(plan, arrival - self.now, k)
        if arrival <= self.now:
            return 1
        return min(k, self._steps_within(plan, arrival - self.now, k) + 1)

    def stretch_to(self, end: float) -> None:
        """A data-parallel rank in lockstep: the iteration in flight (or the wake-up) now ends at ``end``."""
        if self._plan is not None:
            self._dt = end - self.now
        self.next_time = end

    def _wake_for(self, t: float) -> None:
        if self.lockstep is not None:
            t = self.lockstep.wake_time(self, t)
        if self.horizon is not None and t > self.horizon:
            return  # it would arrive after the end
        if not self._idle_observed:
            self._idle_observed = True
            self._observe(self.now)
        self.next_time = self.now + (t - self.now)

    def start(self, now: float, next_arrival: float | None = None) -> None:
        """Begin at ``now``: see the arrivals up to now and plan the first iteration. ``next_arrival``: the
        time of the next request that will come to this engine, when the driver knows it."""
        self.now = self._seen_until = now
        self._started = True
        self._begin(next_arrival)

    def advance(self, next_arrival: float | None = None) -> None:
        """Move to :attr:`next_time`: finish the iteration in flight (or wake up), then plan the next one."""
        t = self.next_time
        if self._plan is not None:
            self._finish(t)
        else:  # waking up after idling
            self.now = self._seen_until = t
            self._idle_observed = False
            self._observe(t)
        self._begin(next_arrival)

    def _release_arrivals(self) -> None:
        now, inbox, i = self.now, self._inbox, self._inbox_head
        sched = self.sched
        if (sched.releases or sched.loading) and sched.settle_transfers(now):
            self._observe(now)
        # async scheduling: while sequences run, the step starting now was scheduled when the last one began
        seen = self._seen_until if self._async and sched.running else now
        while i < len(inbox) and inbox[i][0] <= seen:
            seq = inbox[i][1]
            i += 1
            if not sched.add_arrival(seq):
                self._completed(1)
                if self.on_dropped is not None:
                    self.on_dropped(seq)
        if i == len(inbox):
            inbox.clear()
            i = 0
        self._inbox_head = i

    def _run_weights(self, plan: IterationPlan) -> list[float] | None:
        """The durations of the steps of ``plan`` (the iteration in flight) in proportion (None: one step, or equal
        steps), priced once per plan: a request sent during a decode run asks before its end does, and a cut
        run keeps the leading steps of the planned ones."""
        if not plan.decode_run:
            return None
        w = self._run_steps_s
        if w is None or len(w) < plan.steps:
            w = self._run_steps_s = self.latency.decode_step_times(
                plan.num_seqs, plan.shape.kv_tokens, plan.steps, *plan.context_args
            )
        return w if len(w) == plan.steps else w[: plan.steps]

    def _stream_before(self, t: float) -> None:
        """A request is sent at ``t`` while a run of several steps is in flight: the API servers' event loops
        stream the steps that ended by then before they run its handler (work runs in the order it became
        ready); the rest are streamed when the run ends."""
        plan = self._plan
        assert plan is not None
        weights = self._run_weights(plan) or [1.0] * plan.steps
        scale = self._dt / sum(weights)
        s0, ends, end = self._streamed_steps, [], self.now
        for w in weights:
            end += w * scale
            if end > t:
                break
            ends.append(end)
        if len(ends) > s0:
            start = self._streamed_until if s0 else self.now
            self._stream(plan.num_seqs, start, ends[-1], len(ends) - s0, weights[s0 : len(ends)])
            self._streamed_steps, self._streamed_until = len(ends), ends[-1]

    def _stream(self, tokens: int, start: float, end: float, steps: int, weights: list[float] | None) -> None:
        """The iterations from ``start`` to ``end`` (their durations in proportion to ``weights``) made ``tokens``
        tokens each: the API servers' event loops stream them (:meth:`Intake.streamed`), ahead of hand-offs whose
        prompts come back later."""
        done = self._intake.streamed(tokens, start, end, steps, weights)
        if self._inbox_head < len(self._inbox):
            for server, free in enumerate(done):
                if free > end:
                    self._behind_loop(server, end, free)

    def _completed(self, n: int, final: bool = True, t: float | None = None, heard: float | None = None) -> None:
        """``n`` requests left this engine at ``t`` (default :attr:`now`); ``final``: they are done (not handed on);
        ``heard``: when their clients hear of it (default: a delivery after ``t``)."""
        if n:
            self.outstanding -= n
            if final and self.on_complete is not None:
                if heard is None:
                    heard = (self.now if t is None else t) + self._deliver_s
                self.on_complete(n, heard)  # when the clients hear of it

    def _completed_as_delivered(self, finished: list[Sequence], n: int) -> None:
        """The ``n`` requests completed by ``finished`` (stamped with when their clients get the last token) leave
        the engine; their clients hear of them then. One API server streams every finish of a step at one time;
        with several, each server's event loop may hold its own back (a request's samples share its server)."""
        if self._intake.frontend.servers == 1:
            self._completed(n, heard=finished[0].finish_s)
            return
        heard = {id(s.parent or s): s.finish_s for s in finished if (s.parent or s).request_finished}
        for t, k in Counter(heard.values()).items():
            self._completed(k, heard=t)

    def _deliver_window(self, t: float) -> None:
        """The multi-step window ends at ``t`` (not before :attr:`now`): its finished sequences reach their clients."""
        self._window_left = 0
        delivered = self.sched.delivered
        undelivered, self._undelivered = self._undelivered, []
        for seq in undelivered:
            seq.finish_s = delivered(seq, t)
        n, self._undelivered_n = self._undelivered_n, 0
        if self._loop_bound and n:
            self._completed_as_delivered(undelivered, n)
        else:
            self._completed(n, t=t)

    def _observe(self, t: float) -> None:
        self.memory.observe(t, self.sched.memory_breakdown(), self.alloc.shared_slots)

    def _begin(self, next_arrival: float | None) -> None:
        """At self.now: release arrivals, then plan and price the next iteration (or go idle)."""
        sched = self.sched
        now = self.now
        self.next_time = None
        self._plan = None
        self._cuttable = False
        while True:
            if self._window_left and not sched.running:
                if self._undelivered:  # all finished inside the window: its remaining steps still run
                    self._finish_window_alone()
                    return
                self._window_left = 0  # (a window emptied by preemption ends here)
            sched.hold_admission = self._window_left > 0
            if not sched.hold_admission:  # a multi-step window sees no arrival (nor cancel) before it ends
                self._release_arrivals()
                if self._cancels:
                    self._apply_cancels()
            if self.horizon is not None and now >= self.horizon:
                self.done = True
                return
            if sched.idle:
                self._wait()
                return
            plan = sched.schedule(now)
            if not plan.empty:
                break
            if not sched.running and sched.transfers_pending:
                self._wait()  # the queue waits for memory a KV transfer holds
                return
            self._stalls += 1  # only preemptions happened; reschedule at the same instant
            if self._stalls > len(self.received) + len(sched.samples) + 2:
                raise RuntimeError(
                    f"engine stalled at t={now}: nothing can run "
                    f"({len(sched.running)} running, {len(sched.waiting)} waiting)"
                )
        self._stalls = 0
        if (
            self._window > 1
            and not self._window_left
            and (plan.decode_run or all(n == 1 and seq.computed >= seq.prompt for seq, n in plan.entries))
        ):
            self._window_left = self._window  # all decodes: a multi-step window begins
        dt = self._duration(plan, now, next_arrival)
        if self._window_left:  # the length of its last step, which a window whose sequences all finish repeats
            self._window_step_s = (
                dt
                if plan.steps == 1
                else dt
                - self.latency.decode_run_time(plan.lazy_n, plan.shape.kv_tokens, plan.steps - 1, *plan.context_args)
            )
        if self.lockstep is not None:
            dt = self.lockstep.step(self, now, dt) - now
        self._observe(now)
        self._filled0 = sched.filled_tokens
        self._plan = plan
        self._run_steps_s = None
        self._dt = dt
        self.next_time = now + dt

    def _wait(self) -> None:
        """Nothing to run now: wake at the next arrival already received or the next transfer event."""
        times = [
            t
            for t in (
                self._inbox[self._inbox_head][0] if self._inbox_head < len(self._inbox) else None,
                self.sched.next_transfer,
            )
            if t is not None
        ]
        if times:
            self._wake_for(max(min(times), self.now))

    def _duration(self, plan: IterationPlan, now: float, next_arrival: float | None) -> float:
        """Seconds the plan takes; a decode run is first cut at the next arrival (when known) and the horizon."""
        lat = self.latency
        if plan.decode_run:
            k = plan.max_steps
            if self._window_left:  # arrivals wait for the window's end
                k = min(k, self._window_left)
            else:
                if self._inbox_head < len(self._inbox):  # taken in by the API server (or async), not yet seen
                    k = self._steps_to_see(plan, self._inbox[self._inbox_head][0], k)
                waiting = self.sched.waiting
                if not waiting or waiting.overtakes:  # (fcfs: an arrival behind a blocked head changes nothing)
                    if next_arrival is not None and self._intake is None:
                        k = self._steps_to_see(plan, next_arrival, k)
                    else:  # (behind an API server the driver's hint is when the request was sent, not when it comes)
                        self._cuttable = True
            if self.sched.transfers_pending:  # a load or release that ends may let a request in
                t = self.sched.next_transfer
                if t is not None:
                    k = self._steps_within(plan, t - now, k)
            if self.horizon is not None:
                k = self._steps_within(plan, self.horizon - now, k)
            plan.steps = k
            return lat.decode_run_time(plan.lazy_n, plan.shape.kv_tokens, k, *plan.context_args)
        dt = lat.step_time(plan.shape)
        if self.sched.cfg.kv_load_layers:  # a layer-by-layer load still arriving holds its prefill back
            for seq, _ in plan.entries:
                if seq.loaded_s > now + dt:
                    dt = seq.loaded_s - now
        if self.swap_timing is not None and (plan.swap_out_blocks or plan.swap_in_blocks):
            # Swaps are synchronous copies before the forward pass (vLLM V0): they stall it.
            unit = self.alloc.copy_unit
            swap_s = self.swap_timing.seconds(
                plan.swap_out_blocks, unit, plan.swap_out_calls
            ) + self.swap_timing.seconds(plan.swap_in_blocks, unit, plan.swap_in_calls)
            self.swap_s += swap_s
            dt += swap_s
        return dt

    def _finish(self, t1: float) -> None:
        """The iteration (group) in flight ends at ``t1``."""
        sched, plan, now = self.sched, self._plan, self.now
        self._plan = None
        self._cuttable = False
        dt = self._dt
        if self._async and self._inbox_head < len(self._inbox):
            # the start of the group's last step, when the step after it was scheduled (only read while an
            # arrival waits: nothing is received between a step's end and the next plan)
            self._seen_until = (
                now
                if plan.steps == 1
                else now
                + self.latency.decode_run_time(plan.lazy_n, plan.shape.kv_tokens, plan.steps - 1, *plan.context_args)
            )
        n = plan.num_seqs
        weights = self._run_weights(plan)
        if self._streams:  # before the step's first tokens and finishes are delivered: they wait behind it
            s0, self._streamed_steps = self._streamed_steps, 0
            if s0 < plan.steps:  # (the run's steps before a request sent during it were streamed then)
                rest = weights[s0:] if weights is not None else None
                self._stream(n, self._streamed_until if s0 else now, t1, plan.steps - s0, rest)
        result = sched.update_after_step(plan, t1)
        if self.observer is not None:
            self.observer(now, dt, sched.batch(plan), plan.steps, plan.copies, self.alloc)
        if weights is not None:
            self.memory.add_run(
                now, t1, weights, n, self._filled0, plan.start_breakdown, result.segments, sched.memory_breakdown()
            )
            self.gaps.add_run(now, weights, n)
        else:
            self.gaps.add(now, dt, plan.shape.decodes)
        self.memory.busy(dt, n)
        self.steps += plan.steps
        self.events += 1
        self.now = t1
        self._observe(t1)
        complete = sched.retire(result.finished, t1)
        if self._window_left:  # multi-step: what finished is delivered when the window ends
            self._undelivered += result.finished
            self._undelivered_n += complete
            self._window_left -= plan.steps
            if not self._window_left:
                self._deliver_window(t1)
        elif self._loop_bound and complete and self.handoff is None:  # the clients hear when each server streams it
            self._completed_as_delivered(result.finished, complete)
        else:
            self._completed(complete, final=self.handoff is None)
        if result.finished:
            self._observe(t1)
            if self.on_finished is not None:
                self.on_finished(result.finished)
            if self.handoff is not None:
                for seq in result.finished:
                    self.handoff(seq, t1)

    def _finish_window_alone(self) -> None:
        """Every sequence of the multi-step window has finished: its remaining steps compute only discarded
        tokens, each as long as its last step; the engine is busy until then (an arrival waits) and delivers."""
        end = self.now + self._window_left * self._window_step_s
        self._deliver_window(end)
        self.next_time = end if self.horizon is None or end <= self.horizon else None

    def close(self) -> None:
        """The run ended: close the memory timeline and bring every sequence's fields up to date."""
        if self._undelivered:  # the horizon fell inside a multi-step window
            self._deliver_window(self.now)
        self.memory.finish()
        self.sched.finalize()

    def detach(self) -> None:
        """Drop the hooks into what drove the run (a fleet's state, the disaggregated pools, the data-parallel
        ranks it stepped with) once it is over: they would keep the run's objects in reference cycles, freed only
        by the collector's next full pass instead of by reference counting."""
        self.on_complete = self.handoff = self.on_finished = self.on_dropped = None
        self.sched.kv_loader = None
        self.lockstep = None

    def counters(self) -> dict:
        """Allocator and scheduler totals for the run summary."""
        extra = {**self.alloc.counters(), **{k: v for k, v in self.sched.counts.items() if k != "preemptions"}}
        if self.swap_timing is not None:
            extra["swap_time_s"] = self.swap_s
        if self._loop_bound and self.now > 0:  # the share of the run its API servers' event loops were busy
            extra["api_server_busy"] = self._intake.busy_s / (self._intake.frontend.servers * self.now)
        return extra
