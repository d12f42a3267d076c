"""Egress: the outputs a dataflow's sinks and error output keep on an executor,
read with offsets and kept until a reader commits them (exactly once).

A sink's results go to its `ResultLog`; a full log (by rows, or by bytes: half
the dataflow's state budget shared by its sinks) holds the sink (flow control)
until a reader commits, so unread results make writers wait, not the
dataflow fail. The error output is a log with offsets too,
for a reader (the Spark tier) to consume exactly once; beyond
`ERROR_LOG_CAPACITY` unread records the oldest are dropped and counted.
Recent error records and counts per (step, kind) are kept apart, for status.

With exactly-once delivery a result log is readable only up to its *stable*
offset: where it ended at the sink's barrier of the last completed checkpoint
(`checkpoint.py`). A recovery restores the log as it was at that barrier and
replays what followed, so a reader never sees a row that a failure could take
back or repeat. With at-least-once delivery rows are readable at once, and each
carries an id (`ID_FIELD`: a hash of the row and how many identical rows came
before it) that a replay after a recovery gives the same row again, so a sink
can drop the rows it has.
"""

from __future__ import annotations

import bisect
import hashlib
import itertools
from collections import Counter, OrderedDict, deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import msgpack

from cameo_actors.operators.base import ErrorRecord, Event
from cameo_actors.operators.column_ipc import from_ipc, to_ipc
from cameo_actors.operators.column_results import results_table
from cameo_actors.operators.columns import Columns, is_columns, rows
from cameo_actors.runtime._private.executor.footprint import approx_bytes
from cameo_actors.runtime.boundary import ErrorLogOffsets, LogOffsets, ResultRow

if TYPE_CHECKING:
    from cameo_actors.dataflow.spec import DataflowSpec
    from cameo_actors.runtime._private.executor.activation import Activation

#: Unread records of a dataflow's error output kept per executor.
ERROR_LOG_CAPACITY = 100_000
#: What a row costs beside its event: the (event, ingest_ms, egress_ms) tuple and two floats.
ROW_OVERHEAD = 120
#: The same for a row of columns: its two times, once per chunk, and the offsets of strings.
COLUMN_ROW_OVERHEAD = 8
#: A log's bytes per row before it held any: a guess on the high side (a row of a few
#: fields costs about 500 bytes), so that a first burst cannot pass the log's bytes.
FIRST_ROW_BYTES = 1_024
#: The field of an at-least-once result that names it across replays.
ID_FIELD = "_id"
#: Distinct rows whose count of repeats a sink remembers for their ids (the oldest go first:
#: an identical row further apart than this may get an id again).
ID_MEMORY = 100_000

#: What a sink appended at once: (events, ingest_ms, egress_ms).
Chunk = tuple[Any, float, float]


class ResultLog:
    """A sink's results with offsets, kept until a reader commits them.

    The log holds what the sink appended, a chunk per message: (events, ingest_ms,
    egress_ms), the events a list of dicts or Arrow columns (a sink of columns keeps
    them: no object per row until a reader asks for rows). A row is (event, ingest_ms,
    egress_ms). Offsets count rows from the first result ever appended, so a reader
    that restarts resumes exactly.
    """

    def __init__(self, exactly_once: bool = False, ids: bool = False) -> None:
        # The chunks from `_head` on are kept (those before it were committed; dropped in
        # bulk), `_starts` their first rows' offsets: a read finds its chunk by bisection.
        self._chunks: list[Chunk] = []
        self._starts: list[int] = []
        self._sizes: list[int] = []  # their estimated bytes, summed at a commit in one C loop
        self._head = 0
        self._base = 0  # offset of the first row kept
        self._rows = 0  # rows kept
        self.bytes = 0  # estimated memory of the rows kept
        self.row_bytes = FIRST_ROW_BYTES  # per row, of the rows kept last (kept when empty)
        #: rows below this offset are readable (None: every row, at once)
        self.stable: int | None = 0 if exactly_once else None
        #: at-least-once with ids: row hash -> rows of that hash so far
        self.seen: OrderedDict[str, int] | None = OrderedDict() if ids else None
        #: checkpoint -> the end offset at this sink's barrier of it
        self.marks: dict[int, int] = {}

    @property
    def readable_end(self) -> int:
        return self.end_offset if self.stable is None else self.stable

    def unread(self) -> tuple[int, int]:
        """(rows, estimated bytes) readable and not committed: what holds the sink when a
        reader is behind. Rows waiting for a checkpoint do not count: the sink, and every
        upstream waiting on its credits, must run to pass the checkpoint's barrier that
        makes them readable."""
        rows = self.readable_end - self._base
        return rows, self.bytes * rows // self._rows if self._rows else 0

    @property
    def end_offset(self) -> int:
        return self._base + self._rows

    @property
    def committed_offset(self) -> int:
        return self._base

    def __len__(self) -> int:
        return self._rows

    def append(self, events: list[Event] | Columns, ingest_ms: float, egress_ms: float) -> None:
        if self.seen is not None:  # ids hash each row
            events = [self._with_id(e) if isinstance(e, dict) else e for e in rows(events)]
        if not len(events):
            return
        self._starts.append(self.end_offset)
        self._chunks.append((events, ingest_ms, egress_ms))
        self._sizes.append(_chunk_bytes(events))
        self._rows += len(events)
        self.bytes += self._sizes[-1]
        self.row_bytes = max(1, self.bytes // self._rows)

    def _slices(self, start: int, end: int | None) -> Iterator[Chunk]:
        """The chunks' parts with offsets in [start, min(end, readable end))."""
        if start < self._base:
            raise ValueError(f"offset {start} was committed already (first kept: {self._base})")
        stop = self.readable_end if end is None else min(end, self.readable_end)
        starts, chunks = self._starts, self._chunks
        for i in range(max(self._head, bisect.bisect_right(starts, start, lo=self._head) - 1),
                       len(chunks)):
            at, (events, ingest_ms, egress_ms) = starts[i], chunks[i]
            if at >= stop:
                return
            n = len(events)
            lo, hi = max(start - at, 0), min(stop - at, n)
            if lo < hi:
                yield (events if lo == 0 and hi == n else events[lo:hi]), ingest_ms, egress_ms

    def read(self, start: int, end: int | None = None) -> list[ResultRow]:
        """Rows with offsets in [start, end); start below the committed offset is an error."""
        return [(e, ingest_ms, egress_ms) for events, ingest_ms, egress_ms
                in self._slices(start, end) for e in rows(events)]

    def read_columns(self, start: int, end: int | None = None) -> Any:
        """The rows of `read` as one table: the events' columns, then `_ingest_ms` and
        `_egress_ms`. ResultsNotColumnar if the rows' values do not form columns."""
        return results_table(list(self._slices(start, end)))

    def _with_id(self, event: Event) -> Event:
        """The event with its id: the same for the same row after a replay (the counts
        are in the checkpoint), different for identical rows."""
        digest = hashlib.blake2b(msgpack.packb(sorted(event.items()), use_bin_type=True),
                                 digest_size=8).hexdigest()
        seen = self.seen
        assert seen is not None
        n = seen.pop(digest, 0) + 1
        seen[digest] = n
        if len(seen) > ID_MEMORY:
            seen.popitem(last=False)
        return {**event, ID_FIELD: f"{digest}-{n}"}

    def snapshot(self, ckpt: int) -> tuple[int, list[Any], list[Any] | None]:
        """The log at checkpoint `ckpt`'s barrier: (first offset, chunks not committed, the
        counts behind at-least-once ids); columns as Arrow IPC (the part is msgpack)."""
        self.marks[ckpt] = self.end_offset
        seen = [[h, n] for h, n in self.seen.items()] if self.seen is not None else None
        chunks = [(to_ipc(events) if is_columns(events) else events, ingest_ms, egress_ms)
                  for events, ingest_ms, egress_ms in self._chunks[self._head:]]
        return self._base, chunks, seen

    def checkpointed(self, ckpt: int) -> None:
        """Checkpoint `ckpt` completed: the rows before its barrier can be read."""
        done = [c for c in self.marks if c <= ckpt]
        if done and self.stable is not None:
            self.stable = max(self.stable, self.marks[max(done)])
        for c in done:
            del self.marks[c]

    def restore(self, base: int, chunks: list[Any], seen: list[Any] | None = None) -> None:
        """The log as a checkpoint has it: every row of it readable (it completed)."""
        if self.seen is not None and seen is not None:
            self.seen = OrderedDict((h, n) for h, n in seen)
        self._chunks = [(from_ipc(events) if isinstance(events, bytes) else events,
                         ingest_ms, egress_ms) for events, ingest_ms, egress_ms in chunks]
        self._starts = list(itertools.accumulate((len(e) for e, _, _ in self._chunks[:-1]),
                                                 initial=base))[:len(self._chunks)]
        self._sizes = [_chunk_bytes(events) for events, _, _ in self._chunks]
        self._head = 0
        self._base = base
        self._rows = sum(len(events) for events, _, _ in self._chunks)
        self.bytes = sum(self._sizes)
        self.row_bytes = max(1, self.bytes // self._rows) if self._rows else FIRST_ROW_BYTES
        if self.stable is not None:
            self.stable = self.end_offset
        self.marks.clear()

    def commit(self, offset: int) -> None:
        """Drop rows below `offset` (a reader persisted them). It runs on the worker thread
        and a reader may commit thousands of chunks at once: the whole ones are found by
        bisection and their sizes summed in C, not walked one by one."""
        offset = min(offset, self.end_offset)
        if offset <= self._base:
            return
        chunks, starts, sizes = self._chunks, self._starts, self._sizes
        i = bisect.bisect_right(starts, offset, lo=self._head) - 1  # the last to start <= offset
        dropped = sum(sizes[self._head:i])
        events, ingest_ms, egress_ms = chunks[i]
        cut, n = offset - starts[i], len(events)
        if cut == n:
            dropped += sizes[i]
            i += 1
        elif cut:  # a slice of a batch is zero-copy; of a list, a copy of what stays
            part = sizes[i] * cut // n
            chunks[i], starts[i], sizes[i] = (events[cut:], ingest_ms, egress_ms), offset, \
                sizes[i] - part
            dropped += part
        self._head = i
        self._rows -= offset - self._base
        self._base = offset
        self.bytes = max(0, self.bytes - dropped) if self._rows else 0
        if self._head > 64 and self._head * 2 > len(chunks):  # drop committed chunks in bulk
            del chunks[:self._head], starts[:self._head], sizes[:self._head]
            self._head = 0


def _chunk_bytes(events: Any) -> int:
    """Estimated memory of a chunk: one event measured per list (the estimate must stay
    cheap), the buffers of columns."""
    if is_columns(events):  # a slice's nbytes is its share of the buffers
        return int(events.nbytes) + COLUMN_ROW_OVERHEAD * len(events)
    return (approx_bytes(events[0]) + ROW_OVERHEAD) * len(events) if events else 0


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
                 release: Callable[[str], None], state_budget_bytes: int = 1 << 62,
                 delivery: Callable[[DataflowSpec], str | None] = lambda spec: None) -> None:
        self.result_capacity = result_capacity
        self._delivery = delivery
        self.state_budget_bytes = state_budget_bytes
        self._hold = hold
        self._release = release
        self.dataflows: dict[str, DataflowOutputs] = {}

    def open(self, spec: DataflowSpec, hosted: list[Activation]) -> None:
        budget = spec.limits.state_bytes or self.state_budget_bytes
        mode = self._delivery(spec)
        sinks = sum(s.parallelism for s in spec.sinks)
        self.dataflows[spec.name] = DataflowOutputs(
            {a.id: ResultLog(mode == "exactly_once", mode == "at_least_once")
             for a in hosted if a.is_sink},
            log_bytes=budget // (2 * sinks))

    def close(self, dataflow: str, ids: list[str]) -> None:
        self.dataflows.pop(dataflow, None)

    # -- written by the worker thread ------------------------------------------------------
    def results(self, dataflow: str, sink: str, events: list[Event], ingest_ms: float,
                now: float) -> None:
        out = self.dataflows[dataflow]
        log = out.results[sink]
        log.append(events, ingest_ms, now)
        self._hold_if_full(out, sink)

    def _hold_if_full(self, out: DataflowOutputs, sink: str) -> None:
        rows, size = out.results[sink].unread()
        if rows >= self.result_capacity or size >= out.log_bytes:
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

    def read_result_columns(self, dataflow: str, sink: str, start: int, end: int | None) -> Any:
        """The rows of `read_results` as an Arrow table (`ResultLog.read_columns`)."""
        return self.dataflows[dataflow].results[sink].read_columns(start, end)

    def commit_results(self, dataflow: str, sink: str, offset: int) -> None:
        out = self.dataflows[dataflow]
        log = out.results[sink]
        log.commit(offset)
        rows, size = log.unread()
        if rows < self.result_capacity // 2 and size < out.log_bytes // 2:
            self._release(sink)

    def result_offsets(self, dataflow: str) -> dict[str, LogOffsets]:
        """sink activation -> (committed offset, end offset of what can be read)."""
        return {aid: (log.committed_offset, log.readable_end)
                for aid, log in self.dataflows[dataflow].results.items()}

    def readable_past(self, dataflow: str, after: dict[str, int]) -> bool:
        """Whether a sink log of `dataflow` here has rows a reader at `after` (sink
        activation -> its next offset; a log it lacks: from the committed offset) has
        not read; also when the dataflow is not here (a caller asks and learns why)."""
        out = self.dataflows.get(dataflow)
        if out is None:
            return True
        return any(log.readable_end > after.get(aid, log.committed_offset)
                   for aid, log in out.results.items())

    def checkpointed(self, dataflow: str, ckpt: int) -> None:
        out = self.dataflows.get(dataflow)
        if out is None:
            return
        for sink, log in out.results.items():
            log.checkpointed(ckpt)
            self._hold_if_full(out, sink)

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

    def awaiting_checkpoint(self, dataflow: str) -> int:
        """Result rows of `dataflow` here that a reader cannot see before the next checkpoint."""
        out = self.dataflows.get(dataflow)
        return sum(log.end_offset - log.readable_end for log in out.results.values()) if out else 0

    def room(self, dataflow: str, queued: dict[str, int]) -> dict[str, int]:
        """Sink -> the events its log here can still take, by rows and by bytes (at its
        bytes per row, or the last known), counting the rows that wait for a checkpoint and `queued` (events
        in the sink's mailbox) as taken: at 0 a client is refused more events. The caller
        compares it with the events its sources took in and have not run: those reach the
        log after the refusals start, and the next checkpoint makes them readable at
        once, past the dataflow's state budget if nobody counted them. (The sink itself
        is held by readable rows only, see `ResultLog.unread`.)"""
        out = self.dataflows.get(dataflow)
        if out is None:
            return {}
        rooms = {}
        for sink, log in out.results.items():
            by_bytes = (out.log_bytes - log.bytes) // log.row_bytes
            rooms[sink] = max(0, min(self.result_capacity - len(log), by_bytes)
                              - queued.get(sink, 0))
        return rooms

    def footprint(self, dataflow: str) -> int:
        """Estimated bytes of the dataflow's readable unread results and error output here."""
        out = self.dataflows.get(dataflow)
        if out is None:
            return 0
        # Rows waiting for a checkpoint are not counted: they are readable (or the
        # checkpoint failed and is tried again) within an interval, and a dataflow must not
        # fail because a fast writer outran one checkpoint. Nor, for the same reason, what
        # a log holds past the size that holds its sink: a checkpoint makes up to an
        # interval's results readable at once, the sink is then held until a reader
        # commits (a full log is flow control, answered 429, not a state overrun).
        return sum(min(log.unread()[1], out.log_bytes) for log in out.results.values()) \
            + out.error_log.bytes
