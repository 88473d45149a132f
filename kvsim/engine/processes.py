"""The clock as SimPy processes: arrivals and engines on a :class:`simpy.Environment`, beside which a user's own
processes (clients, autoscalers, failures: kvsim.sim) run on the same simulated time.

It runs the engines exactly as the heap clock does (kvsim/engine/clock.py :func:`~kvsim.engine.clock.drive`),
bit for bit, by putting SimPy's events in the same order:

- times are absolute: an event at ``t`` is queued at ``t`` itself (SimPy's timeouts add a delay to ``now``,
  and ``now + (t - now)`` need not be ``t`` in floating point);
- an arrival goes before an engine event at the same instant (priority 0), and engines at the same instant
  go in index order (engine ``e`` has priority ``1 + e``);
- an engine's next event can move (an arrival wakes it, or cuts its decode run): its process waits on a wake-up
  that only the newest timer of that engine fires, so a superseded timer does nothing.

A request is routed when it arrives, by the arrivals process, so the router sees the engines as they are then.
"""

from __future__ import annotations

import heapq
import math
import warnings
from functools import partial
from typing import Any, Callable, Generator, Sequence as Seq

import simpy
from simpy.events import URGENT

from kvsim.engine.engine import Engine
from kvsim.engine.sequence import Sequence

ARRIVAL = 0  # an arrival's priority: before any engine at the same instant


class Clock(simpy.Environment):
    """A SimPy environment whose events can be queued at absolute times (seconds on the engines' clock)."""

    def __init__(self) -> None:
        super().__init__()
        self._processes: list[simpy.Process] = []

    def process(self, generator: Generator[simpy.Event, Any, Any]) -> simpy.Process:
        """Run ``generator`` as a SimPy process, which :meth:`close` ends if it still waits then."""
        proc = simpy.Process(self, generator)
        self._processes.append(proc)
        return proc

    def close(self) -> None:
        """The run is over: end every process still waiting (its generator closed, as the collector would close it
        later) and drop the queued events. A process's suspended frame refers to what it drives, which refers back
        to the process: without this a run's engines and sequences wait in reference cycles for the collector's
        next full pass (seconds on a large run, and its memory until then)."""
        procs, self._processes = self._processes, []
        for proc in procs:
            if proc.is_alive:
                try:
                    proc._generator.close()
                except Exception as e:  # a user's process failing in its clean-up: the run's results stand
                    warnings.warn(f"a process raised as the finished run closed it: {e!r}", RuntimeWarning, 2)
        self._queue.clear()

    def at(self, t: float, priority: int = 1) -> simpy.Event:
        """An event that fires at time ``t`` exactly, after events of a lower ``priority`` at ``t``."""
        ev = simpy.Event(self)
        ev._ok = True
        ev._value = None
        entry: Any = (t, priority, next(self._eid), ev)
        heapq.heappush(self._queue, entry)
        return ev

    def fire(self, ev: simpy.Event) -> None:
        """Trigger ``ev`` now, before anything else queued for this instant (a wake-up that moves no time)."""
        ev._ok = True
        ev._value = None
        self.schedule(ev, URGENT)


class EngineProcess:
    """One engine as a SimPy process: it waits for its next event, advances the engine, and waits again."""

    def __init__(self, driver: "Driver", index: int, engine: Engine):
        self.driver = driver
        self.index = index
        self.engine = engine
        self.version = 0
        self.stopped = False  # taken out of the run (a replica failed or removed): it takes no more events
        self.pending: float | None = None  # the time of the engine's queued event (None: idle)
        self.wake = driver.env.event()
        self.process = driver.env.process(self.run())

    def schedule(self) -> None:
        """Queue the engine's next event (after it moved); the one queued before, if any, is superseded."""
        self.version += 1
        t = self.engine.next_time if not self.stopped else None
        self.driver.busy += (t is not None) - (self.pending is not None)
        self.pending = t
        if t is not None:
            version = self.version
            timer = self.driver.env.at(t, 1 + self.index)
            timer.callbacks.append(partial(self._due, version))

    def _due(self, version: int, _: simpy.Event) -> None:
        if version == self.version:
            self.pending = None
            self.driver.busy -= 1
            self.driver.env.fire(self.wake)

    def stop(self) -> None:
        """Take the engine out of the run now: its queued event never fires, and nothing wakes it again."""
        self.stopped = True
        self.engine.done = True
        self.schedule()

    def run(self) -> Generator[simpy.Event, Any, None]:
        d = self.driver
        while True:
            yield self.wake
            self.wake = d.env.event()
            self.engine.advance(d.hint())
            self.schedule()
            d.stepped()


class Driver:
    """Arrivals and engines as SimPy processes on ``env`` (a :class:`Clock`): the arguments of
    :func:`kvsim.engine.clock.drive`, the same run. ``done`` fires when the heap clock would return: no engine
    has work and no arrival is due (``arrived``: how many requests were routed).

    For a fleet that changes while it runs (kvsim.sim): ``route`` may return None to hold a request (no replica
    serves yet; :meth:`deliver` sends it on later), :meth:`add_engine` adds an engine, ``EngineProcess.stop``
    takes one out, and ``keep_alive()`` (while true the run is not over) waits for replicas still starting."""

    def __init__(
        self,
        env: Clock,
        engines: Seq[Engine],
        arrivals: Seq[float],
        seqs: Seq[Sequence],
        route: Callable[[Sequence, float], int | None],
        horizon: float | None,
        hints: bool | None = None,
        touched: list[int] | None = None,
        keep_alive: Callable[[], bool] | None = None,
    ):
        self.env = env
        self.engines = engines
        self.arrivals = arrivals
        self.seqs = seqs
        self.route = route
        self.horizon = horizon
        self.touched = touched
        self.single = len(engines) == 1 if hints is None else hints
        self.arrived = 0
        self.keep_alive = keep_alive
        self.stepped_hook: Callable[[], None] | None = None  # called after every engine step (kvsim.sim)
        self.busy = 0  # engines with an event queued
        self.done = env.event()
        self._client: simpy.Event | None = None  # the arrivals process's wake-up while it waits for a client to be free
        self._arrivals_over = False
        n = len(seqs)
        while self.arrived < n and arrivals[self.arrived] <= 0.0:  # as the heap clock: before engines start
            i = self.arrived
            e = route(seqs[i], arrivals[i])
            if e is not None:
                engines[e].receive(seqs[i], arrivals[i])
            self.arrived += 1
        self.procs = [EngineProcess(self, e, eng) for e, eng in enumerate(engines)]
        for p in self.procs:
            p.engine.start(0.0, self.hint())
            p.schedule()
        self.arrivals_process = env.process(self._arrive())

    def add_engine(self, engine: Engine) -> EngineProcess:
        """Add ``engine`` (already the last of :attr:`engines`) to the run: it starts now."""
        proc = EngineProcess(self, len(self.procs), engine)
        self.procs.append(proc)
        engine.start(self.env.now, self.hint())
        proc.schedule()
        return proc

    def deliver(self, seq: Sequence, e: int) -> None:
        """Send ``seq`` (held by the router until now) to engine ``e``."""
        engine = self.engines[e]
        before = engine.next_time
        engine.receive(seq, self.env.now)
        if engine.next_time != before:
            self.procs[e].schedule()
        self.repush_touched()

    def cancel(self, seq: Sequence, e: int, reason: str, final: bool = True) -> None:
        """The client of ``seq`` (on engine ``e``) gives up now (:meth:`Engine.cancel`)."""
        engine = self.engines[e]
        before = engine.next_time
        engine.cancel(seq, self.env.now, reason, final)
        if engine.next_time != before:
            self.procs[e].schedule()

    def hint(self) -> float | None:
        """The next arrival, when the engine it goes to (the only one) may know it."""
        i = self.arrived
        a = self.arrivals
        return a[i] if self.single and i < len(a) and a[i] != math.inf else None

    def repush_touched(self) -> None:
        """Reschedule the engines that something outside their own step moved (listed in ``touched``)."""
        touched = self.touched
        if touched:
            for e in touched:
                p = self.procs[e]
                if p.engine.next_time != p.pending:
                    p.schedule()
            touched.clear()

    def stepped(self) -> None:
        """After an engine step: engines its hooks moved, a client freed by a completion, the end."""
        self.repush_touched()
        if self.stepped_hook is not None:
            self.stepped_hook()
        if self._client is not None and self.arrivals[self.arrived] != math.inf:
            client, self._client = self._client, None
            self.env.fire(client)
        self._check_done()

    def _check_done(self) -> None:
        if (
            not self.done.triggered
            and not self.busy
            and (self._arrivals_over or self._client is not None)
            and not (self.keep_alive is not None and self.keep_alive())
        ):
            self.done.succeed(self.arrived)

    def close(self) -> None:
        """The run is over: end its processes and drop the callbacks into what drove it (a fleet), which would
        otherwise keep the run's objects in reference cycles."""
        self.env.close()
        self.procs = []
        self.route = _no_route
        self.keep_alive = self.stepped_hook = None

    def check_done(self) -> None:
        """See whether the run is over (after something outside the engines changed: a replica became ready)."""
        self._check_done()

    def _arrive(self) -> Generator[simpy.Event, Any, None]:
        env, arrivals, seqs, engines = self.env, self.arrivals, self.seqs, self.engines
        n = len(seqs)
        while self.arrived < n:
            t = arrivals[self.arrived]
            if t == math.inf:  # its client is still waiting for an answer
                client = self._client = env.event()
                self._check_done()
                yield client
                continue
            if t > env.now:
                yield env.at(t, ARRIVAL)
            if self.horizon is not None and t > self.horizon and not self.busy:
                break
            i = self.arrived
            e = self.route(seqs[i], t)
            self.arrived += 1
            if e is not None:
                before = engines[e].next_time
                engines[e].receive(seqs[i], t)
                if engines[e].next_time != before:
                    self.procs[e].schedule()
            self.repush_touched()
        self._arrivals_over = True
        self._check_done()


def drive_processes(
    engines: Seq[Engine],
    arrivals: Seq[float],
    seqs: Seq[Sequence],
    route: Callable[[Sequence, float], int],
    horizon: float | None,
    hints: bool | None = None,
    touched: list[int] | None = None,
) -> int:
    """:func:`kvsim.engine.clock.drive` on SimPy: the same arguments, the same run, bit for bit."""
    env = Clock()
    driver = Driver(env, engines, arrivals, seqs, route, horizon, hints, touched)
    env.run(until=driver.done)
    driver.close()
    return driver.arrived


def _no_route(seq: Sequence, t: float) -> int | None:
    raise RuntimeError("the run is over: its driver routes no more requests")
