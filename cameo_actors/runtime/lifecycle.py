"""A dataflow's lifecycle: its states, the events that move it, and the one table of
the moves allowed (`TRANSITIONS`), checked on every change of a record (the
controller's registry applies events only through `step`)::

                  submitted
                      |
                      v
                +-----------+   sources closed   +-----------+   drained   +----------+
                |  running  | -----------------> | finishing | ----------> | finished |
                +-----------+                    +-----------+             +----------+
                   |     ^                          |     ^
     executor lost |     | restored   executor lost |     | restored
                   v     | [resume: running]        v     | [resume: finishing]
                +---------------------------------------------+
                |                 recovering                  |
                +---------------------------------------------+
                  sources closed: stays recovering, resumes finishing
                  executor lost: stays recovering (another loss during the restore)

       running, finishing, recovering ------------ cancelled ---> cancelled
       running, finishing, recovering, finished -- failed ------> failed

    Events that leave the state as it is (nothing is recorded in its history):
       finishing   + sources closed                   (closed again)
       finished    + cancelled                        (its results are freed)
       cancelled,  + cancelled, failed, restored      (late: a client or a thread
       failed                                          that raced its end)

Any other (state, event) is illegal: `IllegalTransition`, the record unchanged.

`running` takes events; `finishing` drains the backlog once its sources are
closed; `finished` keeps its results readable; `cancelled` and `failed` (with a
cause) freed their parts (`RELEASED_STATES`); `recovering` (with the cause) is
restored from its last checkpoint after a part of the pool it ran on was lost (an
executor died, its node was drained, the pool restarted), then goes back to the
state it had, its `resume_state`. `running`, `finishing` and `recovering` are
live (`LIVE_STATES`): a record has `ended_at` exactly when it is not live.

The states' values are the strings records, saved registries and the HTTP API
carry; a `DataflowState` equals its string.

>>> step(DataflowState.RUNNING, LifecycleEvent.EXECUTOR_LOST)
Step(state='recovering', resume_state='running')
>>> step("recovering", LifecycleEvent.SOURCES_CLOSED, "running")
Step(state='recovering', resume_state='finishing')
>>> next_state("recovering", LifecycleEvent.RESTORED, "finishing")
'finishing'
>>> next_state("finished", LifecycleEvent.DRAINED, dataflow="alerts")
Traceback (most recent call last):
...
cameo_actors.runtime.exceptions.IllegalTransition: dataflow 'alerts' is finished: the event 'drained' is not allowed there (allowed: cancelled, failed)

Pure: no Ray.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import Enum, StrEnum
from types import MappingProxyType
from typing import Final, NamedTuple

from cameo_actors.runtime.exceptions import IllegalTransition


class DataflowState(StrEnum):
    """Where a dataflow stands (the module's diagram). Equal to its value, and shown as
    its value, so that records and messages read as plain strings."""

    RUNNING = "running"
    FINISHING = "finishing"
    FINISHED = "finished"
    CANCELLED = "cancelled"
    FAILED = "failed"
    RECOVERING = "recovering"

    def __repr__(self) -> str:
        return repr(self.value)


class LifecycleEvent(StrEnum):
    """What happens to a dataflow, and moves it (or not) by `TRANSITIONS`."""

    SUBMITTED = "submitted"  # deployed on the pool
    SOURCES_CLOSED = "sources_closed"  # a client closed its sources
    DRAINED = "drained"  # every source closed and drained (the monitor)
    CANCELLED = "cancelled"  # by a client
    FAILED = "failed"  # with a cause; `lost`: a part of the pool died under it
    EXECUTOR_LOST = "executor_lost"  # an executor died, its node drained, the pool restarted
    RESTORED = "restored"  # from its last checkpoint, after a loss

    def __repr__(self) -> str:
        return repr(self.value)


class Resume(Enum):
    """A move that depends on the state a recovering dataflow goes back to."""

    BACK = "back to its resume_state"
    DEFERRED = "stays recovering; the event moves its resume_state instead"


S, E = DataflowState, LifecycleEvent

#: (state, event) -> the state after it; `None` is a dataflow not yet submitted.
#: A pair not here is illegal.
TRANSITIONS: Final[Mapping[tuple[DataflowState | None, LifecycleEvent],
                           DataflowState | Resume]] = MappingProxyType({
    (None, E.SUBMITTED): S.RUNNING,

    (S.RUNNING, E.SOURCES_CLOSED): S.FINISHING,
    (S.RUNNING, E.EXECUTOR_LOST): S.RECOVERING,
    (S.RUNNING, E.CANCELLED): S.CANCELLED,
    (S.RUNNING, E.FAILED): S.FAILED,

    (S.FINISHING, E.SOURCES_CLOSED): S.FINISHING,
    (S.FINISHING, E.DRAINED): S.FINISHED,
    (S.FINISHING, E.EXECUTOR_LOST): S.RECOVERING,
    (S.FINISHING, E.CANCELLED): S.CANCELLED,
    (S.FINISHING, E.FAILED): S.FAILED,

    (S.RECOVERING, E.SOURCES_CLOSED): Resume.DEFERRED,
    (S.RECOVERING, E.EXECUTOR_LOST): S.RECOVERING,
    (S.RECOVERING, E.RESTORED): Resume.BACK,
    (S.RECOVERING, E.CANCELLED): S.CANCELLED,
    (S.RECOVERING, E.FAILED): S.FAILED,

    (S.FINISHED, E.CANCELLED): S.FINISHED,
    (S.FINISHED, E.FAILED): S.FAILED,

    (S.CANCELLED, E.CANCELLED): S.CANCELLED,
    (S.CANCELLED, E.FAILED): S.CANCELLED,
    (S.CANCELLED, E.RESTORED): S.CANCELLED,

    (S.FAILED, E.CANCELLED): S.FAILED,
    (S.FAILED, E.FAILED): S.FAILED,
    (S.FAILED, E.RESTORED): S.FAILED,
})
del S, E

#: States in which a dataflow's activations run (it takes events, or drains), or are
#: being restored.
LIVE_STATES: Final = (DataflowState.RUNNING, DataflowState.FINISHING, DataflowState.RECOVERING)
#: States in which its parts on the executors are freed (nothing to read any more).
RELEASED_STATES: Final = (DataflowState.CANCELLED, DataflowState.FAILED)
#: States whose record may carry a `cause` (why it is recovering, or why it ended); a
#: move to any other state clears it.
CAUSED_STATES: Final = (DataflowState.RECOVERING, *RELEASED_STATES)
#: Every state, in the order of the lifecycle.
STATES: Final = tuple(DataflowState)
_STATES = frozenset(STATES)


class Step(NamedTuple):
    """A record's state after an event, and the state it goes back to once restored
    (None unless it is recovering)."""

    state: DataflowState
    resume_state: DataflowState | None


def allowed_events(state: str | None) -> tuple[LifecycleEvent, ...]:
    """The events `state` allows (None: a dataflow not yet submitted), in table order.

    >>> allowed_events("finished")
    ('cancelled', 'failed')
    """
    return tuple(e for (s, e) in TRANSITIONS if s == state)


def step(state: str | None, event: LifecycleEvent, resume_state: str | None = None, *,
         dataflow: str | None = None) -> Step:
    """The state after `event` in `state` (and the state a recovering dataflow goes back
    to, `resume_state`: None means running), by `TRANSITIONS`.

    Raises:
        IllegalTransition: `state` does not allow `event`; it names `dataflow` (if
            given), the state, the event and the events allowed there.
    """
    known = None if state is None or state not in _STATES else DataflowState(state)
    target = TRANSITIONS.get((known, event)) if known is not None or state is None else None
    if target is None:
        raise IllegalTransition(state, event.value, [e.value for e in allowed_events(state)],
                                dataflow)
    resume = DataflowState(resume_state or DataflowState.RUNNING)
    if target is Resume.BACK:
        return Step(resume, None)
    if target is Resume.DEFERRED:
        return Step(DataflowState.RECOVERING, step(resume, event, dataflow=dataflow).state)
    if target is DataflowState.RECOVERING:  # it goes back where it was (or stays put)
        return Step(target, resume if known is DataflowState.RECOVERING else known)
    return Step(target, None)


def next_state(state: str | None, event: LifecycleEvent, resume_state: str | None = None, *,
               dataflow: str | None = None) -> DataflowState:
    """`step(...).state`: the state after `event`, or `IllegalTransition`."""
    return step(state, event, resume_state, dataflow=dataflow).state
