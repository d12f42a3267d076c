"""Nexmark on cameo: events/s per core for each query, in-process and on Ray, checked.

Run: `python -m bench.nexmark [--quick] [--query q0 q5 ...] [--events N] [--json FILE]`

For each query (cameo_actors.nexmark.queries), on one generated stream
(cameo_actors.nexmark.generator, seed 1; by default 300,000 events at 10,000 events per
second of event time, up to 500 ms out of order, the queries allowing 2 s):

- `in_process`: the query's operators alone through `run_local` (one Python thread, no
  scheduler, no serialization): what the operators cost;
- `ray`: the full runtime on Ray, a pool of one executor: events pushed from this
  process in batches of 2,000 (msgpack over Ray calls), the scheduler, credits,
  checkpoints every 2 s and the result log included, results read every 50,000 events
  (as a consumer would), to the end of the stream and the last result read;
- `ray_busy`: the same run counted per CPU second of the executor's worker thread (its
  thread CPU clock: scheduling, decoding and operators; not the time it waited for the
  driver, nor time off the core);
- `ray_cpu`: the same run counted per CPU second of every process it used (the driver
  that generates and pushes, the executor, the controller, Ray's daemons and workers:
  `bench/harness/cpu.py`): what carries to a cluster;
- `ray_arrow`, `ray_arrow_busy`, `ray_arrow_cpu`: the same, the events pushed as an Arrow
  table (`ARROW_BATCH` rows per call), run as columns where a step has a kernel;
- `cpu`: per Ray arm, the median run's events, CPU seconds of every process and wall
  time: `ray_x1` and `ray_x1_arrow` are the runs above; `ray_x2`, `ray_x4` (and their
  Arrow twins) run `SCALE_QUERIES` on pools of two and four executors, with parallelism
  2 and 4 (four on two cores is oversubscribed: its wall time says little, its CPU per
  event what it costs).

With `--state-backends memory,rocksdb`, the Ray arms of one executor run again on a pool
keeping its keyed state in each other backend (`RuntimeConfig.state_backend`), after
the memory ones: their modes are keyed `mode@backend` (`ray@rocksdb`, ...).

Every run's results are compared with the DuckDB reference (cameo_actors/nexmark/reference.py);
a mismatch fails the benchmark (exit status 1) before any figure is printed.

How cores are counted: `in_process` runs on one core (one thread). `ray` counts the
executors of the pool (one executor = one Ray actor with one CPU reserved): events/s
over 1. The driver that generates, encodes and pushes the batches runs on the machine's
other core and is not counted, as a Kafka broker or Flink's datagen source on another
host would not be; Flink's nexmark runner, below, counts every core its task managers
used (the datagen source included). On this 2-core machine nothing else runs in
parallel, so the figures are upper bounds of one core's work, not of a machine's.
`ray_cpu` counts every process instead (the driver and its data generation included),
which is closer to what Flink's figure counts: compare that one with Flink's.

Published figures of other systems (throughput per core, events/s), for scale only:
their setups differ from ours in every way (JVM or Rust, 8-24 cores, 100 M events
generated in-process, SQL, different query variants):

| system | q0 | q1 | q2 | q3 | q4 | q5 | q7 | q8 | q11 | setup | source |
|---|---|---|---|---|---|---|---|---|---|---|---|
| Flink 1.13 | 155 K | 158 K | 175 K | 152 K | 34 K | 22 K | 12 K | 146 K | 40 K | 3 workers x 8 cores, 32 GB; 8 TMs x 1 slot, parallelism 8; RocksDB, exactly-once checkpoints every 3 min; 100 M events at 10 M/s; cores = measured CPU of the TMs | https://github.com/nexmark/nexmark (README, "Benchmark Results") |
| DBSP (Feldera) | 1,173 K | 1,093 K | 1,094 K | 1,008 K | 811 K | | | | | 8 worker threads on a Core i7-12700H laptop, 64 GB, in memory; 100 M events at 10 M/s | https://github.com/vmware-archive/database-stream-processor/pull/198 |

RisingWave publishes per-query figures per *testbed*, not per core: nexmark-q16 at
131 K rows/s on its "medium, 1 compute node" testbed against Flink 96.4 K on the same
(https://github.com/risingwavelabs/risingwave/issues/14985, March 2024), q15 at 546 K
(https://github.com/risingwavelabs/risingwave/issues/15251); its Flink comparison
(https://risingwave.com/blog/the-preview-of-stream-processing-performance-report-apache-flink-and-risingwave-comparison)
reports ratios to Flink. Arroyo publishes no per-query Nexmark figures: its maintainers
run Nexmark internally but have no reproducible suite
(https://github.com/ArroyoSystems/arroyo/issues/743, September 2024).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import threading
import time
from typing import Any

from bench.harness.output import save_json
from cameo_actors.nexmark.generator import SCHEMA, NexmarkConfig, NexmarkStream, generate
from cameo_actors.nexmark.queries import QUERIES, SINK, SOURCE
from cameo_actors.nexmark.reference import difference, reference
from cameo_actors.operators.state_store import BACKENDS, MEMORY

BATCH = 2_000
#: Rows per push of the Arrow runs (`ray_arrow`).
ARROW_BATCH = 10_000
#: Events pushed between two reads of the results.
READ_EVERY = 50_000

#: Published per-core throughput (events/s) of peers; see the module docstring.
PEERS: dict[str, dict[str, Any]] = {
    "flink-1.13": {
        "per_core_eps": {"q0": 155_020, "q1": 157_940, "q2": 175_210, "q3": 152_120,
                         "q4": 34_330, "q5": 22_140, "q7": 12_330, "q8": 146_140,
                         "q11": 39_700},
        "setup": "3 workers x 8 cores, 32 GB; 8 task managers x 1 slot, parallelism 8; "
                 "RocksDB, exactly-once checkpoints every 3 min; 100 M events at 10 M/s; "
                 "cores = measured CPU of the task managers (datagen source included)",
        "source": "https://github.com/nexmark/nexmark#benchmark-results",
    },
    "dbsp": {
        "per_core_eps": {"q0": 1_172_778, "q1": 1_093_038, "q2": 1_094_335, "q3": 1_007_924,
                         "q4": 811_000},
        "setup": "DBSP (Feldera's engine), 8 worker threads on a Core i7-12700H laptop, "
                 "64 GB, state in memory; 100 M events at 10 M/s",
        "source": "https://github.com/vmware-archive/database-stream-processor/pull/198",
    },
    "risingwave": {
        "per_core_eps": {},
        "setup": "per testbed, not per core: q16 131 K rows/s on 'medium, 1 compute node' "
                 "(Flink 96.4 K on the same); q15 546 K",
        "source": "https://github.com/risingwavelabs/risingwave/issues/14985, "
                  "https://github.com/risingwavelabs/risingwave/issues/15251",
    },
    "arroyo": {
        "per_core_eps": {},
        "setup": "no published per-query figures (internal benchmarks only)",
        "source": "https://github.com/ArroyoSystems/arroyo/issues/743",
    },
}


#: The queries run on 2 and 4 executors too: keyed windows (q4, q5) and a join (q8).
SCALE_QUERIES = ("q4", "q5", "q8")


class Mismatch(Exception):
    """A query's results differ from the reference."""


def stream_config(events: int, rate_eps: float, late_share: float) -> NexmarkConfig:
    return NexmarkConfig(events=events, seed=1, rate_eps=rate_eps, max_disorder_ms=500,
                         late_share=late_share)


def check(query: str, mode: str, rows: list[dict[str, Any]],
          expected: list[dict[str, Any]]) -> None:
    diff = difference(rows, expected)
    if diff:
        raise Mismatch(f"{query} {mode}: results differ from the DuckDB reference: {diff}")


def run_in_process(query: str, stream: NexmarkStream) -> tuple[float, list[dict[str, Any]]]:
    """(seconds, results) of the query through run_local."""
    from cameo_actors.testing import TestingSource, run_local

    dataflow = QUERIES[query](name=f"nexmark-{query}")
    source = TestingSource(stream.events, batch_size=BATCH)
    t0 = time.perf_counter()
    result = run_local(dataflow, {SOURCE: source})
    return time.perf_counter() - t0, result[SINK]


def as_table(stream: NexmarkStream) -> Any:
    """The stream as one Arrow table in the source's types (what a columnar feeder has)."""
    import pyarrow as pa

    from cameo_actors.operators.column_schema import arrow_schema, conform

    fields = list(SCHEMA.items())
    table = pa.Table.from_pylist(stream.events, schema=arrow_schema(fields))
    return pa.Table.from_batches(conform(SOURCE, table, fields))


MODE_WORDS = {"ray": "on Ray", "ray_arrow": "on Ray, pushed as Arrow"}


def run_on_ray(rt: Any, query: str, stream: NexmarkStream, tag: str, table: Any = None,
               parallelism: int = 1) -> tuple[float, float, float, list[dict[str, Any]]]:
    """(seconds end to end, CPU seconds of the executors' worker threads, CPU seconds of every process
    of the run (`harness/cpu.py`), results) of the query on `rt`; with `table`
    (`as_table`), the events pushed as Arrow, `ARROW_BATCH` rows per call, and the results
    read as Arrow tables (made rows after the clock stops, for the check)."""
    from bench.harness.cluster import thread_cpu_s
    from bench.harness.cpu import CpuMeter

    name = rt.deploy(QUERIES[query](name=f"nexmark-{query}-{tag}", parallelism=parallelism,
                                    source_parallelism=parallelism))
    events, got = stream.events, []
    read = (lambda h: read_table(h, name)) if table is not None else (lambda h: h.results(name))
    try:
        stats = rt.executor_stats()
        pids, workers = [e["pid"] for e in stats], {e["worker_tid"]: "worker" for e in stats}
        busy0 = thread_cpu_s(pids, workers).get("worker", 0.0)
        t0 = time.perf_counter()
        with CpuMeter() as machine:
            for i in range(0, len(events), READ_EVERY):
                if table is not None:
                    rt.push(name, SOURCE, table.slice(i, READ_EVERY), batch_size=ARROW_BATCH)
                else:
                    rt.push(name, SOURCE, events[i:i + READ_EVERY], batch_size=BATCH)
                got.append(read(rt))  # as a consumer would: a full result log holds the sink
            rt.close(name)
            got += drain(rt, name, read)
        elapsed = time.perf_counter() - t0
        busy = thread_cpu_s(pids, workers).get("worker", 0.0) - busy0
        return elapsed, busy, machine.total_s(), [row for part in got for row in as_rows(part)]
    finally:
        rt.cancel(name)


def read_table(rt: Any, name: str) -> Any:
    """New results as an Arrow table, or as rows where they do not form columns."""
    from cameo_actors.operators.exceptions import ResultsNotColumnar

    try:
        return rt.result_table(name)
    except ResultsNotColumnar:
        return rt.results(name)


def as_rows(part: Any) -> list[dict[str, Any]]:
    """Results read as rows, or as a table: its rows without the times, and without the
    nulls of fields a row did not have (a Nexmark result has no null field)."""
    if isinstance(part, list):
        return part
    return [{k: v for k, v in r.items() if v is not None}
            for r in part.drop_columns(["_ingest_ms", "_egress_ms"]).to_pylist()]


def drain(rt: Any, name: str, read: Any, timeout_s: float = 1_800.0) -> list[Any]:
    """The results of a closed dataflow still to read, once the runtime is idle, as
    `read(handle)` reads them (a part per read). A reader of its own reads meanwhile: a log
    full of readable results holds its sink, and the checkpoint that makes the last
    results readable waits for that sink, so a wait that nobody reads beside may never
    end (q0's 276,000 results fill the log)."""
    parts: list[Any] = []
    stop = threading.Event()
    reader = rt.handle()

    def loop() -> None:
        while not stop.wait(0.2):
            parts.append(read(reader))  # a read commits: a held sink goes on
    thread = threading.Thread(target=loop, name=f"read-{name}", daemon=True)
    thread.start()
    try:
        rt.wait_idle(timeout_s=timeout_s, dataflows=[name])
    finally:
        stop.set()
        thread.join()
    return [*parts, read(reader)]  # one reader from here on: its cursor is the one


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="20,000 events, one run each")
    parser.add_argument("--query", nargs="+", choices=list(QUERIES), help="default: all")
    parser.add_argument("--events", type=int, help="events per run (default 300,000)")
    parser.add_argument("--rate", type=float, default=10_000.0,
                        help="events per second of event time (default 10,000)")
    parser.add_argument("--late-share", type=float, default=0.0,
                        help="share of events delivered late (default 0). On Ray a join's "
                        "watermark is its slower input's, and this run does not bound how far "
                        "one input runs ahead, so q3 and q8 may then keep a late event the "
                        "reference drops")
    parser.add_argument("--repeat", type=int, help="runs per query and mode (default 3, quick 1)")
    parser.add_argument("--no-ray", action="store_true", help="in-process only")
    parser.add_argument("--executors", default="1,2,4",
                        help="pools to run on, by executors, comma-separated (default 1,2,4): "
                        "on n executors a query runs with parallelism n (its source, and the "
                        "filters and projections chained to it, too)")
    parser.add_argument("--scale-queries", nargs="+", default=list(SCALE_QUERIES),
                        choices=list(QUERIES), help="the queries run on more than one executor "
                        f"(default {' '.join(SCALE_QUERIES)}: keyed windows and a join)")
    parser.add_argument("--state-backends", default="memory",
                        help="comma-separated state backends of the one-executor pools, "
                             f"of {', '.join(BACKENDS)} (default memory); the others run "
                             "one executor only")
    parser.add_argument("--json", help="write the figures to this file")
    args = parser.parse_args(argv)
    backends = [b.strip() for b in args.state_backends.split(",") if b.strip()]
    if not backends or set(backends) - set(BACKENDS):
        parser.error(f"--state-backends: expected some of {', '.join(BACKENDS)}, got "
                     f"{args.state_backends!r}")
    events = args.events or (20_000 if args.quick else 300_000)
    repeat = args.repeat or (1 if args.quick else 3)
    chosen = args.query or list(QUERIES)
    sizes = [] if args.no_ray else [int(n) for n in args.executors.split(",")
                                    if int(n) == 1 or set(chosen) & set(args.scale_queries)]

    t0 = time.perf_counter()
    stream = generate(stream_config(events, args.rate, args.late_share))
    columns = None if args.no_ray else as_table(stream)
    print(f"{events:,} events generated in {time.perf_counter() - t0:.1f} s "
          f"({stream.counts()}, {len(stream.late)} late)")
    ray_modes = ("ray", "ray_busy", "ray_cpu", "ray_arrow", "ray_arrow_busy", "ray_arrow_cpu")
    out: dict[str, Any] = {
        "events": events, "rate_eps": args.rate, "late": len(stream.late), "repeat": repeat,
        "batch": BATCH, "arrow_batch": ARROW_BATCH, "state_backends": backends,
        "cores": {"in_process": 1, **{mode + _at(b): 1 for b in backends for mode in ray_modes}},
        "queries": {}, "peers": PEERS,
    }
    expected = {query: reference(query, stream) for query in chosen}
    runs: dict[str, dict[str, list[float]]] = {q: {mode: [] for mode in out["cores"]}
                                               for q in chosen}
    #: query -> Ray arm (ray_x<n>, ray_x<n>_arrow) -> every run's (events, CPU s, wall s)
    machine: dict[str, dict[str, list[tuple[int, float, float]]]] = {q: {} for q in chosen}
    started = False
    try:
        for query in chosen:
            for _ in range(repeat):
                seconds, rows = run_in_process(query, stream)
                check(query, "in-process", rows, expected[query])
                runs[query]["in_process"].append(events / seconds)
        if sizes:
            from bench.harness.cluster import ensure_ray

            started = ensure_ray()
        pools = [(b, n) for b in backends for n in sizes if b == MEMORY or n == 1]
        for backend, n in pools:  # one pool at a time: an idle one beside a run skews it
            from cameo_actors.runtime import Runtime, RuntimeConfig

            at = _at(backend)
            rt = Runtime.start(RuntimeConfig(num_executors=n, state_backend=backend),
                               pool=f"bench-nexmark{n}{at.replace('@', '-')}")
            try:
                for query in chosen if n == 1 else [q for q in chosen if q in args.scale_queries]:
                    for r in range(repeat):
                        for mode, table_or_none in (("ray", None), ("ray_arrow", columns)):
                            seconds, busy, cpu_s, rows = run_on_ray(
                                rt, query, stream, f"x{n}-{r}-{mode}", table_or_none, n)
                            check(query, f"{MODE_WORDS[mode]}, {n} executors, state in "
                                         f"{backend}", rows, expected[query])
                            arm = f"ray_x{n}" + mode[3:] + at
                            machine[query].setdefault(arm, []).append((events, cpu_s, seconds))
                            if n == 1:
                                runs[query][mode + at].append(events / seconds)
                                runs[query][f"{mode}_busy{at}"].append(events / busy if busy > 0
                                                                       else 0.0)
                                runs[query][f"{mode}_cpu{at}"].append(events / cpu_s if cpu_s > 0
                                                                      else 0.0)
            finally:
                rt.shutdown(stop_ray=False)
    except Mismatch as e:
        print(f"MISMATCH: {e}", file=sys.stderr)
        raise SystemExit(1) from e
    finally:
        if started:
            import ray

            ray.shutdown()
    for query in chosen:
        figures = {mode: {"events_per_s": statistics.median(v),
                          "per_core": statistics.median(v) / out["cores"][mode], "runs": v}
                   for mode, v in runs[query].items() if v}
        # What carries to a cluster: the median run's CPU seconds of every process.
        cpu = {arm: dict(zip(("events", "cpu_s_all", "wall_s"),
                             sorted(arm_runs, key=lambda r: r[1])[len(arm_runs) // 2], strict=True))
               for arm, arm_runs in machine[query].items()}
        out["queries"][query] = {"results": len(expected[query]), "checked": True, **figures,
                                 **({"cpu": cpu} if cpu else {})}
        print(f"  {query}: " + ", ".join(f"{m} {f['per_core'] / 1e3:,.1f}k/s per core"
                                         for m, f in figures.items())
              + "".join(f"; {arm} {c['events'] / c['cpu_s_all'] / 1e3:,.1f}k per CPU s"
                        for arm, c in cpu.items() if c["cpu_s_all"] > 0)
              + f" ({len(expected[query]):,} results, equal to the reference)")
    print(table(out))
    save_json(args.json, out)
    return out


def _at(backend: str) -> str:
    """A mode's suffix for a state backend other than memory."""
    return "" if backend == MEMORY else f"@{backend}"


def table(out: dict[str, Any]) -> str:
    """The figures as a Markdown table, next to Flink's published ones."""
    modes = [m for m in ("in_process", "ray", "ray_busy", "ray_cpu", "ray_arrow",
                         "ray_arrow_busy", "ray_arrow_cpu")
             if any(m in q for q in out["queries"].values())]
    flink = PEERS["flink-1.13"]["per_core_eps"]
    lines = [f"Nexmark on cameo, {out['events']:,} events, events/s per core "
             f"(median of {out['repeat']}):", "",
             "| query | " + " | ".join(modes) + " | Flink 1.13 (published) |",
             "|---|" + "---|" * (len(modes) + 1)]
    for query, q in out["queries"].items():
        cells = [f"{q[m]['per_core'] / 1e3:,.1f} K" if m in q else "" for m in modes]
        peer = f"{flink[query] / 1e3:,.0f} K" if query in flink else "n/a"
        lines.append(f"| {query} | " + " | ".join(cells) + f" | {peer} |")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
