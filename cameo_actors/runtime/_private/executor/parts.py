"""What the executor's parts (`core.py`) ask of one another: typed once, here.

The parts never reach into each other's fields; those that act on the message
path (a plan change sending markers, a checkpoint sending its barrier on) get it
as a `MessagePath`, which `ExecutorCore` implements.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from cameo_actors.dataflow.spec import DataflowSpec
    from cameo_actors.runtime._private.executor.activation import Activation
    from cameo_actors.scheduling import Message


class DataflowScoped(Protocol):
    """A part of the executor that keeps state per dataflow."""

    def open(self, spec: DataflowSpec, hosted: list[Activation]) -> None: ...
    def close(self, dataflow: str, ids: list[str]) -> None: ...


class MessagePath(Protocol):
    """The executor's message path, for parts that put messages on it."""

    def route(self, sender: str, msg: Message) -> None:
        """`msg`, sent by activation `sender`, to its target here or on another executor."""

    def control(self, spec: DataflowSpec, target: str, payload: list[Any], now: float,
                first: bool = False) -> None:
        """A control message from the controller into `target`'s mailbox, a barrier there
        (`first`: ahead of every message pending there)."""

    def send_barriers(self, spec: DataflowSpec, sender: str, sends: list[Any], now: float) -> None:
        """Barriers (watermarks, control) `sender` sends outside its message path:
        (target, port, payload) each."""
