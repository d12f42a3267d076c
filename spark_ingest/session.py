"""The SparkSession of the tier: typed config, read once; embedded `local[*]` by default.

>>> cfg = SparkConfig(run_dir="/tmp/cameo-run")
>>> settings = cfg.settings()
>>> settings["spark.master"], settings["spark.ui.enabled"], settings["spark.sql.shuffle.partitions"]
('local[*]', 'false', '2')
>>> settings["spark.local.dir"]
'/tmp/cameo-run/spark/local'

A `spark://`, YARN or Kubernetes master is configuration only:
`SparkConfig(master="spark://host:7077")`. The Python workers must then run
the same Python with cameo installed (`spark.pyspark.python`), and reach the
Ray cluster's GCS address.
"""

from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass, field
from typing import Any

from cameo_actors.runtime.config import default_run_dir


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
        python: the Python of Spark's Python workers (default: this interpreter).
        conf: any other Spark settings, as (key, value) pairs.
        niceness: with a local master, the OS priority the embedded Spark (its JVM and the
            Python workers it starts) runs at, 0..19: Spark's micro-batches take the CPU
            that the runtime's executors leave, instead of delaying urgent messages on a
            machine both share (in the demo on 2 cores, Spark used 1.2-1.5 of them while
            files landed; the alerts' runtime p99 was 105-607 ms at the same priority,
            24-36 ms at nice 10: docs/spark.md). 0 keeps Spark at the caller's priority.
    """

    master: str = "local[*]"
    app_name: str = "cameo"
    shuffle_partitions: int = 2
    ui: bool = False
    run_dir: str | None = None
    log_level: str = "WARN"
    arrow_batch_rows: int = 10_000
    python: str | None = None
    conf: tuple[tuple[str, str], ...] = field(default_factory=tuple)
    niceness: int = 10

    def __post_init__(self) -> None:
        if self.shuffle_partitions < 1:
            raise ValueError(f"SparkConfig.shuffle_partitions: expected >= 1, got {self.shuffle_partitions}")
        if self.arrow_batch_rows < 1:
            raise ValueError(f"SparkConfig.arrow_batch_rows: expected >= 1, got {self.arrow_batch_rows}")
        if not 0 <= self.niceness <= 19:
            raise ValueError(f"SparkConfig.niceness: expected 0..19 (0: the caller's priority), "
                             f"got {self.niceness}")

    @property
    def spark_dir(self) -> str:
        return os.path.join(self.run_dir or default_run_dir(), "spark")

    @property
    def checkpoint_root(self) -> str:
        return os.path.join(self.spark_dir, "checkpoints")

    @property
    def local(self) -> bool:
        return self.master.startswith("local")

    def settings(self) -> dict[str, str]:
        d = self.spark_dir
        tmp = os.path.join(d, "tmp")
        s = {
            "spark.master": self.master,
            "spark.app.name": self.app_name,
            "spark.ui.enabled": str(self.ui).lower(),
            "spark.ui.showConsoleProgress": "false",
            "spark.sql.shuffle.partitions": str(self.shuffle_partitions),
            "spark.local.dir": os.path.join(d, "local"),
            "spark.driver.extraJavaOptions": f"-Djava.io.tmpdir={tmp}",
            "spark.executor.extraJavaOptions": f"-Djava.io.tmpdir={tmp}",
            "spark.sql.warehouse.dir": os.path.join(d, "warehouse"),
            "spark.sql.streaming.checkpointLocation": self.checkpoint_root,
            "spark.sql.execution.arrow.maxRecordsPerBatch": str(self.arrow_batch_rows),
            # Streaming ignores AQE and warns about it on every query start.
            "spark.sql.adaptive.enabled": "false",
            "spark.sql.session.timeZone": "UTC",
            "spark.python.worker.reuse": "true",
            # An `any` field read as VARIANT from JSON with a key twice keeps the last
            # value, as json.loads (and so Runtime.push) does; Spark's default refuses
            # the row as unparsable.
            "spark.sql.variant.allowDuplicateKeys": "true",
        }
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
    """
    from pyspark.sql import SparkSession

    config = config or SparkConfig()
    for sub in ("local", "tmp", "checkpoints"):
        os.makedirs(os.path.join(config.spark_dir, sub), exist_ok=True)
    os.environ.setdefault("PYSPARK_PYTHON", config.python or sys.executable)
    if config.local:
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")  # loopback only, no warning
    builder = SparkSession.builder
    for key, value in config.settings().items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel(config.log_level)
    jvm = spark._jvm  # None only in Spark Connect, where no local JVM runs
    if config.local and config.niceness and jvm is not None:
        lower_priority(int(jvm.java.lang.ProcessHandle.current().pid()), config.niceness)
    register(spark)
    return spark


def lower_priority(pid: int, niceness: int) -> None:
    """Run process `pid` at OS priority `niceness` (a larger nice value: it yields the CPU).

    On Linux a nice value belongs to each thread, and a new thread or process takes its
    creator's: every thread the process has now is lowered (twice over, for threads
    started meanwhile), so the threads and processes it starts later (Spark's Python
    workers) run lower too. Elsewhere the process's priority is set. Never raises the
    priority back: lowering needs no privilege, raising does.
    """
    task_dir = f"/proc/{pid}/task"
    if not os.path.isdir(task_dir):
        os.setpriority(os.PRIO_PROCESS, pid, max(niceness, os.getpriority(os.PRIO_PROCESS, pid)))
        return
    for _ in range(2):
        for tid in map(int, os.listdir(task_dir)):
            try:
                if os.getpriority(os.PRIO_PROCESS, tid) < niceness:
                    os.setpriority(os.PRIO_PROCESS, tid, niceness)
            except ProcessLookupError:  # the thread ended meanwhile
                continue


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
