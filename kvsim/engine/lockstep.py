"""Data-parallel ranks that step together.

In vLLM's data-parallel attention for MoE models every forward pass of the experts spans all ranks, so the
ranks of one replica run their iterations in lockstep: an iteration starts on every busy rank at once and
ends when the slowest rank's does (a rank with nothing scheduled runs an empty batch meanwhile). A rank's
TPOT therefore includes the prefill chunks other ranks compute.

A :class:`Lockstep` joins the engines of one replica: each engine reports the iteration it plans at an
instant (:meth:`Lockstep.step`) and gets back when it ends, the latest end of every rank that planned at the
same instant; an engine that extends the step moves the others' ends (they are listed in ``touched`` for
the driver to re-read). An idle rank that receives a request while the others are inside a step starts at
that step's end (:meth:`Lockstep.wake_time`). Ranks plan one iteration at a time (no decode runs).
"""

from __future__ import annotations


class Lockstep:
    """The ranks of one data-parallel replica. ``touched``: the driver's list of engines whose next event moved
    (see :func:`kvsim.engine.clock.drive`); ``index``: each engine's position in the driver's list."""

    def __init__(self, touched: list[int]):
        self.touched = touched
        self.index: dict[int, int] = {}  # id(engine) -> the driver's index
        self.start = -1.0  # the instant the current step began
        self.end = -1.0  # when it ends (the latest rank's end)
        self._members: list = []  # engines in the current step, and idle ones waking at its end

    def add(self, engine, index: int) -> None:
        self.index[id(engine)] = index
        engine.lockstep = self
        engine.sched.decode_runs = False  # every iteration is a step of its own

    def step(self, engine, now: float, dt: float) -> float:
        """``engine`` plans an iteration of ``dt`` seconds at ``now``: when the step ends (>= now + dt)."""
        if now != self.start:  # the first rank of a new step
            self.start, self.end = now, now + dt
            self._members = [engine]
            return self.end
        self._members.append(engine)
        if now + dt > self.end:
            self.end = end = now + dt
            for e in self._members:
                if e is not engine and e.next_time is not None and e.next_time < end:
                    e.stretch_to(end)
                    self.touched.append(self.index[id(e)])
        return self.end

    def wake_time(self, engine, t: float) -> float:
        """When an idle ``engine`` receiving work at ``t`` starts: ``t``, or the end of the step under way."""
        if self.start <= t < self.end:
            self._members.append(engine)  # a later rank extending this step moves its wake-up too
            return self.end
        return t
