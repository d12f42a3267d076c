"""`bench.kafka`'s table: a topic through a dataflow to a topic beside the same events
pushed through the API, per CPU second of every process; and the Kafka demo's latency."""

from __future__ import annotations

from typing import Any

#: The issue's goals: events per CPU second of every process; the demo's alerts end to end.
GOAL_PER_CPU_S = 500_000
GOAL_P50_MS, GOAL_P99_MS = 30.0, 100.0
ARMS = {"kafka": "Kafka topic -> dataflow -> Kafka topic (transactions)",
        "kafka_librdkafka": "the same, the source reading through librdkafka",
        "push": "pushed through the API, rows",
        "push_arrow": "pushed through the API, an Arrow table",
        "spark": "JSON files -> the Spark tier -> dataflow (counts kept in the pool)"}


def table(figures: dict[str, Any]) -> list[str]:
    lines = ["| arm | events/s | events per CPU second, every process | CPU s by role (median run) |",
             "|---|---|---|---|"]
    for arm, what in ARMS.items():
        r = figures.get(arm)
        if r is None:
            continue
        roles = ", ".join(f"{k} {v:.2f}" for k, v in r["cpu_s_by_role"].items() if v)
        lines.append(f"| {what} | {r['events_per_s'] / 1e3:,.0f}k | "
                     f"{r['events_per_cpu_s'] / 1e3:,.0f}k | {roles} |")
    k, a = figures["kafka"], figures.get("push_arrow")
    rdk = figures.get("kafka_librdkafka")
    sentence = (f"{figures['events']:,} events over {figures['partitions']} partitions, median "
                f"of {figures['repeat']}. From Kafka and back: "
                f"{k['events_per_cpu_s'] / 1e3:,.0f}k events per CPU second, "
                + ("" if rdk is None else f"{k['events_per_cpu_s'] / rdk['events_per_cpu_s']:.2f}x"
                   " of the source reading through librdkafka and ")
                + ("" if a is None else f"{k['events_per_cpu_s'] / a['events_per_cpu_s']:.2f}x "
                   "of the same events pushed as Arrow; ")
                + ("" if figures.get("spark") is None else
                   f"{k['events_per_cpu_s'] / figures['spark']['events_per_cpu_s']:.2f}x of "
                   "the same events through the Spark tier; ")
                + f"the goal of {GOAL_PER_CPU_S / 1e3:,.0f}k is "
                + ("not met." if k["events_per_cpu_s"] < GOAL_PER_CPU_S else "met."))
    lines += ["", sentence]
    demo = figures.get("demo")
    if demo:
        def verdict(v: float, goal: float) -> str:
            return f"{v:.1f} ms (goal {goal:.0f}: {'met' if v <= goal else 'not met'})"

        lines += ["", f"The Kafka demo ({demo['events']:,} events, {demo['alerts']} alerts): "
                  f"produced -> consumed p50 {verdict(demo['e2e_p50_ms'], GOAL_P50_MS)}, p99 "
                  f"{verdict(demo['e2e_p99_ms'], GOAL_P99_MS)}; in the runtime p50 "
                  f"{demo['runtime_p50_ms']:.1f} ms, p99 {demo['runtime_p99_ms']:.1f} ms, "
                  f"{100 * demo['within_target']:.1f}% within the 50 ms target; results "
                  f"{'equal' if demo['results_match'] else 'DIFFER from'} run_local's."]
    return lines
