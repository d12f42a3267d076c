"""Bytewax peer: throughput per core of filter -> map -> 1 s tumbling count per key.

Run: `python -m bench.peers.bytewax_peer [--repeat 3] [--events N] [--json FILE]`
(needs `bytewax==0.21.1`, an optional extra; this module imports without it).

The throughput query of `bench.peers.common` over `common.throughput_workload()`,
written the way a Bytewax user would: `op.filter` -> `op.map` (keep ts, key,
value; ts becomes a UTC datetime, as Bytewax's EventClock needs) -> `op.key_on`
-> `fold_window` counting, on a `TumblingWindower` of 1 s and an `EventClock`.

Measured, median of --repeat runs, in one run side by side:
- bytewax x1: `run_main`, one worker (one core);
- bytewax x2: `cluster_main` in two processes of one worker each (two cores);
  key_on's exchange then serializes each event that changes process and sends it
  over TCP, which dominates (eps_per_cpu_s shows it);
- bytewax x2 threads: two workers in one process (`-w 2`), which share the GIL;
- cameo operators / executor core: our dataflow on the same events and batches,
  in-process (`run_local`, and one `ExecutorCore` through `bench.throughput.run_core`).

The source hands out batches prebuilt in memory, one list per `next_batch`
call, so the figures are Bytewax's operators and runtime, not a Python loop
over events in the source (`bytewax.testing.TestingSource` checks every item
for its EOF/ABORT/PAUSE markers, and reads on one worker only). With n
workers, worker i reads the events of the keys with crc32(key) % n == i, like
a Kafka topic keyed by `key` with n partitions: Bytewax does not align event
time across workers, so splitting batches round-robin let one worker run
ahead, and the EventClock dropped a third of the events as late (seen with
2 processes and a 10 s wait). Every run is checked: the window
counts must equal the counts per (key, second) of the events passing the
filter, computed in plain Python; a mismatch raises.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import socket
import statistics
import time
import zlib
from collections import Counter
from datetime import UTC, datetime, timedelta
from importlib.metadata import version
from typing import Any

from bench.harness.output import save_json
from bench.harness.workload import THROUGHPUT_EVENTS, throughput_workload
from bench.peers import common

Event = dict[str, Any]
Counts = Counter[tuple[str, int]]  # (key, window id = second of event time) -> events
Timing = tuple[float, float]  # (wall seconds, CPU seconds: user + system, all threads/processes)

BATCH = 1_000  # = the workload's batches (10,000 events/s x 0.1 s); ours uses the same
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
#: EventClock's allowed lateness. A key's events arrive in order (one reader per key), but the
#: watermark also advances with system time between batches; 10 s covers any stall of this
#: machine. It only delays when windows close (all close at EOF), not what is counted.
WAIT = timedelta(seconds=10)


def load_batches(events: int) -> list[list[Event]]:
    """The common workload's events, re-cut into BATCH-sized lists (they already are)."""
    flat = [e for _, batch in throughput_workload(events).batches() for e in batch]
    return [flat[i:i + BATCH] for i in range(0, len(flat), BATCH)]


def expected_counts(batches: list[list[Event]]) -> Counts:
    """The query's answer in plain Python: the reference every run is checked against."""
    return Counter((e["key"], e["ts"] // 1000) for b in batches for e in b if e["value"] > 10)


def check(system: str, got: Counts, want: Counts, late: int = 0) -> None:
    if got != want:
        raise AssertionError(
            f"{system}: wrong window counts: sum {sum(got.values()):,} in {len(got):,} windows, "
            f"expected {sum(want.values()):,} in {len(want):,} windows ({late:,} late events)")


# --- Bytewax ---------------------------------------------------------------------------


def split_by_key(batches: list[list[Event]], workers: int) -> list[list[list[Event]]]:
    """Each worker's input: the events of its keys (crc32 % workers), in order, in BATCH lists."""
    if workers == 1:
        return [batches]
    parts: list[list[Event]] = [[] for _ in range(workers)]
    for e in (e for b in batches for e in b):
        parts[zlib.crc32(e["key"].encode()) % workers].append(e)
    return [[p[i:i + BATCH] for i in range(0, len(p), BATCH)] for p in parts]


def build_flow(batches: list[list[Event]], out: list[Any], late: list[Any], workers: int,
               started: list[float] | None = None) -> Any:
    """The query as a Bytewax dataflow for `workers` workers; window results go to `out`, late
    events to `late`, and the time (time.monotonic) a worker's source is built to `started`."""
    import bytewax.operators as op
    from bytewax.dataflow import Dataflow
    from bytewax.inputs import DynamicSource, StatelessSourcePartition
    from bytewax.operators.windowing import EventClock, TumblingWindower, fold_window
    from bytewax.testing import TestingSink

    class Partition(StatelessSourcePartition[Event]):
        def __init__(self, mine: list[list[Event]]) -> None:
            self._batches = iter(mine)

        def next_batch(self) -> list[Event]:
            return next(self._batches)  # StopIteration at the end = this partition is done

    class Batches(DynamicSource[Event]):
        def build(self, step_id: str, worker_index: int, worker_count: int) -> Partition:
            assert worker_count == workers, f"flow built for {workers} workers, run on {worker_count}"
            if started is not None:
                started.append(time.monotonic())
            return Partition(inputs[worker_index])

    def keep(e: Event) -> Event:
        return {"ts": EPOCH + timedelta(milliseconds=e["ts"]), "key": e["key"], "value": e["value"]}

    inputs = split_by_key(batches, workers)  # before the run: not timed
    flow = Dataflow("throughput")
    events = op.input("in", flow, Batches())
    kept = op.map("map", op.filter("filter", events, lambda e: e["value"] > 10), keep)
    keyed = op.key_on("key", kept, lambda e: e["key"])
    clock: EventClock[Event] = EventClock(lambda e: e["ts"], wait_for_system_duration=WAIT)
    # count_window's own body, with key_on spelled out; unordered since a count does not
    # care about order (ordered=True would hold and sort events until the watermark).
    windows = fold_window("count", keyed, clock, TumblingWindower(timedelta(seconds=1), EPOCH),
                          lambda: 0, lambda n, _: n + 1, lambda a, b: a + b, ordered=False)
    op.output("out", windows.down, TestingSink(out))
    op.output("late", windows.late, TestingSink(late))
    return flow


def counts_of(out: list[Any]) -> Counts:
    """Bytewax's window output `(key, (window id, count))` as Counts (window id = second)."""
    got: Counts = Counter()
    for key, (window_id, n) in out:
        got[key, window_id] += n
    return got


def bytewax_local(batches: list[list[Event]], want: Counts, workers: int) -> Timing:
    """`workers` workers in this process (run_main for 1, cluster_main for more)."""
    from bytewax.testing import cluster_main, run_main

    out: list[Any] = []
    late: list[Any] = []
    flow = build_flow(batches, out, late, workers)
    t0, c0 = time.perf_counter(), time.process_time()
    if workers == 1:
        run_main(flow)
    else:
        cluster_main(flow, [], 0, worker_count_per_proc=workers)
    timing = time.perf_counter() - t0, time.process_time() - c0
    check(f"bytewax x{workers}", counts_of(out), want, len(late))
    return timing


def _cluster_process(events: int, addresses: list[str], proc_id: int, barrier: Any,
                     results: Any) -> None:
    """One process of a Bytewax cluster: load, wait for the others, run, report."""
    from bytewax.testing import cluster_main

    out: list[Any] = []
    late: list[Any] = []
    started: list[float] = []
    flow = build_flow(load_batches(events), out, late, len(addresses), started)
    barrier.wait()  # workload generation and imports are not timed
    c0 = time.process_time()
    cluster_main(flow, addresses, proc_id)
    # Timed from the source's build, which comes after the processes have connected (the one
    # started first retries its connection about once a second, a start-up cost, not a rate).
    # CLOCK_MONOTONIC is system-wide on Linux, so the parent can compare the processes' times.
    results.put((started[0], time.monotonic(), time.process_time() - c0, out, len(late)))


def bytewax_processes(events: int, want: Counts, processes: int) -> Timing:
    """Seconds from the first worker's start to the last process's end, one worker per process."""
    ports = []
    for _ in range(processes):  # free ports, found by binding port 0
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            ports.append(s.getsockname()[1])
    addresses = [f"127.0.0.1:{p}" for p in ports]
    ctx = mp.get_context("spawn")  # fresh interpreters: no Bytewax runtime state forked
    barrier, results = ctx.Barrier(processes), ctx.Queue()
    procs = [ctx.Process(target=_cluster_process, args=(events, addresses, i, barrier, results))
             for i in range(processes)]
    for p in procs:
        p.start()
    reports = [results.get(timeout=600) for _ in procs]
    for p in procs:
        p.join(timeout=60)
        if p.exitcode != 0:
            raise RuntimeError(f"bytewax cluster process exited with {p.exitcode}")
    out = [item for r in reports for item in r[3]]
    check(f"bytewax x{processes} processes", counts_of(out), want, sum(r[4] for r in reports))
    return max(r[1] for r in reports) - min(r[0] for r in reports), sum(r[2] for r in reports)


# --- ours, on the same events -------------------------------------------------------------


def cameo_counts(rows: list[Event]) -> Counts:
    return Counter({(r["key"], r["window_start"] // 1000): r["n"] for r in rows})


def cameo_operators(flat: list[Event], want: Counts) -> Timing:
    """The operators alone, in-process (bench.throughput.bench_operators), counts checked."""
    from bench.throughput import dataflow
    from cameo_actors.testing import TestingSource, run_local

    t0, c0 = time.perf_counter(), time.process_time()
    result = run_local(dataflow("ops"), {"s": TestingSource(flat, batch_size=BATCH)})
    timing = time.perf_counter() - t0, time.process_time() - c0
    check("cameo operators", cameo_counts(result["o"]), want)
    return timing


def cameo_core(flat: list[Event], want: Counts) -> Timing:
    """Through one ExecutorCore in-process (bench.throughput.run_core), counts checked."""
    from bench.throughput import run_core

    t0, c0 = time.perf_counter(), time.process_time()
    core = run_core(flat, BATCH)
    timing = time.perf_counter() - t0, time.process_time() - c0
    logs = core.egress.dataflows["core"].results.values()
    check("cameo executor core", cameo_counts([e for log in logs for e, _, _ in log.read(0)]), want)
    return timing


# --- the run --------------------------------------------------------------------------------


def figures(events: int, timings: list[Timing], parallelism: int) -> dict[str, Any]:
    """The common throughput fields from the median run, and the CPU time the runs used:
    eps_per_cpu_s (events per CPU second) is less at the mercy of a shared machine."""
    s = statistics.median(t[0] for t in timings)
    cpu = statistics.median(t[1] for t in timings)
    return {"events": events, "seconds": s, "eps": events / s, "eps_per_core": events / s / parallelism,
            "parallelism": parallelism, "runs_eps": [events / t[0] for t in timings],
            "cpu_s": cpu, "eps_per_cpu_s": events / cpu}


def run(repeat: int = 3, events: int = THROUGHPUT_EVENTS) -> dict[str, Any]:
    """Every configuration `repeat` times, interleaved (so drift of a noisy machine hits all)."""
    batches = load_batches(events)
    flat = [e for b in batches for e in b]
    want = expected_counts(batches)
    n = len(flat)
    runs: dict[str, list[Timing]] = {"x1": [], "x2": [], "x2_threads": [], "cameo_operators": [],
                                    "cameo_executor_core": []}
    for _ in range(repeat):
        runs["x1"].append(bytewax_local(batches, want, 1))
        runs["x2"].append(bytewax_processes(events, want, 2))
        runs["x2_threads"].append(bytewax_local(batches, want, 2))
        runs["cameo_operators"].append(cameo_operators(flat, want))
        runs["cameo_executor_core"].append(cameo_core(flat, want))
    throughput = figures(n, runs["x1"], 1)  # the headline: one worker, one core
    throughput |= {
        "passing_filter": sum(want.values()), "windows": len(want), "batch": BATCH, "repeat": repeat,
        "by_parallelism": {"1": figures(n, runs["x1"], 1), "2": figures(n, runs["x2"], 2)},
        # Two workers in one process: one interpreter, so one GIL; counted per 2 cores.
        "x2_threads": figures(n, runs["x2_threads"], 2),
        # Ours in the same run, same events and batches, one core, in-process.
        "cameo_same_run": {"operators": figures(n, runs["cameo_operators"], 1),
                           "executor_core": figures(n, runs["cameo_executor_core"], 1)},
    }
    notes = [
        f"bytewax x1: run_main, 1 worker; x2: cluster_main in 2 processes x 1 worker (TCP between "
        f"them, timed from the first source build, after they connected, to the last process's end); "
        f"x2_threads: 2 workers in 1 process (-w 2), GIL-shared. Median of {repeat}.",
        f"source: a DynamicSource handing out prebuilt {BATCH}-event batches; with n workers, "
        "worker i reads the keys with crc32(key) % n == i (a keyed topic with n partitions; "
        "round-robin batches made a third of the events late); sink: TestingSink (a list).",
        "map converts ts (int ms) to a UTC datetime for EventClock, as a Bytewax user must; "
        f"windows: key_on + fold_window(ordered=False), i.e. count_window; EventClock wait {WAIT}.",
        "checked: window counts per (key, second) equal plain Python's over the events with value > 10.",
        "cameo_same_run: our filter -> map -> key_by -> tumbling count on the same events and batches, "
        "run_local (operators) and one ExecutorCore (bench.throughput.run_core), in this process.",
        "cpu_s / eps_per_cpu_s: user + system CPU time of the run (all its threads; for x2, both "
        "processes), for a machine shared with other load, where wall-clock rates are noisy.",
    ]
    return common.result("bytewax", version("bytewax"), throughput=throughput, notes=notes)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--events", type=int, default=THROUGHPUT_EVENTS)
    parser.add_argument("--json", help="write the result to this file")
    args = parser.parse_args(argv)
    res = run(args.repeat, args.events)
    tp = res["throughput"]
    rows = [("bytewax x1", tp["by_parallelism"]["1"]), ("bytewax x2 procs", tp["by_parallelism"]["2"]),
            ("bytewax x2 threads", tp["x2_threads"]),
            ("cameo operators", tp["cameo_same_run"]["operators"]),
            ("cameo executor core", tp["cameo_same_run"]["executor_core"])]
    print(f"filter -> map -> 1 s tumbling count, {tp['events']:,} events "
          f"({tp['passing_filter']:,} pass), bytewax {res['version']}, median of {args.repeat}:")
    for name, f in rows:
        spread = f"{min(f['runs_eps']) / 1e3:,.0f}-{max(f['runs_eps']) / 1e3:,.0f}k"
        print(f"  {name:20s} {f['eps'] / 1e3:8,.0f}k events/s  {f['eps_per_core'] / 1e3:6,.0f}k per core"
              f"  {f['eps_per_cpu_s'] / 1e3:6,.0f}k per CPU s  (runs {spread})")
    print(json.dumps(res, indent=2))
    save_json(args.json, res)
    return res


if __name__ == "__main__":
    main()
