"""The SparkSession of the tier: typed config, read once; embedded `local[*]` by default.

>>> cfg = SparkConfig(run_dir="/tmp/cameo-run")
>>> settings = cfg.settings()
>>> settings["spark.master"], settings["spark.ui.enabled"], settings["spark.sql.shuffle.partitions"]
('local[*,4]', 'false', '2')
>>> settings["spark.local.dir"]
'/tmp/cameo-run/spark/local'

A `spark://`, YARN or Kubernetes master is configuration only:
`SparkConfig(master="spark://host:7077")`. The Python workers must then run
the same Python with cameo installed (`spark.pyspark.python`), and reach the
Ray cluster's GCS address.
"""

from __future__ import annotations

import os
import re
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from cameo_actors.runtime.config import default_run_dir
from spark_ingest.niced_daemon import NICENESS_ENV

#: Seconds a Python worker may take to connect back to Spark's JVM (Spark's default: 15).
PYTHON_CONNECT_TIMEOUT_S = 120

#: Local files without a process started per file operation (`SparkConfig.hadoop_local_files`):
#: Hadoop's raw local file system for both of its APIs, and Spark's checkpoint logs through
#: the FileSystem API, whose rename is `File.renameTo` (FileContext's checks each side with
#: a `readlink` process). The first two concern `file:` paths only; the third every
#: checkpoint, and a log entry is still written whole before it is renamed into place.
PLAIN_LOCAL_FILES = {
    "spark.hadoop.fs.file.impl": "org.apache.hadoop.fs.RawLocalFileSystem",
    "spark.hadoop.fs.AbstractFileSystem.file.impl": "org.apache.hadoop.fs.local.RawLocalFs",
    "spark.sql.streaming.checkpointFileManagerClass":
        "org.apache.spark.sql.execution.streaming.checkpointing.FileSystemBasedCheckpointFileManager",
}


@dataclass(frozen=True)
class SparkConfig:
    """How the tier's SparkSession runs.

    Attributes:
        master: "local[*]" (embedded), "spark://host:7077", "yarn", "k8s://...".
        app_name: the Spark application name.
        shuffle_partitions: spark.sql.shuffle.partitions (Spark's 200 costs ~200 tasks per
            shuffle; the tier's queries do not shuffle, a small number keeps stray ones cheap).
        ui: the Spark UI (off: it costs memory and a port).
        run_dir: the project's run folder; Spark's local dir, temp dir and default
            checkpoints go under <run_dir>/spark (default: ./.run or $CAMEO_RUN_DIR).
        log_level: Spark's log level.
        arrow_batch_rows: rows per Arrow batch handed to the Python writer.
        arrow_batch_bytes: bytes per Arrow batch handed to the Python writer, whichever
            limit comes first: files read by the writer (`cameo.read`) are one row each,
            and without it the JVM reads a task's every file before the writer gets one.
        max_file_bytes: the largest file of an input the writer reads (Spark's
            `binaryFile.maxLength`): a file is one value in Spark and one read in the
            writer, so a larger one fails its query, naming the file, with the fix.
        python: the Python of Spark's Python workers (default: this interpreter).
        conf: any other Spark settings, as (key, value) pairs.
        niceness: with a local master, the OS priority (0..19) of Spark's work: its task
            threads and task workers, JIT and GC threads, and each query's thread once
            started (`keep_tasks_low`). Spark's micro-batches then take the CPU that the
            runtime's executors leave, instead of delaying urgent messages on a machine
            both share (at the same priority the demo's alerts measured 28-76% within
            50 ms: docs/spark.md). Its driver keeps the caller's priority, so that a busy
            machine never starves it into failing a query. 0: all at the caller's.
        task_attempts: with a local master, the attempts of a task before its query fails
            (Spark's `local[N,F]`; a local master gives a failed task no retry by default):
            a task whose Python worker did not start in time on a loaded machine runs again.
        quick_jit: compile Spark's JVM code with the quick compiler only (C1,
            `-XX:TieredStopAtLevel=1`): for a tier whose inputs are small and whose
            process is short-lived, as `make run`'s. Over the demo's first 12 s of files
            the optimizing compiler (C2) took 4.4 of the JVM's 10.3 CPU seconds, on the
            cores the executors and Spark's own work need. At volume, C2's code parses
            JSON twice as fast (docs/spark.md, "Spark settings"; Parquet reads alike).
            False (the JVM's default) for a tier that reads much.
        hadoop_local_files: local files (checkpoints, the file sink's log, Parquet
            output) through Hadoop's checksummed local file system and Spark's checkpoint
            logs through Hadoop's FileContext, as Spark does by default. Without the
            native Hadoop library (not in the pyspark wheel), those start a `readlink` or
            `chmod` process for each file they create or rename: six per entry of a
            query's offset or commit log, 60-90 ms of each micro-batch's logs here. False
            (the tier's default): the raw local file system (no `.crc` files beside
            local files) and Spark's FileSystem-based checkpoint logs, one `chmod` per
            file created (docs/spark.md, "Spark settings").
        restarts, restart_window_s: how many times within that window the tier starts a
            query again, from its checkpoint, when it died for a transient reason (a
            Python worker of the query's driver side that did not connect back in time,
            see `failures.TRANSIENT`); beyond that, or for any other reason, the failure is
            reported (`SparkQueryFailed`). Results stay exactly once across a restart.
    """

    master: str = "local[*]"
    app_name: str = "cameo"
    shuffle_partitions: int = 2
    ui: bool = False
    run_dir: str | None = None
    log_level: str = "WARN"
    arrow_batch_rows: int = 10_000
    arrow_batch_bytes: int = 4 << 20
    max_file_bytes: int = 256 << 20
    python: str | None = None
    conf: tuple[tuple[str, str], ...] = field(default_factory=tuple)
    niceness: int = 10
    task_attempts: int = 4
    quick_jit: bool = False
    hadoop_local_files: bool = False
    restarts: int = 5
    restart_window_s: float = 600.0

    def __post_init__(self) -> None:
        if self.shuffle_partitions < 1:
            raise ValueError(f"SparkConfig.shuffle_partitions: expected >= 1, got {self.shuffle_partitions}")
        if min(self.arrow_batch_rows, self.arrow_batch_bytes, self.max_file_bytes) < 1:
            raise ValueError(f"SparkConfig.arrow_batch_rows, arrow_batch_bytes and max_file_bytes: "
                             f"expected >= 1, got {self.arrow_batch_rows}, "
                             f"{self.arrow_batch_bytes} and {self.max_file_bytes}")
        if not 0 <= self.niceness <= 19:
            raise ValueError(f"SparkConfig.niceness: expected 0..19 (0: the caller's priority), "
                             f"got {self.niceness}")
        if self.task_attempts < 1 or self.restarts < 0 or self.restart_window_s <= 0:
            raise ValueError(f"SparkConfig: expected task_attempts >= 1, restarts >= 0 and "
                             f"restart_window_s > 0, got {self.task_attempts}, {self.restarts} "
                             f"and {self.restart_window_s}")

    @property
    def spark_dir(self) -> str:
        return os.path.join(self.run_dir or default_run_dir(), "spark")

    @property
    def checkpoint_root(self) -> str:
        return os.path.join(self.spark_dir, "checkpoints")

    @property
    def local(self) -> bool:
        return self.master.startswith("local")

    @property
    def spark_master(self) -> str:
        """The master with the task attempts of a local one: "local[*]" -> "local[*,4]"."""
        m = re.fullmatch(r"local(?:\[([^,\]]+)\])?", self.master)
        if m is None or self.task_attempts == 1:
            return self.master
        return f"local[{m.group(1) or 1},{self.task_attempts}]"

    def settings(self) -> dict[str, str]:
        d = self.spark_dir
        tmp = os.path.join(d, "tmp")
        java = f"-Djava.io.tmpdir={tmp}" + (" -XX:TieredStopAtLevel=1" if self.quick_jit else "")
        s = {
            "spark.master": self.spark_master,
            "spark.app.name": self.app_name,
            "spark.ui.enabled": str(self.ui).lower(),
            "spark.ui.showConsoleProgress": "false",
            "spark.sql.shuffle.partitions": str(self.shuffle_partitions),
            "spark.local.dir": os.path.join(d, "local"),
            "spark.driver.extraJavaOptions": java,
            "spark.executor.extraJavaOptions": java,
            "spark.sql.warehouse.dir": os.path.join(d, "warehouse"),
            "spark.sql.streaming.checkpointLocation": self.checkpoint_root,
            "spark.sql.execution.arrow.maxRecordsPerBatch": str(self.arrow_batch_rows),
            "spark.sql.execution.arrow.maxBytesPerBatch": str(self.arrow_batch_bytes),
            "spark.sql.sources.binaryFile.maxLength": str(min(self.max_file_bytes, 2**31 - 1)),
            # Streaming ignores AQE and warns about it on every query start.
            "spark.sql.adaptive.enabled": "false",
            "spark.sql.session.timeZone": "UTC",
            "spark.python.worker.reuse": "true",
            # A Python worker connects back to the JVM within this (15 s by default): on a
            # loaded machine, starting one can take longer, and the query then fails.
            "spark.python.authenticate.socketTimeout": f"{PYTHON_CONNECT_TIMEOUT_S}s",
            # An `any` field read as VARIANT from JSON with a key twice keeps the last
            # value, as json.loads (and so Runtime.push) does; Spark's default refuses
            # the row as unparsable.
            "spark.sql.variant.allowDuplicateKeys": "true",
        }
        if not self.hadoop_local_files:
            s.update(PLAIN_LOCAL_FILES)
        if self.local:
            s["spark.driver.host"] = "127.0.0.1"
            s["spark.driver.bindAddress"] = "127.0.0.1"
        s.update(dict(self.conf))
        return s


def build_session(config: SparkConfig | None = None) -> Any:
    """Start (or get) the SparkSession and register the `cameo` data source.

    Spark's Python workers run `config.python` (default: this interpreter, so they
    import cameo and pyarrow from the same environment): PySpark reads it from
    PYSPARK_PYTHON when the session's context starts, so it is set here if unset.
    With a local master and a `niceness`, Spark's tasks run below the executors'
    priority (`keep_tasks_low`).
    """
    from pyspark.sql import SparkSession

    config = config or SparkConfig()
    for sub in ("local", "tmp", "checkpoints"):
        os.makedirs(os.path.join(config.spark_dir, sub), exist_ok=True)
    os.environ.setdefault("PYSPARK_PYTHON", config.python or sys.executable)
    settings = config.settings()
    if config.local:
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")  # loopback only, no warning
        if config.niceness:  # read by the daemon the JVM starts (it inherits this environment)
            os.environ[NICENESS_ENV] = str(config.niceness)
            settings["spark.python.daemon.module"] = "spark_ingest.niced_daemon"
    builder = SparkSession.builder
    for key, value in settings.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel(config.log_level)
    pid = jvm_pid(spark)
    if config.local and config.niceness and pid is not None:
        keep_tasks_low(pid, config.niceness)
    register(spark)
    return spark


def jvm_pid(spark: Any) -> int | None:
    """The process id of the session's local JVM (None under Spark Connect, which has none)."""
    jvm = spark._jvm
    return None if jvm is None else int(jvm.java.lang.ProcessHandle.current().pid())


#: How often the JVM's threads are looked for (new ones start at its priority).
TASK_WATCH_S = 0.2
#: The JVM's threads that do a micro-batch's work and start no process, by the name Linux
#: shows (cut at 15 bytes): Spark's task threads ("Executor task launch worker ..."), the
#: JIT compilers (a third of a core over the demo's first minute) and the garbage collector.
COMPUTE_THREADS = ("Executor task", "C1 CompilerThre", "C2 CompilerThre", "GC Thread", "G1 ")
#: A query's own thread ("stream execution thread for <query> ...") plans its micro-batches;
#: while the query starts it also starts the Python processes of its source, which must
#: connect back within 10 s: lowered only once it ran `QUERY_START_S`.
QUERY_THREAD = "stream executio"
QUERY_START_S = 20.0


def keep_tasks_low(pid: int, niceness: int) -> threading.Thread:
    """Keep the JVM `pid`'s compute threads (`COMPUTE_THREADS`), and its queries' threads
    once started (`QUERY_THREAD`), at OS priority `niceness`: a thread of this process
    looks for new ones every `TASK_WATCH_S`, until the JVM ends.

    Those do a micro-batch's work (parsing files, Arrow; the Python workers that
    `niced_daemon` forks for the tasks run low too), compile it and plan it. The rest of
    the JVM (py4j, RPC, and the Python processes a starting query needs, which must connect
    back within 10 s) keeps the caller's priority, so a machine whose executors are busy
    slows Spark's work but never starves it into failing a query.
    """
    def watch() -> None:
        seen: dict[int, float] = {}
        while lower_spark_threads(pid, niceness, seen, time.monotonic()):
            time.sleep(TASK_WATCH_S)

    thread = threading.Thread(target=watch, name="cameo-spark-tasks-low", daemon=True)
    thread.start()
    return thread


def lower_spark_threads(pid: int, niceness: int, seen: dict[int, float], now: float) -> bool:
    """One look at process `pid`'s threads: those of `COMPUTE_THREADS` go to `niceness`,
    those of `QUERY_THREAD` once they are `QUERY_START_S` old (never up: that needs a
    privilege; on Linux a nice value belongs to each thread). `seen`: thread -> when it
    was first seen, or -1 once done with (updated). False once the process is gone (or
    there is no /proc)."""
    try:
        tids = {int(t) for t in os.listdir(f"/proc/{pid}/task")}
    except OSError:
        return False
    for gone in set(seen) - tids:
        del seen[gone]
    for tid in tids:
        first = seen.setdefault(tid, now)
        if first < 0:
            continue
        try:
            with open(f"/proc/{pid}/task/{tid}/comm", encoding="utf-8") as f:
                name = f.read()
            if name.startswith(QUERY_THREAD) and now - first < QUERY_START_S:
                continue  # looked at again next time
            if name.startswith((*COMPUTE_THREADS, QUERY_THREAD)) \
                    and os.getpriority(os.PRIO_PROCESS, tid) < niceness:
                os.setpriority(os.PRIO_PROCESS, tid, niceness)
        except OSError:  # the thread ended meanwhile
            continue
        seen[tid] = -1.0
    return True


def register(spark: Any) -> None:
    """Register the `cameo` format with a SparkSession (build_session does it)."""
    from spark_ingest.datasource import CameoDataSource

    spark.dataSource.register(CameoDataSource)


def stop_gracefully(query: Any, *, drain: bool = True, timeout_s: float = 120.0) -> None:
    """Stop a streaming query between micro-batches, never in the middle of one.

    Stopping a query while a batch's job runs cancels its tasks (errors, and for a
    writer a half-written batch). With `drain`, first process everything available
    (`processAllAvailable`). Then stop when no trigger is active, or right after a
    batch finished (the next trigger is still planning: no job runs yet); a batch
    planned but not run is simply run again after a restart.
    """
    if not query.isActive:
        return
    if drain:
        query.processAllAvailable()
    seen = _progress_id(query)
    deadline = time.monotonic() + timeout_s
    while query.isActive and time.monotonic() < deadline:
        if not query.status.get("isTriggerActive") or _progress_id(query) != seen:
            break
        time.sleep(0.002)
    query.stop()


def _progress_id(query: Any) -> tuple[Any, Any]:
    p = query.lastProgress
    return (p["batchId"], p["timestamp"]) if p else (None, None)
