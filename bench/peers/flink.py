"""PyFlink peer: throughput per core and latency of the common queries on a local mini-cluster.

Run: `python -m bench.peers.flink [--repeat 3] [--seconds 20] [--warmup 5] [--bulk-rate 0]
[--json FILE] [--skip-latency]` from the project root (the Python workers import `bench`
from their working directory), in a venv with `apache-flink==2.3.0`
(an optional extra; it pins pandas/pyarrow/numpy/protobuf/py4j below ours, so it lives in
its own venv, `.venv-peers/flink`). This module imports without PyFlink.

Both parts are written the way a PyFlink user would, with the DataStream API and Python
functions, and run in each of PyFlink's two Python execution modes (`--modes`): "process"
(the default: Python operators run in Beam SDK worker processes, one per slot, fed over gRPC
in bundles) and "thread" (the functions run inside the JVM, embedded with pemja).

Throughput (bounded input): the events of `common.throughput_workload()` as typed rows
(`env.from_collection`, so the source is a Java collection source and not a Python file
parser) -> watermarks (monotonous, from `ts`) -> `filter` value > 10 -> `map` (keep ts, key,
value) -> `key_by` key -> 1 s `TumblingEventTimeWindows` -> count (`aggregate`, plus a
`ProcessWindowFunction` for the window start). Parallelism 1 and 2; eps per core = eps /
parallelism. Timed from the first event seen by the filter to the last window result at the
client, which leaves out the JVM, the mini-cluster (made anew for each job) and the Python
workers' start-up; the time from submitting the job (with start-up) is given too. Every run's
counts per (key, second) are checked against plain Python's; a mismatch raises.

Latency (live input): `common.alerts_workload()` played in real time, one JSON-lines file per
batch (10 ms) into a folder that a `FileSource` monitors (every `--monitor-ms`); alerts are
filter value >= 0. With `--bulk-rate` > 0, the bulk tenant runs next to it as a second job
(each tenant its own job and configuration, as on a shared Flink cluster): its own folder (one
file per 100 ms batch) -> watermarks (bounded out-of-orderness) -> map `bench.harness.work.burn` ->
key_by -> 1 s tumbling count. The sink is the last Python function: it stamps the wall clock
and appends a line to a file (line-buffered), so latency = sink stamp - `ts` for an alert,
sink stamp - window end for a bulk window; results of the first `--warmup` seconds are left
out. The FileSource's scan interval bounds alerts from below (a file waits half a scan on
average); in process mode, so does `python.fn-execution.bundle.time` (`--bundle-ms`).
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import shutil
import site
import statistics
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable
from importlib.metadata import version
from typing import Any

from bench.harness.output import save_json
from bench.harness.stats import latency_summary
from bench.harness.workload import THROUGHPUT_EVENTS, throughput_workload
from bench.peers import common

Row3 = tuple[int, str, float]  # (ts, key, value): an event as the jobs see it
Counts = Counter[tuple[str, int]]  # (key, window start s) -> events
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MODES = ("process", "thread")
#: Bulk events may be read up to about two directory scans out of order (a scan lists a folder
#: in no set order); later than that, Flink drops them as late, which the run reports.
BULK_OUT_OF_ORDER_MS = 300


# --- setup ----------------------------------------------------------------------------------


def start_gateway(loopback: bool = False) -> float:
    """Launch PyFlink's JVM (once per process); returns the seconds it took.

    Run locally, PyFlink's process mode by default runs every job's Python functions in this
    client process ("loopback": one interpreter, one GIL for all of them, next to the
    client's own work); unless `loopback`, each slot gets its own Python worker process, as
    on a deployed cluster (PyFlink reads `_python_worker_execution_mode` at job submission)."""
    if not loopback:
        os.environ["_python_worker_execution_mode"] = "process"  # noqa: SIM112 (PyFlink's name)
    # The JVM, the mini-cluster in it, and the Python workers it starts inherit this
    # environment: thread mode's embedded interpreter does not see the venv's site-packages
    # by itself (it fails on `import pemja`), and process-mode workers need `bench` importable
    # for functions pickled by reference (bench.harness.work.burn).
    paths = [ROOT, *site.getsitepackages()]
    if os.environ.get("PYTHONPATH"):
        paths.append(os.environ["PYTHONPATH"])
    os.environ["PYTHONPATH"] = os.pathsep.join(paths)
    from pyflink.java_gateway import get_gateway

    t0 = time.perf_counter()
    get_gateway()
    return time.perf_counter() - t0


def make_env(parallelism: int, mode: str, conf: dict[str, str] | None = None) -> Any:
    """A streaming environment: each job it runs gets a new local mini-cluster."""
    from pyflink.common import Configuration
    from pyflink.datastream import RuntimeExecutionMode, StreamExecutionEnvironment

    c = Configuration()
    c.set_string("python.execution-mode", mode)
    c.set_string("python.executable", sys.executable)  # else `python` from PATH, without pyflink
    for k, v in (conf or {}).items():
        c.set_string(k, v)
    env = StreamExecutionEnvironment.get_execution_environment(c)
    env.set_parallelism(parallelism)
    env.set_runtime_mode(RuntimeExecutionMode.STREAMING)
    return env


def row_type() -> Any:
    from pyflink.common import Types

    return Types.ROW_NAMED(["ts", "key", "value"], [Types.LONG(), Types.STRING(), Types.DOUBLE()])


def count_per_window(stream: Any, window_ms: int = 1000) -> Any:
    """key_by key -> tumbling event-time window -> (key, window start, window end, count)."""
    from pyflink.common import Types
    from pyflink.common.time import Time
    from pyflink.datastream.functions import AggregateFunction, ProcessWindowFunction
    from pyflink.datastream.window import TumblingEventTimeWindows

    class Count(AggregateFunction):
        def create_accumulator(self) -> int:
            return 0

        def add(self, value: Any, accumulator: int) -> int:
            return accumulator + 1

        def get_result(self, accumulator: int) -> int:
            return accumulator

        def merge(self, a: int, b: int) -> int:
            return a + b

    class WithWindow(ProcessWindowFunction):
        def process(self, key: str, context: Any, elements: Any) -> Any:
            w = context.window()
            for n in elements:  # the one count of the aggregate
                yield key, w.start, w.end, n

    out = Types.TUPLE([Types.STRING(), Types.LONG(), Types.LONG(), Types.LONG()])
    return (stream.key_by(lambda r: r[1], key_type=Types.STRING())
            .window(TumblingEventTimeWindows.of(Time.milliseconds(window_ms)))
            .aggregate(Count(), WithWindow(), accumulator_type=Types.LONG(), output_type=out))


def with_timestamps(stream: Any, out_of_order_ms: int) -> Any:
    """Event time from `ts` (field 0)."""
    from pyflink.common import Duration, WatermarkStrategy
    from pyflink.common.watermark_strategy import TimestampAssigner

    class Ts(TimestampAssigner):
        def extract_timestamp(self, value: Any, record_timestamp: int) -> int:
            return int(value[0])

    strategy = (WatermarkStrategy.for_monotonous_timestamps() if out_of_order_ms == 0 else
                WatermarkStrategy.for_bounded_out_of_orderness(Duration.of_millis(out_of_order_ms)))
    return stream.assign_timestamps_and_watermarks(strategy.with_timestamp_assigner(Ts()))


class TreeCpu:
    """CPU seconds used by a process and its descendants, sampled every `period` s (Linux /proc).

    Flink at parallelism p uses more (or less) than p cores: JVM threads (source, network,
    serialisation, gRPC to the workers) next to the Python ones. CPU seconds per event are a
    per-core figure that other tenants of a noisy machine disturb less than wall time does."""

    def __init__(self, pid: int, period: float = 0.2) -> None:
        self.pid, self.period = pid, period
        self.samples: list[tuple[float, float]] = []  # (time.time(), CPU s)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._tick = os.sysconf("SC_CLK_TCK")

    def __enter__(self) -> TreeCpu:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while True:
            self._sample()
            if self._stop.wait(self.period):
                self._sample()
                return

    def _sample(self) -> None:
        # Never less than before: a Python worker that exits at the job's end drops out of the
        # tree until the JVM has reaped its launcher script, and only then counts in cutime.
        last = self.samples[-1][1] if self.samples else 0.0
        self.samples.append((time.time(), max(last, self.cpu())))

    def cpu(self) -> float:
        """utime + stime of the tree's live processes, plus those of descendants already waited for."""
        stats: dict[int, tuple[int, float]] = {}  # pid -> (ppid, CPU s)
        for name in os.listdir("/proc"):
            if name.isdigit():
                try:
                    with open(f"/proc/{name}/stat") as f:
                        fields = f.read().rsplit(")", 1)[1].split()  # after the command name
                except OSError:  # exited meanwhile
                    continue
                stats[int(name)] = (int(fields[1]), sum(int(x) for x in fields[11:15]) / self._tick)
        total, todo = 0.0, [self.pid]
        while todo:
            pid = todo.pop()
            total += stats.get(pid, (0, 0.0))[1]
            todo.extend(c for c, (ppid, _) in stats.items() if ppid == pid)
        return total

    def at(self, t: float) -> float:
        """CPU s at time t, interpolated between samples."""
        prev = self.samples[0]
        for cur in self.samples:
            if cur[0] >= t:
                if cur[0] == prev[0]:
                    return cur[1]
                return prev[1] + (cur[1] - prev[1]) * (t - prev[0]) / (cur[0] - prev[0])
            prev = cur
        return prev[1]


# --- throughput -----------------------------------------------------------------------------


def load_events(events: int) -> list[Row3]:
    return [(e["ts"], e["key"], e["value"])
            for _, batch in throughput_workload(events).batches() for e in batch]


def expected_counts(rows: list[Row3]) -> Counts:
    """The query's answer in plain Python: the reference every run is checked against."""
    return Counter((key, ts // 1000) for ts, key, value in rows if value > 10)


def first_call_stamper(folder: str, keep: Callable[[Any], bool]) -> Callable[[Any], bool]:
    """`keep` as a filter function that writes the wall time of its first call to a file in
    `folder` (each parallel instance unpickles its own copy, so its own `first`)."""
    first: list[float] = []

    def stamped(r: Any) -> bool:
        if not first:
            first.append(time.time())
            with open(os.path.join(folder, uuid.uuid4().hex), "w") as f:
                f.write(repr(first[0]))
        return keep(r)

    return stamped


def read_float(path: str) -> float:
    with open(path) as f:
        return float(f.read())


def throughput_once(rows: list[Row3], want: Counts, parallelism: int, mode: str) -> dict[str, float]:
    """One run: seconds from the first event at the filter to the last result (`seconds`), from
    submitting the job (`with_startup`), and to build the job's collection source (`build`)."""
    from pyflink.common import Row

    env = make_env(parallelism, mode)
    stamps = tempfile.mkdtemp(prefix="flink-first-")
    try:
        t_build = time.perf_counter()
        # Typed rows: the collection source hands Java rows to the first Python operator.
        source = env.from_collection([Row(*r) for r in rows], type_info=row_type())
        build_s = time.perf_counter() - t_build
        kept = (with_timestamps(source, 0)
                .filter(first_call_stamper(stamps, lambda r: r[2] > 10))
                .map(lambda r: Row(r[0], r[1], r[2]), output_type=row_type()))
        got: Counts = Counter()
        # This process (Python functions in loopback), the JVM and its Python workers.
        with TreeCpu(os.getpid()) as cpu:
            t_submit = time.time()
            with count_per_window(kept).execute_and_collect() as results:
                for key, start, _end, n in results:
                    got[key, start // 1000] += n
            t_end = time.time()
        firsts = [read_float(p) for p in glob.glob(os.path.join(stamps, "*"))]
    finally:
        shutil.rmtree(stamps, ignore_errors=True)
    if got != want:
        raise AssertionError(
            f"pyflink {mode} p={parallelism}: wrong window counts: sum {sum(got.values()):,} in "
            f"{len(got):,} windows, expected {sum(want.values()):,} in {len(want):,} windows")
    if not firsts:
        raise AssertionError("pyflink: the filter never stamped its first event")
    return {"seconds": t_end - min(firsts), "with_startup": t_end - t_submit, "build": build_s,
            "cpu_s": cpu.at(t_end) - cpu.at(min(firsts)), "cpu_s_with_startup": cpu.at(t_end) - cpu.at(t_submit)}


def figures(events: int, runs: list[dict[str, float]], parallelism: int) -> dict[str, Any]:
    """The common throughput fields from the median run, and the same with start-up."""
    s = statistics.median(r["seconds"] for r in runs)
    s_up = statistics.median(r["with_startup"] for r in runs)
    return {"events": events, "seconds": s, "eps": events / s, "eps_per_core": events / s / parallelism,
            "parallelism": parallelism, "runs_eps": [events / r["seconds"] for r in runs],
            "with_startup": {"seconds": s_up, "eps": events / s_up,
                             "eps_per_core": events / s_up / parallelism,
                             "cpu_s": statistics.median(r["cpu_s_with_startup"] for r in runs)},
            # CPU seconds of the JVM and its Python workers over the same span: cores really used
            # (cpu_s / seconds) and events per CPU second, a per-core rate that needs no parallelism.
            "cpu_s": statistics.median(r["cpu_s"] for r in runs),
            "cores_used": statistics.median(r["cpu_s"] / r["seconds"] for r in runs),
            "eps_per_cpu_s": statistics.median(events / r["cpu_s"] for r in runs),
            "source_build_s": statistics.median(r["build"] for r in runs)}


def throughput(repeat: int, events: int, modes: list[str]) -> dict[str, Any]:
    """Every (mode, parallelism) `repeat` times, interleaved, so a noisy machine's drift hits all."""
    rows = load_events(events)
    want = expected_counts(rows)
    cores = os.cpu_count() or 2
    configs = [(m, p) for m in modes for p in sorted({1, min(2, cores)})]
    runs: dict[tuple[str, int], list[dict[str, float]]] = {c: [] for c in configs}
    for i in range(repeat):
        for mode, p in configs:
            r = throughput_once(rows, want, p, mode)
            runs[mode, p].append(r)
            print(f"  throughput run {i + 1}/{repeat} {mode} p={p}: {len(rows) / r['seconds']:,.0f} events/s "
                  f"({r['seconds']:.1f} s, {r['cpu_s']:.1f} CPU s; {r['with_startup']:.1f} s with start-up)",
                  flush=True)
    by_mode = {m: {str(p): figures(len(rows), runs[m, p], p) for mm, p in configs if mm == m} for m in modes}
    head = by_mode[modes[0]]
    return head["1"] | {"mode": modes[0], "by_parallelism": head, "by_mode": by_mode,
                        "passing_filter": sum(want.values()), "windows": len(want), "repeat": repeat}


# --- latency --------------------------------------------------------------------------------


def file_writer(folder: str) -> Callable[[list[dict[str, Any]]], None]:
    """A push function for `Workload.play`: each batch becomes one JSON-lines file, written
    under a hidden name (FileSource skips names starting with '.') and renamed."""
    os.makedirs(folder, exist_ok=True)
    seq = [0]

    def push(events: list[dict[str, Any]]) -> None:
        seq[0] += 1
        tmp, final = os.path.join(folder, f".{seq[0]:07d}.tmp"), os.path.join(folder, f"{seq[0]:07d}.json")
        with open(tmp, "w") as f:
            f.write("".join(json.dumps(e, separators=(",", ":")) + "\n" for e in events))
        os.replace(tmp, final)

    return push


def file_sink(folder: str, prefix: str) -> Callable[[Any], list[Any]]:
    """A flat_map that is the sink: it appends `fields... wall_ms` to its own file (opened on
    first use: an open file does not pickle), line-buffered so each line is out at once."""
    opened: list[Any] = []

    def sink(r: Any) -> list[Any]:
        if not opened:  # kept open for the job's life: it is the sink's connection
            path = os.path.join(folder, f"{prefix}-{uuid.uuid4().hex}.txt")
            opened.append(open(path, "a", buffering=1))  # noqa: SIM115
        opened[0].write(" ".join(str(x) for x in r) + f" {time.time() * 1000:.3f}\n")
        return []

    return sink


def read_sink(folder: str, prefix: str) -> list[list[str]]:
    lines: list[list[str]] = []
    for p in glob.glob(os.path.join(folder, f"{prefix}-*.txt")):
        with open(p) as f:
            lines.extend(line.split() for line in f if line.endswith("\n"))
    return lines


def file_source(env: Any, folder: str, name: str, monitor_ms: int) -> Any:
    """A stream of the lines of the files that land in `folder`, from one reader (so files are
    read about in the order they land), scanning every `monitor_ms`."""
    from pyflink.common import Duration, WatermarkStrategy
    from pyflink.datastream.connectors.file_system import FileSource, StreamFormat

    src = (FileSource.for_record_stream_format(StreamFormat.text_line_format(), folder)
           .monitor_continuously(Duration.of_millis(monitor_ms)).build())
    return env.from_source(src, WatermarkStrategy.no_watermarks(), name).set_parallelism(1)


def parse(line: str) -> Any:
    from pyflink.common import Row

    e = json.loads(line)
    return Row(e["ts"], e["key"], e["value"])


def alerts_job(env: Any, base: str, monitor_ms: int) -> None:
    """Alerts: one chain at parallelism 1 (no network hop between its operators)."""
    (file_source(env, os.path.join(base, "alerts"), "alerts-files", monitor_ms)
     .map(parse, output_type=row_type()).set_parallelism(1)
     .filter(lambda r: r[2] >= 0).set_parallelism(1)
     .map(lambda r: (r[0], r[1])).set_parallelism(1)
     .flat_map(file_sink(os.path.join(base, "out"), "alerts")).set_parallelism(1))


def bulk_job(env: Any, base: str, monitor_ms: int) -> None:
    """Bulk: read and watermark at parallelism 1, burn and window at the environment's (2)."""
    from pyflink.common import Row

    from bench.harness.work import burn

    parsed = file_source(env, os.path.join(base, "bulk"), "bulk-files", monitor_ms).map(
        parse, output_type=row_type()).set_parallelism(1)
    timed = with_timestamps(parsed, BULK_OUT_OF_ORDER_MS).set_parallelism(1)
    burnt = timed.map(lambda r: Row(r[0], r[1], burn({"ts": r[0], "key": r[1], "value": r[2]})["value"]),
                      output_type=row_type())
    (count_per_window(burnt)
     .map(lambda w: (w[2], w[3]))  # (window end, count)
     .flat_map(file_sink(os.path.join(base, "out"), "bulk")))


def latency(mode: str, seconds: float, warmup: float, bulk_rate: float, monitor_ms: int,
            alerts_conf: dict[str, str], bulk_conf: dict[str, str]) -> dict[str, Any]:
    """One live run: alerts (and bulk) played in real time for warmup + seconds. Each tenant is
    its own job with its own configuration, as on a shared Flink cluster; locally each job gets
    its own mini-cluster, all in the one JVM."""
    base = tempfile.mkdtemp(prefix="flink-latency-")
    out = os.path.join(base, "out")
    os.makedirs(out)
    alerts_push, bulk_push = file_writer(os.path.join(base, "alerts")), file_writer(os.path.join(base, "bulk"))
    cores = min(2, os.cpu_count() or 2)
    jobs = []
    env = make_env(1, mode, alerts_conf)
    alerts_job(env, base, monitor_ms)
    jobs.append(env.execute_async(f"alerts-{mode}"))
    if bulk_rate > 0:
        env = make_env(cores, mode, bulk_conf)
        bulk_job(env, base, monitor_ms)
        jobs.append(env.execute_async(f"bulk-{mode}"))
    try:
        # Wait for the jobs to be up (mini-cluster, Python workers) before the clock starts:
        # probe alerts until one reaches the sink. The warm-up then covers the JIT and caches.
        t0 = time.time()
        while not any(r[1] == "probe" for r in read_sink(out, "alerts")):
            if time.time() - t0 > 180:
                raise TimeoutError("pyflink latency job: no probe reached the sink in 180 s")
            alerts_push([{"ts": int(time.time() * 1000), "key": "probe", "value": 1.0}])
            time.sleep(0.5)
        startup_s = time.time() - t0
        alerts_w = common.alerts_workload(warmup + seconds)
        bulk_w = common.bulk_workload(bulk_rate, warmup + seconds) if bulk_rate > 0 else None
        started: dict[str, float] = {}
        stop = threading.Event()
        bulk_t = None
        if bulk_w is not None:
            bulk_t = threading.Thread(target=lambda: started.setdefault("bulk", bulk_w.play(bulk_push, stop)),
                                      daemon=True)
            bulk_t.start()
        start_ms = alerts_w.play(alerts_push, stop)
        if bulk_t is not None:
            bulk_t.join()
        # Drain: until every alert is at the sink (or 30 s), then 3 s more for the last windows.
        sent = alerts_w.total_events()
        deadline = time.time() + 30
        while time.time() < deadline and sum(r[1] != "probe" for r in read_sink(out, "alerts")) < sent:
            time.sleep(0.2)
        time.sleep(3.0 if bulk_w is not None else 0.0)
    finally:
        for job in jobs:
            job.cancel().result()
    since_ms = start_ms + warmup * 1000
    alerts_rows = [r for r in read_sink(out, "alerts") if r[1] != "probe"]
    alerts_lat = [float(r[2]) - int(r[0]) for r in alerts_rows if int(r[0]) >= since_ms]
    res: dict[str, Any] = {
        "mode": mode, "alerts": latency_summary(alerts_lat, common.ALERTS_TARGET_MS),
        "offered_eps": {"alerts": alerts_w.rate_eps, "bulk": bulk_rate}, "seconds": seconds,
        "warmup_s": warmup, "job_startup_s": startup_s,
        "alerts_sent": sent, "alerts_at_sink": len(alerts_rows)}
    if bulk_w is not None:
        bulk_start = started["bulk"]
        windows = read_sink(out, "bulk")
        bulk_lat = [float(r[2]) - int(r[0]) for r in windows if int(r[0]) - 1000 >= bulk_start + warmup * 1000]
        res["bulk"] = latency_summary(bulk_lat, common.BULK_TARGET_MS)
        # Events in the windows that closed vs the events sent for them: the rest came late.
        ends = {int(r[0]) for r in windows}
        sent_in = len([e for _, b in bulk_w.batches(int(bulk_start)) for e in b
                       if (e["ts"] // 1000 + 1) * 1000 in ends])
        res["bulk_events"] = {"sent_in_closed_windows": sent_in,
                              "counted": sum(int(r[1]) for r in windows)}
    shutil.rmtree(base, ignore_errors=True)
    return res


# --- the run --------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--repeat", type=int, default=3, help="throughput runs per configuration (median)")
    p.add_argument("--events", type=int, default=THROUGHPUT_EVENTS)
    p.add_argument("--seconds", type=float, default=20, help="measured seconds of the latency run")
    p.add_argument("--warmup", type=float, default=5, help="seconds played first and left out")
    p.add_argument("--bulk-rate", type=float, default=0, help="bulk tenant events/s (0: alerts alone)")
    p.add_argument("--monitor-ms", type=int, default=100, help="FileSource directory scan interval")
    # Process mode holds a Python operator's input for up to bundle.time ms before handing it to the
    # worker; Flink's default (1000) made alerts' p50 ~650 ms, so the latency jobs are tuned. The
    # bulk job's windows were later with 10 ms (per-bundle costs) and 1000 ms than with 100 ms
    # (seen with loopback workers, one shared interpreter).
    p.add_argument("--bundle-ms", type=int, default=10,
                   help="python.fn-execution.bundle.time of the alerts job (0: Flink's default, 1000)")
    p.add_argument("--bulk-bundle-ms", type=int, default=100,
                   help="python.fn-execution.bundle.time of the bulk job (0: Flink's default, 1000)")
    p.add_argument("--modes", nargs="+", choices=MODES, default=list(MODES),
                   help="Python execution modes; the first is the headline")
    p.add_argument("--loopback", action="store_true",
                   help="process mode: Python functions in this process (PyFlink's local default)")
    p.add_argument("--skip-throughput", action="store_true")
    p.add_argument("--skip-latency", action="store_true")
    p.add_argument("--json", help="write the result to this file")
    a = p.parse_args(argv)

    flink_version = version("apache-flink")
    jvm_s = start_gateway(a.loopback)
    print(f"pyflink {flink_version}: JVM gateway up in {jvm_s:.1f} s", flush=True)
    notes = [
        f"PyFlink {flink_version}, local mini-cluster (one per job), Java {java_version()}; "
        f"Python execution modes {a.modes} (the first is the headline); JVM gateway start {jvm_s:.1f} s, "
        "counted in no figure.",
        "process mode: " + ("loopback, PyFlink's local default: all Python functions in the client "
                            "process (one GIL)." if a.loopback else
                            "one Python worker process per slot, as on a cluster (PyFlink's local "
                            "default, loopback, would run them all in the client process)."),
    ]
    tp = lat = None
    if not a.skip_throughput:
        tp = throughput(a.repeat, a.events, a.modes)
        notes += [
            "throughput: env.from_collection of typed rows (a Java collection source; pickling them "
            "into the job is `source_build_s`, not timed) -> Python TimestampAssigner (monotonous) -> "
            "filter -> map -> key_by -> TumblingEventTimeWindows 1 s -> aggregate count + "
            "ProcessWindowFunction -> execute_and_collect.",
            "throughput `seconds`: first event at the filter (stamped by it) -> last window result at the "
            "client: without JVM, mini-cluster and Python worker start-up; `with_startup`: from job "
            f"submission. Median of {a.repeat}; counts per (key, second) checked against plain Python.",
            "parallelism 2: the collection source is non-parallel (one Java thread); every Python "
            "operator runs twice. eps_per_core = eps / parallelism; eps_per_cpu_s = events / CPU seconds "
            "of the client, the JVM and its Python workers over the timed span (/proc, sampled every "
            "0.2 s, the sampler included), cores_used = CPU s / seconds.",
        ]
    if not a.skip_latency:
        def bundle(ms: int) -> dict[str, str]:
            return {"python.fn-execution.bundle.time": str(ms)} if ms else {}

        by_mode = {}
        for mode in a.modes:
            by_mode[mode] = latency(mode, a.seconds, a.warmup, a.bulk_rate, a.monitor_ms,
                                    bundle(a.bundle_ms), bundle(a.bulk_bundle_ms))
            print(f"  latency {mode}: alerts {fmt(by_mode[mode]['alerts'])}"
                  + (f"; bulk {fmt(by_mode[mode]['bulk'])}" if "bulk" in by_mode[mode] else ""), flush=True)
        lat = by_mode[a.modes[0]] | {"by_mode": by_mode}
        notes += [
            f"latency: FileSource monitoring a folder every {a.monitor_ms} ms, one JSON-lines file per "
            "workload batch (alerts 10 ms, bulk 100 ms), written and renamed by Workload.play; sink = the "
            "last Python function, which stamps time.time() and appends a line to a file; alerts latency "
            "= stamp - ts; bulk = stamp - window end. Each tenant is its own job (own mini-cluster, in one "
            "JVM; own Python workers in process mode). Alerts at parallelism 1 (one chain); bulk reads and "
            f"watermarks at 1 (bounded out-of-orderness {BULK_OUT_OF_ORDER_MS} ms), burns and windows at 2. "
            f"python.fn-execution.bundle.time (process mode): alerts {a.bundle_ms or 'default 1000'} ms, "
            f"bulk {a.bulk_bundle_ms or 'default 1000'} ms.",
            "latency clock starts once a probe alert has reached the sink (job and Python workers up); "
            f"then {a.warmup:g} s of warm-up, left out.",
        ]
        if a.bulk_rate <= 0:
            notes.append("latency: alerts alone (--bulk-rate 0).")
    res = common.result("pyflink", flink_version, throughput=tp, latency=lat, notes=notes)
    report(res)
    save_json(a.json, res)
    return res


def fmt(s: dict[str, Any]) -> str:
    if not s.get("results"):
        return "no results"
    return (f"p50 {s['p50_ms']:.0f} ms, p99 {s['p99_ms']:.0f} ms, {s['within_target']:.0%} within "
            f"{s['target_ms']:.0f} ms ({s['results']:,} results)")


def report(res: dict[str, Any]) -> None:
    tp = res["throughput"]
    if tp:
        print(f"filter -> map -> 1 s tumbling count, {tp['events']:,} events ({tp['passing_filter']:,} pass):")
        for mode, by_p in tp["by_mode"].items():
            for p, f in by_p.items():
                print(f"  pyflink {mode:7s} p={p}  {f['eps']:7,.0f} events/s  {f['eps_per_core']:7,.0f} per core"
                      f"  {f['eps_per_cpu_s']:7,.0f} per CPU s ({f['cores_used']:.2f} cores used)"
                      f"  with start-up {f['with_startup']['eps']:7,.0f} ({f['with_startup']['eps_per_core']:,.0f}"
                      " per core)")
    print(json.dumps(res, indent=2))


def java_version() -> str:
    from pyflink.java_gateway import get_gateway

    return str(get_gateway().jvm.java.lang.System.getProperty("java.version"))


if __name__ == "__main__":
    main()
