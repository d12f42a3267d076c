"""The `cameo` Spark data source: a stream writer into a dataflow, a stream reader out of it.

    spark.dataSource.register(CameoDataSource)          # or spark_ingest.register(spark)
    (events.writeStream.format("cameo")
        .option("dataflow", "errors").option("address", runtime.address)
        .option("checkpointLocation", ".run/ck/in").start())
    (spark.readStream.format("cameo")
        .option("dataflow", "errors").option("address", runtime.address).load()
        .writeStream.format("parquet").option("path", "out")
        .option("checkpointLocation", ".run/ck/out").start())

Options: see `spark_ingest.options` (dataflow, address, pool, source, sink,
output, batch_size, max_rows_per_batch, rows_per_partition, include_metadata,
ray_auth, corrupt_column, skip_replayed, wait_ms).

Where the code runs: `CameoDataSource.schema/streamWriter/streamReader` run
in short-lived Python planner processes on the Spark driver, the reader's
offset methods in one long-lived Python process per query on the driver, and
`write`/`read` in Spark's (reused) Python workers. Each joins the runtime once
per process (`spark_ingest.client`).
"""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceStreamArrowWriter,
    DataSourceStreamReader,
    InputPartition,
    WriterCommitMessage,
)
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadLimit, ReadMaxRows
from pyspark.sql.types import StructType

from cameo_actors.dataflow.spec import DataflowSpec
from cameo_actors.operators.exceptions import ResultsNotColumnar
from spark_ingest import client
from spark_ingest.arrow import (
    CORRUPT,
    prepare,
    results_batch,
    results_columns,
)
from spark_ingest.batching import Target, bucket_ms, push_target
from spark_ingest.exceptions import CameoSparkError, OptionError
from spark_ingest.files import read_files
from spark_ingest.offsets import (
    initial_offset,
    latest_offset,
    nothing_new,
    parse_offset,
    ranges,
    to_commit,
)
from spark_ingest.options import Connection, ReaderOptions, WriterOptions
from spark_ingest.schema import (
    ERROR_COLUMNS,
    EVENT_COLUMN,
    META_COLUMNS,
    TYPE_KEY,
    Column,
    base_type,
    check_input,
    result_columns,
    spark_kind,
)

FORMAT = "cameo"
#: Spark's local properties of a streaming task (set by MicroBatchExecution).
BATCH_ID_PROPERTY = "streaming.sql.batchId"
QUERY_ID_PROPERTY = "sql.streaming.queryId"


def _describe(conn: Connection, dataflow: str, max_age_s: float = client.DESCRIBE_MAX_AGE_S,
              *, expect: str | None = None) -> tuple[Any, DataflowSpec, str]:
    """(runtime, spec, deployment id) of a running dataflow; a missing one is an option error.

    `expect`: the deployment the caller works for (its query's, its offset's). A process's
    view may be up to `max_age_s` old: one that differs is asked again before it counts,
    or a dataflow deployed again under its name would look like the old deployment to a
    worker that saw that one in the last seconds.
    """
    try:
        rt, info = client.describe(conn, dataflow, max_age_s)
    except KeyError as e:  # DataflowNotFound
        known = sorted(d["name"] for d in client.runtime(conn).list())
        raise OptionError("dataflow", f"the name of a dataflow running in pool {conn.pool!r}",
                          dataflow, f"deploy it first or pick one of {known}") from e
    if expect is not None and max_age_s > 0 and deployment_id(info) != expect:
        return _describe(conn, dataflow, 0)
    return rt, DataflowSpec.from_dict(info["spec"]), deployment_id(info)


def spark_client(query: str, batch_id: int, partition: int) -> str:
    """The ingest client of one Spark write task: the same for its retries and replays
    (see `Runtime.handle`; `Hosting.mark_input_batch` forgets those of marked batches)."""
    return f"spark/{query}/{batch_id}/{partition}"


def deployment_id(info: dict[str, Any]) -> str:
    """Names one deployment of a dataflow: a redeploy under the same name gets a new id."""
    return f"{info['name']}@{info['submitted_at']!r}"


class CameoDataSource(DataSource):
    """`format("cameo")`: write into a running dataflow, read its results or errors."""

    @classmethod
    def name(cls) -> str:
        return FORMAT

    def schema(self) -> StructType:
        opts = ReaderOptions.parse(self.options)
        _, spec, _ = _describe(opts.connection, opts.dataflow, 0)
        return struct_type(reader_columns(spec, opts))

    def streamWriter(self, schema: StructType, overwrite: bool) -> CameoStreamWriter:
        opts = WriterOptions.parse(self.options)
        # Rows that are files hold no events to check: the writer reads the source's fields.
        columns = None if opts.files else {f.name: f.dataType.simpleString()
                                           for f in schema.fields}
        return CameoStreamWriter(opts, tuple(_target(opts.connection, dataflow, source, columns)
                                             for dataflow, source in opts.targets),
                                 uuid.uuid4().hex)

    def streamReader(self, schema: StructType) -> CameoStreamReader:
        opts = ReaderOptions.parse(self.options)
        _, spec, _ = _describe(opts.connection, opts.dataflow)
        from pyspark.sql.pandas.types import to_arrow_schema

        inferred = reader_columns(spec, opts)
        # A column of the inferred schema says its cameo type (an `any` one is JSON text, a
        # str among them too); a user-given schema's columns are coerced by their Spark type.
        columns = [(f.name, f.metadata.get(TYPE_KEY) or spark_kind(f.dataType.simpleString()))
                   for f in schema.fields]
        event_column = opts.output == "results" and inferred[:1] == [EVENT_COLUMN]
        return CameoStreamReader(opts, columns, to_arrow_schema(schema), event_column)


def _target(conn: Connection, dataflow: str, source: str | None,
            columns: dict[str, str] | None) -> Target:
    """The source `source` of the running dataflow `dataflow`, checked against the
    DataFrame's `columns` (name -> Spark type; None: no check)."""
    _, spec, deployment = _describe(conn, dataflow, 0)
    source = pick_source(spec, source)
    problems = check_input(spec, source, columns) if columns is not None else []
    if problems:
        raise CameoSparkError(
            f"the DataFrame cannot feed source {source!r} of dataflow {spec.name!r}: "
            f"{'; '.join(problems)}. Fix: select or cast columns to the source's schema "
            f"{dict(getattr(spec.step(source), 'schema', ()))} (int: integral or timestamp, "
            "float: numeric, str: string, bool: boolean)")
    step = spec.step(source)
    return Target(dataflow, source, getattr(step, "event_time", None), bucket_ms(spec, source),
                  deployment, tuple(getattr(step, "schema", ())))


def pick_source(spec: DataflowSpec, source: str | None) -> str:
    ids = [s.id for s in spec.sources]
    if source is None:
        if len(ids) != 1:
            raise OptionError("source", f"one of the sources of {spec.name!r}: {ids}", None,
                              '.option("source", "<source step id>")')
        return ids[0]
    if source not in ids:
        raise OptionError("source", f"a source of {spec.name!r}: {ids}", source,
                          '.option("source", ...) with one of those step ids')
    return source


def struct_type(columns: list[Column]) -> StructType:
    """The Spark schema of result columns: each field's metadata holds its cameo type
    (`TYPE_KEY`), which Spark writes into Parquet files with the schema, so a reader
    knows a JSON text column (`spark_ingest.results`)."""
    from pyspark.sql.types import BooleanType, DoubleType, LongType, StringType, StructField

    types = {"int": LongType(), "float": DoubleType(), "str": StringType(),
             "bool": BooleanType(), "any": StringType()}  # no DDL parser without a JVM here
    return StructType([StructField(name, types[base_type(typ)], True, {TYPE_KEY: typ})
                       for name, typ in columns])


def reader_columns(spec: DataflowSpec, opts: ReaderOptions) -> list[tuple[str, str]]:
    if opts.output == "errors":
        cols = list(ERROR_COLUMNS)
    else:
        sinks = [s.id for s in spec.sinks]
        if opts.sink is not None and opts.sink not in sinks:
            raise OptionError("sink", f"a sink of {spec.name!r}: {sinks}", opts.sink,
                              '.option("sink", ...) with one of those step ids, or leave it out')
        cols = result_columns(spec, [opts.sink] if opts.sink else None)
        cols = [c for c in cols if c[0] not in dict(META_COLUMNS)]
    return cols + (list(META_COLUMNS) if opts.include_metadata else [])


# == into a dataflow ==========================================================================
@dataclass
class CameoCommitMessage(WriterCommitMessage):
    """What one write task did; the driver's commit() sums them and marks the batch for
    each "dataflow:source" in `pushed` (those that did not have it already)."""

    partition: int
    rows: int
    messages: int
    corrupt: int
    pushed: tuple[str, ...]
    query: str
    batch_id: int
    started_ms: float
    finished_ms: float


class CameoStreamWriter(DataSourceStreamArrowWriter):
    """Each Spark task pushes its rows, to each target, as bounded, window-aligned runtime
    messages and returns once the runtime accepted them; the driver then hands the batch
    id over. A message goes as Arrow columns when they fit the source's schema
    (`to_columns`), as event dicts otherwise."""

    def __init__(self, opts: WriterOptions, targets: tuple[Target, ...], run: str) -> None:
        self.opts = opts
        self.targets = targets
        #: Names this run of the query: Spark creates the writer when a query (re)starts.
        self.run = run

    def write(self, iterator: Iterator[pa.RecordBatch]) -> CameoCommitMessage:
        from pyspark import TaskContext

        started = time.time() * 1000.0
        ctx = TaskContext.get()
        batch_id = int((ctx.getLocalProperty(BATCH_ID_PROPERTY) if ctx else None) or -1)
        query = (ctx.getLocalProperty(QUERY_ID_PROPERTY) if ctx else None) or ""
        partition = ctx.partitionId() if ctx else -1
        todo = [(t, rt) for t in self.targets
                if (rt := self._runtime(t, batch_id, query, partition)) is not None]
        if self.opts.files:  # the rows are files: read here, one Arrow batch per batch of files
            fields = file_fields(self.targets)
            read = (read_files(raw, self.opts.files, fields, self.opts.corrupt_column)
                    for raw in iterator)
            iterator = (batch for batch in read if batch is not None)
        batches: Iterator[Any] = (prepare(raw, self.opts.corrupt_column) for raw in iterator)
        if self.opts.order_task:  # all of the task's rows at once, in window order
            whole = list(batches)
            batches = iter([pa.Table.from_batches(whole)] if whole else [])
        rows = messages = corrupt = 0
        for batch in batches:
            for target, rt in todo:  # a shared input's rows: each target its own columns
                messages += push_target(rt, target, batch, self.opts.batch_size,
                                        columns=self.opts.columns, select=len(self.targets) > 1)
            rows += batch.num_rows
            corrupt += _corrupt_rows(batch)
        for _, rt in todo:
            rt.flush()  # returns when the runtime accepted every message: backpressure reaches Spark
        return CameoCommitMessage(partition, rows, messages, corrupt,
                                  tuple(f"{t.dataflow}:{t.source}" for t, _ in todo), query,
                                  batch_id, started, time.time() * 1000.0)

    def _runtime(self, target: Target, batch_id: int, query: str, partition: int) -> Any:
        """The runtime handle a task pushes to `target` with; None when the target has the
        batch already (a replay after a restart)."""
        name = target.dataflow
        rt, _, deployment = _describe(self.opts.connection, name, expect=target.deployment)
        if deployment != target.deployment:
            raise CameoSparkError(
                f"dataflow {name!r} was redeployed since this query started ({target.deployment} "
                f"-> {deployment}); restart the query (its events would mix two deployments)")
        if self.opts.skip_replayed and batch_id >= 0 and \
                self._replayed_up_to(rt, target, query) >= batch_id:
            return None
        if batch_id >= 0:  # a retried task, or a replayed batch, pushes the same calls:
            rt = rt.handle(client=spark_client(query, batch_id, partition))  # applied once
        return rt

    def _replayed_up_to(self, rt: Any, target: Target, query: str) -> int:
        """The last batch the runtime marked for `target` when this run of the query
        started (-1: none): Spark replays only the first batch of a run (the last one
        before a restart, if it did not commit). Asked once per run, target and worker
        process, and kept for every task of that batch."""
        key = f"{self.run}/{target.dataflow}/{target.source}"
        if key not in _REPLAY_MARKS:
            _REPLAY_MARKS[key] = rt.input_batches(target.dataflow).get(
                f"{target.source}@{query}", -1)
        return _REPLAY_MARKS[key]

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        done = [m for m in messages if isinstance(m, CameoCommitMessage)]
        for target in self.targets:
            if any(f"{target.dataflow}:{target.source}" in m.pushed for m in done):
                rt, _, _ = _describe(self.opts.connection, target.dataflow)  # fresh enough
                rt.mark_input_batch(target.dataflow, target.source, batchId, done[0].query)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Nothing to undo: the events a failed batch pushed stay in the runtime, and its
        replay pushes the same calls under the same client names, which the sources drop."""


#: run/dataflow/source -> the runtime's mark when the run started (see _replayed_up_to).
_REPLAY_MARKS: dict[str, int] = {}


def file_fields(targets: tuple[Target, ...]) -> list[tuple[str, str]]:
    """The fields a file reader reads: every target's, once (the tier refused a field
    two subscribers type differently)."""
    fields: dict[str, str] = {}
    for target in targets:
        for name, typ in target.schema:
            fields.setdefault(name, typ)
    return list(fields.items())


def _corrupt_rows(batch: pa.RecordBatch) -> int:
    if CORRUPT not in batch.schema.names:
        return 0
    col = batch.column(batch.schema.names.index(CORRUPT))
    return len(col) - col.null_count


# == out of a dataflow ========================================================================
class CameoPartition(InputPartition):
    """Rows [start, end) of one output log."""

    def __init__(self, log: str, start: int, end: int, deployment: str) -> None:
        super().__init__((log, start, end))
        self.log = log
        self.start = start
        self.end = end
        self.deployment = deployment


class CameoStreamReader(DataSourceStreamReader):
    """Offsets are the runtime's result-log offsets; commit() lets the runtime forget
    rows only after Spark committed the batch that wrote them."""

    def __init__(self, opts: ReaderOptions, columns: list[tuple[str, str]], schema: pa.Schema,
                 event_column: bool) -> None:
        self.opts = opts
        self.columns = columns
        self.schema = schema
        self.event_column = event_column

    def _available(self, offset: dict[str, Any] | None = None
                   ) -> tuple[Any, str, dict[str, tuple[int, int]]]:
        """(runtime, deployment, available offsets); `offset`: the Spark offset the caller
        works from (None: a query's start, which asks the controller afresh)."""
        expect = parse_offset(offset)[0] if offset is not None else None
        rt, _, deployment = _describe(self.opts.connection, self.opts.dataflow,
                                      client.DESCRIBE_MAX_AGE_S if offset is not None else 0,
                                      expect=expect)
        if self.opts.output == "errors":
            avail = {log: (c, e) for log, (c, e, _) in rt.error_offsets(self.opts.dataflow).items()}
        else:
            avail = rt.result_offsets(self.opts.dataflow, self.opts.sink)
        return rt, deployment, avail

    def initialOffset(self) -> dict[str, Any]:
        _, deployment, avail = self._available()
        return initial_offset(deployment, avail)

    def getDefaultReadLimit(self) -> ReadLimit:
        n = self.opts.max_rows_per_batch
        return ReadMaxRows(n) if n else ReadAllAvailable()

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        """Spark plans the next batch from `start`, the end of the last batch, which is in
        its commit log by now (a batch that was not is re-run first, without planning). So
        the rows before `start` are written and the runtime may forget them: committing
        here, not only in commit() (which Spark calls only once a batch with new data is
        planned), frees a sink the runtime holds on a full result log, which otherwise
        could wait for a commit that waits for its results."""
        rt, deployment, avail = self._available(start)
        for log, offset in self._commit(rt, start, avail, deployment).items():
            avail[log] = (offset, avail[log][1])
        begin = nothing_new(start, deployment, avail)
        if self.opts.wait_ms and self.opts.output == "results" and begin is not None:
            # Nothing new: wait for results here, so that the batch starts as they commit
            # (with Spark's default trigger) rather than at the next trigger or poll.
            # An executor of a version without the call (an upgrade under way): answer
            # at once, as with wait_ms 0.
            with contextlib.suppress(AttributeError):
                avail = rt.await_results(self.opts.dataflow, self.opts.sink, after=begin,
                                         timeout_s=self.opts.wait_ms / 1000.0)
        max_rows = limit.max_rows if isinstance(limit, ReadMaxRows) else None
        return latest_offset(start, deployment, avail, max_rows,
                             lossy=self.opts.output == "errors")

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> list[InputPartition]:
        _, _, deployment = _describe(self.opts.connection, self.opts.dataflow,
                                     expect=parse_offset(end)[0])
        if parse_offset(end)[0] != deployment:
            # A batch of a deployment that was cancelled since (re-run after a restart):
            # its unread results went with it; there is nothing left to read.
            return []
        return [CameoPartition(log, s, e, deployment)
                for log, s, e in ranges(start, end, self.opts.rows_per_partition)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if not isinstance(partition, CameoPartition):
            raise CameoSparkError(f"not a cameo partition: {partition!r}")
        name = self.opts.dataflow
        rt, _, deployment = _describe(self.opts.connection, name, expect=partition.deployment)
        if deployment != partition.deployment:
            raise CameoSparkError(f"dataflow {name!r} was redeployed while Spark read "
                                  f"{partition.log}; the query will go on with the new deployment "
                                  "after a restart")
        if self.opts.output == "results" and self.opts.columns and not self.event_column:
            batch = self._read_columns(rt, partition)
            if batch is not None:
                yield batch
                return
        if self.opts.output == "errors":
            first, rows = rt.read_errors(name, partition.log, partition.start, partition.end)
        else:
            first, rows = partition.start, rt.read_results(name, partition.log, partition.start,
                                                           partition.end)
        if first + len(rows) < partition.end and self.opts.output == "results":
            raise CameoSparkError(f"{partition.log}: expected rows {partition.start}.."
                                  f"{partition.end}, the runtime has {first}..{first + len(rows)}")
        yield results_batch(rows, first, partition.log, self.columns, self.schema,
                            event_column=self.event_column)

    def _read_columns(self, rt: Any, partition: CameoPartition) -> pa.RecordBatch | None:
        """A partition's results read as columns, or None if they must be read as rows
        (`results_columns`)."""
        try:
            table = rt.read_result_columns(self.opts.dataflow, partition.log, partition.start,
                                           partition.end)
        except ResultsNotColumnar:
            return None
        if table.num_rows < partition.end - partition.start:
            raise CameoSparkError(f"{partition.log}: expected rows {partition.start}.."
                                  f"{partition.end}, the runtime has {partition.start}.."
                                  f"{partition.start + table.num_rows}")
        return results_columns(table, partition.start, partition.log, self.columns, self.schema)

    def commit(self, end: dict[str, Any]) -> None:
        rt, deployment, avail = self._available(end)
        self._commit(rt, end, avail, deployment)

    def _commit(self, rt: Any, end: dict[str, Any], avail: dict[str, tuple[int, int]],
                deployment: str) -> dict[str, int]:
        """Let the runtime forget the rows before `end` (Spark wrote them); what it committed."""
        todo = to_commit(end, avail, deployment)
        for log, offset in todo.items():
            if self.opts.output == "errors":
                rt.commit_errors(self.opts.dataflow, log, offset)
            else:
                rt.commit_results(self.opts.dataflow, log, offset)
        return todo
