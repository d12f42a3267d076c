"""The controller's calls, declared once: the public `ControlAPI`, and what a `Runtime`
handle asks beyond it (its set-up, waiting until settled, closing, shutting down).

The controller serves every call here through the manager marked
`@serves(ControllerAPI.<call>)` (or `ControlAPI.<operation>`); a handle makes them
through `remote.RemoteController`, whose `_forward` sends each as the Ray call of the
same name.

Imported by the controller and the client; it imports neither.
"""

# The calls' bodies are declarations (`interface.operation`).
# mypy: disable-error-code="empty-body"

from __future__ import annotations

import builtins
from collections.abc import Sequence
from typing import Any, TypedDict

from cameo_actors.runtime.boundary import CALL_TIMEOUT_S, Explanation
from cameo_actors.runtime.interface import ControlAPI, operation


class DataflowSettling(TypedDict):
    """What a client waiting for a dataflow must know of it (`ControllerAPI.settling`)."""

    state: str
    cause: str | None
    released: bool
    executors: builtins.list[int]
    migration: str | None  # the id of the migration under way, if any


class PoolSettling(TypedDict):
    """The dataflows a client waits for, and the executors restarting or gone."""

    dataflows: dict[str, DataflowSettling]
    restarting: builtins.list[int]
    dead: builtins.list[int]


class ControllerAPI(ControlAPI):
    """`ControlAPI`, and a handle's own calls to the controller."""

    @operation
    def closing(self, name: str) -> None:
        """A client closed the dataflow's sources: it drains, then it is finished."""

    @operation
    def settling(self, names: Sequence[str] | None = None) -> PoolSettling:
        """Each dataflow of `names` (None: every live one, or ended with results kept):
        its state, cause, executors and migration under way; and the executors restarting
        or gone."""

    @operation
    def checkpoint_now(self, names: Sequence[str] | None = None,
                       timeout_s: float = CALL_TIMEOUT_S) -> dict[str, bool]:
        """Checkpoint these dataflows (every live one with checkpoints, by default) now,
        in parallel, within `timeout_s`; which completed."""

    @operation
    def lifecycle_counts(self) -> tuple[builtins.list[tuple[str, str, int]], dict[str, int]]:
        """(transitions per (tenant, state) since the pool started, dataflows per state now)."""

    @operation
    def critical_path(self) -> Explanation:
        """The newest snapshot's critical participation per operator and executor."""

    @operation
    def executor_handles(self) -> builtins.list[Any]:
        """Each executor's Ray handle, by index (None for one retired for good)."""

    @operation
    def config_dict(self) -> dict[str, Any]:
        """The pool's configuration (`RuntimeConfig.to_dict`)."""

    @operation
    def code_id(self) -> str:
        """The digest of the code the controller runs (`codebase.code_id`)."""

    @operation
    def shutdown(self, forget: bool = True) -> None:
        """Stop the executors. `forget`: the pool is stopped for good (its registry and
        checkpoints go); else a next controller on this storage restores its dataflows."""
