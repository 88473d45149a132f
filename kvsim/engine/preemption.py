"""Preemption victim policies: which running sequence gives up its KV memory when another running
sequence needs memory that is not there. (Dropping cached prefix blocks is a different thing, cache
eviction: allocators/cache_eviction.py.)"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence as Seq

from kvsim.engine.sequence import Sequence
from kvsim.errors import ConfigError


@dataclass(frozen=True)
class VictimPolicy:
    """Picks one victim among the running sequences (listed in admission order). ``reads_schedule_state``:
    it reads fields that change every iteration (``last_scheduled_s``, ``generated``), which the incremental
    scheduler then brings up to date for every running sequence before asking."""

    name: str
    pick: Callable[[Seq[Sequence]], Sequence]
    reads_schedule_state: bool

    def __call__(self, running: Seq[Sequence]) -> Sequence:
        return self.pick(running)


def _lifo(running: Seq[Sequence]) -> Sequence:
    """Most recently admitted (vLLM's default)."""
    return running[-1]


def _fifo(running: Seq[Sequence]) -> Sequence:
    """Earliest admitted."""
    return running[0]


def _lru(running: Seq[Sequence]) -> Sequence:
    """Least recently scheduled; ties go to the most recently admitted."""
    best = running[-1]
    for s in reversed(running):
        if s.last_scheduled_s < best.last_scheduled_s:
            best = s
    return best


def _priority(running: Seq[Sequence]) -> Sequence:
    """Least important (largest ``priority`` value), then latest arrival."""
    return max(reversed(running), key=lambda s: (s.req.priority, s.req.arrival_s))


def _prefill_first(running: Seq[Sequence]) -> Sequence:
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


lifo = VictimPolicy("lifo", _lifo, False)
fifo = VictimPolicy("fifo", _fifo, False)
lru = VictimPolicy("lru", _lru, True)
priority = VictimPolicy("priority", _priority, False)
prefill_first = VictimPolicy("prefill-first", _prefill_first, True)

VICTIM_POLICIES: dict[str, VictimPolicy] = {p.name: p for p in (lifo, fifo, lru, priority, prefill_first)}
# older names: `hybrid` was the seed design's name, which is also an allocator's
VICTIM_ALIASES = {"hybrid": "prefill-first"}


def victim_policy_names() -> tuple[str, ...]:
    """The names --victim-policy takes now: registered policies and their aliases."""
    return (*VICTIM_POLICIES, *VICTIM_ALIASES)


def get_victim_policy(name: str) -> VictimPolicy:
    try:
        return VICTIM_POLICIES[VICTIM_ALIASES.get(name, name)]
    except KeyError:
        raise ConfigError(f"unknown preemption victim policy '{name}' (known: {', '.join(VICTIM_POLICIES)})") from None
