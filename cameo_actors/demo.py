"""`make run`: two tenants' dataflows on generated events.

    python -m cameo_actors.demo            # on the Ray runtime (embedded local Ray)
    python -m cameo_actors.demo --local    # in-process, no Ray
    python -m cameo_actors.demo --spark    # end to end: files -> Spark -> Ray -> Spark -> Parquet
    python -m cameo_actors.demo --kafka    # end to end: Kafka -> Ray -> Kafka, in milliseconds

Tenant "ops" runs an error filter with a 50 ms target; tenant "analytics" a
per-key one-second windowed sum with a 1 s target. Both share the pool.
"""

from __future__ import annotations

import argparse
import time

# The dataflows and events live in cameo_actors.examples; Ray and Spark are imported
# by the mode that runs on them, so importing this module imports neither.
from cameo_actors.examples import alerts_dataflow, bulk_dataflow, generate


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


def run_on_ray(n: int, policy: str = "cameo") -> None:
    """Both dataflows on one executor pool of an embedded local Ray."""
    from cameo_actors.runtime import Runtime, RuntimeConfig

    print(f"starting a local Ray and a pool (policy {policy!r}) ...")
    rt = Runtime.start(RuntimeConfig(policy=policy), pool=f"demo-{policy}")
    try:
        flows = {"alerts": ("logs", alerts_dataflow()), "bulk": ("metrics", bulk_dataflow())}
        for _, (_, df) in flows.items():
            rt.deploy(df)
        print("deployed:", ", ".join(f"{d['name']} (tenant {d['tenant']}, target "
                                      f"{d['latency_target_ms']} ms)" for d in rt.list()))
        # Replay the events at 10 per ms of event time, in steps of 50 ms, for both tenants.
        events = generate(n)
        step = 500
        t0 = time.monotonic()
        for i in range(0, n, step):
            for name, (source, _) in flows.items():
                rt.push(name, source, events[i:i + step])
            time.sleep(max(0.0, t0 + (i + step) / 10_000 - time.monotonic()))
        for name in flows:
            rt.close(name)
        rt.wait_idle()
        for name in flows:
            results = rt.results(name)
            s = rt.stats(name)
            print(f"\n[{s['tenant']}/{name}] {len(results)} results from {s['events_in']} events; "
                  f"latency p50 {s['p50_ms']:.1f} ms, p99 {s['p99_ms']:.1f} ms, "
                  f"{100 * s['within_target']:.1f}% within the {s['target_ms']} ms target; "
                  f"errors: {s['errors'] or 'none'}")
            for row in results[:3]:
                print("   ", row)
        for ex in rt.executor_stats():
            print(f"executor {ex['executor']}: {ex['activations']} activations, "
                  f"{ex['executed']} messages, busy {ex['busy_ms']:.0f} ms")
    finally:
        rt.shutdown()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--local", action="store_true", help="run in-process, without Ray")
    parser.add_argument("--events", type=int, default=20_000, help="events per dataflow")
    parser.add_argument("--spark", action="store_true",
                        help="end to end: JSON files -> Spark -> the pool -> Spark -> Parquet")
    parser.add_argument("--kafka", action="store_true",
                        help="end to end: a local Kafka-protocol broker -> the pool -> Kafka")
    args = parser.parse_args(argv)
    if args.kafka:
        from cameo_actors.examples.kafka_demo import run_kafka

        run_kafka(args.events)
    elif args.spark:
        from spark_ingest.demo import run_end_to_end

        # The events land in files of ~166 rows every 100 ms (20,000 events: 12 s).
        run_end_to_end(files=max(1, args.events // 166), rows=166)
    elif args.local:
        run_in_process(args.events)
    else:
        run_on_ray(args.events)


if __name__ == "__main__":
    main()
