"""Peer: Spark Structured Streaming alone, the two tenants' queries in one SparkSession, FAIR pools.

Run: `python -m bench.peers.spark_fair [--seconds 30] [--warmup 10] [--bulk-rate 20000]
[--compare-alone] [--json FILE]` (`--bulk-rate 0`: the alerts query alone, Spark's floor).

One SparkSession on `local[2]` (the machine's 2 cores, as many as our 2 executors)
with `spark.scheduler.mode=FAIR` and two pools: "alerts" (weight 10, minShare 1)
and "bulk" (weight 1), Spark's own isolation knob between queries of one
application. Each query is started on a thread whose `spark.scheduler.pool` local
property names its pool (the query's thread inherits it; checked in the sinks).
Two feeder threads play `common.alerts_workload` and `common.bulk_workload` in
real time and write each tenant's events as JSON-lines files into its folder
(`spark_ingest.events.write_file`: hidden name, then rename). For `warmup +
seconds` seconds; events with ts earlier than start + warmup are not counted.

The choices (figures quoted: 20 s runs after a 5 s warm-up, on the 2 cores shared
with other loads, load average 4-8: read them for the ranking, not the values):

- alerts: filter `value >= 0` -> foreachBatch, which collects `ts` to the driver;
  latency = wall clock once the rows are in the driver - ts. The clock is read
  after the collect, not on entering foreachBatch: Spark reads the batch's files
  only in that collect's job, so before it the result is not visible anywhere.
- bulk: map `bench.harness.work.burn` -> watermark 0 s on ts (events come in order) ->
  (key, 1 s tumbling window) count, append mode -> foreachBatch; latency = wall
  clock when the row is in the driver - window end. The map is a plain `@udf`,
  what a Spark user writes: on Spark 4 it is Arrow-batched by default
  (`spark.sql.execution.pythonUDF.arrow.enabled`), measured here as fast as a
  pandas UDF doing the same per-row loop (both ~42 us per event per core against
  ~70 for the pickled row UDF). The count is `count(value)` of the mapped value so
  that Spark cannot prune the map away (it would for `count(*)`).
- trigger: processingTime 0 (the default: the next micro-batch starts as soon as
  the previous one ends) for both queries. Continuous and real-time modes do not
  take a file source. A 100 ms interval only adds waiting: alerts alone, p50/p99
  917/1936 ms against 807/1877 with 0.
- alerts files: 10 of the workload's 10 ms batches per file, a file every 100 ms
  (`ALERTS_FILE_MS`; the bulk's files too). One file per 10 ms batch overwhelms the
  file source: every file costs in each micro-batch (listing, opening, and above 32
  files per batch a Spark job to list them, see below), batches grow, so more
  files wait, and it spirals: alerts alone p50 20.5 s, 9 s per batch (with that
  job off: p50 1.7 s, 1.2 s per batch). Files of 100 ms: p50 0.7-0.8 s, p99
  1.3-1.9 s, ~0.55 s per batch; files of 50 ms did no better (p50 0.75 s, p99
  1.6 s). Spark's ~0.5 s floor per micro-batch dwarfs the up to 90 ms an event
  waits for its file.
- one setting besides FAIR: spark.sql.sources.parallelPartitionDiscovery.threshold
  raised, so that a micro-batch with more than 32 new files does not run a Spark
  job (a task per file, in the query's pool) only to stat them. It is a cost of
  feeding Spark through small files, not of the queries: bulk at 5,000 ev/s fell
  behind with it (3,100 ev/s ingested, getBatch 2-4 s a batch, bulk p50 19 s,
  alerts p50 3.2 s) and kept up without it (5,270 ev/s, bulk p50 8 s, alerts p50
  2.0 s).

At the end the feeders stop, one more bulk event (key "__mark__", not counted,
event time = the wall clock once the last window has ended) closes the bulk
query's last windows the way further input would, and both queries are drained (up to `DRAIN_TIMEOUT_S`), so slow results are counted
too. Reported besides the latencies: the events/s each query ingested over the
measured part (from Spark's progress), against the offered rate, and Spark's
mean micro-batch time per query. Everything lives in a temporary folder under
the project's run dir, removed at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.harness.stats import latency_summary
from bench.peers import common
from cameo_actors.runtime.config import default_run_dir
from spark_ingest.events import write_file
from spark_ingest.session import SparkConfig, build_session

SYSTEM = "spark-fair-pools"
SCHEMA = "ts LONG, key STRING, value DOUBLE"
#: The project root, for Spark's Python workers to import bench.harness.work wherever they start.
ROOT = str(Path(__file__).resolve().parents[2])
POOLS = {"alerts": {"weight": 10, "minShare": 1}, "bulk": {"weight": 1, "minShare": 0}}
ALERTS_FILE_MS = 100
TRIGGER = "0 seconds"
#: The key of events that are not the workload's: the warm-up file and the bulk's closing event.
MARK_KEY = "__mark__"
DRAIN_TIMEOUT_S = 60.0
FILE_NOTE = ("alerts events written a file per 100 ms (10 batches of 10 ms): a file per 10 ms "
             "made the file source fall ever further behind (alerts alone p50 20 s); 50 ms was "
             "no better than 100 ms")
TRIGGER_NOTE = "trigger processingTime 0 s for both queries (a 100 ms interval was no better)"

Log = Callable[[str], Any]


def mark(ts: int) -> str:
    """A JSON line of an event that is not the workload's (not counted anywhere)."""
    return f'{{"ts":{ts},"key":"{MARK_KEY}","value":0.0}}'


def pools_xml() -> str:
    pools = "".join(f'  <pool name="{name}"><schedulingMode>FIFO</schedulingMode>'
                    f'<weight>{p["weight"]}</weight><minShare>{p["minShare"]}</minShare></pool>\n'
                    for name, p in POOLS.items())
    return f'<?xml version="1.0"?>\n<allocations>\n{pools}</allocations>\n'


class Feeder:
    """Writes a tenant's pushed batches into `folder`, `batches_per_file` batches per file."""

    def __init__(self, folder: str, batches_per_file: int = 1) -> None:
        self.folder, self.batches_per_file = folder, batches_per_file
        self.pushed = 0  # events written
        self.first_ts: int | None = None  # the feed's start: event time of its first batch
        self.max_ts = 0
        self._lines: list[str] = []
        self._batches = 0
        self._files = 0
        os.makedirs(folder, exist_ok=True)

    def push(self, events: list[dict[str, Any]]) -> None:
        # Formatted by hand: json.dumps costs ~3x more, on the same 2 cores as Spark.
        self._lines.extend(f'{{"ts":{e["ts"]},"key":"{e["key"]}","value":{e["value"]!r}}}'
                           for e in events)
        if self.first_ts is None:
            self.first_ts = min(e["ts"] for e in events)
        self.max_ts = max(self.max_ts, max(e["ts"] for e in events))
        self._batches += 1
        if self._batches >= self.batches_per_file:
            self.flush()

    def flush(self) -> None:
        if self._lines:
            write_file(self.folder, f"e-{self._files:07d}.json", self._lines)
            self._files += 1
            self.pushed += len(self._lines)
        self._lines, self._batches = [], 0


class Sink:
    """Counts what comes after `warmup_s` of its feeder's events (from its first event's time)."""

    def __init__(self, spark: Any, feeder: Feeder, warmup_s: float) -> None:
        self.spark, self.feeder, self.warmup_ms = spark, feeder, warmup_s * 1000
        self.pools: set[str | None] = set()  # the scheduler pools seen by its jobs' thread

    @property
    def since_ms(self) -> float:
        first = self.feeder.first_ts  # set before the feeder's first file lands
        return float("inf") if first is None else first + self.warmup_ms


class AlertsSink(Sink):
    """foreachBatch of the alerts query: latency of every row in the driver."""

    def __init__(self, spark: Any, feeder: Feeder, warmup_s: float) -> None:
        super().__init__(spark, feeder, warmup_s)
        self.latencies: list[float] = []
        self.rows = 0  # workload rows seen
        self.batches = 0
        self.collect_ms: list[float] = []

    def __call__(self, df: Any, batch_id: int) -> None:
        t0 = time.time() * 1000
        rows = df.select("ts", "key").collect()
        now = time.time() * 1000
        self.collect_ms.append(now - t0)
        self.pools.add(self.spark.sparkContext.getLocalProperty("spark.scheduler.pool"))
        ts = [t for t, key in rows if key != MARK_KEY]
        since = self.since_ms
        self.latencies.extend(now - t for t in ts if t >= since)
        self.rows += len(ts)
        self.batches += 1


class BulkSink(Sink):
    """foreachBatch of the bulk query: latency of every emitted window after its end."""

    def __init__(self, spark: Any, feeder: Feeder, warmup_s: float) -> None:
        super().__init__(spark, feeder, warmup_s)
        self.latencies: list[float] = []
        self.counted = 0  # events in the emitted windows (without the marked ones)

    def __call__(self, df: Any, batch_id: int) -> None:
        from pyspark.sql import functions as F

        rows = df.select("key", F.unix_millis("window.start"), F.unix_millis("window.end"),
                         "n").collect()
        now = time.time() * 1000
        self.pools.add(self.spark.sparkContext.getLocalProperty("spark.scheduler.pool"))
        since = self.since_ms
        for key, start, end, n in rows:
            if key == MARK_KEY:
                continue
            self.counted += n
            if start >= since:
                self.latencies.append(now - end)


def _ingested(query: Any) -> int:
    return sum(p["numInputRows"] for p in query.recentProgress)


def _spark_stats(query: Any, offered: float, pushed: int, in0: tuple[float, int],
                 in1: tuple[float, int]) -> dict[str, Any]:
    """What Spark kept up with: in0, in1 = (time, events ingested) at the measured part's ends."""
    # Batch 0 (the warm-up file) is the cold start, not a micro-batch of the run.
    ms = [p["durationMs"].get("triggerExecution", 0) for p in query.recentProgress
          if p["numInputRows"] and p["batchId"] > 0]
    return {"offered_eps": offered, "ingested_eps": round((in1[1] - in0[1]) / (in1[0] - in0[0]), 1),
            "pushed": pushed,
            # Events pushed but not through a finished micro-batch when the feed ended (the
            # warm-up file's one event aside): how far behind Spark was then.
            "backlog_at_feed_end": pushed - (in1[1] - 1),
            "backlog_at_feed_end_s": round((pushed - (in1[1] - 1)) / offered, 2),
            "mean_batch_ms": round(statistics.mean(ms), 1) if ms else None,
            "batches": len(query.recentProgress)}


def _wait(done: Callable[[], bool], queries: list[Any], timeout_s: float) -> bool:
    """Wait for `done`; raises if a query died."""
    deadline = time.monotonic() + timeout_s
    while not done():
        for q in queries:
            if not q.isActive:
                raise RuntimeError(f"query {q.name} stopped: {q.exception()}")
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def phase(spark: Any, base: str, name: str, seconds: float, warmup: float, bulk_rate: float, *,
          alerts_file_ms: int = ALERTS_FILE_MS, trigger: str = TRIGGER,
          log: Log = print) -> dict[str, Any]:
    """Run the alerts query (and the bulk one if bulk_rate > 0) live for warmup + seconds."""
    from pyspark.sql import functions as F

    from bench.harness.work import burn

    sc = spark.sparkContext
    folder = os.path.join(base, name)
    alerts_w = common.alerts_workload(warmup + seconds)
    bulk_w = common.bulk_workload(bulk_rate, warmup + seconds)
    feeders = {"alerts": Feeder(os.path.join(folder, "alerts"),
                                max(1, round(alerts_file_ms / (alerts_w.period_s * 1000))))}
    bulk_feeder = Feeder(os.path.join(folder, "bulk"))
    a_sink = AlertsSink(spark, feeders["alerts"], warmup)
    b_sink = BulkSink(spark, bulk_feeder, warmup)
    queries: dict[str, Any] = {}

    def read(tenant: str) -> Any:
        return spark.readStream.schema(SCHEMA).json(feeders[tenant].folder)

    def start(tenant: str, frame: Any, sink: Any, mode: str) -> None:
        # The query's thread copies this thread's local properties when it starts: its jobs
        # (the collect in foreachBatch included) all go to the tenant's pool.
        sc.setLocalProperty("spark.scheduler.pool", tenant)
        queries[tenant] = (frame.writeStream.queryName(f"{name}-{tenant}").outputMode(mode)
                           .option("checkpointLocation", os.path.join(folder, "chk", tenant))
                           .trigger(processingTime=trigger).foreachBatch(sink).start())
        sc.setLocalProperty("spark.scheduler.pool", None)

    start("alerts", read("alerts").filter(common.ALERTS_FILTER), a_sink, "append")
    if bulk_rate > 0:
        feeders["bulk"] = bulk_feeder
        # A plain @udf; useArrow=True is what Spark 4 gives it by default (the session's
        # spark.sql.execution.pythonUDF.arrow.enabled), spelled out so it does not hang on that.
        burned = F.udf(lambda ts, key, value: burn({"ts": ts, "key": key, "value": value})["value"],
                       "double", useArrow=True)
        frame = (read("bulk").select("key", F.timestamp_millis("ts").alias("et"),
                                     burned("ts", "key", "value").alias("value"))
                 .withWatermark("et", "0 seconds")
                 .groupBy("key", F.window("et", "1 second"))
                 .agg(F.count("value").alias("n")))
        start("bulk", frame, b_sink, "append")
    qs = list(queries.values())

    # Spark's first micro-batch of a query costs seconds (planning, code generation, the JIT,
    # the Python workers): one marked file per query, and its batch done, before the feed. A
    # long-running deployment pays that once, as our runtime does its start.
    for f in feeders.values():
        write_file(f.folder, "warm.json", [mark(int(time.time() * 1000) - 60_000)])
    if not _wait(lambda: all(_ingested(q) > 0 for q in qs) and a_sink.batches > 0, qs, 300):
        raise TimeoutError("the queries' first micro-batch did not finish within 300 s")

    stop = threading.Event()
    plays = {"alerts": alerts_w, "bulk": bulk_w}
    threads = [threading.Thread(target=plays[t].play, args=(f.push, stop), name=f"feed-{t}", daemon=True)
               for t, f in feeders.items()]
    since_ms = time.time() * 1000 + warmup * 1000  # for the ingested rates only
    for t in threads:
        t.start()
    log(f"[{name}] feeding for {warmup + seconds:.0f} s (warm-up {warmup:.0f} s), "
        f"bulk {bulk_rate:,.0f} ev/s")
    try:
        _wait(lambda: time.time() * 1000 >= since_ms, qs, warmup + 1)
        in0 = {t: (time.time(), _ingested(q)) for t, q in queries.items()}
        _wait(lambda: not any(t.is_alive() for t in threads), qs, seconds + 60)
        in1 = {t: (time.time(), _ingested(q)) for t, q in queries.items()}
    finally:
        stop.set()
        for t in threads:
            t.join()
    for f in feeders.values():
        f.flush()
    pushed = {t: f.pushed for t, f in feeders.items()}

    # Drain: everything pushed reaches the sinks (the bulk's last windows once a later event
    # moves the watermark past them), so that slow results are counted, not dropped.
    t_end = time.monotonic()
    drained = _wait(lambda: a_sink.rows >= pushed["alerts"], qs, DRAIN_TIMEOUT_S)
    if "bulk" in feeders:
        last_end = (feeders["bulk"].max_ts // 1000 + 1) * 1000
        time.sleep(max(0.0, (last_end - time.time() * 1000) / 1000 + 0.01))
        write_file(feeders["bulk"].folder, "flush.json",
                   [mark(int(time.time() * 1000))])
        drained = _wait(lambda: b_sink.counted >= pushed["bulk"], qs,
                        max(1.0, DRAIN_TIMEOUT_S - (time.monotonic() - t_end))) and drained
    drain_s = time.monotonic() - t_end
    spark_stats = {t: _spark_stats(q, plays[t].rate_eps, pushed[t], in0[t], in1[t])
                   for t, q in queries.items()}
    spark_stats["alerts"]["mean_collect_ms"] = (round(statistics.mean(a_sink.collect_ms), 1)
                                                if a_sink.collect_ms else None)
    for q in qs:
        q.stop()
    out = {"alerts": latency_summary(a_sink.latencies, common.ALERTS_TARGET_MS),
           "bulk": latency_summary(b_sink.latencies, common.BULK_TARGET_MS),
           "spark": spark_stats, "drained": drained, "drain_s": round(drain_s, 1),
           "pools_seen": {"alerts": sorted(map(str, a_sink.pools)), "bulk": sorted(map(str, b_sink.pools))}}
    _log_phase(name, out, log)
    return out


def _log_phase(name: str, r: dict[str, Any], log: Log) -> None:
    for t in ("alerts", "bulk"):
        s, sp = r[t], r["spark"].get(t)
        if not sp:
            continue
        lat = (f"p50 {s['p50_ms']:.0f} p99 {s['p99_ms']:.0f} ms, {s['within_target']:.1%} in target"
               if s["results"] else "no results")
        log(f"[{name}] {t:6s} {lat}; ingested {sp['ingested_eps']:,.0f}/{sp['offered_eps']:,.0f} ev/s, "
            f"{sp['backlog_at_feed_end_s']} s behind at the end, {sp['mean_batch_ms']} ms per batch")
    if not r["drained"]:
        log(f"[{name}] not drained after {r['drain_s']} s: results still missing are not counted")


def run(seconds: float = 30.0, warmup: float = 10.0, bulk_rate: float = 20_000.0, *,
        compare_alone: bool = False, alerts_file_ms: int = ALERTS_FILE_MS, trigger: str = TRIGGER,
        log: Log = print) -> dict[str, Any]:
    """Both tenants in one FAIR SparkSession (bulk_rate 0: alerts alone); `common.result` shape.

    Needs its own SparkContext (FAIR is fixed when the context starts): raises if one
    is already running in this process.
    """
    import pyspark
    from pyspark import SparkContext

    if SparkContext._active_spark_context is not None:
        raise RuntimeError("spark_fair needs its own SparkContext (the scheduler mode is fixed "
                           "when a context starts): run it in a process without one")
    peers_dir = os.path.join(default_run_dir(), "peers")
    os.makedirs(peers_dir, exist_ok=True)
    base = tempfile.mkdtemp(prefix="spark-fair-", dir=peers_dir)
    try:
        alloc = os.path.join(base, "pools.xml")
        with open(alloc, "w") as f:
            f.write(pools_xml())
        conf = (("spark.scheduler.mode", "FAIR"), ("spark.scheduler.allocation.file", alloc),
                # Spark's Python workers import bench.harness.work (the UDF) from the project root.
                ("spark.executorEnv.PYTHONPATH", ROOT),
                # The file source hands each micro-batch's new files to a file index that, above
                # 32 paths, runs a Spark job (a task per file) just to stat files Spark has listed
                # already: an artifact of feeding through small files (no other source pays it),
                # seconds per bulk batch here, so off (the files are stat'ed in the driver).
                ("spark.sql.sources.parallelPartitionDiscovery.threshold", "1000000"),
                # Keep every batch's progress (default 100) for the ingested rates.
                ("spark.sql.streaming.numRecentProgressUpdates", "100000"))
        spark = build_session(SparkConfig(master="local[2]", app_name="cameo-peer-spark-fair",
                                          run_dir=base, log_level="ERROR", conf=conf))
        try:
            jsc = spark.sparkContext._jsc.sc()
            if jsc.getSchedulingMode().toString() != "FAIR":
                raise RuntimeError("spark.scheduler.mode=FAIR not in effect")
            pools = {n: (jsc.getPoolForName(n).get().weight(), jsc.getPoolForName(n).get().minShare())
                     for n in POOLS}
            alone = None
            if compare_alone and bulk_rate > 0:
                alone = phase(spark, base, "alone", seconds, warmup, 0, alerts_file_ms=alerts_file_ms,
                              trigger=trigger, log=log)
            main = phase(spark, base, "shared" if bulk_rate > 0 else "alone", seconds, warmup,
                         bulk_rate, alerts_file_ms=alerts_file_ms, trigger=trigger, log=log)
        finally:
            spark.stop()
    finally:
        shutil.rmtree(base, ignore_errors=True)

    latency: dict[str, Any] = {
        "alerts": main["alerts"], "bulk": main["bulk"],
        "offered_eps": {"alerts": common.alerts_workload(1).rate_eps, "bulk": float(bulk_rate)},
        "seconds": seconds, "warmup_s": warmup, "trigger": f"processingTime {trigger}",
        "alerts_file_ms": alerts_file_ms, "spark": main["spark"], "drained": main["drained"],
        "pools_seen": main["pools_seen"]}
    if alone is not None:
        latency["alerts_alone"] = alone["alerts"]
        latency["spark_alone"] = alone["spark"]
    bulk = main["spark"].get("bulk")
    notes = [
        f"local[2], spark.scheduler.mode=FAIR, pools (weight, minShare): {pools}; each query "
        "started with spark.scheduler.pool set, pools seen in its foreachBatch: "
        f"{main['pools_seen']}",
        "FAIR shares task slots between pools when slots free up; it does not preempt a running "
        "task, so an alerts task can wait for a bulk task (burn over a batch's files) to finish",
        "alerts latency: wall clock once foreachBatch has collected the rows - ts; bulk: wall "
        "clock once collected - window end; events of the warm-up not counted",
        "bulk map: plain @udf (Arrow-batched by default on Spark 4) calling bench.harness.work.burn; "
        "count(value) keeps the map from being pruned",
        FILE_NOTE, TRIGGER_NOTE,
        "spark.sql.sources.parallelPartitionDiscovery.threshold raised: no Spark job (a task per "
        "file) to stat each micro-batch's new files, a cost of the file feed, not of the queries",
    ]
    if bulk:
        notes.append(f"bulk ingested {bulk['ingested_eps']:,.0f} of {bulk['offered_eps']:,.0f} "
                     "offered ev/s over the measured part (Spark progress numInputRows), "
                     f"{bulk['backlog_at_feed_end_s']} s of input behind when the feed ended")
    if not main["drained"]:
        notes.append(f"not drained within {DRAIN_TIMEOUT_S:.0f} s after the feed: results still "
                     "missing then are not in the latencies (they would only be later)")
    return common.result(SYSTEM, pyspark.__version__, latency=latency, notes=notes)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seconds", type=float, default=30.0, help="measured seconds (after the warm-up)")
    p.add_argument("--warmup", type=float, default=10.0, help="seconds fed but not counted")
    p.add_argument("--bulk-rate", type=float, default=20_000.0, help="bulk events/s (0: alerts alone)")
    p.add_argument("--compare-alone", action="store_true",
                   help="first the alerts query alone, then both (the alone figures as alerts_alone)")
    p.add_argument("--alerts-file-ms", type=int, default=ALERTS_FILE_MS,
                   help="alerts events per file, in ms of the feed (the workload's batches are 10 ms)")
    p.add_argument("--trigger", default=TRIGGER, help="processingTime of both queries")
    p.add_argument("--json", help="also write the result to this file")
    a = p.parse_args(argv)
    res = run(a.seconds, a.warmup, a.bulk_rate, compare_alone=a.compare_alone,
              alerts_file_ms=a.alerts_file_ms, trigger=a.trigger,
              log=lambda s: print(s, file=sys.stderr, flush=True))
    text = json.dumps(res, indent=2)
    print(text)
    if a.json:
        with open(a.json, "w") as f:
            f.write(text + "\n")


if __name__ == "__main__":
    main()
