"""What a Kafka source's reads become (`kafka_reader`): each partition's read state and
the instance's watermark of them, a read's JSON values parsed into the source's columns
at once, or each record an event of its own (the rows).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from cameo_actors.runtime._private.executor.kafka_batches import json_columns, native


@dataclass
class PartitionRead:
    """What a source instance read of one partition."""

    topic: str
    partition: int
    next_offset: int = -1  # read up to; -1: not read yet (where startingOffsets says)
    taken: int = -1  # taken in by the source instance up to (its position)
    at_end: bool = False  # read to its end, nothing read since (a bounded read ends when
    # all are; an idle partition is one at its end for the idle timeout)
    max_event_ms: float = -math.inf
    at_end_since: float = 0.0  # when it reached its end (monotonic s)
    high: int = -1  # the partition's end offset, last seen (its lag: high - taken)


def watermark_of(reads: list[PartitionRead], now: float, idle_s: float, lateness: float
                 ) -> float:
    """A source instance's watermark: the least of its partitions' (the largest event
    time read there, less the allowed lateness), those idle left out; all idle, the
    largest, so that windows still close. Idle: read to its end, nothing new for `idle_s`,
    and no fetch told of records beyond. A partition idle that gets records again may
    bring events behind the watermark (late: the error output), as with any idleness: a
    source whose partitions pause for long should have an `idle_timeout_ms` longer.

    >>> quiet = PartitionRead("t", 1, next_offset=5, at_end=True, max_event_ms=900.0, high=5)
    >>> watermark_of([PartitionRead("t", 0, max_event_ms=500.0), quiet], 10.0, 1.0, 40.0)
    460.0
    """
    if not reads:
        return -math.inf
    active = [r.max_event_ms for r in reads
              if not r.at_end or now - r.at_end_since < idle_s or r.high > r.next_offset]
    return (min(active) if active else max(r.max_event_ms for r in reads)) - lateness


#: Records between two watermarks of a source instance: as many as a pushed call of a
#: thousand events (an event late through the API is late here too).
WATERMARK_EVERY = 1000
#: Records in one message at most where blocks are joined (`column_messages`): as the
#: Spark tier's column messages. Each step of bench.kafka's dataflow took under 1 ms
#: for 16,000 events, a fifth of the scheduler's quantum.
JOINED_MAX = 16 * WATERMARK_EVERY


def column_messages(batch: Any, advance: Callable[[int, int], float], watermark: float,
                    time_field: str | None, join: bool) -> tuple[list[Any], float]:
    """A read's records as a source instance's messages, and its watermark after them:
    blocks of WATERMARK_EVERY records, each followed by the watermark after it where that
    moved (`advance(i, j)`: the watermark once records i to j are seen).

    Where `join`, blocks go as one message (up to JOINED_MAX records, then the watermark
    after the last) while no event of a block is behind the watermark before it. Such an
    event is late nowhere (a step rejects an event behind its watermark, `t < wm`, or
    one whose window or session the watermark ended, which holds only earlier events),
    so the cut changes no result, and the steps after the source pay their cost per
    message once for many blocks (the Kafka arm of `bench.kafka` measures it).
    Only where the steps that judge lateness read the source's event time as it is
    (`streams.time_reaches_as_is`).

    >>> import pyarrow as pa
    >>> def sizes(batch, join):
    ...     seen = batch.column("t").to_pylist()
    ...     got, _ = column_messages(batch, lambda i, j: max(seen[:j]), -1.0, "t", join)
    ...     return [len(m) if isinstance(m, pa.RecordBatch) else m for m in got]
    >>> in_order = pa.record_batch({"t": list(range(2500))})
    >>> sizes(in_order, join=False)
    [1000, 999, 1000, 1999, 500, 2499]
    >>> sizes(in_order, join=True)
    [2500, 2499]
    >>> sizes(pa.record_batch({"t": [*range(1000), 5, *range(1001, 2500)]}), join=True)
    [1000, 999, 1500, 2499]
    """
    items: list[Any] = []
    joined = 0  # records from here on are in no message yet
    held: float | None = None  # the watermark after them
    for i in range(0, len(batch), WATERMARK_EVERY):
        j = min(i + WATERMARK_EVERY, len(batch))
        if i > joined and (not join or i - joined >= JOINED_MAX
                           or not _ahead(batch.slice(i, j - i), time_field, watermark)):
            items.append(batch.slice(joined, i - joined))
            joined = i
            if held is not None:
                items.append(held)
                held = None
        wm = advance(i, j)
        if wm > watermark:
            watermark = held = wm
    if joined < len(batch):
        items.append(batch.slice(joined, len(batch) - joined))
    if held is not None:
        items.append(held)
    return items, watermark


def _ahead(block: Any, time_field: str | None, watermark: float) -> bool:
    """Whether no event of `block` is behind `watermark` (or it has no event time)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if time_field is None or watermark == -math.inf:
        return True
    times = block.column(time_field)
    if times.null_count or not (pa.types.is_integer(times.type)
                                or pa.types.is_floating(times.type)):
        return False
    low = pc.min(times).as_py()
    return low is not None and low >= watermark


def parse_json_values(values: list[bytes | None], schema: list[tuple[str, str]],
                      step: str) -> Any:
    """Record values (JSON objects, one each) parsed at once into one Arrow batch of a
    source's columns (`parse_json_body`: in C, or pyarrow's JSON reader, either a
    fraction of json.loads' cost per record); None if they do not all parse as the
    schema says (the rows then say which is wrong, and why)."""
    try:
        body = b"\n".join(values)  # type: ignore[arg-type]  # None: TypeError
    except TypeError:
        return None
    if body.count(b"\n") != len(values) - 1:  # a value of several lines
        return None
    return parse_json_body(body, len(values), schema, step)


def parse_json_body(body: bytes, n: int, schema: list[tuple[str, str]], step: str) -> Any:
    """`n` JSON objects, one a line, as one Arrow batch of a source's columns; None if
    they do not all parse as the schema says."""
    import pyarrow as pa
    import pyarrow.json as pj

    from cameo_actors.operators.column_schema import arrow_schema, conform
    from cameo_actors.operators.exceptions import ColumnsRefused

    if native():  # the common case in C, under half of pyarrow's cost (`json_columns`)
        batch = json_columns(body, n, schema)
        if batch is not None:
            return conform(step, batch, schema)[0]
    try:  # one block for the whole batch, on this thread
        table = pj.read_json(pa.BufferReader(body), read_options=pj.ReadOptions(
            use_threads=False, block_size=len(body) + 1), parse_options=pj.ParseOptions(
            explicit_schema=arrow_schema(schema)))
        if table.num_rows != n:
            return None
        return conform(step, table, schema)[0]
    except (pa.ArrowInvalid, ColumnsRefused, IndexError):
        return None


def largest_by_run(times: Any, of: Any) -> list[tuple[int, float]]:
    """The largest of `times` in each run of records of one partition (`of`: each
    record's partition; a read's records come in such runs), NaN (no time) left out.

    >>> largest_by_run([5.0, 9.0, 2.0, float("nan"), 4.0], [0, 0, 1, 1, 0])
    [(0, 9.0), (1, 2.0), (0, 4.0)]
    """
    import numpy as np

    which = np.asarray(of, dtype=np.int64)
    starts = np.concatenate(([0], np.flatnonzero(np.diff(which)) + 1))
    return list(zip(which[starts].tolist(),
                    np.fmax.reduceat(np.asarray(times, dtype=np.float64), starts).tolist(),
                    strict=True))


def record_event(m: Any, read: PartitionRead, fields: list[str], event_time: str | None,
                 step: str, errors: list[list[Any]]) -> Any:
    """Record `m` of partition `read` as an event: its value's JSON object (or, where the
    schema names `_value`, the value whole as text), with the record's `fields`
    (`KAFKA_RECORD_FIELDS` the schema names), the partition's largest event time noted; None,
    with an error record in `errors`, if its value is not an object."""
    value = m.value()
    if "_value" in fields:  # not parsed: text (bytes that are not UTF-8 replaced)
        event: Any = {"_value": value.decode("utf-8", "replace") if value is not None else None}
        why = ""
    else:
        try:
            event = json.loads(value) if value is not None else None
        except ValueError as e:
            event, why = None, f"its value is not JSON ({e})"
        else:
            why = f"its value is JSON {type(event).__name__}, not an object"
    if not isinstance(event, dict):
        text = value[:200].decode("utf-8", "replace") if value else None
        errors.append([step, "malformed", f"Kafka record {read.topic}/{read.partition}@"
                       f"{m.offset()}: {why}. Fix: produce each event as one JSON object", text])
        return None
    for name in fields:
        if name == "_key":
            key = m.key()
            event[name] = key.decode("utf-8", "replace") if key is not None else None
        elif name == "_partition":
            event[name] = read.partition
        elif name == "_offset":
            event[name] = m.offset()
        elif name == "_timestamp":
            event[name] = m.timestamp()[1]
        elif name == "_headers":  # as text, by name (a name twice: the last)
            event[name] = {k: v.decode("utf-8", "replace") if v is not None else None
                           for k, v in m.headers() or []}
    if event_time is not None:
        t = event.get(event_time)
        if isinstance(t, (int, float)) and not isinstance(t, bool) and t > read.max_event_ms:
            read.max_event_ms = float(t)
    return event
