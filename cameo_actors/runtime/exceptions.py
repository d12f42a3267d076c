"""Errors the runtime raises about dataflows by name (they cross Ray intact)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from cameo_actors.errors import CameoError


class DataflowNotFound(CameoError, KeyError):
    """No dataflow of that name runs on the pool."""

    def __init__(self, name: str, known: Sequence[str] = ()) -> None:
        self.name = name
        self.known = list(known)
        super().__init__(f"no dataflow named {name!r}; running: {self.known}")

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0])

    def __reduce__(self) -> tuple[type, tuple[object, ...]]:
        return (type(self), (self.name, self.known))


class DataflowExists(CameoError, ValueError):
    """A dataflow of that name runs already."""


class AdmissionRefused(CameoError, ValueError):
    """The pool predicts that this dataflow, or one already running, would miss its
    target, and its admission setting is "refuse". `prediction` says who and why."""

    def __init__(self, message: str, prediction: dict[str, Any]) -> None:
        self.prediction = prediction
        super().__init__(message)

    def __reduce__(self) -> tuple[type, tuple[object, ...]]:
        return (type(self), (self.args[0], self.prediction))


class PoolNotFound(CameoError, LookupError):
    """No cameo pool of that name runs on the Ray cluster."""


class PoolKept(CameoError, RuntimeError):
    """A pool started afresh (`Runtime.start()` without `resume`) found the dataflows of
    a pool of that name that was kept to be restored (by `cameo serve`, or a start with
    `resume=True`); nothing was started and nothing of them changed."""


class PoolInUse(CameoError, RuntimeError):
    """A pool started afresh found the storage of a pool of that name that a process on
    this machine still runs (another script, another service): nothing of it was touched."""


class StorageNotShared(CameoError, ValueError):
    """A new pool on a cluster of more than one node was left its node-local default
    storage (`config.storage_not_shared`): nothing was started."""


class RuntimeUnavailable(CameoError, TimeoutError):
    """The pool did not answer in time (an executor died or is overloaded)."""


class DataflowEnded(CameoError, LookupError):
    """The dataflow ended (cancelled or failed) and its parts were freed: nothing of it
    runs or can be read any more; its record (state, cause) is still there."""

    def __init__(self, name: str, state: str, cause: str | None = None) -> None:
        self.name = name
        self.state = state
        self.cause = cause
        why = f": {cause}" if cause else ""
        super().__init__(f"dataflow {name!r} is {state}{why}")

    def __reduce__(self) -> tuple[type, tuple[object, ...]]:
        return (type(self), (self.name, self.state, self.cause))


class NotHosted(RuntimeUnavailable):
    """An executor does not host that activation now: the dataflow is being restored
    after a failure (a client waits and sends again), or it ended."""


class ReconfigFailed(CameoError):
    """A reconfiguration that was started and waited for (`wait=True`) failed on the way;
    `info` is its record (a `MigrationInfo`, or a removal's answer). The dataflows go on,
    each on its placement from before the step that failed."""

    def __init__(self, message: str, info: dict[str, Any]) -> None:
        self.info = info
        super().__init__(message)

    def __reduce__(self) -> tuple[type, tuple[object, ...]]:
        return (type(self), (self.args[0], self.info))


class IllegalTransition(CameoError, RuntimeError):
    """An event a dataflow's state does not allow (`runtime/lifecycle.py`, its table):
    a bug where it was applied. Nothing of the record changed."""

    def __init__(self, state: str | None, event: str, allowed: Sequence[str],
                 dataflow: str | None = None) -> None:
        self.state, self.event, self.dataflow = state, event, dataflow
        self.allowed = list(allowed)
        who = f"dataflow {dataflow!r}" if dataflow is not None else "a dataflow"
        where = f"is {state}" if state is not None else "is not submitted yet"
        super().__init__(f"{who} {where}: the event {event!r} is not allowed there "
                         f"(allowed: {', '.join(self.allowed) or 'none'})")

    def __reduce__(self) -> tuple[type, tuple[object, ...]]:
        return (type(self), (self.state, self.event, self.allowed, self.dataflow))
