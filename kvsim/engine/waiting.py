"""The waiting queue and its scheduling policy (vLLM's ``--scheduling-policy``): which waiting sequence the
scheduler tries to admit next.

- ``fcfs`` (the default): first come, first served. Arrivals join the back; a sequence that comes back
  (preempted, its KV loaded from elsewhere, a parallel sample that could not share its parent's KV) goes to
  the front. A plain ``collections.deque`` underneath, its operations deque's own, so the hot path costs
  nothing more than a deque.
- ``priority``: vLLM V1's priority policy (vllm/v1/core/sched/request_queue.py, PriorityRequestQueue): a
  heap ordered by the request's ``priority`` (lower first), then its arrival time (then arrival order, the
  sequence id, where the trace gives two requests the same time: vLLM's request id). A sequence that comes
  back re-enters by that order, not at the front. Arrivals can overtake the queue head, which the scheduler
  and the engine must then look at (:attr:`WaitingQueue.overtakes`).

The queue only orders; admission (the head blocks the sequences behind it when it does not fit) is the
scheduler's (kvsim/engine/scheduler.py).
"""

from __future__ import annotations

import heapq
from collections import deque
from typing import Iterable, Iterator, Protocol

from kvsim.engine.sequence import Sequence

SCHEDULING_POLICIES = ("fcfs", "priority")


class WaitingQueue(Protocol):
    """The operations the schedulers use:

    - ``push(seq)``: an arriving sequence joins. Returns True when it went ahead of the sequences already
      waiting (only a queue that :attr:`overtakes` says so; fcfs returns None);
    - ``push_front(seq)``: a sequence comes back (preempted, its KV loaded, a sample that could not fork);
    - ``peek()`` (or ``queue[0]``, deque's own for fcfs: the hot path's): the next sequence to admit;
      ``pop_next()`` takes it out;
    - ``reclaim_order(holding)``: of the waiting sequences that still hold KV (``holding``, by sid, oldest
      first), the order in which they give it back when memory is short: the one furthest back first;
    - ``len``, ``bool`` and iteration (in admission order).
    """

    policy: str
    # arrivals can go ahead of the head: a blocked head does not keep a later arrival out
    overtakes: bool

    def push(self, seq: Sequence) -> bool | None: ...

    def push_front(self, seq: Sequence) -> None: ...

    def peek(self) -> Sequence: ...

    def __getitem__(self, i: int) -> Sequence: ...  # [0] only: peek()

    def pop_next(self) -> Sequence: ...

    def reclaim_order(self, holding: dict[int, Sequence]) -> Iterable[Sequence]: ...

    def discard(self, seq: Sequence) -> bool: ...  # take ``seq`` out wherever it stands (a cancel); False: absent

    def __len__(self) -> int: ...

    def __iter__(self) -> Iterator[Sequence]: ...


class FCFSQueue(deque[Sequence]):
    """First come, first served: a deque whose front is the head."""

    __slots__ = ()
    policy = "fcfs"
    overtakes = False
    # deque's own methods (no Python frame in between): this runs for every arrival and admission
    push = deque.append
    push_front = deque.appendleft
    pop_next = deque.popleft

    def peek(self) -> Sequence:
        return self[0]

    def reclaim_order(self, holding: dict[int, Sequence]) -> Iterable[Sequence]:
        """The earliest preempted first: it is the furthest back among those at the front."""
        return holding.values()

    def discard(self, seq: Sequence) -> bool:
        for i, s in enumerate(self):
            if s is seq:
                del self[i]
                return True
        return False


def priority_key(seq: Sequence) -> tuple[int, float, int]:
    """vLLM's Request.__lt__: the priority (lower first), then the arrival time, then (vLLM: the request
    id) the arrival order. A parallel sample carries its request's priority and arrival."""
    return seq.req.priority, seq.req.arrival_s, seq.sid


class PriorityQueue:
    """vLLM V1's ``--scheduling-policy priority``: a heap by :func:`priority_key`."""

    __slots__ = ("_heap",)
    policy = "priority"
    overtakes = True

    def __init__(self) -> None:
        self._heap: list[tuple[int, float, int, Sequence]] = []

    def push(self, seq: Sequence) -> bool:
        r = seq.req
        entry = (r.priority, r.arrival_s, seq.sid, seq)
        heapq.heappush(self._heap, entry)
        return self._heap[0] is entry

    def push_front(self, seq: Sequence) -> None:
        """No front under priority: it re-enters by its key (vLLM's prepend_request)."""
        self.push(seq)

    def peek(self) -> Sequence:
        return self._heap[0][3]

    def __getitem__(self, i: int) -> Sequence:
        if i != 0:
            raise IndexError("a priority queue shows only its head, [0]")
        return self._heap[0][3]

    def pop_next(self) -> Sequence:
        return heapq.heappop(self._heap)[3]

    def reclaim_order(self, holding: dict[int, Sequence]) -> Iterable[Sequence]:
        """The least important first (the furthest back in the queue)."""
        return sorted(holding.values(), key=priority_key, reverse=True)

    def discard(self, seq: Sequence) -> bool:
        for i, e in enumerate(self._heap):
            if e[3] is seq:
                self._heap[i] = self._heap[-1]
                self._heap.pop()
                heapq.heapify(self._heap)
                return True
        return False

    def __len__(self) -> int:
        return len(self._heap)

    def __bool__(self) -> bool:
        return bool(self._heap)

    def __iter__(self) -> Iterator[Sequence]:
        return (e[3] for e in sorted(self._heap))

    def __repr__(self) -> str:
        return f"PriorityQueue({[s.sid for s in self]})"


def make_waiting_queue(policy: str) -> WaitingQueue:
    """An empty waiting queue of the named scheduling policy."""
    if policy == "fcfs":
        return FCFSQueue()
    if policy == "priority":
        return PriorityQueue()
    raise ValueError(f"unknown scheduling policy '{policy}' (known: {', '.join(SCHEDULING_POLICIES)})")
