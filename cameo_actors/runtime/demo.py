"""The Ray half of `make run`: two tenants' dataflows sharing one executor pool."""

from __future__ import annotations

import time

from cameo_actors.demo import alerts_dataflow, bulk_dataflow, generate
from cameo_actors.runtime.api import Runtime
from cameo_actors.runtime.config import RuntimeConfig


def run_on_ray(n: int, policy: str = "cameo") -> None:
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
