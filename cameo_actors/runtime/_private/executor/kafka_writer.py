"""A Kafka sink instance's writer: the result log, in transactions with its offset
(what it does: `kafka`'s docstring).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from cameo_actors.runtime._private.executor.egress import ID_FIELD
from cameo_actors.runtime._private.executor.kafka_client import (
    CALL_TIMEOUT_S,
    CONNECT_TIMEOUT_S,
    RETRY_CAP_S,
    RETRY_S,
    Connector,
    client_config,
    kafka_options,
    load_kafka,
    waits_of,
)

if TYPE_CHECKING:
    from cameo_actors.runtime._private.executor.activation import Activation
    from cameo_actors.runtime._private.executor.core import ExecutorCore


#: Rows written per transaction, at most.
WRITE_BATCH = 5_000


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
        ck = load_kafka()
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
        producer.send_offsets_to_transaction([load_kafka().TopicPartition(self.topic, 0, end)],
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
