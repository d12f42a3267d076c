"""Spec-driven Spark queries: the connectors of a dataflow's spec start them.

For a dataflow whose source names a connector (format, options, schema from the source,
event-time column) and whose sink names one (format, path, checkpoint, trigger),
`SparkTier.deploy` deploys the dataflow and starts, in one SparkSession:

- per source with a connector, an *input query*:
  `spark.readStream.format(<format>)...load()` -> `format("cameo")` sink; sources that
  name one input (`cameo.input`) share one query, which feeds each of them;
- per sink with a connector, an *output query*:
  `format("cameo")` source -> `writeStream.format(<format>)`;
- for the spec's `errors` connector, an *errors query* reading the dataflow's
  error output (`output=errors`) the same way.

Connector options are Spark options, except those starting with `cameo.`,
which the tier reads itself:

| option | where | meaning |
|---|---|---|
| `cameo.batch_size` | source | events per runtime message (default 16384 as Arrow columns, 4096 as rows) |
| `cameo.landed_ms` | file source | add a `landed_ms` column: the file's modification time (ms) |
| `cameo.event_time_type` | source | `timestamp`: read the event-time column as a Spark TIMESTAMP (converted to ms) |
| `cameo.order` | source | `auto` (default): when windows or joins downstream group by the source's event time, each micro-batch is written by one task that sends its rows in event-time window order; `none`: parallel tasks, each in its own order |
| `cameo.max_rows_per_batch` | sink, errors | most result rows per Spark micro-batch |
| `cameo.wait_ms` | sink | how long a planning with no new results waits for some (default 500; 0: none): without `trigger_ms`, results go out as their checkpoint commits |
| `cameo.input` | source | a name: every source naming it is fed by one shared input query (`spark_ingest.shared`) |
| `cameo.read` | file source | `auto` (default): for Parquet and JSON lines of int, float, str and bool fields with only file-source options, Spark lists the new files and the writer reads them with pyarrow (`spark_ingest.files`), no JVM row per event; `spark`: Spark's reader; `arrow`: the writer's, refused where it cannot read as Spark would |
| `cameo.columns` | source, sink | `true` (default): events go in, and results come out, as Arrow columns where they fit the schema; `false`: as rows (for comparison) |

Checkpoints default to `<run_dir>/spark/checkpoints/<dataflow>/<in|out|errors>-<step>`,
so a restarted tier resumes where it stopped. Each holds a marker of the query it
belongs to (`spark_ingest.checkpoints`): one of another query (a name used before,
with another input) is refused at deploy, or deleted with `fresh_checkpoints=True`.

A query that dies does not pass unnoticed: `drain`, `stop`, `stop_all` and
`raise_if_failed` raise `SparkQueryFailed` (the dataflow, the query, Spark's message,
the fix) once the dataflow's other queries are stopped; `status` reports each query.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from cameo_actors.dataflow.builder import Dataflow
from cameo_actors.dataflow.spec import ConnectorSpec, DataflowSpec, SourceStep
from cameo_actors.runtime.interface import RuntimeAPI
from spark_ingest import checkpoints
from spark_ingest.exceptions import SparkQueryFailed
from spark_ingest.failures import failure_fix, spark_message, transient
from spark_ingest.files import BINARY_FILE_DDL
from spark_ingest.reading import (
    CORRUPT_COLUMN,
    FILE_FORMATS,
    KINDS,
    PERMISSIVE_FORMATS,
    connector_of,
    read_plan,
    split_options,
)
from spark_ingest.session import SparkConfig, build_session, stop_gracefully
from spark_ingest.shared import Subscriber, input_name, subscribers_option
from spark_ingest.shared_inputs import SharedInputs

log = logging.getLogger(__name__)

#: How often the supervisor looks for queries that died (s).
SUPERVISE_S = 1.0


@dataclass
class DataflowQueries:
    """The Spark queries the tier runs for one dataflow."""

    inputs: dict[str, Any] = field(default_factory=dict)   # source id -> StreamingQuery
    outputs: dict[str, Any] = field(default_factory=dict)  # sink id -> StreamingQuery
    errors: Any = None

    def all(self) -> list[Any]:
        return [*self.inputs.values(), *self.outputs.values(), *([self.errors] if self.errors else [])]

    def items(self) -> Iterator[tuple[str, str, Any]]:
        """(role, step, query) of each query: inputs, then outputs, then the errors query."""
        yield from (("input", step, q) for step, q in self.inputs.items())
        yield from (("output", step, q) for step, q in self.outputs.items())
        if self.errors is not None:
            yield ("errors", "errors", self.errors)

    def discard(self, role: str, step: str) -> None:
        """Forget a query (one that stopped)."""
        if role == "input":
            self.inputs.pop(step, None)
        elif role == "output":
            self.outputs.pop(step, None)
        else:
            self.errors = None

    def get(self, role: str, step: str) -> Any:
        """The query of `role` for `step` (None if there is none)."""
        if role == "input":
            return self.inputs.get(step)
        return self.outputs.get(step) if role == "output" else self.errors

    def put(self, role: str, step: str, query: Any) -> None:
        if role == "input":
            self.inputs[step] = query
        elif role == "output":
            self.outputs[step] = query
        else:
            self.errors = query


@dataclass(frozen=True)
class QueryState:
    """One Spark query of a dataflow, as `SparkTier.status` reports it.

    Attributes:
        dataflow: the dataflow's name.
        role: "input", "output" or "errors".
        step: the source or sink it serves ("errors" for the errors query).
        query: the Spark query's name.
        active: whether it runs.
        error: Spark's message when it stopped with an error, else None.
    """

    dataflow: str
    role: str
    step: str
    query: str
    active: bool
    error: str | None


class SparkTier:
    """Starts, drains and stops the Spark queries of dataflows, from their specs.

    Args:
        runtime: the Runtime handle of the pool the dataflows run on.
        spark: a SparkSession (default: `build_session(config)`).
        config: the tier's Spark configuration (run folder, checkpoints).
    """

    def __init__(self, runtime: RuntimeAPI, spark: Any = None, config: SparkConfig | None = None) -> None:
        self.runtime = runtime
        self.config = config or SparkConfig()
        self.spark = spark if spark is not None else build_session(self.config)
        self.queries: dict[str, DataflowQueries] = {}
        #: the queries of shared inputs (`cameo.input`) and their subscribers
        self.shared = SharedInputs(self)
        #: query name -> when the supervisor (or a drain) started it again, recently
        self._restarts: dict[str, deque[float]] = {}
        self.lock = threading.RLock()
        self._supervisor: threading.Thread | None = None
        self._closed = threading.Event()
        #: stop_all runs: a shared input's query is not started again for the others
        self.stopping_all = False
        # Default checkpoints go where the session keeps them (a given session's own setting).
        root = self.spark.conf.get("spark.sql.streaming.checkpointLocation", None) \
            if config is None else None
        self.checkpoint_root: str = root or self.config.checkpoint_root

    # -- start -------------------------------------------------------------------------------
    def deploy(self, dataflow: Dataflow | DataflowSpec | dict[str, Any], *,
               fresh_checkpoints: bool = False) -> str:
        """Deploy a dataflow on the runtime and start its Spark queries.

        Args:
            dataflow: the dataflow (builder, spec, or its dict form).
            fresh_checkpoints: delete the checkpoints the tier did not start itself (one
                of another query: a name used before, with another input or output; or one
                without a marker) and start those queries anew; the others resume.

        Raises:
            CheckpointConflict: without `fresh_checkpoints`, a checkpoint of another query
                (nothing is deployed); with it too, a file sink's log of an earlier query
                under an output path whose query starts anew.
        """
        spec = dataflow.spec if isinstance(dataflow, Dataflow) else (
            dataflow if isinstance(dataflow, DataflowSpec) else DataflowSpec.from_dict(dataflow))
        self.plan(spec, fresh_checkpoints=fresh_checkpoints)  # refuses before anything runs
        name = self.runtime.deploy(dataflow)
        try:
            self.start(name, fresh_checkpoints=fresh_checkpoints)
        except Exception:
            q = self.queries.pop(name, None)
            for role, step, query in q.items() if q else ():
                self._halt(name, role, step, query, drain=False)
            self.runtime.cancel(name)
            raise
        return name

    def start(self, name: str, *, fresh_checkpoints: bool = False) -> DataflowQueries:
        """Start the Spark queries of a running dataflow's connectors (outputs first,
        so that no result waits for its reader), each from its checkpoint (see `deploy`
        for `fresh_checkpoints`). Queries that stopped start again; running ones stay."""
        spec = DataflowSpec.from_dict(self.runtime.describe(name)["spec"])
        with self.lock:
            q = self.queries.setdefault(name, DataflowQueries())
            for role, step, query in list(q.items()):  # one that died starts again
                if not query.isActive:
                    q.discard(role, step)
            running = {(role, step) for role, step, _ in q.items()}
            plans = [(role, step, plan) for role, step, plan in
                     self.plan(spec, fresh_checkpoints=fresh_checkpoints)
                     if (role, step) not in running]
            for _, _, plan in plans:  # every check passed: make them so
                checkpoints.apply(plan)
            for role, step, plan in plans:  # outputs, the errors query, then inputs
                q.put(role, step, self._start_query(spec, role, step, plan.location))
        self._supervise()
        return q

    def _start_query(self, spec: DataflowSpec, role: str, step: str,
                     location: str | None = None) -> Any:
        """Start one query of the dataflow from its checkpoint (default: where `plan` puts it)."""
        c = connector_of(spec, role, step)
        location = location or self.checkpoint(spec.name, KINDS[role], step, c)
        if role == "input":
            src = spec.step(step)
            assert isinstance(src, SourceStep)
            shared = input_name(c)
            if shared is not None:
                return self.shared.subscribe(shared, Subscriber(spec.name, src.id), c, location)
            return self.input_query([(spec, src)], c, location, f"cameo-in-{spec.name}-{src.id}")
        return self._output_query(spec.name, step, c, "errors" if role == "errors" else "results",
                                  location)

    def plan(self, spec: DataflowSpec, *, fresh_checkpoints: bool = False
             ) -> list[tuple[str, str, checkpoints.Plan]]:
        """(role, step, checkpoint plan) of each query the spec's connectors make; raises
        `CheckpointConflict` for a checkpoint of another query (unless `fresh_checkpoints`)
        and for a file sink's log that a new checkpoint would clash with. Reads only."""
        # Kafka connectors are the runtime's own (its executors read and write the
        # topics): no Spark query.
        queries: list[tuple[str, str, str, ConnectorSpec]] = [
            ("output", "out", sink.id, sink.connector) for sink in spec.sinks
            if sink.connector is not None and sink.connector.format != "kafka"]
        if spec.errors is not None:
            queries.append(("errors", "errors", "errors", spec.errors))
        queries += [("input", "in", src.id, src.connector) for src in spec.sources
                    if src.connector is not None and src.connector.format != "kafka"]
        out = []
        for role, kind, step, c in queries:
            spark_opts, _ = split_options(c)
            shared = input_name(c) if role == "input" else None
            owner = checkpoints.Owner(spec.name, f"{kind}-{step}", c.format, spark_opts)
            if shared is not None:
                src = spec.step(step)
                assert isinstance(src, SourceStep)
                self.shared.check(shared, spec, src, c)
                owner = checkpoints.Owner(f"{checkpoints.SHARED}{shared}", f"in-{shared}",
                                          c.format, spark_opts)
                running = shared in self.shared.queries  # never reset under its subscribers
                out.append((role, step, checkpoints.check(
                    self.input_checkpoint(shared, c), owner,
                    fresh=fresh_checkpoints and not running)))
                continue
            sink_path = spark_opts.get("path") if role != "input" and c.format in FILE_FORMATS \
                else None
            out.append((role, step, checkpoints.check(
                self.checkpoint(spec.name, kind, step, c), owner, fresh=fresh_checkpoints,
                sink_path=sink_path)))
        return out

    def _cameo_options(self) -> dict[str, str]:
        return {"address": self.runtime.address, "pool": self.runtime.pool,
                "ray_auth": os.environ.get("RAY_AUTH_MODE", "auto")}

    def checkpoint(self, name: str, kind: str, step: str, connector: ConnectorSpec) -> str:
        shared = input_name(connector) if kind == "in" else None
        if shared is not None:
            return self.input_checkpoint(shared, connector)
        return connector.checkpoint or os.path.join(self.checkpoint_root, name, f"{kind}-{step}")

    def track(self, name: str, source: str, query: Any) -> None:
        """`query` feeds the source `source` of dataflow `name` (a shared input's, which
        may start it for a dataflow not started here yet): drained, stopped, reported."""
        with self.lock:
            self.queries.setdefault(name, DataflowQueries()).inputs[source] = query

    def input_checkpoint(self, shared: str, connector: ConnectorSpec) -> str:
        """The checkpoint of the shared input `shared`'s query (by default
        `<root>/inputs/<name>`: the input's, not any subscriber's)."""
        return connector.checkpoint or os.path.join(self.checkpoint_root, "inputs", shared)

    def input_query(self, feeds: list[tuple[DataflowSpec, SourceStep]], c: ConnectorSpec,
                     checkpoint: str, query_name: str) -> Any:
        """Start an input query that reads `c` and feeds each (dataflow, source) of `feeds`."""
        from pyspark.sql import functions as F

        spark_opts, tier = split_options(c)
        plan = read_plan(feeds, c)
        landed = tier.get("landed_ms", "false").lower() == "true" and c.format in FILE_FORMATS
        if plan.read == "arrow":
            # Spark lists the new files and hands each over whole; the writer reads it.
            df = (self.spark.readStream.format("binaryFile").options(**spark_opts)
                  .schema(BINARY_FILE_DDL).load())
            df = df.select("path", "content", *(
                [F.unix_millis(F.col("modificationTime")).alias("landed_ms")] if landed else []))
        else:
            reader = self.spark.readStream.format(c.format).options(**spark_opts)
            if c.format in PERMISSIVE_FORMATS:
                reader = reader.option("mode", "PERMISSIVE").option("columnNameOfCorruptRecord",
                                                                    CORRUPT_COLUMN)
            if plan.ddl is not None:
                reader = reader.schema(plan.ddl)
            df = reader.load()
            if landed:
                df = df.withColumn("landed_ms",
                                   F.unix_millis(F.col("_metadata.file_modification_time")))
        if plan.in_order:
            # Spark runs a micro-batch's files as parallel tasks in no particular order; the
            # source's watermark follows the largest event time it has seen, so events of an
            # earlier file arriving after a later one would be late. One task, whose writer
            # sends the batch's rows in event-time window order (streaming cannot sort).
            df = df.coalesce(1)
        writer = (df.writeStream.format("cameo").options(**self._cameo_options())
                  .option("subscribers", subscribers_option(
                      [Subscriber(spec.name, step.id) for spec, step in feeds]))
                  .option("checkpointLocation", checkpoint)
                  .queryName(query_name))
        for key in ("batch_size", "columns"):
            if key in tier:
                writer = writer.option(key, tier[key])
        if plan.in_order:
            writer = writer.option("order_task", "true")
        if plan.read == "arrow":
            writer = writer.option("files", c.format)
        if c.trigger_ms:
            writer = writer.trigger(processingTime=f"{c.trigger_ms} milliseconds")
        return writer.start()

    def _output_query(self, name: str, step: str, c: ConnectorSpec, output: str,
                      checkpoint: str) -> Any:
        spark_opts, tier = split_options(c)
        reader = (self.spark.readStream.format("cameo").options(**self._cameo_options())
                  .option("dataflow", name).option("output", output))
        if output == "results":
            reader = reader.option("sink", step)
        for key in ("max_rows_per_batch", "columns", "wait_ms"):
            if key in tier:
                reader = reader.option(key, tier[key])
        kind = "out" if output == "results" else "errors"
        writer = (reader.load().writeStream.format(c.format).options(**spark_opts)
                  .option("checkpointLocation", checkpoint)
                  .queryName(f"cameo-{kind}-{name}-{step}"))
        if c.trigger_ms:
            writer = writer.trigger(processingTime=f"{c.trigger_ms} milliseconds")
        return writer.start()

    # -- drain and stop --------------------------------------------------------------------
    def drain(self, name: str, *, close: bool = False, timeout_s: float = 120.0) -> None:
        """Process every input file that landed, then every result, and stop the queries.

        Inputs first (processAllAvailable, then stop between batches); with `close`,
        the dataflow's sources end (every window fires); then the runtime works off
        its queues and the output queries write everything out before they stop. A
        query that dies for a transient reason meanwhile is started again from its
        checkpoint and drained again (see `SparkConfig.restarts`).

        Raises:
            SparkQueryFailed: a query of the dataflow died (before or while draining).
                An input that died leaves the dataflow open (closing it would fire its
                windows on part of the input and write them out as complete): the other
                queries are stopped between micro-batches, and `start` resumes them all
                from their checkpoints once the cause is fixed.
        """
        q = self.queries.get(name)
        if q is None:
            return
        failed = [f for step in list(q.inputs)
                  if (f := self._drained(name, "input", step, drain=True, timeout_s=timeout_s))]
        failed += [f for role, step, _ in list(q.items()) if role != "input"
                   and (f := self._failed_for_good(name, role, step))]
        if not failed:
            if close:
                self.runtime.close(name)
            try:
                self.runtime.wait_idle(timeout_s, dataflows=[name])
            except TimeoutError:  # results a dead output query will never read?
                failed = [f for role, step, _ in list(q.items())
                          if (f := self._failed_for_good(name, role, step))]
                if not failed:
                    raise
        write_out, known = not failed, {f.query for f in failed}
        for role, step, query in list(q.items()):
            if role != "input" and query.name not in known:
                failure = self._drained(name, role, step, drain=write_out, timeout_s=timeout_s)
                if failure is not None:
                    failed.append(failure)
        with self.lock:
            self.queries.pop(name, None)
        _raise_first(failed)

    def _drained(self, name: str, role: str, step: str, *, drain: bool,
                 timeout_s: float) -> SparkQueryFailed | None:
        """Stop a query between micro-batches (after processing what is available, if
        `drain`); one that dies meanwhile for a transient reason is started again and
        drained again. Its failure, if it failed for good."""
        while True:
            query = self.queries[name].get(role, step)
            failure = self._halt(name, role, step, query, drain=drain, timeout_s=timeout_s)
            if failure is None or not self._restart(name, role, step, query, failure):
                return failure

    def _failed_for_good(self, name: str, role: str, step: str) -> SparkQueryFailed | None:
        """A query's failure, unless it was transient and the query started again."""
        query = self.queries[name].get(role, step)
        failure = self._failure(name, role, step, query)
        if failure is not None and self._restart(name, role, step, query, failure):
            return None
        return failure

    def _restart(self, name: str, role: str, step: str, dead: Any,
                 failure: SparkQueryFailed) -> bool:
        """Start query `dead` again from its checkpoint if it failed for a transient
        reason and its restarts allow (`SparkConfig.restarts` within `restart_window_s`);
        whether it runs again (also when another thread restarted it first)."""
        with self.lock:
            q = self.queries.get(name)
            if q is None:
                return False
            if q.get(role, step) is not dead:  # restarted meanwhile (the supervisor)
                return True
            if not transient(failure.spark_message):
                return False
            now = time.monotonic()
            times = self._restarts.setdefault(failure.query, deque())
            while times and now - times[0] > self.config.restart_window_s:
                times.popleft()
            if len(times) >= self.config.restarts:
                return False
            times.append(now)
            log.warning("the %s query %r of %s died for a transient reason (%s); started "
                        "again from its checkpoint (%d of %d restarts in %g s)", role,
                        failure.query, name, failure.spark_message[:200], len(times),
                        self.config.restarts, self.config.restart_window_s)
            spec = DataflowSpec.from_dict(self.runtime.describe(name)["spec"])
            q.put(role, step, self._start_query(spec, role, step))
            return True

    def _supervise(self) -> None:
        """Make sure the supervisor runs: a thread that starts again, every
        `SUPERVISE_S`, the queries that died for a transient reason (it ends when the
        tier has no queries left)."""
        with self.lock:
            if self._supervisor is None or not self._supervisor.is_alive():
                self._closed.clear()
                self._supervisor = threading.Thread(target=self._watch, daemon=True,
                                                    name="cameo-spark-supervisor")
                self._supervisor.start()

    def _watch(self) -> None:
        while not self._closed.wait(SUPERVISE_S):
            with self.lock:
                watched = [(name, role, step, query) for name, q in self.queries.items()
                           for role, step, query in q.items()]
            if not watched:
                return
            for name, role, step, query in watched:
                try:
                    failure = self._failure(name, role, step, query)
                    if failure is not None:
                        self._restart(name, role, step, query, failure)
                except Exception:  # a bug here must not stop the watch; drain reports failures
                    log.exception("the Spark tier's supervisor failed on %s", name)

    def stop(self, name: str, *, drain: bool = False) -> None:
        """Stop a dataflow's queries between micro-batches (draining first if asked).

        Raises:
            SparkQueryFailed: a query of the dataflow had died (the others are stopped).
        """
        with self.lock:
            q = self.queries.pop(name, None)
        failed = [f for role, step, query in (q.items() if q else ())
                  if (f := self._halt(name, role, step, query, drain=drain))]
        _raise_first(failed)

    def cancel(self, name: str) -> dict[str, Any]:
        """Stop the dataflow's queries (between micro-batches), then cancel it. The messages
        of queries that had died are in the answer's "spark_failures" (and logged)."""
        q = self.queries.pop(name, None)
        failed = [f for role, step, query in (q.items() if q else ())
                  if (f := self._halt(name, role, step, query, drain=False))]
        answer = dict(self.runtime.cancel(name))
        if failed:
            for f in failed:
                log.warning("cancelled %s: %s", name, f)
            answer["spark_failures"] = [str(f) for f in failed]
        return answer

    def stop_all(self) -> None:
        """Stop every dataflow's queries (and the supervisor); raise the first failure
        once all are stopped."""
        self._closed.set()
        failed: list[SparkQueryFailed] = []
        self.stopping_all = True
        try:
            for name in list(self.queries):
                try:
                    self.stop(name)
                except SparkQueryFailed as e:
                    failed.append(e)
        finally:
            self.stopping_all = False
        if failed:
            raise failed[0]

    def raise_if_failed(self) -> None:
        """Raise `SparkQueryFailed` for the first query of the tier that stopped with an
        error for good (one that died for a transient reason starts again instead; the
        others stay as they are)."""
        for name, q in list(self.queries.items()):
            for role, step, _ in list(q.items()):
                failure = self._failed_for_good(name, role, step)
                if failure is not None:
                    raise failure

    def status(self, name: str) -> list[QueryState]:
        """The state of each Spark query the tier runs for a dataflow ([] if none)."""
        q = self.queries.get(name)
        return [QueryState(name, role, step, str(query.name), bool(query.isActive),
                           failure.spark_message if (failure := self._failure(
                               name, role, step, query)) else None)
                for role, step, query in (q.items() if q else ())]

    def _halt(self, name: str, role: str, step: str, query: Any, *, drain: bool,
              timeout_s: float = 120.0) -> SparkQueryFailed | None:
        """Stop a query between micro-batches; its failure, if it died (before or meanwhile).
        A shared input's query then starts again for its other subscribers."""
        try:
            stop_gracefully(query, drain=drain, timeout_s=timeout_s)
        except Exception as e:
            from pyspark.errors import StreamingQueryException

            if not isinstance(e, StreamingQueryException):
                raise
            query.stop()  # it died while processing what was available: exception() has it
        failure = self._failure(name, role, step, query)
        if role == "input":  # a shared input goes on for the others (a fault recurs there)
            self.shared.leave(name, step)
        return failure

    def _failure(self, name: str, role: str, step: str, query: Any) -> SparkQueryFailed | None:
        exc = query.exception()
        if exc is None:
            return None
        message = spark_message(str(exc))
        return SparkQueryFailed(name, str(query.name), role, step, message,
                                failure_fix(message, name, self.checkpoint_root, KINDS[role], step))


def _raise_first(failed: list[SparkQueryFailed]) -> None:
    if failed:
        first = failed[0]
        raise SparkQueryFailed(first.dataflow, first.query, first.role, first.step,
                               first.spark_message, first.fix, tuple(f.query for f in failed[1:]))
