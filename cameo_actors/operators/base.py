"""The contract every operator keeps: a pure state machine over batches.

An operator receives batches of events (dicts) and watermarks on numbered
input ports and returns an `Output`: events for its main output, error records
for the dataflow's error output, and its output watermark when that advanced.
Operators never read the clock, never sleep and never do I/O; the runtime
(in-process or on Ray) owns time, queues and transport.

Watermark rule, kept by `Operator.on_watermark`: an operator's input watermark
is the minimum over its ports; when it advances, `advance_to` runs (windows
fire there) and the output lists the results *before* the new watermark, so a
downstream operator never sees a result as late.
"""

from __future__ import annotations

import math
import reprlib
from dataclasses import dataclass, field
from typing import Any, TypeAlias

from cameo_actors.operators.columns import Columns, rows

Event = dict[str, Any]
#: A message's events: rows, or columns (`columns.py`).
Events: TypeAlias = list[Event] | Columns

#: Fewer events than this run as rows: a kernel's calls cost tens of µs whatever the
#: batch, more than a few rows take (a latency-sensitive tenant's batches of ten).
MIN_COLUMN_EVENTS = 128

#: The watermark that ends a stream: every window fires, nothing is late after it.
END_OF_STREAM = math.inf
#: Before any watermark arrived.
NO_WATERMARK = -math.inf


@dataclass(slots=True)
class ErrorRecord:
    """A record the dataflow could not process, kept with the reason, never dropped.

    kind is one of: "malformed" (missing field, wrong type, a value out of bounds),
    "unencodable" (refused at the edge: msgpack cannot carry it), "late" (behind the
    watermark), "user_function" (a user callable raised).
    """

    step: str
    kind: str
    message: str
    event: Any

    def to_dict(self) -> dict[str, Any]:
        return {"step": self.step, "kind": self.kind, "message": self.message, "event": self.event}


_SHORT = reprlib.Repr()
_SHORT.maxlevel, _SHORT.maxstring, _SHORT.maxother, _SHORT.maxlong = 3, 60, 60, 40


def short_repr(value: Any) -> str:
    """A value as an error message shows it: short, and safe on any value (deep
    nesting, huge ints, a failing __repr__).

    >>> short_repr(2**200), short_repr([[[[1]]]])
    ('<int of 201 bits>', '[[[[...]]]]')
    """
    if type(value) is int and value.bit_length() > 128:  # repr refuses beyond 4300 digits
        return f"<int of {value.bit_length()} bits>"
    try:
        return _SHORT.repr(value)[:120]
    except Exception:  # a user type whose __repr__ raises
        return f"<{type(value).__name__}>"


@dataclass(slots=True)
class Output:
    #: Rows, or columns where the step has a columnar kernel (the runtime reads both).
    events: list[Event] = field(default_factory=list)
    errors: list[ErrorRecord] = field(default_factory=list)
    #: The operator's new output watermark, or None when it did not advance.
    watermark: float | None = None


class Operator:
    """Base of all operators. Subclasses override `process` and, if stateful,
    `advance_to`, `snapshot` and `restore`.

    Attributes:
        step_id: the spec step this operator runs (named in every error).
        n_inputs: number of input ports (2 for a join, n for a union).
    """

    #: Stateful operators keep per-key state and need keyed routing.
    stateful: bool = False

    def __init__(self, step_id: str, n_inputs: int = 1) -> None:
        self.step_id = step_id
        self.n_inputs = n_inputs
        self._port_watermarks = [NO_WATERMARK] * n_inputs
        self.watermark = NO_WATERMARK

    # -- what the runtime calls -------------------------------------------------
    def on_batch(self, events: Events, port: int = 0) -> Output:
        """Events as rows (a list of dicts) or as columns (an Arrow record batch, which
        the operator reads as rows unless `process_columns` takes it)."""
        out = Output()
        if events.__class__ is not list and len(events) >= MIN_COLUMN_EVENTS \
                and self.process_columns(events, port, out):
            return out
        self.process(rows(events), port, out)
        return out

    def on_watermark(self, watermark: float, port: int = 0) -> Output:
        out = Output()
        if watermark > self._port_watermarks[port]:
            self._port_watermarks[port] = watermark
            low = min(self._port_watermarks)
            if low > self.watermark:
                self.watermark = low
                self.advance_to(low, out)
                out.watermark = low
        return out

    # -- what subclasses implement -------------------------------------------
    def process(self, events: list[Event], port: int, out: Output) -> None:
        raise NotImplementedError

    def process_columns(self, batch: Columns, port: int, out: Output) -> bool:
        """Process a columnar batch as `process` would its rows, or decline (False, with
        `out` untouched): the batch then runs as rows. See `columns.py`."""
        return False

    def advance_to(self, watermark: float, out: Output) -> None:
        """The input watermark rose to `watermark`: emit what is now complete."""

    def snapshot(self) -> dict[str, Any]:
        """State to restore from, as msgpack-able data (dicts, lists, numbers, strings)."""
        return {"port_watermarks": list(self._port_watermarks), "watermark": self.watermark}

    def restore(self, state: dict[str, Any]) -> None:
        self._port_watermarks = list(state["port_watermarks"])
        self.watermark = state["watermark"]

    # -- a checkpoint's snapshot in steps (the runtime's) -------------------------------------
    def begin_snapshot(self, incremental: bool = False) -> dict[str, Any]:
        """A checkpoint's cut: the snapshot, but for the state `snapshot_step` packs in
        bounded steps (nothing may change the state until the last: the runtime runs
        nothing else at the activation meanwhile). The default is the whole snapshot at
        once.

        `incremental`: the previous cut's snapshot is in a completed checkpoint, so the
        steps may pack only the state changed since; the operator then says so with
        ``"delta": True`` in the head, and `restore` takes the snapshots from the last
        full one on, their "pieces" one after the other."""
        return self.snapshot()

    def snapshot_step(self, budget: int) -> bool:
        """Pack about `budget` more entries of the state at the cut; True once all are."""
        return True

    def index_step(self, budget: int) -> bool:
        """After a `restore`: find the bins of about `budget` more restored keys (what
        moving bins needs; the first move does what is left at once); True once all are
        found. The runtime runs these steps among other work, bounded."""
        return True

    def disk_bytes(self) -> int:
        """Bytes of its state on disk (a store's table files); 0 when all is in memory
        (what `approx_bytes` measures)."""
        return 0

    def end_snapshot(self, head: dict[str, Any]) -> dict[str, Any]:
        """The snapshot of the cut: `head` (`begin_snapshot`'s) with what the steps packed
        under "pieces" (msgpack objects, which the runtime stores as they are, and gives
        back unpacked or not); call once `snapshot_step` said True. `restore` takes it
        as it takes `snapshot`'s."""
        return head

    # -- helpers -----------------------------------------------------------------
    def error(self, out: Output, kind: str, message: str, event: Any) -> None:
        out.errors.append(ErrorRecord(self.step_id, kind, message, event))
