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
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

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


class Pauses:
    """What the collector's passes have cost this process since it started: per
    generation, passes, their time and the longest (a pass holds the interpreter: the
    worker thread waits for it however urgent its work), and the objects they found
    unreachable (reference cycles: what a pass is for).

    With `freeze`, a full pass that found nothing unreachable is the last over what it
    walked: it is all frozen. Without, full passes come each time the objects that
    outlived the younger passes grow by a quarter, and each walks every long-lived
    object again: with 100 MB of keyed state, 0.6 s on the worker thread, finding
    nothing (measured in bench.recovery's alerts arms). With it, the next full pass
    walks only what came since. The price: reference cycles among what was frozen that
    become garbage later are never freed (`collected` shows what the passes find; the full
    passes in bench.recovery found none; `RuntimeConfig.gc_freeze` turns it off)."""

    def __init__(self, freeze: bool = False) -> None:
        self.freeze = freeze
        self.count = [0, 0, 0]
        self.total_ms = [0.0, 0.0, 0.0]
        self.max_ms = [0.0, 0.0, 0.0]
        self.collected = [0, 0, 0]
        self._began = 0.0
        gc.callbacks.append(self._on_pass)

    def _on_pass(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._began = time.perf_counter()
            return
        ms = (time.perf_counter() - self._began) * 1000.0
        g = info["generation"]
        self.count[g] += 1
        self.total_ms[g] += ms
        self.max_ms[g] = max(self.max_ms[g], ms)
        self.collected[g] += info["collected"]
        if self.freeze and g == 2 and info["collected"] == 0:
            gc.freeze()

    def stats(self) -> dict[str, Any]:
        return {"collections": list(self.count), "total_ms": [round(x, 1) for x in self.total_ms],
                "max_ms": [round(x, 1) for x in self.max_ms], "collected": list(self.collected),
                "frozen": gc.get_freeze_count()}
