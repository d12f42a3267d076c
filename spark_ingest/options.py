"""The options of the `cameo` Spark source and sink, parsed and checked once.

Spark hands options over as a case-insensitive map of strings; these frozen
dataclasses are what the rest of the tier reads. Pure: no Spark, no Ray.

>>> WriterOptions.parse({"dataflow": "errors", "address": "127.0.0.1:6379"}).batch_size
16384
>>> ReaderOptions.parse({"dataflow": "errors"})
Traceback (most recent call last):
...
spark_ingest.exceptions.OptionError: cameo option 'address': expected the Ray GCS address of the cluster running the pool ("host:port"), got None. Fix: .option("address", runtime.address) (Runtime.address of the running pool)
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from spark_ingest.exceptions import OptionError
from spark_ingest.files import FORMATS as FILE_READER_FORMATS

#: Default events per runtime message (one Ray call each): of rows, and of Arrow columns.
#: A message of columns costs the writer, Ray and the executor about the same whatever its
#: rows, so it is larger (4x the events in, `bench.spark_throughput --batch-size`); the
#: executor cuts it again by its measured cost, so no step outlasts the quantum.
DEFAULT_BATCH_SIZE = 4096
DEFAULT_COLUMNS_BATCH_SIZE = 16384
RAY_AUTH_MODES = ("auto", "token", "disabled")
#: How long a reader's planning waits for new results (ReaderOptions.wait_ms): an idle
#: output query asks twice a second, and Spark's stop waits for it at most that long.
DEFAULT_WAIT_MS = 500
MAX_WAIT_MS = 5000
OUTPUTS = ("results", "errors")
_TRUE = ("true", "1", "yes")
_FALSE = ("false", "0", "no")


def _lower(options: Mapping[str, str]) -> dict[str, str]:
    return {str(k).lower(): str(v) for k, v in options.items() if v is not None}


def _required(opts: dict[str, str], key: str, expected: str, fix: str) -> str:
    value = opts.get(key)
    if not value:
        raise OptionError(key, expected, value, fix)
    return value


def _dataflow(opts: dict[str, str]) -> str:
    return _required(opts, "dataflow", "the name of a running dataflow",
                     '.option("dataflow", "<name>") naming a deployed dataflow')


def _int(opts: dict[str, str], key: str, default: int | None, minimum: int) -> int | None:
    raw = opts.get(key)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        value = None
    if value is None or value < minimum:
        raise OptionError(key, f"an integer >= {minimum}", raw, f'e.g. .option("{key}", {max(minimum, 1000)})')
    return value


def _bool(opts: dict[str, str], key: str, default: bool) -> bool:
    raw = opts.get(key)
    if raw is None:
        return default
    if raw.lower() in _TRUE:
        return True
    if raw.lower() in _FALSE:
        return False
    raise OptionError(key, "true or false", raw, f'.option("{key}", "true")')


@dataclass(frozen=True)
class Connection:
    """How a Spark Python worker reaches the runtime."""

    address: str
    pool: str = "default"
    ray_auth: str = "auto"

    @classmethod
    def parse(cls, opts: dict[str, str]) -> Connection:
        address = _required(opts, "address",
                            'the Ray GCS address of the cluster running the pool ("host:port")',
                            '.option("address", runtime.address) (Runtime.address of the running pool)')
        if address not in ("auto",) and not address.startswith("ray://"):
            host, _, port = address.rpartition(":")
            if not host or not port.isdigit():
                raise OptionError("address", 'a Ray GCS address "host:port"', address,
                                  "pass Runtime.address of the running pool, e.g. 127.0.0.1:6379")
        auth = opts.get("ray_auth", "auto").lower()
        if auth not in RAY_AUTH_MODES:
            raise OptionError("ray_auth", f"one of {RAY_AUTH_MODES}", auth,
                              "leave it unset (auto) or mirror the cluster's RAY_AUTH_MODE")
        return cls(address=address, pool=opts.get("pool") or "default", ray_auth=auth)


@dataclass(frozen=True)
class WriterOptions:
    """`df.writeStream.format("cameo")` options.

    Attributes:
        dataflow: the running dataflow to feed.
        source: its source step (default: its only source).
        targets: every (dataflow, source) fed: the one above, or those of the option
            `subscribers` ("dataflow:source,...": a shared input, `spark_ingest.shared`),
            each pushed its own columns of every row.
        batch_size: most events per runtime message (default: DEFAULT_BATCH_SIZE for
            rows, DEFAULT_COLUMNS_BATCH_SIZE for columns).
        corrupt_column: the column Spark's PERMISSIVE readers put unparsable records in;
            such rows go to the dataflow's error output.
        skip_replayed: skip a Spark batch the runtime already marked as received
            (a batch replayed after a restart).
        order_task: buffer a task's rows and send all of them in event-time window
            order (default: each Arrow batch on its own); with `coalesce(1)` upstream,
            the whole micro-batch goes out in order.
        columns: push a span as Arrow columns where it fits the source's schema (false:
            as rows, one dict per event: the comparison `bench.spark_throughput` makes).
        files: the rows are files of this format (parquet, json) from Spark's `binaryFile`
            source, which the writer reads itself (`spark_ingest.files`); None: the rows
            are the events.
    """

    connection: Connection
    dataflow: str
    source: str | None = None
    batch_size: int = DEFAULT_BATCH_SIZE
    corrupt_column: str = "_corrupt_record"
    skip_replayed: bool = True
    order_task: bool = False
    columns: bool = True
    targets: tuple[tuple[str, str | None], ...] = ()
    files: str | None = None

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> WriterOptions:
        opts = _lower(options)
        targets = _subscribers(opts.get("subscribers"))
        dataflow = targets[0][0] if targets else _dataflow(opts)
        source = targets[0][1] if targets else opts.get("source") or None
        columns = _bool(opts, "columns", True)
        default = DEFAULT_COLUMNS_BATCH_SIZE if columns else DEFAULT_BATCH_SIZE
        return cls(connection=Connection.parse(opts), dataflow=dataflow, source=source,
                   targets=targets or ((dataflow, source),),
                   batch_size=_int(opts, "batch_size", default, 1) or default,
                   corrupt_column=opts.get("corrupt_column", "_corrupt_record"),
                   skip_replayed=_bool(opts, "skip_replayed", True),
                   order_task=_bool(opts, "order_task", False),
                   columns=columns, files=_files(opts.get("files")))


def _files(raw: str | None) -> str | None:
    if raw is None:
        return None
    if raw.lower() not in FILE_READER_FORMATS:
        raise OptionError("files", f"one of {FILE_READER_FORMATS}", raw,
                          '.option("files", "parquet"), or leave it out: rows are the events')
    return raw.lower()


def _subscribers(raw: str | None) -> tuple[tuple[str, str | None], ...]:
    """The writer's `subscribers` option: "dataflow:source,..." -> ((dataflow, source), ...).

    >>> _subscribers("alerts:logs,bulk:metrics")
    (('alerts', 'logs'), ('bulk', 'metrics'))
    """
    if not raw:
        return ()
    pairs = [part.strip().split(":") for part in raw.split(",")]
    if any(len(p) != 2 or not all(p) for p in pairs):
        raise OptionError("subscribers", '"dataflow:source" pairs separated by commas', raw,
                          '.option("subscribers", "alerts:logs,bulk:metrics")')
    return tuple((d, src) for d, src in pairs)


@dataclass(frozen=True)
class ReaderOptions:
    """`spark.readStream.format("cameo")` options.

    Attributes:
        dataflow: the running dataflow to read.
        output: "results" (its sinks' results) or "errors" (its error output).
        sink: read only this sink (default: every sink).
        max_rows_per_batch: most rows per Spark micro-batch (default: all available).
        rows_per_partition: a log's rows per Spark task (larger ranges are split).
        include_metadata: add the _log, _offset, _ingest_ms and _egress_ms columns.
        columns: read results as Arrow columns where their types need no per-value
            coercion (false: as rows).
        wait_ms: when no result is readable past the last micro-batch, how long Spark's
            next planning (`latestOffset`) waits for one (0: it answers at once). With
            Spark's default trigger, a micro-batch then starts as soon as results commit.
    """

    connection: Connection
    dataflow: str
    output: str = "results"
    sink: str | None = None
    max_rows_per_batch: int | None = None
    rows_per_partition: int = 100_000
    include_metadata: bool = True
    columns: bool = True
    wait_ms: int = DEFAULT_WAIT_MS

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> ReaderOptions:
        opts = _lower(options)
        dataflow = _dataflow(opts)
        output = opts.get("output", "results").lower()
        if output not in OUTPUTS:
            raise OptionError("output", f"one of {OUTPUTS}", output,
                              '.option("output", "results") or .option("output", "errors")')
        sink = opts.get("sink") or None
        if sink is not None and output == "errors":
            raise OptionError("sink", "no sink with output 'errors' (errors are per dataflow)", sink,
                              'remove .option("sink", ...) or read output "results"')
        wait_ms = _int(opts, "wait_ms", DEFAULT_WAIT_MS, 0) or 0
        if wait_ms > MAX_WAIT_MS:  # a wait holds a runtime thread, and Spark's stop
            raise OptionError("wait_ms", f"at most {MAX_WAIT_MS} ms", str(wait_ms),
                              f'.option("wait_ms", {DEFAULT_WAIT_MS}), or 0 not to wait')
        return cls(connection=Connection.parse(opts), dataflow=dataflow, output=output, sink=sink,
                   max_rows_per_batch=_int(opts, "max_rows_per_batch", None, 1),
                   rows_per_partition=_int(opts, "rows_per_partition", 100_000, 1) or 100_000,
                   include_metadata=_bool(opts, "include_metadata", True),
                   columns=_bool(opts, "columns", True),
                   wait_ms=wait_ms)
