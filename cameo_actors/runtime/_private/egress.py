"""Egress: the outputs a dataflow's sinks and error output keep on an executor,
read with offsets and kept until a reader commits them (exactly once).

A sink's results go to its `ResultLog`; a full log holds the sink (flow
control) until a reader commits. The error output is a log with offsets too,
for a reader (the Spark tier) to consume exactly once; beyond
`ERROR_LOG_CAPACITY` unread records the oldest are dropped and counted.
Recent error records and counts per (step, kind) are kept apart, for status.
"""

from __future__ import annotations

from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from cameo_actors.operators.base import ErrorRecord, Event
from cameo_actors.runtime.boundary import ErrorLogOffsets, LogOffsets, ResultRow

if TYPE_CHECKING:
    from cameo_actors.dataflow.spec import DataflowSpec
    from cameo_actors.runtime._private.activation import Activation

#: Unread records of a dataflow's error output kept per executor.
ERROR_LOG_CAPACITY = 100_000


class ResultLog:
    """A sink's results with offsets, kept until a reader commits them.

    Each row is (event, ingest_ms, egress_ms). Offsets count rows from the
    first result ever appended, so a reader that restarts resumes exactly.
    """

    def __init__(self) -> None:
        self._rows: deque[ResultRow] = deque()
        self._base = 0  # offset of self._rows[0]

    @property
    def end_offset(self) -> int:
        return self._base + len(self._rows)

    @property
    def committed_offset(self) -> int:
        return self._base

    def __len__(self) -> int:
        return len(self._rows)

    def append(self, events: list[Event], ingest_ms: float, egress_ms: float) -> None:
        self._rows.extend((e, ingest_ms, egress_ms) for e in events)

    def read(self, start: int, end: int | None = None) -> list[ResultRow]:
        """Rows with offsets in [start, end); start below the committed offset is an error."""
        if start < self._base:
            raise ValueError(f"offset {start} was committed already (first kept: {self._base})")
        stop = self.end_offset if end is None else min(end, self.end_offset)
        return [self._rows[i - self._base] for i in range(start, max(start, stop))]

    def commit(self, offset: int) -> None:
        """Drop rows below `offset` (a reader persisted them)."""
        while self._base < offset and self._rows:
            self._rows.popleft()
            self._base += 1


class ErrorLog:
    """A dataflow's error output: recent records and counts per (step, kind)."""

    def __init__(self, keep: int = 10_000) -> None:
        self.records: deque[ErrorRecord] = deque(maxlen=keep)
        self.counts: Counter[tuple[str, str]] = Counter()

    def extend(self, errors: list[ErrorRecord]) -> None:
        self.records.extend(errors)
        self.counts.update((e.step, e.kind) for e in errors)


@dataclass
class DataflowOutputs:
    """The outputs of one dataflow on one executor."""

    results: dict[str, ResultLog]  # sink activation -> its log
    errors: ErrorLog = field(default_factory=ErrorLog)
    error_log: ResultLog = field(default_factory=ResultLog)
    error_log_dropped: int = 0


class Egress:
    """The result logs and error outputs of the dataflows hosted on one executor.

    Args:
        result_capacity: results kept uncommitted per sink before the sink is held.
        hold, release: hold a sink on a full log / let it run again (flow control).
    """

    def __init__(self, result_capacity: int, hold: Callable[[str], None],
                 release: Callable[[str], None]) -> None:
        self.result_capacity = result_capacity
        self._hold = hold
        self._release = release
        self.dataflows: dict[str, DataflowOutputs] = {}

    def open(self, spec: DataflowSpec, hosted: list[Activation]) -> None:
        self.dataflows[spec.name] = DataflowOutputs({a.id: ResultLog() for a in hosted if a.is_sink})

    def close(self, dataflow: str, ids: list[str]) -> None:
        self.dataflows.pop(dataflow, None)

    # -- written by the worker thread ------------------------------------------------------
    def results(self, dataflow: str, sink: str, events: list[Event], ingest_ms: float,
                now: float) -> None:
        log = self.dataflows[dataflow].results[sink]
        log.append(events, ingest_ms, now)
        if len(log) >= self.result_capacity:
            self._hold(sink)

    def errors(self, dataflow: str, errors: list[ErrorRecord], ingest_ms: float,
               now: float) -> None:
        out = self.dataflows[dataflow]
        out.errors.extend(errors)
        log = out.error_log
        log.append([e.to_dict() for e in errors], ingest_ms, now)
        excess = len(log) - ERROR_LOG_CAPACITY
        if excess > 0:
            log.commit(log.committed_offset + excess)
            out.error_log_dropped += excess

    # -- read by readers -------------------------------------------------------------------
    def read_results(self, dataflow: str, sink: str, start: int, end: int | None
                     ) -> list[ResultRow]:
        return self.dataflows[dataflow].results[sink].read(start, end)

    def commit_results(self, dataflow: str, sink: str, offset: int) -> None:
        log = self.dataflows[dataflow].results[sink]
        log.commit(offset)
        if len(log) < self.result_capacity // 2:
            self._release(sink)

    def result_offsets(self, dataflow: str) -> dict[str, LogOffsets]:
        """sink activation -> (committed offset, end offset)."""
        return {aid: (log.committed_offset, log.end_offset)
                for aid, log in self.dataflows[dataflow].results.items()}

    def read_errors(self, dataflow: str, start: int, end: int | None
                    ) -> tuple[int, list[ResultRow]]:
        """(offset of the first row, rows) of the error output from `start` (or from the
        first kept row, when rows below it were dropped unread)."""
        log = self.dataflows[dataflow].error_log
        first = max(start, log.committed_offset)
        return first, log.read(first, end)

    def commit_errors(self, dataflow: str, offset: int) -> None:
        self.dataflows[dataflow].error_log.commit(offset)

    def error_offsets(self, dataflow: str) -> ErrorLogOffsets:
        """(committed offset, end offset, records dropped unread) of the error output."""
        out = self.dataflows[dataflow]
        return out.error_log.committed_offset, out.error_log.end_offset, out.error_log_dropped

    def error_records(self, dataflow: str, limit: int) -> list[dict[str, Any]]:
        return [e.to_dict() for e in list(self.dataflows[dataflow].errors.records)[-limit:]]

    def error_counts(self, dataflow: str) -> dict[str, int]:
        """"step:kind" -> records."""
        return {f"{s}:{k}": n for (s, k), n in self.dataflows[dataflow].errors.counts.items()}
