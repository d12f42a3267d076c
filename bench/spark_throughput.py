"""Events/s through Spark into the runtime: JSON files -> Spark -> `cameo` sink -> executors.

Run: `python -m bench.spark_throughput [--rows N] [--files F] [--format json|parquet]
[--push rows|columns|both] [--read spark|arrow|both] [--max-files-per-trigger M] [--repeat R]
[--quick-jit] [--json F]`

What is measured: N small rows ({"ts", "level", "key", "value"}, ~70 bytes as
JSON) already landed in F files (JSON, or the same rows as Parquet); one input
query (file source, `cameo` sink) feeds a filter dataflow on a pool of 2
executors. With `--push both` each repeat runs the sink pushing rows (one dict
per event, msgpack) and pushing Arrow columns, one after the other; with `--read
both`, Arrow columns once more with the files read by the writer (`cameo.read`:
Spark's `binaryFile` source lists the files, pyarrow reads them,
`spark_ingest.files`) instead of Spark's reader. The clock runs from
the query's start to the moment the runtime counted all N events in
(`stats()["events_in"]`), so Spark's per-batch planning and checkpoint
writes, JSON parsing, Arrow -> events, msgpack, Ray calls and the runtime's
backpressure are all inside it. A warm-up query on a few files first starts
Spark's Python workers (and their Ray connection) and the JVM's JIT, which a
long-running tier pays once. Also printed: Spark's own rate (input rows over
the batches' triggerExecution time), and events per CPU second of every process
the run used (`bench.harness.cpu`: Spark's JVM and Python workers, the executors,
Ray, the driver), counted from the query's start until the runtime is idle (the
figure that carries to a cluster), and when the first event came in (the query's
start and its micro-batch's planning) with the rate from then on. `--json F` writes
every run's figures.
"""

from __future__ import annotations

import argparse
import os
import shutil
import time
from typing import Any

from bench.harness.cpu import CpuMeter
from bench.harness.output import save_json
from bench.harness.spark import spark_on_pool
from cameo_actors import Dataflow
from cameo_actors.examples import SCHEMA
from cameo_actors.runtime.config import default_run_dir
from spark_ingest import SparkTier
from spark_ingest.events import land_files


def dataflow(name: str, folder: str, opts: dict[str, str], parallelism: int = 1,
             fmt: str = "json") -> Dataflow:
    # Keeps ~0.05% of the events: the benchmark is about getting events in.
    return (Dataflow(name, latency_target_ms=1000)
            .source("logs", schema=SCHEMA, event_time="ts", allowed_lateness_ms=10**9,
                    connector={"format": fmt, "path": folder, **opts}, parallelism=parallelism)
            .filter("level == 'ERROR' and value > 99").sink("o"))


def run_once(tier: SparkTier, rt: Any, name: str, folder: str, rows: int, opts: dict[str, str],
             parallelism: int = 1, timeout_s: float = 600, fmt: str = "json") -> dict[str, Any]:
    # The CPU of every process (Spark's JVM and Python workers, the executors, Ray, this
    # driver) until the runtime is idle: the events' whole cost, not only the clock's part.
    with CpuMeter() as machine:
        t0 = time.monotonic()
        tier.deploy(dataflow(name, folder, opts, parallelism, fmt))
        first = None  # the query's start and first micro-batch's planning, before any event
        while True:
            n = rt.stats(name)["events_in"]
            if n and first is None:
                first = time.monotonic() - t0
            if n >= rows:
                break
            tier.raise_if_failed()
            if time.monotonic() - t0 > timeout_s:
                raise TimeoutError(f"{n} of {rows} events in after {timeout_s} s")
            time.sleep(0.02)
        elapsed = time.monotonic() - t0
        query = tier.queries[name].inputs["logs"]
        tier.stop(name, drain=True)
        rt.wait_idle()
    progress = [p for p in query.recentProgress if p["numInputRows"]]
    rt.cancel(name)
    spark_rows = sum(p["numInputRows"] for p in progress)
    spark_ms = sum(p["durationMs"].get("triggerExecution", 0) for p in progress)
    return {"rows": rows, "seconds": elapsed, "events_per_s": rows / elapsed,
            "first_event_s": first,
            # Of the events, once they flow: the rate a long micro-batch tends to.
            "flowing_events_per_s": rows / (elapsed - first) if first and elapsed > first else None,
            "batches": len(progress), "spark_rows_per_s": spark_rows / (spark_ms / 1000) if spark_ms else None,
            "machine": machine.summary(rows)}


def to_parquet(folder: str) -> None:
    """The landed JSON files of `folder` as Parquet files, in place."""
    import pyarrow.json as pj
    import pyarrow.parquet as pq

    for f in sorted(os.listdir(folder)):
        if f.endswith(".json"):
            path = os.path.join(folder, f)
            pq.write_table(pj.read_json(path), path[:-len(".json")] + ".parquet")
            os.remove(path)


def spark_alone(spark: Any, folder: str, rows: int, opts: dict[str, str], ck: str,
                fmt: str = "json") -> dict[str, Any]:
    """The same files into Spark's `noop` sink: Spark's own ceiling here (rows/s, and the
    CPU of every process, the idle pool's included)."""
    corrupt = ", _corrupt_record STRING" if fmt == "json" else ""
    reader = spark.readStream.format(fmt).schema("ts BIGINT, level STRING, key STRING, "
                                                 "value DOUBLE" + corrupt)
    for k, v in opts.items():
        if not k.startswith("cameo."):
            reader = reader.option(k, v)
    with CpuMeter() as machine:
        t0 = time.monotonic()
        query = reader.load(folder).writeStream.format("noop").option("checkpointLocation", ck).start()
        query.processAllAvailable()
        elapsed = time.monotonic() - t0
    query.stop()
    return {"rows": rows, "seconds": elapsed, "rows_per_s": rows / elapsed,
            "machine": machine.summary(rows)}


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rows", type=int, default=2_000_000)
    p.add_argument("--files", type=int, default=40)
    p.add_argument("--max-files-per-trigger", type=int, default=None)
    p.add_argument("--batch-size", type=int, default=None, help="events per runtime message")
    p.add_argument("--arrow-batch-rows", type=int, default=10_000)
    p.add_argument("--format", choices=("json", "parquet"), default="json")
    p.add_argument("--push", choices=("rows", "columns", "both"), default="both",
                   help="how the sink hands events to the runtime")
    p.add_argument("--read", choices=("spark", "arrow", "both"), default="both",
                   help="who reads the files: Spark's reader, or the writer with pyarrow "
                        "(pushing Arrow columns)")
    p.add_argument("--repeat", type=int, default=1)
    p.add_argument("--parallelism", type=int, default=1, help="source instances in the runtime")
    p.add_argument("--executors", type=int, default=2)
    p.add_argument("--quick-jit", action="store_true",
                   help="the JVM's quick compiler only (SparkConfig.quick_jit)")
    p.add_argument("--json", help="write the figures to this file")
    args = p.parse_args(argv)

    run = os.path.join(default_run_dir(), "bench", "spark_throughput")
    shutil.rmtree(run, ignore_errors=True)
    data = os.path.join(run, "in")
    t = time.monotonic()
    list(land_files(data, args.files, args.rows // args.files))
    list(land_files(os.path.join(run, "warm"), 4, 5_000))
    if args.format == "parquet":
        for folder in (data, os.path.join(run, "warm")):
            to_parquet(folder)
    print(f"generated {args.rows} rows in {args.files} files in {time.monotonic() - t:.1f} s")
    opts: dict[str, str] = {}
    if args.max_files_per_trigger:
        opts["maxFilesPerTrigger"] = str(args.max_files_per_trigger)
    if args.batch_size:
        opts["cameo.batch_size"] = str(args.batch_size)

    with spark_on_pool("bench-spark", run, args.executors, arrow_batch_rows=args.arrow_batch_rows,
                       quick_jit=args.quick_jit) as (rt, spark, tier):
        pushes = ("rows", "columns") if args.push == "both" else (args.push,)
        reads = ("spark", "arrow") if args.read == "both" else (args.read,)
        for read in reads:
            warm = run_once(tier, rt, f"warmup-{read}", os.path.join(run, "warm"), 20_000,
                            {"cameo.read": read}, fmt=args.format)
            print(f"warm-up, {read} reads: {warm['events_per_s']:,.0f} events/s "
                  "(cold Python workers and JIT)")
        results = []
        # The writer reads files into columns: its rows arm would measure nothing new.
        arms = [(push, read) for read in reads for push in pushes
                if read == "spark" or push == "columns"]
        for i in range(args.repeat):
            for push, read in arms:
                name = f"tput-{push}-{read}-{i}"
                r = run_once(tier, rt, name, data, args.files * (args.rows // args.files),
                             {**opts, "cameo.columns": str(push == "columns").lower(),
                              "cameo.read": read}, args.parallelism, fmt=args.format)
                results.append({"push": push, "read": read, **r})
                print(f"run {i} {push:7s} {read:5s}: {r['rows']:,} events in {r['seconds']:.2f} s = "
                      f"{r['events_per_s']:,.0f} events/s into the runtime (the first after "
                      f"{r['first_event_s']:.2f} s, then {r['flowing_events_per_s'] or 0:,.0f}/s); "
                      f"{r['batches']} Spark batches; Spark's own rate "
                      f"{r['spark_rows_per_s'] or 0:,.0f} {'files' if read == 'arrow' else 'rows'}/s; "
                      f"{r['machine']['events_per_cpu_s'] or 0:,} events per CPU s of every "
                      f"process ({r['machine']['cores_busy']} cores busy)")
                shutil.rmtree(os.path.join(tier.checkpoint_root, name), ignore_errors=True)
        for push, read in arms:
            rates = sorted(r["events_per_s"] for r in results
                           if (r["push"], r["read"]) == (push, read))
            print(f"{push}, {read} reads: median {rates[len(rates) // 2]:,.0f} events/s")
        alone = spark_alone(spark, data, args.files * (args.rows // args.files), opts,
                            os.path.join(run, "noop-checkpoint"), args.format)
        print(f"baseline: the same files into Spark's noop sink: {alone['rows_per_s']:,.0f} rows/s, "
              f"{alone['machine']['events_per_cpu_s'] or 0:,} per CPU s of every process "
              f"({args.format} reading and Spark's batch costs, no Python, no runtime)")
        save_json(args.json, {"cores": os.cpu_count(), "args": vars(args), "runs": results,
                              "spark_noop": alone})


if __name__ == "__main__":
    main()
