"""A Kafka source instance's reader: partitions, offsets as positions, watermarks, parsing
(what it does: `kafka`'s docstring); what its records become is `kafka_events`.
"""

from __future__ import annotations

import contextlib
import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from cameo_actors.dataflow.streams import time_reaches_as_is
from cameo_actors.dataflow.validate import KAFKA_RECORD_FIELDS
from cameo_actors.operators.base import END_OF_STREAM
from cameo_actors.runtime._private.executor.kafka_batches import (
    META_FIELDS,
    Batch,
    Committed,
    UnsupportedBatch,
    batches,
    join_values,
    meta_columns,
    native,
    records_of,
)
from cameo_actors.runtime._private.executor.kafka_client import (
    CALL_TIMEOUT_S,
    CONNECT_TIMEOUT_S,
    RETRY_CAP_S,
    RETRY_S,
    WAITING,
    Connector,
    client_config,
    kafka_options,
    load_kafka,
    waits_of,
)
from cameo_actors.runtime._private.executor.kafka_events import (
    WATERMARK_EVERY,
    PartitionRead,
    column_messages,
    largest_by_run,
    parse_json_body,
    parse_json_values,
    record_event,
    watermark_of,
)
from cameo_actors.runtime._private.executor.kafka_fetch import (
    EARLIEST,
    LATEST,
    OFFSET_OUT_OF_RANGE,
    FetchClient,
    KafkaProtocolError,
)

if TYPE_CHECKING:
    from cameo_actors.runtime._private.executor.activation import Activation
    from cameo_actors.runtime._private.executor.core import ExecutorCore

logger = logging.getLogger(__name__)

#: Records taken from the consumer per ingest call (the source cuts them into messages).
READ_BATCH = 5_000
#: What one fetch of cameo's client asks for at most, in all and per partition: about as
#: many records as READ_BATCH at a hundred bytes each.
FETCH_BYTES, PARTITION_BYTES = 1 << 20, 512 << 10
#: The librdkafka settings cameo's fetch client also honours; a source with any other
#: (security, client tuning) reads through librdkafka.
FETCH_CLIENT_SETTINGS = {"kafka.bootstrap.servers", "kafka.fetch.wait.max.ms",
                         "kafka.client.id", "kafka.group.id"}
#: What the client fetches ahead of the reader, at most (librdkafka's default is 64 MB per
#: consumer): while the source has no room, the reader waits and this much waits with it.
QUEUED_KB = 8_192
#: The fewest records parsed into columns at once (fewer: as rows).
MIN_COLUMNS = 64
DEFAULT_IDLE_MS = 1_000.0
_PARTITION_EOF = -191  # KafkaError._PARTITION_EOF: a fetch reached a partition's end


def position_key(topic: str, partition: int) -> str:
    """A partition's key in a source instance's positions (next offset to read)."""
    return f"kafka/{topic}/{partition}"


def reads_by_fetch(options: dict[str, str], columns: bool) -> bool:
    """Whether a source reads through cameo's fetch client (`kafka_fetch`) rather than
    librdkafka: its records parse into columns (its schema names none of the record's
    fields but `META_FIELDS`), it has no librdkafka setting the client does not honour,
    its `client` option is not "librdkafka", and the C part is built.

    >>> reads_by_fetch({"kafka.bootstrap.servers": "b:9092", "subscribe": "t"}, False)
    False
    >>> reads_by_fetch({"kafka.security.protocol": "SASL_SSL"}, True)
    False
    """
    if not columns or options.get("client") == "librdkafka":
        return False
    if any(k.startswith("kafka.") and k not in FETCH_CLIENT_SETTINGS for k in options):
        return False
    return native()


@dataclass
class Got:
    """What one read took from the broker, for `KafkaReader._deliver`."""

    n: int  # records
    of: Any  # each record's partition (its index in `KafkaReader.parts`)
    moved: dict[str, int]  # position key -> the next offset to read
    batch: Any  # the records' values as one Arrow batch; None: as `rows`
    rows: list[Any]  # the records (confluent-kafka's Message, or `kafka_batches.Record`)


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
        self.record_fields = [f for f in KAFKA_RECORD_FIELDS if f in names]
        # A batch of records is parsed into columns at once (`parse_json_values`), then
        # runs as columns where a step has a kernel; as rows where it does not parse.
        # cameo's client also makes the record's key, partition, offset and timestamp
        # columns (`meta_columns`); librdkafka's reader reads a source that names any as rows.
        self.columns = not self.record_fields
        self.value_schema = [(n, t) for n, t in self.schema if n not in self.record_fields]
        fetch_columns = bool(self.value_schema) and all(
            f in META_FIELDS for f in self.record_fields)
        idle_ms = getattr(step, "idle_timeout_ms", None)  # the source's, for each partition
        self.idle_s = float(idle_ms if idle_ms is not None else DEFAULT_IDLE_MS) / 1000.0
        self.bounded = self.options.get("endingOffsets", "") == "latest"
        # Whether blocks of records may go as one message (`_deliver`): where every step
        # that judges lateness reads the event time as this source took it in.
        hosted = core.hosting.dataflows.get(act.dataflow)
        self.joins_blocks = hosted is not None and time_reaches_as_is(hosted.spec, step.id)
        self.parts: dict[tuple[str, int], PartitionRead] = {}
        self.watermark = -math.inf
        self.ended = False
        self.malformed = 0
        self.consumer: Any = None
        self.fetcher: FetchClient | None = None  # cameo's fetch client, where it reads
        self.by_fetch = reads_by_fetch(self.options, fetch_columns)
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
                if self.consumer is None and self.fetcher is None:
                    self._open_fetch() if self.by_fetch else self._open()
                    backoff = RETRY_S
                self._read_once()
            except UnsupportedBatch as e:  # batches only librdkafka reads
                logger.warning("kafka %s: %s; reading through librdkafka", self.aid, e)
                self._close()
                self.by_fetch = False
            except Exception as e:  # the broker away, a topic missing: shown, tried again
                self.failed(e, backoff)
                self._close()
                self.stopped.wait(backoff)
                backoff = min(backoff * 2, RETRY_CAP_S)
        self.state = "ended"
        self._close()

    def _open(self) -> None:
        ck = load_kafka()
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
            meta = consumer.list_topics(timeout=CONNECT_TIMEOUT_S).topics
            mine = self._partitions({
                t: sorted(m.partitions) if m.error is None and m.partitions else str(m.error)
                for t, m in meta.items()})
            start = OFFSET_END if self.options.get("startingOffsets") == "latest" \
                else OFFSET_BEGINNING
            consumer.assign([TopicPartition(topic, p, at if at >= 0 else start)
                             for (topic, p), at in self._positions(mine).items()])
            self.assigned = [TopicPartition(topic, p) for topic, p in mine]
        except BaseException:
            consumer.close()
            raise
        self.consumer = consumer
        self.state, self.error = "reading", ""

    def _open_fetch(self) -> None:
        """Opens cameo's fetch client (`kafka_fetch`): each partition read from its
        position, or where startingOffsets says."""
        self.waits = waits_of(self.core, self.act)
        if "kafka.fetch.wait.max.ms" in self.options:
            self.waits = replace(self.waits, fetch_ms=int(self.options["kafka.fetch.wait.max.ms"]))
        client = FetchClient(self.options["kafka.bootstrap.servers"],
                             self.options.get("kafka.client.id", f"cameo.{self.act.dataflow}"),
                             CONNECT_TIMEOUT_S + self.waits.fetch_ms / 1000.0)
        try:
            positions = self._positions(self._partitions(client.partitions(self.topics)))
            unknown = [tp for tp, at in positions.items() if at < 0]
            if unknown:
                positions.update(client.offsets(unknown, LATEST if self.options.get(
                    "startingOffsets") == "latest" else EARLIEST))
            for tp, at in positions.items():
                if at < 0:
                    raise ConnectionError(f"the broker told no offset of {tp[0]}/{tp[1]}")
                self.parts[tp].next_offset = at
        except BaseException:
            client.close()
            raise
        self.fetcher = client
        self.state, self.error = "reading", ""

    def _partitions(self, found: dict[str, Any]) -> list[tuple[str, int]]:
        """This instance's share of the topics' partitions (`found`: each topic's, or why
        it has none)."""
        every = []
        for topic in self.topics:
            t = found.get(topic)
            if not isinstance(t, list):
                raise LookupError(f"topic {topic!r} does not exist on the broker "
                                  f"({t if t is not None else 'not listed'})")
            every += [(topic, p) for p in t]
        mine = every[self.act.aid.instance::self.instances]
        if not mine:
            self._no_partitions()
        return mine

    def _no_partitions(self) -> None:
        """This instance has no partition (its source has more instances than its topics
        have partitions): it will have no watermark, so it tells the steps after it that
        it is idle, and they leave it out of theirs, as with a source idle for its
        timeout (`ExecutorCore.idle_sources`)."""
        core, act = self.core, self.act

        def idle() -> None:
            hosted = core.hosting.dataflows.get(act.dataflow)
            if core.hosting.activations.get(self.aid) is act and not act.idle_sent \
                    and hosted is not None:
                core.send_barriers(hosted.spec, act.id, act.went_idle(), core.clock.now_ms())
        self.submit(idle)

    def _positions(self, mine: list[tuple[str, int]]) -> dict[tuple[str, int], int]:
        """Where to read each of `mine` from: the instance's position (what it took in),
        -1 where it has none yet."""
        positions = self.call(lambda: dict(self.act.positions))
        out = {}
        for topic, p in mine:
            read = self.parts.setdefault((topic, p), PartitionRead(topic, p))
            self.index.setdefault((topic, p), len(self.index))
            self.by_key[position_key(topic, p)] = read
            at = positions.get(position_key(topic, p), read.next_offset)
            read.taken = max(read.taken, at)
            out[(topic, p)] = at
        return out

    def _close(self) -> None:
        if self.fetcher is not None:
            self.fetcher.close()
            self.fetcher = None
        if self.consumer is not None:
            with contextlib.suppress(Exception):  # a consumer whose broker is gone
                self.consumer.close()
            self.consumer = None

    def _read_once(self) -> None:
        got = self._fetch() if self.fetcher is not None else self._consume()
        if got.n and self.state == WAITING:  # the broker is back
            self.state, self.error = "reading", ""
        self._deliver(got, time.monotonic())

    def _consume(self) -> Got:
        """A read through librdkafka: up to READ_BATCH records."""
        msgs = self.consumer.consume(READ_BATCH, self.waits.read_s)
        now = time.monotonic()
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
        return Got(len(records), of, moved, batch, records)

    def _fetch(self) -> Got:
        """A read through cameo's fetch client (`kafka_fetch`): each partition's batches
        from its position, their values joined in C and parsed into one Arrow batch; the
        records as rows where a value is null or of several lines, or does not parse."""
        assert self.fetcher is not None
        reads = list(self.parts.values())
        wanted = {(r.topic, r.partition): r.next_offset for r in reads}
        answers = self.fetcher.fetch(wanted, self.waits.fetch_ms, FETCH_BYTES, PARTITION_BYTES)
        now = time.monotonic()
        bodies: list[bytes] = []
        counts: list[int] = []
        which: list[int] = []
        kept: list[tuple[Batch, int, int]] = []  # (batch, first offset wanted, partition)
        reached: list[tuple[PartitionRead, int, int]] = []  # (read, read up to, its end)
        odd = 0
        for f in answers:
            i = self.index[(f.topic, f.partition)]
            read = reads[i]
            if f.error == OFFSET_OUT_OF_RANGE:  # gone from the log (retention): the earliest
                read.next_offset = self.fetcher.offsets([(f.topic, f.partition)], EARLIEST)[
                    (f.topic, f.partition)]
                self.error = f"{f.topic}/{f.partition}: the position was no longer in the " \
                    f"log; read on from its earliest record, {read.next_offset}"
                continue
            if f.error:
                raise KafkaProtocolError(f"fetching {f.topic}/{f.partition}", f.error)
            committed = Committed(f.aborted)
            at = read.next_offset
            for b in batches(f.records or b""):
                if b.last_offset < at:
                    continue
                if committed.keep(b):
                    body, n, _, o = join_values(b, at)
                    if n:
                        bodies.append(body)
                        counts.append(n)
                        which.append(i)
                        kept.append((b, at, read.partition))
                        odd |= o
                at = b.last_offset + 1
            reached.append((read, at, f.high))
        import numpy as np

        n = sum(counts)
        of = np.repeat(np.asarray(which, dtype=np.int64), counts)
        batch = None
        if n and not odd:
            batch = self._columns_of(b"\n".join(bodies), n, kept)
        rows = [r for b, first, _ in kept for r in records_of(b, first)] \
            if n and batch is None else []  # as rows: each odd record says what is wrong
        # The positions move only now: a read that raised above is read again.
        moved: dict[str, int] = {}
        for read, at, high in reached:
            if at != read.next_offset:
                moved[position_key(read.topic, read.partition)] = at
            was = read.at_end
            read.next_offset, read.high = at, max(read.high, high)
            read.at_end = at >= high
            if read.at_end and (not was or position_key(read.topic, read.partition) in moved):
                read.at_end_since = now
        return Got(n, of, moved, batch, rows)

    def _columns_of(self, body: bytes, n: int, kept: list[tuple[Batch, int, int]]) -> Any:
        """The values of a read as the source's columns, with the record fields the
        schema names (`meta_columns`); None where they go as rows."""
        step = self.act.step.id
        batch = parse_json_body(body, n, self.value_schema, step)
        if batch is None or not self.record_fields:
            return batch
        import pyarrow as pa

        from cameo_actors.operators.column_schema import conform
        from cameo_actors.operators.exceptions import ColumnsRefused

        meta = meta_columns(kept, self.record_fields)
        if meta is None:
            return None
        try:
            return conform(step, pa.RecordBatch.from_arrays(
                [*batch.columns, *meta.values()], names=[*batch.schema.names, *meta]),
                self.schema)[0]
        except ColumnsRefused:  # a record field declared of another type: the rows say so
            return None

    def _deliver(self, got: Got, now: float) -> None:
        """What a read got, into the instance's mailbox: its events, a watermark after
        every WATERMARK_EVERY records (whether an event is late is as fine-grained as
        through the API; as columns, blocks joined where that changes nothing:
        `column_messages`), the malformed records to the error output, the end of a
        bounded read."""
        items: list[Any] = []
        errors: list[list[Any]] = []
        reads = list(self.parts.values())
        n = 0
        if got.batch is not None:
            def advance(i: int, j: int) -> float:  # the watermark once records i to j are seen
                self._saw(got.batch.slice(i, j - i), got.of[i:j])
                return self._watermark(now)

            items, self.watermark = column_messages(got.batch, advance, self.watermark,
                                                    self.event_time, self.joins_blocks)
            n = got.n
        else:
            for i in range(0, got.n, WATERMARK_EVERY):
                events = [e for j, m in enumerate(got.rows[i:i + WATERMARK_EVERY])
                          if (e := record_event(m, reads[got.of[i + j]], self.record_fields,
                                                self.event_time, self.act.step.id, errors))
                          is not None]
                if events:
                    items.append(events)
                    n += len(events)
                wm = self._watermark(now)
                if wm > self.watermark:
                    self.watermark = wm
                    items.append(wm)
        if errors:
            self.malformed += len(errors)
            items.append({"errors": errors})
        if not got.n:  # partitions may have gone idle
            wm = self._watermark(now)
            if wm > self.watermark:
                self.watermark = wm
                items.append(wm)
        if self.bounded and all(r.at_end for r in self.parts.values()):
            items.append(END_OF_STREAM)
            self.ended = True
        if items or got.moved:
            self._hand_over(items, got.moved, n)

    def _columns(self, records: list[Any]) -> Any:
        return parse_json_values([m.value() for m in records], self.schema, self.act.step.id)

    def _saw(self, batch: Any, of: Any) -> None:
        """Each partition's largest event time, after `batch` (whose events are of the
        partitions `of` names, by index)."""
        if self.event_time is None:
            return
        times = batch.column(self.event_time).to_numpy(zero_copy_only=False)
        reads = list(self.parts.values())
        for i, t in largest_by_run(times, of):
            if t > reads[i].max_event_ms:  # (NaN: no time, never larger)
                reads[i].max_event_ms = t

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
                "client": "cameo" if self.by_fetch else "librdkafka",
                "watermark": self.watermark,
                "partitions": {f"{r.topic}/{r.partition}": {
                    "offset": r.taken, "lag": max(0, r.high - max(r.taken, 0))}
                    for r in list(self.parts.values())}}
