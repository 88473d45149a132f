"""The garbage collector's settings around a run are put back as they were (kvsim/collector.py)."""

import gc

from kvsim.collector import kept_apart, paused


def test_kept_apart_freezes_then_restores():
    before = gc.get_threshold()
    objects = [[i] for i in range(100)]  # noqa: F841 (exist on entry: frozen within)
    with kept_apart():
        assert gc.get_freeze_count() >= 100
        assert gc.get_threshold()[0] == 1_000_000
        with kept_apart():  # nested: the outer block's settings stand
            assert gc.get_threshold()[0] == 1_000_000
        assert gc.get_freeze_count() >= 100
    assert gc.get_freeze_count() == 0 and gc.get_threshold() == before


def test_paused_restores_the_collector_as_it_was():
    assert gc.isenabled()
    with paused():
        assert not gc.isenabled()
        with paused():
            assert not gc.isenabled()
        assert not gc.isenabled()
    assert gc.isenabled()
    gc.disable()
    try:
        with paused():
            pass
        assert not gc.isenabled()  # it was off before: it stays off
    finally:
        gc.enable()
