"""Python's garbage collector around the phases that build or keep millions of objects without cycles.

A collection walks every object that may be in a cycle; a run of a million requests holds millions of them (its
requests, their sequences, the result rows), so the collector's passes cost seconds that collect nothing: reading
lines into requests, turning requests into sequences and rows into tables make no cycles, and the objects a run
keeps from its start to its end need not be walked by every full pass in between."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def paused() -> Iterator[None]:
    """The collector off within (as it was, after)."""
    collecting = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if collecting:
            gc.enable()


@contextmanager
def kept_apart() -> Iterator[None]:
    """Every object that exists on entry left out of the collector's passes until the block ends (``gc.freeze``),
    and the youngest generation collected after a million new objects instead of 700: a simulation's objects
    mostly die young by reference count (a step's lists and tuples), so rare passes find the few cycles at a
    fraction of the cost (a million-request run's loop took ~2 s less of ~55 with the collector off entirely; a
    20,000-request run leaves ~1,100 cyclic objects in all, so nothing piles up). A finished run makes no cycle
    of its own (tests/test_collector.py): its objects go by reference counting when it is dropped, not at the
    collector's next full pass. Nested blocks end as the outermost does."""
    if gc.get_freeze_count():
        yield
        return
    gc.freeze()
    threshold = gc.get_threshold()
    gc.set_threshold(1_000_000, *threshold[1:])
    try:
        yield
    finally:
        gc.set_threshold(*threshold)
        gc.unfreeze()
