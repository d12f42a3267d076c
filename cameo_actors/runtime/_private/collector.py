"""Python's cycle collector, kept off the state an executor holds.

A collector pass walks every container object it tracks. At 100 MB of keyed state
(1.75 million accumulator lists) a full pass takes a quarter of a second on the
worker thread, far over a quantum, and while millions of objects are unpacked at
once (a restore, state moved in) passes come again and again as they pile up: they
doubled a restore's unpack. State is plain data, with no reference cycles for the
collector to find, so a block that brings much of it in runs with the collector
paused, and freezes what it brought afterwards (`gc.freeze`: out of every later
pass; still freed by reference counting once nothing refers to it).
"""

from __future__ import annotations

import atexit
import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager

_pauses = 0
_pauses_lock = threading.Lock()
_enable_after = False


@contextmanager
def collector_paused() -> Iterator[None]:
    """The collector off for the block. It is one per process: pauses on several threads
    nest, and it is on again after the last, if it was before the first."""
    global _pauses, _enable_after
    with _pauses_lock:
        if _pauses == 0:
            _enable_after = gc.isenabled()
            gc.disable()
        _pauses += 1
    try:
        yield
    finally:
        with _pauses_lock:
            _pauses -= 1
            if _pauses == 0 and _enable_after:
                gc.enable()


@contextmanager
def state_coming_in() -> Iterator[None]:
    """For a block that unpacks much state: the collector paused during it, and what is
    there afterwards frozen."""
    with collector_paused():
        yield
    gc.freeze()


# At exit, what is frozen goes back to the collector, whose last pass frees it (else
# extension types count their objects as leaked).
atexit.register(gc.unfreeze)
