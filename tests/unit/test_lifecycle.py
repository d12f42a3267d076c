"""A dataflow's lifecycle (`runtime/lifecycle.py`): the table of the moves allowed, and
the registry that applies it. Random sequences of events, applied to the real
registry and through the controller's managers on an in-process pool, keep every
record in a legal state; an illegal event raises and changes nothing."""

from __future__ import annotations

import copy
import doctest
import json
import pickle
import tempfile
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import msgpack
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cameo_actors import Dataflow, count, sum_
from cameo_actors.operators.base import END_OF_STREAM
from cameo_actors.runtime import boundary, lifecycle
from cameo_actors.runtime._private.controller.registry import Registry
from cameo_actors.runtime.boundary import DataflowInfo, RestoreSummary
from cameo_actors.runtime.config import RuntimeConfig
from cameo_actors.runtime.exceptions import DataflowEnded, IllegalTransition
from cameo_actors.runtime.lifecycle import (
    CAUSED_STATES,
    LIVE_STATES,
    RELEASED_STATES,
    TRANSITIONS,
    DataflowState,
    LifecycleEvent,
    allowed_events,
    next_state,
    step,
)
from tests.shared.gateway import ControlPlane, now
from tests.shared.zoo import SCHEMA, events

S, E = DataflowState, LifecycleEvent

#: Each state's events, written out by hand (the table must say the same).
ALLOWED: dict[DataflowState | None, set[LifecycleEvent]] = {
    None: {E.SUBMITTED},
    S.RUNNING: {E.SOURCES_CLOSED, E.EXECUTOR_LOST, E.CANCELLED, E.FAILED},
    S.FINISHING: {E.SOURCES_CLOSED, E.DRAINED, E.EXECUTOR_LOST, E.CANCELLED, E.FAILED},
    S.RECOVERING: {E.SOURCES_CLOSED, E.EXECUTOR_LOST, E.RESTORED, E.CANCELLED, E.FAILED},
    S.FINISHED: {E.CANCELLED, E.FAILED},
    S.CANCELLED: {E.CANCELLED, E.FAILED, E.RESTORED},
    S.FAILED: {E.CANCELLED, E.FAILED, E.RESTORED},
}
#: One event each state does not allow.
ILLEGAL = {None: E.DRAINED, S.RUNNING: E.DRAINED, S.FINISHING: E.RESTORED,
           S.RECOVERING: E.DRAINED, S.FINISHED: E.EXECUTOR_LOST, S.CANCELLED: E.SOURCES_CLOSED,
           S.FAILED: E.SUBMITTED}


# -- the table ---------------------------------------------------------------------------
def test_every_state_allows_exactly_its_events() -> None:
    assert set(ALLOWED) == {None, *DataflowState}
    for state, allowed in ALLOWED.items():
        assert set(allowed_events(state)) == allowed, state
        for event in LifecycleEvent:
            assert ((state, event) in TRANSITIONS) == (event in allowed), (state, event)


@pytest.mark.parametrize("state", [None, *DataflowState])
def test_an_illegal_event_names_the_dataflow_the_state_the_event_and_the_allowed_ones(
        state: DataflowState | None) -> None:
    event = ILLEGAL[state]
    with pytest.raises(IllegalTransition) as raised:
        next_state(state, event, dataflow="alerts")
    e = raised.value
    assert (e.dataflow, e.state, e.event) == ("alerts", state, event)
    assert set(e.allowed) == {a.value for a in ALLOWED[state]}
    message = str(e)
    assert message.startswith("dataflow 'alerts' is ")
    assert (state or "not submitted yet") in message and repr(event.value) in message
    assert all(a.value in message for a in ALLOWED[state])
    back = pickle.loads(pickle.dumps(e))  # it crosses Ray intact
    assert type(back) is IllegalTransition and str(back) == message
    # A record's plain string names its state just as well.
    with pytest.raises(IllegalTransition, match=r"allowed: "):
        step(None if state is None else state.value, event)


def test_the_moves_and_what_a_recovering_dataflow_goes_back_to() -> None:
    assert next_state(None, E.SUBMITTED) == S.RUNNING
    assert step("running", E.SOURCES_CLOSED) == (S.FINISHING, None)
    assert step("finishing", E.SOURCES_CLOSED) == (S.FINISHING, None)  # closed again
    assert step("finishing", E.DRAINED) == (S.FINISHED, None)
    for state in (S.RUNNING, S.FINISHING):
        assert step(state, E.EXECUTOR_LOST) == (S.RECOVERING, state)
        recovering = step(state, E.EXECUTOR_LOST)
        assert step(S.RECOVERING, E.EXECUTOR_LOST, recovering.resume_state) == recovering
        assert step(S.RECOVERING, E.RESTORED, recovering.resume_state) == (state, None)
        # Sources closed while recovering: it goes back finishing.
        closed = step(S.RECOVERING, E.SOURCES_CLOSED, recovering.resume_state)
        assert closed == (S.RECOVERING, S.FINISHING)
        assert step(S.RECOVERING, E.RESTORED, S.FINISHING) == (S.FINISHING, None)
    assert step("recovering", E.RESTORED, None) == (S.RUNNING, None)  # none kept: running
    for state in LIVE_STATES:
        assert next_state(state, E.CANCELLED) == S.CANCELLED
        assert next_state(state, E.FAILED) == S.FAILED
    assert next_state(S.FINISHED, E.CANCELLED) == S.FINISHED  # its results freed
    assert next_state(S.FINISHED, E.FAILED) == S.FAILED
    for state in RELEASED_STATES:
        assert all(next_state(state, e) == state for e in ALLOWED[state])
    with pytest.raises(IllegalTransition):
        step("no such state", E.CANCELLED)


def test_the_states_are_their_strings_on_every_wire() -> None:
    assert boundary.STATES == lifecycle.STATES == tuple(DataflowState)
    assert [s.value for s in boundary.STATES] == [
        "running", "finishing", "finished", "cancelled", "failed", "recovering"]
    plain: str = "running"  # as a record holds it
    assert boundary.RUNNING is S.RUNNING and plain == boundary.RUNNING
    assert boundary.LIVE_STATES == ("running", "finishing", "recovering")
    assert boundary.RELEASED_STATES == ("cancelled", "failed")
    assert "recovering" in boundary.LIVE_STATES and S.FINISHED not in boundary.LIVE_STATES
    assert json.dumps(S.RUNNING) == '"running"'
    assert json.dumps({"state": S.FAILED, S.RECOVERING: 1}) == \
        '{"state": "failed", "recovering": 1}'
    assert msgpack.packb(S.RUNNING) == msgpack.packb("running")
    assert f"{S.FINISHING}" == str(S.FINISHING) == "finishing"
    assert repr(S.CANCELLED) == "'cancelled'"  # messages listing states read as before
    assert doctest.testmod(lifecycle).failed == 0


# -- the registry ------------------------------------------------------------------------
#: Events to draw: those that end a dataflow less often, so that sequences go somewhere.
EVENTS = [e for e in LifecycleEvent for _ in range(1 if e in (E.CANCELLED, E.FAILED) else 4)]
PHASES: RestoreSummary = {"checkpoint": 0, "waited_s": 0.0, "read_s": 0.0, "read_bytes": 0,
                          "read_local_bytes": 0, "restored_s": 0.0}


def keyed(name: str) -> Dataflow:
    d = Dataflow(name, latency_target_ms=1000)
    (d.source("s", schema=SCHEMA, event_time="ts", allowed_lateness_ms=40)
     .key_by("key").window(tumbling_ms=50, parallelism=2, id="win")
     .aggregate(n=count(), total=sum_("value")).sink("o"))
    return d


def legal_move(before: str | None, after: str) -> bool:
    """Some event the table allows takes `before` to `after` (another state)."""
    return after != before and any(
        step(before, e, resume).state == after
        for e in allowed_events(before) for resume in (S.RUNNING, S.FINISHING))


def check_cause(info: DataflowInfo) -> None:
    """A record carries a cause exactly where its state has one."""
    if info["state"] in (S.RECOVERING, S.FAILED):
        assert info["cause"]
    if info["state"] not in CAUSED_STATES:
        assert info["cause"] is None, (info["state"], info["cause"])


def check_record(registry: Registry, info: DataflowInfo, states: list[str]) -> None:
    """The record is legal, and its history is `states`, the moves the table made."""
    state = info["state"]
    assert type(state) is str and DataflowState(state) == state  # a plain string: saved as is
    history = [h["state"] for h in info["history"]]
    assert history == states
    assert all(type(s) is str for s in history)
    assert all(legal_move(a, b) for a, b in zip([None, *history], history, strict=False)), history
    assert history[-1] == state
    assert (info["ended_at"] is not None) == (state not in LIVE_STATES)
    if state in RELEASED_STATES:
        assert info["released"]
    if state in LIVE_STATES:
        assert not info["released"]
    assert (info["resume_state"] is not None) == (state == S.RECOVERING)
    assert info["resume_state"] is None or type(info["resume_state"]) is str
    check_cause(info)
    tenant = info["spec"]["tenant"]
    assert registry.transitions == Counter((tenant, s) for s in history)
    assert all(type(s) is str for _, s in registry.transitions)
    json.dumps(info)  # what the registry saves


def apply(registry: Registry, info: DataflowInfo, event: LifecycleEvent,
          by_fail: bool) -> None:
    """`event` as the registry's callers apply it."""
    name = info["name"]
    if event is E.SUBMITTED:
        registry.enter(info, event, "submitted")
    elif event is E.SOURCES_CLOSED:
        registry.closing(info)
    elif event is E.DRAINED:
        registry.enter(info, event, "every source closed and drained")
    elif event is E.CANCELLED:
        registry.end(info, event, "cancelled by a client")
    elif event is E.FAILED and by_fail:
        registry.fail(name, "boom", lost=True)
    elif event is E.FAILED:
        registry.end(info, event, "boom")
    elif event is E.EXECUTOR_LOST:
        registry.mark_recovering(info, "executor 0 died: killed")
    else:
        registry.restored(info, info["spec"], registry.placements[name], PHASES)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(moves=st.lists(st.tuples(st.sampled_from(EVENTS), st.booleans()), min_size=2,
                      max_size=30))
def test_random_events_keep_a_record_legal_and_illegal_ones_change_nothing(
        moves: list[tuple[LifecycleEvent, bool]]) -> None:
    plane = ControlPlane(2, RuntimeConfig(bins=64))
    registry = plane.registry
    plane.lifecycle.deploy(keyed("lc").spec.to_dict())
    info = registry.record("lc")
    states = ["running"]
    save = registry.save

    def checked_save() -> None:  # what is saved, and what a reader sees meanwhile, is legal
        check_cause(info)
        save()
    registry.save = checked_save  # type: ignore[method-assign]
    check_record(registry, info, states)
    for event, by_fail in moves:
        before, counted = copy.deepcopy(info), Counter(registry.transitions)
        load = dict(plane.pool.load)
        try:
            moved = step(info["state"], event, info["resume_state"])
        except IllegalTransition:
            with pytest.raises(IllegalTransition) as raised:
                apply(registry, info, event, by_fail)
            assert raised.value.dataflow == "lc" and raised.value.state == before["state"]
            assert info == before and registry.transitions == counted
            assert plane.pool.load == load
            continue
        apply(registry, info, event, by_fail)
        assert info["state"] == moved.state and info["resume_state"] == moved.resume_state
        if moved.state != before["state"]:
            states.append(moved.state.value)
        elif event is not E.RESTORED:  # a restore of an ended one still records its phases
            # A move to its own state: what the event is about changes, and nothing else
            # (the cause of another loss, the state to resume, a finished one's results).
            skip = ("resume_state", "cause", "released")
            assert {k: v for k, v in info.items() if k not in skip} == \
                {k: v for k, v in before.items() if k not in skip}
        check_record(registry, info, states)


# -- through the controller's managers ------------------------------------------------------
class Later:
    """The managers' long work (a restart's wait and restore), kept to run on demand."""

    def __init__(self) -> None:
        self.pending: list[tuple[Callable[..., None], tuple[Any, ...]]] = []

    def __call__(self, name: str, fn: Callable[..., None], *args: Any) -> None:
        self.pending.append((fn, args))

    def run(self) -> None:
        while self.pending:
            fn, args = self.pending.pop(0)
            fn(*args)


def pool(folder: Path, n: int = 2, spawn: Callable[..., None] | None = None,
         seed: int = 0) -> ControlPlane:
    """An in-process pool with checkpoints, and dataflow "lc" on it, its input ended."""
    config = RuntimeConfig(checkpoint_interval_s=1.0, bins=64,
                           checkpoint_url=str(folder / "checkpoints"),
                           ingress_log_dir=str(folder / "ingress"))
    plane = ControlPlane(n, config, seed=seed, spawn=spawn or now)
    plane.lifecycle.deploy(keyed("lc").spec.to_dict())
    plane.push("lc", "s", [events(100, seed=seed)])
    plane.push("lc", "s", [END_OF_STREAM])
    plane.gateway.pump()
    return plane


def test_sources_closed_while_recovering_resume_finishing_then_it_finishes(
        tmp_path: Path) -> None:
    later = Later()
    plane = pool(tmp_path, spawn=later)
    plane.cluster.restart_core(1)
    plane.recovery.check_executors()
    assert plane.registry.record("lc")["resume_state"] == "running"
    plane.lifecycle.closing("lc")
    info = plane.registry.record("lc")
    assert info["state"] == "recovering" and info["resume_state"] == "finishing"
    later.run()
    plane.gateway.pump()
    plane.monitor.check_finishing()
    info = plane.registry.record("lc")
    assert [(h["state"], str(h["reason"]).split(":")[0]) for h in info["history"]] == [
        ("running", "submitted"), ("recovering", "executor 1 died"),
        ("finishing", "restored from checkpoint 0"),
        ("finished", "every source closed and drained")]
    assert info["resume_state"] is None and info["cause"] is None
    # Cancelling a finished one frees its results; it stays finished.
    assert plane.lifecycle.cancel("lc")["ended_before"]
    info = plane.registry.record("lc")
    assert info["state"] == "finished" and info["released"] and len(info["history"]) == 4
    with pytest.raises(DataflowEnded):
        plane.lifecycle.closing("lc")
    tenant = info["spec"]["tenant"]
    assert plane.registry.lifecycle_counts()[0] == [
        (tenant, s, 1) for s in ("finished", "finishing", "recovering", "running")]


def test_a_restore_that_ends_after_a_client_cancelled_leaves_it_cancelled(
        tmp_path: Path) -> None:
    later = Later()
    plane = pool(tmp_path, spawn=later)
    plane.cluster.restart_core(0)
    plane.recovery.check_executors()
    plane.lifecycle.cancel("lc")
    later.run()
    info = plane.registry.record("lc")
    assert [h["state"] for h in info["history"]] == ["running", "recovering", "cancelled"]
    assert info["resume_state"] is None and info["released"]


def test_a_dataflow_cancelled_while_its_node_drains_is_not_restored(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    plane = pool(tmp_path, n=3)
    plane.lifecycle.deploy(keyed("other").spec.to_dict())
    on = sorted(set(plane.registry.record("lc")["executors"]))[-1]
    take = plane.checkpoints.now

    def cancelled_meanwhile(names: Sequence[str] | None = None,
                            timeout_s: float = 10.0) -> dict[str, bool]:
        plane.lifecycle.cancel("lc")  # a client, while the drain checkpoints
        return take(names, timeout_s)

    monkeypatch.setattr(plane.checkpoints, "now", cancelled_meanwhile)
    drained = plane.recovery.drain(f"node-{on}")
    assert "lc" not in drained["dataflows"]
    info = plane.registry.record("lc")
    assert [h["state"] for h in info["history"]] == ["running", "cancelled"]
    assert info["resume_state"] is None


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(moves=st.lists(st.tuples(st.sampled_from(EVENTS), st.integers(0, 1)), min_size=3,
                      max_size=16),
       seed=st.integers(0, 1000))
def test_the_managers_move_a_dataflow_only_as_the_table_allows(
        moves: list[tuple[LifecycleEvent, int]], seed: int) -> None:
    with tempfile.TemporaryDirectory() as folder:
        later = Later()
        plane = pool(Path(folder), spawn=later, seed=seed)
        registry = plane.registry
        states = ["running"]
        for event, executor in moves:
            info = registry.record("lc")
            state, resume = info["state"], info["resume_state"]
            expected: str = state
            if event is E.SUBMITTED:  # a live dataflow of that name runs already
                continue
            if event is E.SOURCES_CLOSED:
                if state in LIVE_STATES:
                    plane.lifecycle.closing("lc")
                    expected, resume = step(state, event, resume)
                else:
                    with pytest.raises(DataflowEnded):
                        plane.lifecycle.closing("lc")
            elif event is E.DRAINED:
                plane.monitor.check_finishing()  # finished if it drained
                if state == S.FINISHING and registry.record("lc")["state"] == S.FINISHED:
                    expected = S.FINISHED
            elif event is E.CANCELLED:
                plane.lifecycle.cancel("lc")
                expected = next_state(state, event)
            elif event is E.FAILED:
                registry.fail("lc", "boom")
                expected = next_state(state, event)
            elif event is E.EXECUTOR_LOST:
                delivered = executor not in plane.pool.restarting
                plane.cluster.restart_core(executor)  # it died; the platform started it again
                plane.recovery.check_executors()
                if delivered and state in LIVE_STATES:
                    expected, resume = step(state, event, resume)
            else:
                later.run()  # every restart waited for: what they hit restored
                if state == S.RECOVERING and not plane.pool.restarting:
                    expected, resume = step(state, event, resume)
            info = registry.record("lc")
            assert info["state"] == expected, (event, state, info["history"])
            assert info["resume_state"] == (resume if expected == S.RECOVERING else None)
            if expected != state:
                states.append(expected)
            check_record(registry, info, states)
