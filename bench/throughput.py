"""Throughput of filter -> map -> tumbling count, per core.

Run: `python -m bench.throughput [--events N] [--executors 1,2,4] [--arrow-copies K] [--repeat R]
[--json FILE]`

Measured in one run, side by side:
- operators: the three operators alone, in-process (`run_local`);
- executor core: the same dataflow through one `ExecutorCore` in-process:
  scheduling, mailboxes, credits and egress included, no Ray;
- ray x1: on Ray, one executor, events pushed from this process;
- ray x2, ray x4: on Ray, two and four executors, every step with parallelism 2 or 4
  (source -> filter -> map -> key_by chained on each executor, only the keyed
  exchange to the window crosses executors); four on this machine's two cores is
  oversubscribed: its wall time says little, its CPU per event what it costs;
- ray x1 p2: the dataflow of parallelism 2 on one executor: the same keyed exchange as
  ray x2's, inside one executor (what an exchange between executors is set beside);
- ray xN busy: the same runs counted per CPU second of the
  executors' worker threads (their thread CPU clock: scheduling, decoding and
  operators, not time off the core): the rate inside an executor, without the
  driver and Ray's transport.
- *_arrow: the same events pushed as an Arrow table, run as columns where a step
  has a kernel (`operators/columns.py`). The arms differ in that alone: the same
  events, the same rows per push (`--arrow-batch`, default the rows' 2,000) and
  one copy (`--arrow-copies K` runs K copies one after the other in event time,
  and `--arrow-batch` larger pushes, to see what each adds).
Each Ray arm also gives events per CPU second of every process the run used (the
driver, the executors, the controller, Ray's daemons and workers: `harness/cpu.py`),
the figure that carries to a cluster, with those CPU seconds by role.
Every Ray run's results are checked against `run_local`'s (a mismatch exits).
Figures are medians over --repeat runs, after a warm-up run of each Ray arm; on
Ray they include the driver's cost of encoding and sending batches, which shares
the machine's cores, and the checkpoint `wait_idle` takes at the end (exactly
once: results are readable only after it). One pool runs at a time. Printed
after them: where the time went in each Ray arm's last run (wall time, the
driver's CPU, the executors' worker threads' CPU and all their threads' CPU by name).
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

from bench.harness.output import save_json
from bench.harness.workload import THROUGHPUT_FILTER
from cameo_actors import Dataflow, count
from cameo_actors.operators.base import END_OF_STREAM

SCHEMA = {"ts": "int", "key": "str", "value": "float"}
BATCH = 2_000


def dataflow(name: str, p: int = 1) -> Dataflow:
    return (Dataflow(name, latency_target_ms=1000)
            .source("s", schema=SCHEMA, event_time="ts", parallelism=p)
            .filter(THROUGHPUT_FILTER, id="f")
            .map({"ts": "ts", "key": "key", "value": "value"}, parallelism=p)
            .key_by("key").window(tumbling_ms=1000, parallelism=p).aggregate(n=count())
            .sink("o"))


def make_events(n: int, seed: int = 1) -> list[dict[str, Any]]:
    """The peer comparison's throughput input (bench/harness/workload.py): the same events for every system."""
    from bench.harness.workload import throughput_workload

    return [e for _, batch in throughput_workload(n, seed).batches() for e in batch]


def bench_operators(events: list[dict[str, Any]]) -> float:
    from cameo_actors.testing import TestingSource, run_local

    t0 = time.perf_counter()
    run_local(dataflow("ops"), {"s": TestingSource(events, batch_size=BATCH)})
    return len(events) / (time.perf_counter() - t0)


def as_columns(events: list[dict[str, Any]], copies: int = 1) -> Any:
    """The events as one Arrow record batch in the source's types; `copies` of them one
    after the other, each later in event time than the one before."""
    import numpy as np
    import pyarrow as pa

    from cameo_actors.operators.column_schema import conform

    [batch] = conform("s", pa.Table.from_pylist(events), list(SCHEMA.items()))
    ts = batch["ts"].to_numpy()
    span = int(ts.max()) + 1
    whole = pa.Table.from_batches([batch] * copies).combine_chunks().to_batches()[0]
    shifted = np.concatenate([ts + i * span for i in range(copies)])
    return whole.set_column(whole.schema.get_field_index("ts"), "ts", pa.array(shifted))


def run_core(events: Any, batch: int = BATCH) -> Any:
    """`events` (rows, or an Arrow batch) through one ExecutorCore in-process (no Ray), to
    the end of the stream, in `batch`-event pushes; returns the core (its results:
    `core.egress.dataflows["core"]`)."""
    from cameo_actors.runtime._private.executor.core import ExecutorCore
    from cameo_actors.runtime._private.placement import place
    from cameo_actors.runtime.config import RuntimeConfig

    spec = dataflow("core").spec
    core = ExecutorCore(0, RuntimeConfig(), lambda host, blob: None)
    core.deploy(spec, place(spec, [0], {}))
    seq = 0
    for seq, i in enumerate(range(0, len(events), batch)):
        part = events.slice(i, batch) if hasattr(events, "slice") else events[i:i + batch]
        core.ingress.ingest("bench", seq, "core/s/0", [part], 0.0)
        while core.run_slice():
            pass
    core.ingress.ingest("bench", seq + 1, "core/s/0", [END_OF_STREAM], 0.0)
    while core.run_slice():
        pass
    return core


def bench_core(events: Any, batch: int = BATCH) -> float:
    t0 = time.perf_counter()
    core = run_core(events, batch)
    elapsed = time.perf_counter() - t0
    assert core.stats.dataflows["core"].events_out > 0
    return len(events) / elapsed


def expected_results(events: list[dict[str, Any]]) -> Any:
    """The fingerprint of the results `run_local` gives for `events` (every arm's results
    are checked against it, after its clock stopped)."""
    from bench.harness.fingerprint import Fingerprint
    from cameo_actors.testing import run_local

    expected = Fingerprint(RESULT_FIELDS)
    for row in run_local(dataflow("expected"), {"s": events}).sinks["o"]:
        expected.add("o", row)
    return expected


#: What tells the tumbling count's results apart.
RESULT_FIELDS = ("key", "window_start", "n")


def bench_ray(rt: Any, events: Any, p: int, tag: str, batch: int = BATCH,
              expected: Any = None, meter_root: int | None = None
              ) -> tuple[float, float, dict[str, Any]]:
    """(events/s end to end, events per CPU second of the executors' worker threads, where
    the time went); `events` rows or an Arrow table, whose results must equal `expected`
    (`expected_results`, None: not checked). Where the time went: the wall time, the driver's
    CPU, the executors' threads' CPU by thread name (the worker thread, Ray's receiving and
    sending threads), the wall time the worker threads spent in `execute` (the executors'
    own `busy_ms`, which counts time off the core and leaves out scheduling and decoding),
    and every process's CPU by role: of every process under `meter_root` (default this one)."""
    from bench.harness.cluster import thread_cpu_s
    from bench.harness.cpu import CpuMeter

    name = rt.deploy(dataflow(f"tp-{tag}", p))
    try:
        stats = rt.executor_stats()
        pids = [e["pid"] for e in stats]
        names = {e["worker_tid"]: "worker thread" for e in stats}
        busy0, threads0, driver0 = sum(e["busy_ms"] for e in stats), thread_cpu_s(pids, names), \
            time.process_time()
        t0 = time.perf_counter()
        with CpuMeter(meter_root) as machine:
            rt.push(name, "s", events, batch_size=batch)
            rt.close(name)
            rt.wait_idle(timeout_s=600)
        elapsed = time.perf_counter() - t0
        driver_s = time.process_time() - driver0
        threads = {k: round(v - threads0.get(k, 0.0), 3)
                   for k, v in thread_cpu_s(pids, names).items()}
        after = rt.executor_stats()
        busy_wall_s = (sum(e["busy_ms"] for e in after) - busy0) / 1000
        exchange = {k: sum(e.get("exchange", {}).get(k, 0) for e in after)
                    - sum(e.get("exchange", {}).get(k, 0) for e in stats)
                    for k in ("calls", "messages", "events", "acks", "bytes")}
        for k in ("executed", "slices"):  # messages run, and the slices they ran in
            exchange[k] = sum(e[k] for e in after) - sum(e[k] for e in stats)
        worker_cpu_s = threads.get("worker thread", 0.0)
        assert rt.stats(name)["events_in"] == len(events)
        if expected is not None:
            from bench.harness.fingerprint import Fingerprint

            got = Fingerprint(RESULT_FIELDS)
            for row in rt.results(name):
                got.add("o", row)
            if got != expected:
                raise SystemExit(f"MISMATCH: {tag}: {got.total} results, not run_local's "
                                 f"{expected.total} (or other ones)")
        profile = {"wall_s": round(elapsed, 3), "driver_cpu_s": round(driver_s, 3),
                   "worker_threads_cpu_s": round(worker_cpu_s, 3),
                   "executor_busy_wall_s": round(busy_wall_s, 3),
                   "exchange": exchange,
                   "executor_threads_cpu_s": {k: v for k, v in sorted(
                       threads.items(), key=lambda kv: -kv[1]) if v >= 0.01},
                   "machine": machine.summary(len(events))}
        return len(events) / elapsed, len(events) / max(worker_cpu_s, 1e-3), profile
    finally:
        rt.cancel(name)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--events", type=int, default=400_000)
    parser.add_argument("--arrow-copies", type=int, default=1,
                        help="the Arrow arms run this many copies of the events (default 1: "
                             "the rows arms' events)")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--arrow-batch", type=int, default=BATCH,
                        help=f"rows per push of the Arrow arms (default the rows arms' {BATCH:,})")
    parser.add_argument("--executors", default="1,2,4",
                        help="the Ray arms' executor counts, comma-separated (default 1,2,4)")
    parser.add_argument("--json", help="write the figures to this file")
    args = parser.parse_args(argv)

    import pyarrow as pa

    from cameo_actors.runtime import Runtime, RuntimeConfig

    events = make_events(args.events)
    columns = as_columns(events, args.arrow_copies)
    table = pa.Table.from_batches([columns])
    expected = {"rows": expected_results(events), "arrow": expected_results(columns.to_pylist())}
    sizes = [int(n) for n in args.executors.split(",")]
    ray_arms = [f"ray_x{n}{kind}" for n in sizes for kind in ("", "_arrow")]
    arms = ["operators", "executor_core", "executor_core_arrow", *ray_arms,
            *(f"{arm}_busy" for arm in ray_arms)]
    runs: dict[str, list[float]] = {arm: [] for arm in arms}
    machine: dict[str, list[dict[str, Any]]] = {}  # Ray arm -> every run's `CpuMeter.summary`
    profiles: dict[str, dict[str, Any]] = {}  # the last run's, per Ray arm
    # No pool beside the in-process arms, and one pool at a time: an idle pool's
    # executors and controller beside a run made its figures vary 2.5x here.
    for _ in range(args.repeat):
        runs["operators"].append(bench_operators(events))
        runs["executor_core"].append(bench_core(events))
        runs["executor_core_arrow"].append(bench_core(columns, args.arrow_batch))
    for p in sizes:
        rt = Runtime.start(RuntimeConfig(num_executors=p), pool=f"bench-tp{p}")
        try:
            pool_arms = [(f"ray_x{p}", p, events, BATCH, expected["rows"]),
                         (f"ray_x{p}_arrow", p, table, args.arrow_batch, expected["arrow"])]
            if p == 1 and 2 in sizes:  # the keyed exchange of parallelism 2 inside one executor
                pool_arms += [("ray_x1_p2", 2, events, BATCH, expected["rows"]),
                              ("ray_x1_p2_arrow", 2, table, args.arrow_batch, expected["arrow"])]
            for arm, par, data, batch, want in pool_arms:  # warm-up: a first run is slower
                bench_ray(rt, data, par, f"{arm}-warm", batch, want)
            for r in range(args.repeat):
                for arm, par, data, batch, want in pool_arms:
                    end_to_end, per_busy_s, profiles[arm] = bench_ray(rt, data, par,
                                                                      f"{arm}-{r}", batch, want)
                    runs.setdefault(arm, [])
                    runs.setdefault(f"{arm}_busy", [])
                    runs[arm].append(end_to_end)
                    runs[f"{arm}_busy"].append(per_busy_s)
                    machine.setdefault(arm, []).append(profiles[arm]["machine"])
        finally:
            rt.shutdown(stop_ray=p == sizes[-1])
    # *_busy: events per CPU second of the worker threads (the executors' own rate, per core).
    cores = {arm: int(arm[5]) if arm.startswith("ray_x") and not arm.endswith("busy") else 1
             for arm in runs}
    result: dict[str, Any] = {k: {"events_per_s": statistics.median(v), "per_core": statistics.median(v) / cores[k],
                  "runs": v} for k, v in runs.items()}
    # What carries to a cluster: every process's CPU counted; `cpu` keeps the median run's
    # events, CPU seconds and wall time of each Ray arm.
    result["cpu"] = {}
    for arm, summaries in machine.items():
        per_cpu = [m["events_per_cpu_s"] for m in summaries]
        result[arm]["events_per_cpu_s"], result[arm]["cpu_runs"] = statistics.median(per_cpu), per_cpu
        mid = sorted(summaries, key=lambda m: m["events_per_cpu_s"])[len(summaries) // 2]
        result["cpu"][arm] = {"events": len(table if arm.endswith("_arrow") else events),
                              "cpu_s_all": mid["cpu_s"], "wall_s": mid["wall_s"],
                              "cpu_s_by_role": mid["cpu_s_by_role"]}
    print(f"filter -> map -> tumbling count, {args.events:,} events ({len(columns):,} in the "
          f"Arrow arms), median of {args.repeat}:")
    for k, v in result.items():
        if k == "cpu":
            continue
        spread = f"{min(v['runs']) / 1e3:,.0f}-{max(v['runs']) / 1e3:,.0f}k"
        print(f"  {k:18s} {v['events_per_s'] / 1e3:9,.0f}k events/s  "
              f"({v['per_core'] / 1e3:,.0f}k per core; runs {spread})"
              + (f"; {v['events_per_cpu_s'] / 1e3:,.0f}k per CPU second of every process"
                 if "events_per_cpu_s" in v else ""))
    print("where the time went (the last run of each Ray arm; CPU seconds by thread name, "
          "the executors' summed):")
    for arm, prof in profiles.items():
        threads = ", ".join(f"{k} {v:.2f}" for k, v in list(prof["executor_threads_cpu_s"].items())[:5])
        roles = ", ".join(f"{r} {c:.2f}" for r, c in prof["machine"]["cpu_s_by_role"].items() if c)
        print(f"  {arm:13s} wall {prof['wall_s']:.2f} s, driver CPU {prof['driver_cpu_s']:.2f} s, "
              f"worker threads CPU {prof['worker_threads_cpu_s']:.2f} s (in execute, wall: "
              f"{prof['executor_busy_wall_s']:.2f} s); threads: {threads}")
        print(f"  {'':13s} every process: {prof['machine']['cpu_s']:.2f} CPU s ({roles})")
        ex = prof["exchange"]
        print(f"  {'':13s} between executors: {ex['calls']:,} calls, {ex['messages']:,} "
              f"messages, {ex['events']:,} events, {ex['acks']:,} acks, {ex['bytes'] / 1e6:.1f} MB; "
              f"{ex['executed']:,} messages run in {ex['slices']:,} slices")
    result["profiles"] = profiles
    save_json(args.json, result)
    return result


if __name__ == "__main__":
    main()
