"""The latency the Spark tier adds, next to the runtime's own, for given trigger intervals.

Run: `python -m bench.spark_latency [--triggers 100 1000] [--seconds 20] [--rate 10000]`

For each trigger interval T: JSON files land in a folder, one every 100 ms
(`--rate` events/s in all), for `--seconds`; an input query (trigger T) feeds a
filter dataflow (keeps ~10%), an output query (trigger T) writes its results
to Parquet. Per result row, read back from Parquet (see spark_ingest.latency):

- Spark in:  file landed (its mtime) -> the runtime stamped the event's ingress
- runtime:   ingress -> egress (the runtime's own latency)
- Spark out: egress -> the Parquet file holding the row was written
- end to end: file landed -> Parquet

A warm-up dataflow runs first (Spark's Python workers, their Ray connection,
the JIT), and rows of the first `--skip-seconds` are left out of the figures.
Also printed: Spark's mean time per micro-batch of each query, and its parts.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import threading
from typing import Any

from bench.harness.output import save_json
from bench.harness.spark import spark_on_pool
from cameo_actors import Dataflow
from cameo_actors.examples import SCHEMA as EVENT_SCHEMA
from cameo_actors.runtime.config import default_run_dir
from spark_ingest import SparkTier
from spark_ingest.events import land_files
from spark_ingest.latency import format_summary, read_output, stage_latencies

#: The files' events (spark_ingest.events), with the landing time the source adds.
SCHEMA = {**EVENT_SCHEMA, "landed_ms": "int"}
FILE_INTERVAL_S = 0.1


def dataflow(name: str, inp: str, out: str, trigger_ms: int) -> Dataflow:
    return (Dataflow(name, latency_target_ms=50)
            .source("logs", schema=SCHEMA, event_time="ts", allowed_lateness_ms=10**9,
                    connector={"format": "json", "path": inp, "trigger_ms": trigger_ms,
                               "cameo.landed_ms": "true"})
            .filter("value > 90")
            .sink("o", connector={"format": "parquet", "path": out, "trigger_ms": trigger_ms}))


def batch_costs(query: Any) -> dict[str, float]:
    """Mean ms per micro-batch that had input, per part of Spark's trigger."""
    progress = [p for p in query.recentProgress if p["numInputRows"]]
    if not progress:
        return {}
    keys = {k for p in progress for k in p["durationMs"]}
    return {k: statistics.mean(p["durationMs"].get(k, 0) for p in progress) for k in sorted(keys)}


def run(tier: SparkTier, spark: Any, rt: Any, base: str, trigger_ms: int, seconds: float,
        rate: int, skip_s: float) -> dict[str, Any]:
    name = f"lat-{trigger_ms}"
    inp, out = os.path.join(base, name, "in"), os.path.join(base, name, "out")
    os.makedirs(inp, exist_ok=True)
    tier.deploy(dataflow(name, inp, out, trigger_ms))
    files = int(seconds / FILE_INTERVAL_S)
    rows = max(1, int(rate * FILE_INTERVAL_S))
    landed: list[Any] = []
    t = threading.Thread(target=lambda: landed.extend(
        land_files(inp, files, rows, interval_s=FILE_INTERVAL_S)), daemon=True)
    t.start()
    while t.is_alive():
        tier.raise_if_failed()
        t.join(0.5)
    q = tier.queries[name]
    costs = {"in": batch_costs(q.inputs["logs"]), "out": batch_costs(q.outputs["o"])}
    tier.drain(name)
    frame = read_output(spark, out)
    first = min(f.landed_ms for f in landed)
    frame = frame[frame["landed_ms"] >= first + skip_s * 1000]
    stats = rt.stats(name)
    rt.cancel(name)
    return {"trigger_ms": trigger_ms, "events": stats["events_in"], "results": len(frame),
            "stages": stage_latencies(frame), "spark_batch_ms": costs}


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--triggers", type=int, nargs="+", default=[100, 1000])
    p.add_argument("--seconds", type=float, default=20.0)
    p.add_argument("--rate", type=int, default=10_000, help="events/s landing")
    p.add_argument("--skip-seconds", type=float, default=3.0)
    p.add_argument("--conf", nargs="*", default=[], help="extra Spark settings key=value")
    p.add_argument("--json", help="write the figures to this file")
    args = p.parse_args(argv)

    base = os.path.join(default_run_dir(), "bench", "spark_latency")
    shutil.rmtree(base, ignore_errors=True)
    os.makedirs(base)
    conf = tuple(tuple(kv.split("=", 1)) for kv in args.conf)
    results = []
    with spark_on_pool("bench-spark-latency", base, 2, conf=conf) as (rt, spark, tier):
        warm = run(tier, spark, rt, base, 200, 3.0, 2000, 0.0)
        print(f"warm-up done ({warm['events']} events)")
        for trigger in args.triggers:
            r = run(tier, spark, rt, base, trigger, args.seconds, args.rate, args.skip_seconds)
            results.append(r)
            print(f"\ntrigger {trigger} ms: {r['events']:,} events in, {r['results']:,} results "
                  f"measured (rate {args.rate:,}/s, files every {FILE_INTERVAL_S * 1000:.0f} ms)")
            for stage in ("spark_in", "runtime", "spark_out", "end_to_end"):
                print(f"   {stage:10s} {format_summary(r['stages'].get(stage, {}))}")
            for q, c in r["spark_batch_ms"].items():
                parts = ", ".join(f"{k} {v:.0f}" for k, v in c.items() if k != "triggerExecution")
                print(f"   Spark {q:3s} query: {c.get('triggerExecution', 0):.0f} ms per batch ({parts})")
        save_json(args.json, {"cores": os.cpu_count(), "args": vars(args), "runs": results})


if __name__ == "__main__":
    main()
