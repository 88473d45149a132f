"""Time-weighted memory accounting and a down-sampled timeline for plots."""

from __future__ import annotations

import operator

from kvsim.allocators.base import MEMORY_CATEGORIES, Breakdown


class MemoryTracker:
    """Integrates each memory category over simulated time with the trapezoid rule between
    observations. The engine observes at every state change, so the integral is exact wherever
    memory changes linearly between events (token states during a decode run do)."""

    def __init__(self, pool_tokens: int, resolution_s: float, token_slots: int = 1):
        self.pool_tokens = pool_tokens
        self.token_slots = token_slots  # slots one computed token fills (KVAllocator.token_slots)
        self.resolution_s = resolution_s
        self.integral = [0.0] * len(MEMORY_CATEGORIES)  # slot-seconds
        self.t_first: float | None = None
        self.t_last = 0.0
        self._last: tuple[int, ...] | None = None
        self.peak_held = 0  # most slots held by sequences at once
        self.timeline: list[tuple[float, ...]] = []  # (t, *categories) in slots
        self._last_recorded = -1e300
        self.busy_s = 0.0
        self.batch_seq_s = 0.0  # integral of running batch size over busy time
        self.max_batch = 0
        self.shared_integral = 0.0  # slot-seconds of KV stored once but used by several sequences
        self.peak_shared = 0
        self._shared = 0

    def observe(self, t: float, b: Breakdown, shared: int = 0) -> None:
        """Memory state at time t; ``shared`` = slots saved by sharing (constant between observations
        except at event instants, so it is integrated as a step function)."""
        if self._last is not None and t > self.t_last:
            self.shared_integral += self._shared * (t - self.t_last)
        self._shared = shared
        if shared > self.peak_shared:
            self.peak_shared = shared
        vals = b.as_tuple()
        if self.t_first is None:
            self.t_first = t
        elif self._last is not None:
            dt = t - self.t_last
            if dt > 0:
                self.integral = [acc + (v0 + v1) * 0.5 * dt for acc, v0, v1 in zip(self.integral, self._last, vals)]
        self._last, self.t_last = vals, t
        held = b.held
        if held > self.peak_held:
            self.peak_held = held
        if t - self._last_recorded >= self.resolution_s:
            self.timeline.append((t, *vals))
            self._last_recorded = t

    def add_run(
        self,
        t0: float,
        t1: float,
        step_weights: list[float],
        n: int,
        filled0: int,
        start: Breakdown,
        segments: list[tuple[int, Breakdown, int]],
        end: Breakdown,
    ) -> None:
        """Integrate a decode run over [t0, t1] exactly as stepping would, without stepping: step i lasts
        t1 - t0 scaled by ``step_weights`` (the steps' own durations), n sequences add a token each per
        step, and the pool is ``start`` until the first of ``segments`` (iteration offset, pool) and each
        segment's from its offset on, and so are the slots saved by sharing (segments: (offset, pool, shared)).
        Pools are given with no token states (filled = 0): during step i the tokens go from filled0 + n*i to
        filled0 + n*(i + 1), and stepping's trapezoid sees their mean."""
        assert self._last is not None and self.t_last == t0, "observe the run's start before adding it"
        T = t1 - t0
        if T > 0 and step_weights:
            scale = T / sum(step_weights)
            # the pool's state is constant between segment offsets; tokens grow by n per step
            bounds = [(0, start.as_tuple(), self._shared)] + [(o, b.as_tuple(), sh) for o, b, sh in segments]
            nc = len(MEMORY_CATEGORIES)
            acc = [0.0] * nc
            shared = 0.0
            for j, (o, state, sh) in enumerate(bounds):
                hi = bounds[j + 1][0] if j + 1 < len(bounds) else len(step_weights)
                if hi <= o:
                    continue
                dt = scale * sum(step_weights[o:hi])
                for c in range(nc):
                    acc[c] += dt * state[c]
                shared += dt * sh
            tokens = (filled0 + 0.5 * n) * T + n * scale * sum(
                map(operator.mul, range(len(step_weights)), step_weights)
            )
            tokens *= self.token_slots
            acc[0] += tokens
            acc[1] -= tokens
            for i in range(nc):
                self.integral[i] += acc[i]
            self.shared_integral += shared
        if segments:  # what sequences hold and share changes only at the segments' starts
            self._shared = segments[-1][2]
            self.peak_shared = max(self.peak_shared, max(sh for _, _, sh in segments))
            self.peak_held = max(self.peak_held, max(b.held for _, b, _ in segments))
        self._last, self.t_last = None, t1
        self.observe(t1, end, self._shared)

    def busy(self, dt: float, batch_size: int) -> None:
        self.busy_s += dt
        self.batch_seq_s += dt * batch_size
        if batch_size > self.max_batch:
            self.max_batch = batch_size

    @property
    def last(self) -> dict[str, int]:
        """The pool at the last observation, slots by category (the timeline may hold an earlier state of the
        same instant)."""
        vals = self._last or (0, 0, 0, 0, self.pool_tokens, 0, 0)
        return dict(zip(MEMORY_CATEGORIES, vals))

    def finish(self) -> None:
        if self._last is not None and (not self.timeline or self.timeline[-1][0] != self.t_last):
            self.timeline.append((self.t_last, *self._last))

    def time_weighted_fractions(self) -> dict[str, float]:
        span = self.t_last - (self.t_first or 0.0)
        if span <= 0 or self._last is None:
            vals = self._last or (0, 0, 0, 0, self.pool_tokens, 0, 0)
            return {c: v / self.pool_tokens for c, v in zip(MEMORY_CATEGORIES, vals)}
        return {c: v / (span * self.pool_tokens) for c, v in zip(MEMORY_CATEGORIES, self.integral)}
