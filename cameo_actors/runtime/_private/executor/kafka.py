"""Kafka connectors, served by the executor that hosts the instance (no Spark, no hop).

A source with `connector={"format": "kafka", ...}` reads its topic's partitions: each
instance takes its share (the topic's partitions in order, one in `parallelism`), from a
thread of its own that hands the decoded records to the worker thread as an ingest call
does. Its read offsets are the instance's `positions` (one per partition): a checkpoint
keeps them with the state, so a restore reads again from there and no record is taken
twice or lost; the broker's group offsets are not used. Its watermark is the least of
its partitions' (the largest event time read there, less the allowed lateness); a
partition with nothing new for the source's `idle_timeout_ms` (1 s if it has none) does
not hold it back. Backpressure is the ingest call's: the thread waits for room at the
source before it reads more.

A sink with `connector={"format": "kafka", ...}` writes each result row, as JSON, to its
topic, keyed by a field of the row if `key` names one. A thread per instance reads the
sink's result log from where it wrote last and writes the rows in one Kafka transaction
per batch, with the log offset it reached in the same transaction (as the consumer
offset of a group of its own): what a `read_committed` reader sees, and where the writer
goes on after any failure, move together. With exactly-once delivery the log is readable
once a checkpoint after its rows completed, so a reader sees each result once, a
checkpoint interval late; with at-least-once delivery rows are written at once.

Options (strings, as Spark's Kafka connector names them): `kafka.bootstrap.servers`;
`subscribe` (a topic) for a source, `topic` for a sink; `startingOffsets` "earliest"
(the default) or "latest"; `endingOffsets` "latest" to end each source instance once
its partitions were read to their end (a bounded read: tests, backfills); `key` (a
sink's key field). Every `kafka.<name>` option goes to librdkafka as `<name>` (security
settings, client tuning), and is never logged. docs/kafka.md has the rest.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from cameo_actors.operators.base import END_OF_STREAM
from cameo_actors.runtime._private.executor.egress import ID_FIELD
from cameo_actors.runtime._private.placement import Placement

if TYPE_CHECKING:
    from cameo_actors.dataflow.spec import ConnectorSpec, DataflowSpec
    from cameo_actors.runtime._private.executor.activation import Activation
    from cameo_actors.runtime._private.executor.core import ExecutorCore

logger = logging.getLogger(__name__)

KAFKA = "kafka"
#: Records taken from the consumer per ingest call (the source cuts them into messages).
READ_BATCH = 5_000
#: What the client fetches ahead of the reader, at most (librdkafka's default is 64 MB per
#: consumer): while the source has no room, the reader waits and this much waits with it.
QUEUED_KB = 8_192
#: The fewest records parsed into columns at once (fewer: as rows).
MIN_COLUMNS = 64
#: Records between two watermarks of a source instance: as many as a pushed call of a
#: thousand events (an event late through the API is late here too). Per 2,000 records
#: bench.kafka's Kafka arm took a fifth less CPU than per 500.
WATERMARK_EVERY = 1000
#: Rows written per transaction, at most.
WRITE_BATCH = 5_000
#: A connector's waits (`Waits`) are each at most this share of its dataflow's latency
#: target, and within these bounds (ms).
WAIT_SHARE = 1 / 25
WAIT_MIN_MS, WAIT_MAX_MS = 1.0, 50.0
#: A broker that does not answer: tried again after this long, doubled up to the cap.
RETRY_S, RETRY_CAP_S = 0.5, 10.0
#: How long a call to the broker or to the worker thread may take; how long the first
#: call to a broker waits for it (then the connector shows it is waiting, and tries again).
CALL_TIMEOUT_S = 30.0
CONNECT_TIMEOUT_S = 5.0
#: How long a stopped writer is waited for (its transaction under way ends).
WRITER_END_S = 10.0
WAITING = "waiting for the broker"
DEFAULT_IDLE_MS = 1_000.0
#: The fields of a record an event may take, when the source's schema names them.
RECORD_FIELDS = ("_key", "_partition", "_offset", "_timestamp", "_headers")


def kafka_options(step: Any) -> dict[str, str] | None:
    """A source's or sink's Kafka connector options; None if it has no Kafka connector."""
    connector: ConnectorSpec | None = getattr(step, "connector", None)
    return dict(connector.options) if connector is not None and connector.format == KAFKA \
        else None


@dataclass(frozen=True)
class Waits:
    """How long a connector lets a record wait, by its dataflow's latency target: a
    record waits in each (the broker's fetch, the reader's batch, the writer's look at its
    result log), so a 50 ms target cannot afford the 10 ms each that a 1 s one can, and a
    1 s one need not pay for a connector that asks the broker 500 times a second.

    Attributes:
        fetch_ms: how long the broker may hold a fetch that has no records yet
            (librdkafka's 500 ms default held each record that long on Tansu); a source's
            `kafka.fetch.wait.max.ms` overrides it.
        read_s: how long one read waits for a full batch (a read returns when its batch is
            full or this passed); how soon a stop is seen.
        write_idle_s: how often a writer with nothing to write looks at its log again.

    >>> Waits.for_target(50.0), Waits.for_target(1000.0).fetch_ms
    (Waits(fetch_ms=2, read_s=0.002, write_idle_s=0.002), 40)
    """

    fetch_ms: int
    read_s: float
    write_idle_s: float

    @classmethod
    def for_target(cls, latency_target_ms: float) -> Waits:
        ms = min(max(latency_target_ms * WAIT_SHARE, WAIT_MIN_MS), WAIT_MAX_MS)
        return cls(fetch_ms=round(ms), read_s=round(ms) / 1000.0, write_idle_s=round(ms) / 1000.0)


def waits_of(core: ExecutorCore, act: Activation) -> Waits:
    """The waits of `act`'s connector, by its dataflow's target when it opens (a target
    changed later counts from its next open)."""
    hosted = core.hosting.dataflows.get(act.dataflow)
    return Waits.for_target(hosted.spec.latency_target_ms if hosted else 1000.0)


def client_config(options: dict[str, str], on_error: Callable[[Any], None]) -> dict[str, Any]:
    """librdkafka's settings: the `kafka.` options, less the prefix, a value `env:NAME`
    read from the executor's environment (so that a password is in no spec, checkpoint or
    API answer). Its errors go to `on_error` (the connector's state shows them), not to
    the log: a broker away would write a line per connection attempt.

    >>> os.environ["CAMEO_DOC_SECRET"] = "s3cret"
    >>> client_config({"kafka.sasl.password": "env:CAMEO_DOC_SECRET", "topic": "t"}, print)
    {'log_level': 2, 'sasl.password': 's3cret', 'error_cb': <built-in function print>}
    """
    conf: dict[str, Any] = {"log_level": 2}
    for name, value in options.items():
        if not name.startswith("kafka."):
            continue
        if value.startswith("env:"):
            var = value[len("env:"):]
            if var not in os.environ:
                raise LookupError(f"option {name} reads the environment variable {var!r}, "
                                  "which this executor's process does not have. Fix: set it "
                                  "where the executors start (the service's environment)")
            value = os.environ[var]
        conf[name[len("kafka."):]] = value
    conf["error_cb"] = on_error
    return conf


class Connector(threading.Thread):
    """A Kafka reader or writer of instance `act`: its state, and the broker's last error,
    for stats. `call` runs a function on the worker thread (`Worker.call`)."""

    def __init__(self, name: str, core: ExecutorCore, call: Callable[..., Any],
                 act: Activation) -> None:
        super().__init__(name=name, daemon=True)
        self.core, self.call, self.act, self.aid = core, call, act, act.id
        self.waits = waits_of(core, act)
        self.state, self.error = "starting", ""
        self.stopped = threading.Event()

    def stop(self) -> None:
        self.stopped.set()

    def _alive(self) -> bool:
        """Not stopped, and its instance still the one hosted (not cancelled or restored)."""
        return not self.stopped.is_set() and self.core.hosting.activations.get(self.aid) is self.act

    def on_error(self, err: Any) -> None:
        """librdkafka's error callback (its own thread): the broker away is shown."""
        self.error = str(err)
        if err.code() in _BROKER_AWAY:
            self.state = WAITING

    def report(self) -> dict[str, Any]:
        """What stats show of it (read from another thread: a snapshot)."""
        return {"state": self.state, "error": self.error}

    def failed(self, e: Exception, backoff: float) -> None:
        self.state, self.error = WAITING, f"{type(e).__name__}: {e}"
        logger.warning("kafka %s: %s; trying again in %.1f s", self.aid, self.error, backoff)


#: librdkafka's error codes for a broker it cannot reach (filled at first use)
_BROKER_AWAY: set[int] = set()
_PARTITION_EOF = -191  # KafkaError._PARTITION_EOF: a fetch reached a partition's end


def _load() -> Any:
    """confluent_kafka, imported where a connector runs (not where none does)."""
    import confluent_kafka

    if not _BROKER_AWAY:
        err = confluent_kafka.KafkaError
        _BROKER_AWAY.update({err._ALL_BROKERS_DOWN, err._TRANSPORT, err._RESOLVE})
    return confluent_kafka


def position_key(topic: str, partition: int) -> str:
    """A partition's key in a source instance's positions (next offset to read)."""
    return f"kafka/{topic}/{partition}"


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


def parse_json_values(values: list[bytes | None], schema: list[tuple[str, str]],
                      step: str) -> Any:
    """Record values (JSON objects, one each) parsed at once into one Arrow batch of a
    source's columns (pyarrow's JSON reader: a fifth of json.loads' cost per record here);
    None if they do not all parse as the schema says (the rows then say which is wrong,
    and why)."""
    import pyarrow as pa
    import pyarrow.json as pj

    from cameo_actors.operators.column_schema import arrow_schema, conform
    from cameo_actors.operators.exceptions import ColumnsRefused

    try:
        body = b"\n".join(values)  # type: ignore[arg-type]  # None: TypeError
    except TypeError:
        return None
    if body.count(b"\n") != len(values) - 1:  # a value of several lines
        return None
    try:  # one block for the whole batch, on this thread
        table = pj.read_json(pa.BufferReader(body), read_options=pj.ReadOptions(
            use_threads=False, block_size=len(body) + 1), parse_options=pj.ParseOptions(
            explicit_schema=arrow_schema(schema)))
        if table.num_rows != len(values):
            return None
        return conform(step, table, schema)[0]
    except (pa.ArrowInvalid, ColumnsRefused, IndexError):
        return None


def record_event(m: Any, read: PartitionRead, fields: list[str], event_time: str | None,
                 step: str, errors: list[list[Any]]) -> Any:
    """Record `m` of partition `read` as an event: its value's JSON object, with the
    record's `fields` (`RECORD_FIELDS` the schema names), the partition's largest event
    time noted; None, with an error record in `errors`, if its value is not an object."""
    value = m.value()
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
        else:  # headers as text, by name (a name twice: the last)
            event[name] = {k: v.decode("utf-8", "replace") if v is not None else None
                           for k, v in m.headers() or []}
    if event_time is not None:
        t = event.get(event_time)
        if isinstance(t, (int, float)) and not isinstance(t, bool) and t > read.max_event_ms:
            read.max_event_ms = float(t)
    return event


class KafkaReader(Connector):
    """Reads a Kafka source instance's partitions into its mailbox (see the module)."""

    def __init__(self, core: ExecutorCore, submit: Callable[[Callable[[], None]], None],
                 call: Callable[..., Any], act: Activation, instances: int) -> None:
        super().__init__(f"cameo-kafka-in-{act.id}", core, call, act)
        self.submit, self.instances = submit, instances
        step = act.step
        self.options = kafka_options(step) or {}
        self.topics = [t.strip() for t in self.options.get("subscribe", "").split(",") if t.strip()]
        self.lateness = float(getattr(act.operator, "allowed_lateness_ms", 0.0))
        self.event_time = getattr(act.operator, "event_time", None)
        self.schema = list(getattr(step, "schema", ()))
        names = {name for name, _ in self.schema}
        self.record_fields = [f for f in RECORD_FIELDS if f in names]
        # A batch of records is parsed into columns at once (`parse_json_values`), then
        # runs as columns where a step has a kernel; as rows where it does not parse.
        self.columns = not self.record_fields
        idle_ms = getattr(step, "idle_timeout_ms", None)  # the source's, for each partition
        self.idle_s = float(idle_ms if idle_ms is not None else DEFAULT_IDLE_MS) / 1000.0
        self.bounded = self.options.get("endingOffsets", "") == "latest"
        self.parts: dict[tuple[str, int], PartitionRead] = {}
        self.watermark = -math.inf
        self.ended = False
        self.malformed = 0
        self.consumer: Any = None
        self.assigned: list[Any] = []  # its TopicPartitions, to ask their end offsets
        self.by_key: dict[str, PartitionRead] = {}  # position_key -> its read
        self.index: dict[tuple[str, int], int] = {}  # (topic, partition) -> its place in parts

    # -- the thread ---------------------------------------------------------------------
    def run(self) -> None:
        backoff = RETRY_S
        while not self.stopped.is_set() and not self.ended:
            if not self._alive() or self.act.saw_end():  # gone, or its sources closed
                break
            try:
                if self.consumer is None:
                    self._open()
                    backoff = RETRY_S
                self._read_once()
            except Exception as e:  # the broker away, a topic missing: shown, tried again
                self.failed(e, backoff)
                self._close()
                self.stopped.wait(backoff)
                backoff = min(backoff * 2, RETRY_CAP_S)
        self.state = "ended"
        self._close()

    def _open(self) -> None:
        ck = _load()
        OFFSET_BEGINNING, OFFSET_END, TopicPartition = \
            ck.OFFSET_BEGINNING, ck.OFFSET_END, ck.TopicPartition
        self.waits = waits_of(self.core, self.act)  # (the target may have changed)
        conf = {"fetch.wait.max.ms": self.waits.fetch_ms, "queued.max.messages.kbytes": QUEUED_KB,
                **client_config(self.options, self.on_error),
                "group.id": f"cameo.{self.act.dataflow}",
                "enable.auto.commit": False, "enable.auto.offset.store": False,
                # The end of a partition as the fetches see it: a bounded read's end. (Asked
                # for, the end offsets were short of the end on Tansu 0.6.)
                "enable.partition.eof": True}
        consumer = ck.Consumer(conf)
        try:
            mine = self._partitions(consumer)
            positions = self.call(lambda: dict(self.act.positions))
            start = OFFSET_END if self.options.get("startingOffsets") == "latest" \
                else OFFSET_BEGINNING
            assign = []
            for topic, p in mine:
                read = self.parts.setdefault((topic, p), PartitionRead(topic, p))
                self.index.setdefault((topic, p), len(self.index))
                self.by_key[position_key(topic, p)] = read
                at = positions.get(position_key(topic, p), read.next_offset)
                read.taken = max(read.taken, at)
                assign.append(TopicPartition(topic, p, at if at >= 0 else start))
            consumer.assign(assign)
            self.assigned = [TopicPartition(topic, p) for topic, p in mine]
        except BaseException:
            consumer.close()
            raise
        self.consumer = consumer
        self.state, self.error = "reading", ""

    def _partitions(self, consumer: Any) -> list[tuple[str, int]]:
        """This instance's share of the topics' partitions."""
        meta = consumer.list_topics(timeout=CONNECT_TIMEOUT_S)
        every = []
        for topic in self.topics:
            t = meta.topics.get(topic)
            if t is None or t.error is not None or not t.partitions:
                raise LookupError(f"topic {topic!r} does not exist on the broker "
                                  f"({t.error if t is not None else 'not listed'})")
            every += [(topic, p) for p in sorted(t.partitions)]
        return every[self.act.aid.instance::self.instances]

    def _close(self) -> None:
        if self.consumer is not None:
            with contextlib.suppress(Exception):  # a consumer whose broker is gone
                self.consumer.close()
            self.consumer = None

    def _read_once(self) -> None:
        msgs = self.consumer.consume(READ_BATCH, self.waits.read_s)
        now = time.monotonic()
        if msgs and self.state == WAITING:  # the broker is back
            self.state, self.error = "reading", ""
        # Per record only what must be (its partition, its last offset); the rest per
        # partition: this loop is most of a reader's own cost.
        records: list[Any] = []
        of: list[int] = []  # each record's partition (its index in self.parts)
        last: dict[int, int] = {}  # partition -> its last offset read here
        index, ends = self.index, []
        for m in msgs:
            if m.error() is not None:
                ends.append(m)
                continue
            i = index[m.topic(), m.partition()]
            of.append(i)
            last[i] = m.offset()
            records.append(m)
        reads = list(self.parts.values())
        moved: dict[str, int] = {}
        for i, offset in last.items():
            read = reads[i]
            read.next_offset, read.at_end = offset + 1, False
            moved[position_key(read.topic, read.partition)] = offset + 1
        for m in ends:
            err = m.error()
            if err.code() == _PARTITION_EOF:
                read = self.parts[(m.topic(), m.partition())]
                read.next_offset = max(read.next_offset, m.offset())  # the end's
                if not read.at_end:
                    read.at_end, read.at_end_since = True, now
            elif err.fatal():
                raise RuntimeError(str(err))
            # else transient: librdkafka goes on by itself
        batch = self._columns(records) if self.columns and len(records) >= MIN_COLUMNS \
            else None
        for tp in self.assigned:  # the end offsets the last fetches told (no call)
            read = self.parts[(tp.topic, tp.partition)]
            high = self.consumer.get_watermark_offsets(tp, cached=True)[1]
            read.high = max(read.high, high, read.next_offset)
        # A watermark after every WATERMARK_EVERY records, not after a batch of thousands:
        # whether an event is late is as fine-grained as through the API.
        items: list[Any] = []
        errors: list[list[Any]] = []
        n = 0
        for i in range(0, len(records), WATERMARK_EVERY):
            chunk = records[i:i + WATERMARK_EVERY]
            if batch is not None:
                events: Any = batch.slice(i, len(chunk))
                self._saw(events, of[i:i + WATERMARK_EVERY])
            else:
                events = [e for m in chunk
                          if (e := record_event(m, self.parts[(m.topic(), m.partition())],
                                                self.record_fields, self.event_time,
                                                self.act.step.id, errors)) is not None]
            if len(events):
                items.append(events)
                n += len(events)
            wm = self._watermark(now)
            if wm > self.watermark:
                self.watermark = wm
                items.append(wm)
        if errors:
            self.malformed += len(errors)
            items.append({"errors": errors})
        if not records:  # partitions may have gone idle
            wm = self._watermark(now)
            if wm > self.watermark:
                self.watermark = wm
                items.append(wm)
        if self.bounded and all(r.at_end for r in self.parts.values()):
            items.append(END_OF_STREAM)
            self.ended = True
        if items or moved:
            self._hand_over(items, moved, n)

    def _columns(self, records: list[Any]) -> Any:
        return parse_json_values([m.value() for m in records], self.schema, self.act.step.id)

    def _saw(self, batch: Any, of: list[int]) -> None:
        """Each partition's largest event time, after `batch` (whose events are of the
        partitions `of` names, by index)."""
        if self.event_time is None:
            return
        import numpy as np

        times = batch.column(self.event_time).to_numpy(zero_copy_only=False)
        reads = list(self.parts.values())
        which = np.asarray(of, dtype=np.int64)
        for i in set(of):
            mine = times if len(reads) == 1 else times[which == i]
            reads[i].max_event_ms = max(reads[i].max_event_ms, float(np.nanmax(mine)))

    def _watermark(self, now: float) -> float:
        if self.event_time is None:
            return -math.inf
        return watermark_of(list(self.parts.values()), now, self.idle_s, self.lateness)

    def _hand_over(self, items: list[Any], moved: dict[str, int], n: int) -> None:
        """The records read, into the instance's mailbox on the worker thread, once it
        has room (this thread waits: the broker keeps what is not read yet)."""
        core, aid, act = self.core, self.aid, self.act
        ingest_ms = core.clock.now_ms()
        core.flow.wait_for_room(aid, n, self._alive, CALL_TIMEOUT_S)

        def apply() -> None:
            if core.hosting.activations.get(aid) is not act or act.saw_end():
                core.flow.arrived(aid, n)  # cancelled, restored or closed meanwhile: dropped
                return
            core.ingress.ingest_read(act, items, ingest_ms, moved, reserved=n)
            for key, offset in moved.items():
                self.by_key[key].taken = offset
        self.submit(apply)

    def report(self) -> dict[str, Any]:
        """Its state, and per partition the offset the source instance took in up to and
        the lag behind the partition's end (records read but not taken in yet count)."""
        return {**super().report(), "malformed": self.malformed,
                "watermark": self.watermark,
                "partitions": {f"{r.topic}/{r.partition}": {
                    "offset": r.taken, "lag": max(0, r.high - max(r.taken, 0))}
                    for r in list(self.parts.values())}}


class KafkaWriter(Connector):
    """Writes a Kafka sink instance's result log to its topic (see the module)."""

    def __init__(self, core: ExecutorCore, call: Callable[..., Any], act: Activation) -> None:
        super().__init__(f"cameo-kafka-out-{act.id}", core, call, act)
        self.options = kafka_options(act.step) or {}
        self.topic = self.options.get("topic", "")
        self.key = self.options.get("key")
        # One transactional id per sink instance of a deployment: a writer that starts
        # again (here or on another executor after a failure) fences the one before, and
        # aborts its transaction under way; a dataflow deployed again under its name
        # starts from its own log's start, not where the last deployment's writer was.
        hosted = core.hosting.dataflows.get(act.dataflow)
        instance = f"{act.dataflow}.{hosted.deployment if hosted else ''}.{act.id}"
        self.txn_id, self.group = f"cameo.{instance}", f"cameo.sink.{instance}"
        self.position = -1
        self.written = 0
        self._metadata: Any = None  # the group's, for offsets committed in a transaction
        self.producer: Any = None

    def run(self) -> None:
        backoff = RETRY_S
        while not self.stopped.is_set():
            try:
                if self.producer is None:
                    self._open()
                    backoff = RETRY_S
                if not self._write_once():
                    self.stopped.wait(self.waits.write_idle_s)
            except Exception as e:  # the broker away: shown, tried again from the position kept
                self.failed(e, backoff)
                self.producer = None
                self.stopped.wait(backoff)
                backoff = min(backoff * 2, RETRY_CAP_S)

    def _open(self) -> None:
        ck = _load()
        self.waits = waits_of(self.core, self.act)
        conf = client_config(self.options, self.on_error)
        producer = ck.Producer({**conf, "transactional.id": self.txn_id, "linger.ms": 1})
        producer.init_transactions(CONNECT_TIMEOUT_S)
        # Where the last committed transaction left the log (its offset, committed with it).
        reader = ck.Consumer({**conf, "group.id": self.group, "enable.auto.commit": False,
                              "isolation.level": "read_committed"})
        try:
            got = reader.committed([ck.TopicPartition(self.topic, 0)],
                                   timeout=CONNECT_TIMEOUT_S)
            self.position = max(0, got[0].offset) if got and got[0].offset >= 0 else 0
            self._metadata = reader.consumer_group_metadata()
        finally:
            reader.close()
        self.producer = producer
        self.state, self.error = "writing", ""

    def _more(self, name: str) -> bool:
        """Whether the log may have rows past the position, or the sink its end: looked
        at from this thread, without a call to the worker thread (a writer that waits for
        a checkpoint's rows would make 200 calls a second). What it reads may be a moment
        old: that only delays the next look."""
        try:
            out = self.core.egress.dataflows.get(name)
            log = out.results.get(self.aid) if out is not None else None
            return log is None or log.readable_end > self.position or self.act.saw_end()
        except RuntimeError:  # a dict changed size while read: look through the worker
            return True

    def _write_once(self) -> bool:
        """One transaction of the rows readable from the position on; False if none."""
        core, name, aid, act = self.core, self.act.dataflow, self.aid, self.act
        if not self._alive():
            self.stopped.set()
            return False

        if not self._more(name):
            return False

        def offsets() -> tuple[int, int, bool]:
            log = core.egress.dataflows[name].results[aid]
            return log.committed_offset, log.readable_end, \
                act.saw_end() and log.readable_end == log.end_offset
        committed, readable, done = self.call(offsets)
        start = max(self.position, committed)
        if readable <= start:
            if done:  # the dataflow ended and its last row is written
                self.state = "ended"
                self.stopped.set()
            return False
        rows = self.call(core.egress.read_results, name, aid, start,
                         min(readable, start + WRITE_BATCH))
        if not rows:
            return False
        producer = self.producer
        producer.begin_transaction()
        key, sink = self.key, self.aid.encode()
        for offset, (event, _, _) in enumerate(rows, start):
            # Which result this is, in headers: a reader may drop a repeat by them, where the
            # broker's read_committed lets an aborted transaction's records through (Tansu
            # 0.6); with at-least-once delivery, a replay's repeats have the same `_id`.
            headers = [("cameo-sink", sink), ("cameo-offset", b"%d" % offset)]
            if ID_FIELD in event:
                event = dict(event)
                headers.append(("cameo-id", str(event.pop(ID_FIELD)).encode()))
            value = json.dumps(event, separators=(",", ":"), default=str).encode()
            k = event.get(key) if key else None
            producer.produce(self.topic, value, None if k is None else str(k).encode(),
                             headers=headers)
        end = start + len(rows)
        producer.send_offsets_to_transaction([_load().TopicPartition(self.topic, 0, end)],
                                             self._metadata, CALL_TIMEOUT_S)
        producer.commit_transaction(CALL_TIMEOUT_S)
        self.position = end
        self.written += len(rows)
        self.state, self.error = "writing", ""
        # Written: the log may let them go (the position in Kafka says where to go on).
        self.call(core.egress.commit_results, name, aid, end)
        return True

    def report(self) -> dict[str, Any]:
        """Its state, the result log's offset written up to, the rows written here."""
        return {**super().report(), "position": self.position, "written": self.written}


class KafkaConnectors:
    """The Kafka readers and writers of the instances an executor hosts."""

    def __init__(self, core: ExecutorCore, submit: Callable[[Callable[[], None]], None],
                 call: Callable[..., Any]) -> None:
        self.core, self.submit, self.call = core, submit, call
        self.threads: dict[str, Connector] = {}

    def start(self, spec: DataflowSpec, placement: Placement) -> None:
        """Readers and writers for the Kafka instances of `spec` hosted here now."""
        hosted = self.core.hosting.dataflows.get(spec.name)
        for aid in hosted.ids if hosted is not None else []:
            act = self.core.hosting.activations[aid]
            old = self.threads.get(aid)
            if old is not None and old.act is act or kafka_options(act.step) is None:
                continue
            if old is not None:
                self._end([old])
            thread: Connector
            if act.is_source:
                thread = KafkaReader(self.core, self.submit, self.call, act,
                                     len(placement.of_step(act.step.id)))
            elif act.is_sink:
                thread = KafkaWriter(self.core, self.call, act)
            else:
                continue
            self.threads[aid] = thread
            thread.start()

    def stop(self, dataflow: str, ids: list[str] | None = None) -> None:
        self._end([self.threads.pop(a) for a, t in list(self.threads.items())
                   if t.act.dataflow == dataflow and (ids is None or a in ids)])

    def stop_all(self) -> None:
        self._end(list(self.threads.values()))
        self.threads.clear()

    @staticmethod
    def _end(threads: list[Connector]) -> None:
        """Stop `threads`; a writer is waited for (a while), so that the one that follows
        it (a restore) is the only writer of its transactional id: it may be in a
        transaction. A reader is not: what it hands over after is dropped."""
        for t in threads:
            t.stop()
        deadline = time.monotonic() + WRITER_END_S
        for t in threads:
            if isinstance(t, KafkaWriter):
                t.join(max(0.0, deadline - time.monotonic()))

    def report(self, dataflow: str) -> dict[str, Any]:
        return {aid: t.report() for aid, t in list(self.threads.items())
                if t.act.dataflow == dataflow}
