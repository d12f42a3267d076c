"""The cycle collector paused while state comes in, and that state kept out of its passes."""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from typing import Any

import msgpack
import pytest

from cameo_actors.runtime._private.collector import Pauses, collector_paused, state_coming_in


@pytest.fixture(autouse=True)
def collector_as_it_was() -> Iterator[None]:
    enabled = gc.isenabled()
    yield
    gc.unfreeze()
    (gc.enable if enabled else gc.disable)()


def test_pauses_nest_across_threads_and_the_collector_comes_back_after_the_last() -> None:
    gc.enable()
    inner_done = threading.Event()
    seen: list[bool] = []

    def other() -> None:
        with collector_paused():
            seen.append(gc.isenabled())
        inner_done.set()

    with collector_paused():
        assert not gc.isenabled()
        thread = threading.Thread(target=other)
        thread.start()
        inner_done.wait()
        thread.join()
        assert not gc.isenabled()  # the other thread's pause ended, this one's has not
    assert seen == [False]
    assert gc.isenabled()


def test_a_collector_off_before_stays_off() -> None:
    gc.disable()
    with collector_paused():
        pass
    assert not gc.isenabled()


def test_state_that_came_in_is_out_of_the_collectors_passes() -> None:
    gc.enable()
    blob = msgpack.packb({f"k{i}": [i, float(i)] for i in range(1_000)}, use_bin_type=True)
    frozen_before = gc.get_freeze_count()
    with state_coming_in():
        assert not gc.isenabled()
        state = msgpack.unpackb(blob, raw=False)
    assert gc.isenabled()
    assert gc.get_freeze_count() - frozen_before >= 1_001  # the dict and its lists
    walked = {id(o) for o in gc.get_objects()}
    assert id(state) not in walked and id(state["k7"]) not in walked
    assert state["k7"] == [7, 7.0]


def test_the_collectors_passes_are_counted_and_timed_per_generation() -> None:
    gc.enable()
    pauses = Pauses()
    try:
        before = pauses.stats()
        gc.collect(2)
        gc.collect(0)
        after = pauses.stats()
    finally:
        gc.callbacks.remove(pauses._on_pass)
    assert after["collections"][2] == before["collections"][2] + 1
    assert after["collections"][0] >= before["collections"][0] + 1
    assert after["total_ms"][2] >= after["max_ms"][2] > 0
    assert after["frozen"] == gc.get_freeze_count()


def test_with_freeze_a_full_pass_that_found_no_garbage_is_the_last_over_what_it_walked() -> None:
    gc.enable()
    pauses = Pauses(freeze=True)
    try:
        state = {f"k{i}": [i, float(i)] for i in range(10_000)}  # plain data, no cycles
        gc.collect(2)  # what garbage there was
        gc.collect(2)  # none now: what it walked is frozen
        assert id(state["k7"]) not in {id(o) for o in gc.get_objects()}  # frozen
        fresh: list[Any] = [[i] for i in range(100)]
        cycle: list[Any] = []
        cycle.append(cycle)
        del cycle
        gc.collect(2)  # found the cycle: nothing frozen
        assert pauses.stats()["collected"][2] >= 1
        assert id(fresh) in {id(o) for o in gc.get_objects()}
    finally:
        gc.callbacks.remove(pauses._on_pass)
    assert state["k7"] == [7, 7.0]
