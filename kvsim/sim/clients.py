"""Requests that processes send (:meth:`Fleet.send`) and clients built from them: think time, timeouts,
retries, cancellation.

    def client(fleet, rng):
        for _ in range(20):
            call = fleet.send(prompt_tokens=800, output_tokens=200)
            yield call.done | fleet.env.timeout(30)  # the answer, or 30 s: whichever comes first
            if not call.ended:
                fleet.cancel(call)  # it gave up: the replica frees the request's KV at its next iteration
            yield fleet.env.timeout(rng.exponential(5.0))  # think

    fleet.client(client(fleet, np.random.default_rng(0)))

A call ends once: finished, rejected, cancelled, or lost with a failed replica. Its request is a row of the
run's requests table like the trace's (status ``cancelled`` for those given up on), so every request sent is
accounted for exactly once.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Generator, Iterator

import simpy

from kvsim.engine.sequence import Sequence, Status
from kvsim.errors import ConfigError
from kvsim.validation import NON_NEGATIVE, POSITIVE, require


def last_finish(seq: Sequence) -> float:
    """When request ``seq`` finished: its last sample's finish (seconds on the clock)."""
    return max(s.finish_s for s in (seq, *seq.samples) if s.finish_s is not None)


class Call:
    """A request a process sent. ``done`` (a SimPy event) fires when it ends; ``status`` is then finished,
    rejected, cancelled or lost."""

    def __init__(self, fleet: Any, sid: int, sent_s: float):  # fleet: kvsim.sim.fleet.Fleet
        self._fleet = fleet
        self.sid = sid  # the request's row in the run's requests table
        self.sent_s = sent_s  # seconds on the fleet's clock
        self.done: simpy.Event = fleet.env.event()

    @property
    def seq(self) -> Sequence:
        """The request's sequence now (a retry after a failure is a fresh one)."""
        return self._fleet.seqs[self.sid]

    @property
    def ended(self) -> bool:
        return self.done.triggered

    @property
    def status(self) -> str:
        if self.sid in self._fleet.lost_requests:
            return "lost"
        return self.seq.status.value

    @property
    def ttft_s(self) -> float:
        """Seconds from sending to the first token (NaN before it)."""
        first = self.seq.first_token_s
        return math.nan if first is None else first - self.sent_s

    @property
    def e2e_s(self) -> float:
        """Seconds from sending to the last token of its last sample (NaN unless finished)."""
        s = self.seq
        if s.status != Status.FINISHED or s.finish_s is None:
            return math.nan
        return last_finish(s) - self.sent_s

    def __repr__(self) -> str:
        return f"Call(sid={self.sid}, status={self.status})"


@dataclass(frozen=True)
class ClientBehaviour:
    """How a user of the service behaves: waits ``think_s`` (mean of an exponential; 0: none) between requests,
    gives up on a request after ``timeout_s`` without its last token (None: never) and sends it again up to
    ``retries`` times (also after a rejection or a lost request)."""

    think_s: float = 0.0
    timeout_s: float | None = None
    retries: int = 0

    def __post_init__(self) -> None:
        require(self.think_s, NON_NEGATIVE, "think_s")
        if self.timeout_s is not None:
            require(self.timeout_s, POSITIVE, "timeout_s")
        if not isinstance(self.retries, int) or self.retries < 0:
            raise ConfigError(f"retries: must be a whole number >= 0, got {self.retries!r}")


def behaving_client(
    fleet: Any,
    requests: Iterator[tuple[int, int]],
    behaviour: ClientBehaviour,
    rng,
    on_call: Callable[[Call, int], None] | None = None,
) -> Generator[Any, Any, None]:
    """A client process: sends each (prompt tokens, output tokens) of ``requests`` in turn as ``behaviour``
    says (think, time out and cancel, retry); ``on_call(call, attempt)``: told of every request sent."""
    env = fleet.env
    for prompt, output in requests:
        for attempt in range(behaviour.retries + 1):
            call = fleet.send(prompt, output)
            if on_call is not None:
                on_call(call, attempt)
            if behaviour.timeout_s is None:
                yield call.done
            else:
                yield call.done | env.timeout(behaviour.timeout_s)
                if not call.ended:
                    fleet.cancel(call, f"cancelled by its client after {behaviour.timeout_s:g} s")
                    yield call.done
            if call.status == "finished":
                break
        if behaviour.think_s > 0:
            yield env.timeout(float(rng.exponential(behaviour.think_s)))
