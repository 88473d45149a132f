"""Time-weighted memory accounting and a down-sampled timeline for plots."""

from __future__ import annotations

from kvsim.allocators.base import MEMORY_CATEGORIES, Breakdown


class MemoryTracker:
    """Integrates each memory category over simulated time with the trapezoid rule between
    observations. The engine observes at every state change, so the integral is exact wherever
    memory changes linearly between events (token states during a decode run do)."""

    def __init__(self, pool_tokens: int, resolution_s: float):
        self.pool_tokens = pool_tokens
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
                for i, (v0, v1) in enumerate(zip(self._last, vals)):
                    self.integral[i] += (v0 + v1) * 0.5 * dt
        self._last, self.t_last = vals, t
        held = vals[0] + vals[1] + vals[2]
        if held > self.peak_held:
            self.peak_held = held
        if t - self._last_recorded >= self.resolution_s:
            self.timeline.append((t, *vals))
            self._last_recorded = t

    def add_decode_run(self, t0: float, t1: float, k: int, n: int, used_sum: int, internal_sum: int,
                       end: Breakdown) -> None:
        """Integrate a fast-forwarded run of k decode steps of n sequences over [t0, t1] (steps taken as
        equally long), starting from the state observed at t0.

        Matches what stepping would integrate: during step i token states go from start + n*i to
        start + n*(i+1), held slots are those allocated for that step (``used_sum``/``internal_sum``
        sum them over the steps), and external fragmentation stays what it was at t0.
        """
        assert self._last is not None and self.t_last == t0, "observe the run's start before adding it"
        token0, external = self._last[0], self._last[3]
        T = t1 - t0
        if T > 0 and k > 0:
            dt = T / k
            token = T * (token0 + n * k / 2)
            used = dt * used_sum
            internal = dt * internal_sum
            ext = T * external
            for i, v in enumerate((token, used - internal - token, internal, ext, T * self.pool_tokens - used - ext)):
                self.integral[i] += v
            self.shared_integral += self._shared * T
        self._last, self.t_last = None, t1
        self.observe(t1, end, self._shared)

    def busy(self, dt: float, batch_size: int) -> None:
        self.busy_s += dt
        self.batch_seq_s += dt * batch_size
        if batch_size > self.max_batch:
            self.max_batch = batch_size

    def finish(self) -> None:
        if self._last is not None and (not self.timeline or self.timeline[-1][0] != self.t_last):
            self.timeline.append((self.t_last, *self._last))

    def time_weighted_fractions(self) -> dict[str, float]:
        span = self.t_last - (self.t_first or 0.0)
        if span <= 0 or self._last is None:
            vals = self._last or (0, 0, 0, 0, self.pool_tokens)
            return {c: v / self.pool_tokens for c, v in zip(MEMORY_CATEGORIES, vals)}
        return {c: v / (span * self.pool_tokens) for c, v in zip(MEMORY_CATEGORIES, self.integral)}
