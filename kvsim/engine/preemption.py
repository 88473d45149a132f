"""Preemption victim policies: which running sequence gives up its KV memory when another running
sequence needs memory that is not there. (Dropping cached prefix blocks is a different thing, cache
eviction: allocators/cache_eviction.py.)"""

from __future__ import annotations

from typing import Callable, Sequence as Seq

from kvsim.engine.sequence import Sequence
from kvsim.errors import ConfigError

# A policy picks one victim among the running sequences (listed in admission order).
VictimPolicy = Callable[[Seq[Sequence]], Sequence]


def lifo(running: Seq[Sequence]) -> Sequence:
    """Most recently admitted (vLLM's default)."""
    return running[-1]


def fifo(running: Seq[Sequence]) -> Sequence:
    """Earliest admitted."""
    return running[0]


def lru(running: Seq[Sequence]) -> Sequence:
    """Least recently scheduled; ties go to the most recently admitted."""
    best = running[-1]
    for s in reversed(running):
        if s.last_scheduled_s < best.last_scheduled_s:
            best = s
    return best


def priority(running: Seq[Sequence]) -> Sequence:
    """Least important (largest ``priority`` value), then latest arrival."""
    return max(reversed(running), key=lambda s: (s.req.priority, s.req.arrival_s))


def hybrid(running: Seq[Sequence]) -> Sequence:
    """The seed design's hybrid: sequences still in prefill go before running decodes (decodes are
    protected), and within each group the least recently scheduled goes first (LRU), ties to the most
    recently admitted. Combine with --partial-preemption to take only tail blocks. Like every policy here
    it only preempts for running sequences: a new request that does not fit waits in the queue."""
    best = None
    best_key = None
    for s in reversed(running):
        key = (s.generated > 0, s.last_scheduled_s)  # prefills (False) first, then least recent
        if best_key is None or key < best_key:
            best, best_key = s, key
    return best


# Whether a policy reads fields that change every iteration (the incremental scheduler brings them up to
# date for every running sequence before asking it).
for _policy, _reads in ((lifo, False), (fifo, False), (lru, True), (priority, False), (hybrid, True)):
    _policy.reads_schedule_state = _reads

VICTIM_POLICIES: dict[str, VictimPolicy] = {"lifo": lifo, "fifo": fifo, "lru": lru, "priority": priority,
                                            "hybrid": hybrid}


def get_victim_policy(name: str) -> VictimPolicy:
    try:
        return VICTIM_POLICIES[name]
    except KeyError:
        raise ConfigError(f"unknown preemption victim policy '{name}' (known: {', '.join(VICTIM_POLICIES)})") from None
