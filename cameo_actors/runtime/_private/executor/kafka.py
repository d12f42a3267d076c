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
sink's key field); `client` "cameo" or "librdkafka" (a source's). Every `kafka.<name>`
option goes to librdkafka as `<name>` (security settings, client tuning), and is never
logged. A source reads through cameo's own fetch client (`kafka_fetch`) unless it needs
librdkafka (`kafka_reader.reads_by_fetch`). docs/kafka.md has the rest.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from cameo_actors.runtime._private.executor.kafka_client import Connector, kafka_options
from cameo_actors.runtime._private.executor.kafka_reader import KafkaReader
from cameo_actors.runtime._private.executor.kafka_writer import KafkaWriter
from cameo_actors.runtime._private.placement import Placement

if TYPE_CHECKING:
    from cameo_actors.dataflow.spec import DataflowSpec
    from cameo_actors.runtime._private.executor.core import ExecutorCore


#: How long a stopped writer is waited for (its transaction under way ends).
WRITER_END_S = 10.0


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
