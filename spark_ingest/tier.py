"""Spec-driven Spark queries: the connectors of a dataflow's spec start them.

For a dataflow whose source names a connector (format, options, schema from
the source, event-time column) and whose sink names one (format, path,
checkpoint, trigger), `SparkTier.deploy` deploys the dataflow and starts, in
one SparkSession:

- per source with a connector, an *input query*:
  `spark.readStream.format(<format>)...load()` -> `format("cameo")` sink;
- per sink with a connector, an *output query*:
  `format("cameo")` source -> `writeStream.format(<format>)`;
- for the spec's `errors` connector, an *errors query* reading the dataflow's
  error output (`output=errors`) the same way.

Connector options are Spark options, except those starting with `cameo.`,
which the tier reads itself:

| option | where | meaning |
|---|---|---|
| `cameo.batch_size` | source | events per runtime message (default 4096) |
| `cameo.landed_ms` | file source | add a `landed_ms` column: the file's modification time (ms) |
| `cameo.event_time_type` | source | `timestamp`: read the event-time column as a Spark TIMESTAMP (converted to ms) |
| `cameo.order` | source | `auto` (default): when windows or joins downstream group by the source's event time, each micro-batch is written by one task that sends its rows in event-time window order; `none`: parallel tasks, each in its own order |
| `cameo.max_rows_per_batch` | sink, errors | most result rows per Spark micro-batch |

Checkpoints default to `<run_dir>/spark/checkpoints/<dataflow>/<in|out|errors>-<step>`,
so a restarted tier resumes where it stopped.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from cameo_actors.dataflow.builder import Dataflow
from cameo_actors.dataflow.spec import ConnectorSpec, DataflowSpec, SourceStep
from cameo_actors.runtime.boundary import RuntimeLike
from spark_ingest.batching import bucket_ms
from spark_ingest.schema import SPARK_TYPES
from spark_ingest.session import SparkConfig, build_session, stop_gracefully

FILE_FORMATS = ("json", "csv", "parquet", "orc", "text", "avro")
#: Formats whose PERMISSIVE mode keeps unparsable records in a corrupt-record column.
PERMISSIVE_FORMATS = ("json", "csv")
CORRUPT_COLUMN = "_corrupt_record"


@dataclass
class DataflowQueries:
    """The Spark queries the tier runs for one dataflow."""

    inputs: dict[str, Any] = field(default_factory=dict)   # source id -> StreamingQuery
    outputs: dict[str, Any] = field(default_factory=dict)  # sink id -> StreamingQuery
    errors: Any = None

    def all(self) -> list[Any]:
        return [*self.inputs.values(), *self.outputs.values(), *([self.errors] if self.errors else [])]


def split_options(connector: ConnectorSpec) -> tuple[dict[str, str], dict[str, str]]:
    """(Spark options, tier options without the `cameo.` prefix) of a connector."""
    spark, tier = {}, {}
    for key, value in connector.options:
        if key.startswith("cameo."):
            tier[key[len("cameo."):]] = value
        else:
            spark[key] = value
    return spark, tier


def input_ddl(step: SourceStep, connector: ConnectorSpec) -> str:
    """The schema an input query reads with: the source's fields, the event-time
    column as TIMESTAMP when asked, and the corrupt-record column for JSON/CSV."""
    _, tier = split_options(connector)
    cols = []
    for name, typ in step.schema:
        spark_type = SPARK_TYPES[typ]
        if name == step.event_time and tier.get("event_time_type") == "timestamp":
            spark_type = "TIMESTAMP"
        cols.append(f"`{name}` {spark_type}")
    if connector.format in PERMISSIVE_FORMATS:
        cols.append(f"`{CORRUPT_COLUMN}` STRING")
    return ", ".join(cols)


def ordered(spec: DataflowSpec, step: SourceStep, tier: dict[str, str]) -> bool:
    """Whether an input query sends each micro-batch as one task sorted by event time."""
    mode = tier.get("order", "auto").lower()
    if mode not in ("auto", "none"):
        raise ValueError(f"source {step.id!r}: connector option cameo.order: expected 'auto' or "
                         f"'none', got {mode!r}")
    return mode == "auto" and step.event_time is not None and bucket_ms(spec, step.id) is not None


class SparkTier:
    """Starts, drains and stops the Spark queries of dataflows, from their specs.

    Args:
        runtime: the Runtime handle of the pool the dataflows run on.
        spark: a SparkSession (default: `build_session(config)`).
        config: the tier's Spark configuration (run folder, checkpoints).
    """

    def __init__(self, runtime: RuntimeLike, spark: Any = None, config: SparkConfig | None = None) -> None:
        self.runtime = runtime
        self.config = config or SparkConfig()
        self.spark = spark if spark is not None else build_session(self.config)
        self.queries: dict[str, DataflowQueries] = {}
        # Default checkpoints go where the session keeps them (a given session's own setting).
        root = self.spark.conf.get("spark.sql.streaming.checkpointLocation", None) \
            if config is None else None
        self.checkpoint_root: str = root or self.config.checkpoint_root

    # -- start -------------------------------------------------------------------------------
    def deploy(self, dataflow: Dataflow | DataflowSpec | dict[str, Any]) -> str:
        """Deploy a dataflow on the runtime and start its Spark queries."""
        name = self.runtime.deploy(dataflow)
        try:
            self.start(name)
        except Exception:
            self.stop(name, drain=False)
            self.runtime.cancel(name)
            raise
        return name

    def start(self, name: str) -> DataflowQueries:
        """Start the Spark queries of a running dataflow's connectors (outputs first,
        so that no result waits for its reader)."""
        spec = DataflowSpec.from_dict(self.runtime.describe(name)["spec"])
        q = self.queries.setdefault(name, DataflowQueries())
        for sink in spec.sinks:
            if sink.connector is not None and sink.id not in q.outputs:
                q.outputs[sink.id] = self._output_query(name, sink.id, sink.connector, "results")
        if spec.errors is not None and q.errors is None:
            q.errors = self._output_query(name, "errors", spec.errors, "errors")
        for src in spec.sources:
            if src.connector is not None and src.id not in q.inputs:
                q.inputs[src.id] = self._input_query(name, src, src.connector)
        return q

    def _cameo_options(self) -> dict[str, str]:
        return {"address": self.runtime.address, "pool": self.runtime.pool,
                "ray_auth": os.environ.get("RAY_AUTH_MODE", "auto")}

    def checkpoint(self, name: str, kind: str, step: str, connector: ConnectorSpec) -> str:
        return connector.checkpoint or os.path.join(self.checkpoint_root, name, f"{kind}-{step}")

    def _input_query(self, name: str, step: SourceStep, c: ConnectorSpec) -> Any:
        from pyspark.sql import functions as F

        spark_opts, tier = split_options(c)
        reader = self.spark.readStream.format(c.format).options(**spark_opts)
        if c.format in PERMISSIVE_FORMATS:
            reader = reader.option("mode", "PERMISSIVE").option("columnNameOfCorruptRecord",
                                                                CORRUPT_COLUMN)
        if c.format in FILE_FORMATS or c.format in PERMISSIVE_FORMATS:
            reader = reader.schema(input_ddl(step, c))
        df = reader.load()
        spec = DataflowSpec.from_dict(self.runtime.describe(name)["spec"])
        if ordered(spec, step, tier):
            # Spark runs a micro-batch's files as parallel tasks in no particular order; the
            # source's watermark follows the largest event time it has seen, so events of an
            # earlier file arriving after a later one would be late. One task, whose writer
            # sends the batch's rows in event-time window order (streaming cannot sort).
            df = df.coalesce(1)
        if tier.get("landed_ms", "false").lower() == "true" and c.format in FILE_FORMATS:
            df = df.withColumn("landed_ms",
                               F.unix_millis(F.col("_metadata.file_modification_time")))
        writer = (df.writeStream.format("cameo").options(**self._cameo_options())
                  .option("dataflow", name).option("source", step.id)
                  .option("checkpointLocation", self.checkpoint(name, "in", step.id, c))
                  .queryName(f"cameo-in-{name}-{step.id}"))
        if "batch_size" in tier:
            writer = writer.option("batch_size", tier["batch_size"])
        if ordered(spec, step, tier):
            writer = writer.option("order_task", "true")
        if c.trigger_ms:
            writer = writer.trigger(processingTime=f"{c.trigger_ms} milliseconds")
        return writer.start()

    def _output_query(self, name: str, step: str, c: ConnectorSpec, output: str) -> Any:
        spark_opts, tier = split_options(c)
        reader = (self.spark.readStream.format("cameo").options(**self._cameo_options())
                  .option("dataflow", name).option("output", output))
        if output == "results":
            reader = reader.option("sink", step)
        if "max_rows_per_batch" in tier:
            reader = reader.option("max_rows_per_batch", tier["max_rows_per_batch"])
        kind = "out" if output == "results" else "errors"
        writer = (reader.load().writeStream.format(c.format).options(**spark_opts)
                  .option("checkpointLocation", self.checkpoint(name, kind, step, c))
                  .queryName(f"cameo-{kind}-{name}-{step}"))
        if c.trigger_ms:
            writer = writer.trigger(processingTime=f"{c.trigger_ms} milliseconds")
        return writer.start()

    # -- drain and stop --------------------------------------------------------------------
    def drain(self, name: str, *, close: bool = False, timeout_s: float = 120.0) -> None:
        """Process every input file that landed, then every result, and stop the queries.

        Inputs first (processAllAvailable, then stop between batches); with `close`,
        the dataflow's sources end (every window fires); then the runtime works off
        its queues and the output queries write everything out before they stop.
        """
        q = self.queries.get(name)
        if q is None:
            return
        for query in q.inputs.values():
            stop_gracefully(query, timeout_s=timeout_s)
        if close:
            self.runtime.close(name)
        self.runtime.wait_idle(timeout_s)
        for query in [*q.outputs.values(), *([q.errors] if q.errors else [])]:
            stop_gracefully(query, timeout_s=timeout_s)
        self.queries.pop(name, None)

    def stop(self, name: str, *, drain: bool = False) -> None:
        """Stop a dataflow's queries between micro-batches (draining first if asked)."""
        q = self.queries.pop(name, None)
        for query in q.all() if q else []:
            stop_gracefully(query, drain=drain)

    def cancel(self, name: str) -> dict[str, Any]:
        """Stop the dataflow's queries (between micro-batches), then cancel it."""
        self.stop(name)
        return dict(self.runtime.cancel(name))

    def stop_all(self) -> None:
        for name in list(self.queries):
            self.stop(name)

    def raise_if_failed(self) -> None:
        """Raise the first error a query of the tier stopped with."""
        for name, q in self.queries.items():
            for query in q.all():
                exc = query.exception()
                if exc is not None:
                    raise RuntimeError(f"Spark query {query.name!r} of dataflow {name!r} failed: "
                                       f"{exc}") from None
