"""`make run`: two tenants' dataflows on generated events.

    python -m cameo_actors.demo            # on the Ray runtime (embedded local Ray)
    python -m cameo_actors.demo --local    # in-process, no Ray
    python -m cameo_actors.demo --spark    # end to end: files -> Spark -> Ray -> Spark -> Parquet

Tenant "ops" runs an error filter with a 50 ms target; tenant "analytics" a
per-key one-second windowed sum with a 1 s target. Both share the pool.
"""

from __future__ import annotations

import argparse
import random

from cameo_actors import Dataflow, avg, count, sum_
from cameo_actors.operators.base import Event

SCHEMA = {"ts": "int", "level": "str", "key": "str", "value": "float"}


def alerts_dataflow() -> Dataflow:
    return (Dataflow("alerts", latency_target_ms=50, tenant="ops")
            .source("logs", schema=SCHEMA, event_time="ts")
            .filter("level == 'ERROR' and value > 90")
            .map({"ts": "ts", "key": "key", "value": "round(value, 1)"})
            .sink("alerts"))


def bulk_dataflow() -> Dataflow:
    return (Dataflow("bulk", latency_target_ms=1000, tenant="analytics")
            .source("metrics", schema=SCHEMA, event_time="ts")
            .key_by("key")
            .window(tumbling_ms=1000)
            .aggregate(n=count(), total=sum_("value"), mean=avg("value"))
            .sink("totals"))


def generate(n: int, start_ms: int = 0, rate_per_ms: float = 10.0, seed: int = 7) -> list[Event]:
    """n log events, `rate_per_ms` events per ms of event time, 5% errors."""
    rng = random.Random(seed)
    return [{"ts": start_ms + int(i / rate_per_ms),
             "level": "ERROR" if rng.random() < 0.05 else "INFO",
             "key": f"k{rng.randrange(8)}",
             "value": rng.uniform(0, 100)} for i in range(n)]


def run_in_process(n: int) -> None:
    from cameo_actors.testing import run_local

    events = generate(n)
    for df, source in ((alerts_dataflow(), "logs"), (bulk_dataflow(), "metrics")):
        result = run_local(df, {source: events})
        for sink, rows in result.sinks.items():
            print(f"[{df.tenant}/{df.name}] {sink}: {len(rows)} results; first 3:")
            for row in rows[:3]:
                print("   ", row)
        print(f"[{df.tenant}/{df.name}] errors: {result.error_counts() or 'none'}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--local", action="store_true", help="run in-process, without Ray")
    parser.add_argument("--events", type=int, default=20_000, help="events per dataflow")
    parser.add_argument("--spark", action="store_true",
                        help="end to end: JSON files -> Spark -> the pool -> Spark -> Parquet")
    args = parser.parse_args(argv)
    if args.spark:
        from spark_ingest.demo import run_end_to_end

        # The events land in files of ~166 rows every 100 ms (20,000 events: 12 s).
        run_end_to_end(files=max(1, args.events // 166), rows=166)
    elif args.local:
        run_in_process(args.events)
    else:
        from cameo_actors.runtime.demo import run_on_ray

        run_on_ray(args.events)


if __name__ == "__main__":
    main()
