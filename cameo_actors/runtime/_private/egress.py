"""Egress: the outputs a dataflow's sinks and error output keep on an executor,
read with offsets and kept until a reader commits them (exactly once).

A sink's results go to its `ResultLog`; a full log (by rows, or by bytes: half
the dataflow's state budget shared by its sinks) holds the sink (flow control)
until a reader commits, so unread results make writers wait, not the
dataflow fail. The error output is a log with offsets too,
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
from cameo_actors.runtime._private.footprint import approx_bytes
from cameo_actors.runtime.boundary import ErrorLogOffsets, LogOffsets, ResultRow

if TYPE_CHECKING:
    from cameo_actors.dataflow.spec import DataflowSpec
    from cameo_actors.runtime._private.activation import Activation

#: Unread records of a dataflow's error output kept per executor.
ERROR_LOG_CAPACITY = 100_000
#: What a row costs beside its event: the (event, ingest_ms, egress_ms) tuple and two floats.
ROW_OVERHEAD = 120


class ResultLog:
    """A sink's results with offsets, kept until a reader commits them.

    Each row is (event, ingest_ms, egress_ms). Offsets count rows from the
    first result ever appended, so a reader that restarts resumes exactly.
    """

    def __init__(self) -> None:
        self._rows: deque[ResultRow] = deque()
        self._base = 0  # offset of self._rows[0]
        self.bytes = 0  # estimated memory of the rows kept

    @property
    def end_offset(self) -> int:
        return self._base + len(self._rows)

    @property
    def committed_offset(self) -> int:
        return self._base

    def __len__(self) -> int:
        return len(self._rows)

    def append(self, events: list[Event], ingest_ms: float, egress_ms: float) -> None:
        if events:  # one event measured per batch: the estimate must stay cheap
            self.bytes += (approx_bytes(events[0]) + ROW_OVERHEAD) * len(events)
        self._rows.extend((e, ingest_ms, egress_ms) for e in events)

    def read(self, start: int, end: int | None = None) -> list[ResultRow]:
        """Rows with offsets in [start, end); start below the committed offset is an error."""
        if start < self._base:
            raise ValueError(f"offset {start} was committed already (first kept: {self._base})")
        stop = self.end_offset if end is None else min(end, self.end_offset)
        return [self._rows[i - self._base] for i in range(start, max(start, stop))]

    def commit(self, offset: int) -> None:
        """Drop rows below `offset` (a reader persisted them)."""
        before = len(self._rows)
        while self._base < offset and self._rows:
            self._rows.popleft()
            self._base += 1
        if before:
            self.bytes = self.bytes * len(self._rows) // before


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
    log_bytes: int  # a log holds its sink at this many bytes
    errors: ErrorLog = field(default_factory=ErrorLog)
    error_log: ResultLog = field(default_factory=ResultLog)
    error_log_dropped: int = 0


class Egress:
    """The result logs and error outputs of the dataflows hosted on one executor.

    Args:
        result_capacity: results kept uncommitted per sink before the sink is held.
        hold, release: hold a sink on a full log / let it run again (flow control).
        state_budget_bytes: a dataflow's state budget when its spec sets none; half of it
            is shared by its sinks' logs.
    """

    def __init__(self, result_capacity: int, hold: Callable[[str], None],
                 release: Callable[[str], None], state_budget_bytes: int = 1 << 62) -> None:
        self.result_capacity = result_capacity
        self.state_budget_bytes = state_budget_bytes
        self._hold = hold
        self._release = release
        self.dataflows: dict[str, DataflowOutputs] = {}

    def open(self, spec: DataflowSpec, hosted: list[Activation]) -> None:
        budget = spec.limits.state_bytes or self.state_budget_bytes
        sinks = sum(s.parallelism for s in spec.sinks)
        self.dataflows[spec.name] = DataflowOutputs(
            {a.id: ResultLog() for a in hosted if a.is_sink}, log_bytes=budget // (2 * sinks))

    def close(self, dataflow: str, ids: list[str]) -> None:
        self.dataflows.pop(dataflow, None)

    # -- written by the worker thread ------------------------------------------------------
    def results(self, dataflow: str, sink: str, events: list[Event], ingest_ms: float,
                now: float) -> None:
        out = self.dataflows[dataflow]
        log = out.results[sink]
        log.append(events, ingest_ms, now)
        if len(log) >= self.result_capacity or log.bytes >= out.log_bytes:
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
        out = self.dataflows[dataflow]
        log = out.results[sink]
        log.commit(offset)
        if len(log) < self.result_capacity // 2 and log.bytes < out.log_bytes // 2:
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

    def held_full(self, dataflow: str) -> list[str]:
        """The sinks of `dataflow` here whose log is full (held until a reader commits)."""
        out = self.dataflows.get(dataflow)
        if out is None:
            return []
        return [sink for sink, log in out.results.items()
                if len(log) >= self.result_capacity or log.bytes >= out.log_bytes]

    def footprint(self, dataflow: str) -> int:
        """Estimated bytes of the dataflow's unread results and error output here."""
        out = self.dataflows.get(dataflow)
        if out is None:
            return 0
        return sum(log.bytes for log in out.results.values()) + out.error_log.bytes
