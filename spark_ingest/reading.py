"""What an input query reads, and whom a query serves: the tier's pure planning.

Pure: no Spark, no Ray (`SparkTier` and `SharedInputs` start the queries).
"""

from __future__ import annotations

from typing import NamedTuple

from cameo_actors.dataflow.spec import ConnectorSpec, DataflowSpec, SourceStep
from spark_ingest.batching import bucket_ms
from spark_ingest.files import read_mode
from spark_ingest.schema import input_spark_type
from spark_ingest.shared import ShareConflict

FILE_FORMATS = ("json", "csv", "parquet", "orc", "text", "avro")
#: Formats whose PERMISSIVE mode keeps unparsable records in a corrupt-record column.
PERMISSIVE_FORMATS = ("json", "csv")
CORRUPT_COLUMN = "_corrupt_record"


def split_options(connector: ConnectorSpec) -> tuple[dict[str, str], dict[str, str]]:
    """(Spark options, tier options without the `cameo.` prefix) of a connector."""
    spark, tier = {}, {}
    for key, value in connector.options:
        if key.startswith("cameo."):
            tier[key[len("cameo."):]] = value
        else:
            spark[key] = value
    return spark, tier


def input_ddl(steps: SourceStep | list[SourceStep], connector: ConnectorSpec) -> str:
    """The schema an input query reads with: the sources' fields (a shared input's
    subscribers' together), the event-time column as TIMESTAMP when asked, and the
    corrupt-record column for JSON/CSV.

    Raises:
        ShareConflict: two subscribers of a shared input read a field as different types.
    """
    _, tier = split_options(connector)
    types: dict[str, tuple[str, str]] = {}  # field -> (Spark type, the source that says so)
    for step in steps if isinstance(steps, list) else [steps]:
        for name, typ in step.schema:
            # `any` from JSON: VARIANT, so a number stays a number (see schema.VARIANT_FORMATS)
            spark_type = input_spark_type(typ, connector.format)
            if name == step.event_time and tier.get("event_time_type") == "timestamp":
                spark_type = "TIMESTAMP"
            seen = types.setdefault(name, (spark_type, step.id))
            if seen[0] != spark_type:
                raise ShareConflict(tier.get("input"), f"field {name!r} as source {seen[1]!r} "
                                    f"reads it: {seen[0]}", f"{spark_type} (source {step.id!r})",
                                    "declare the field with one type in every subscriber")
    cols = [f"`{name}` {spark_type}" for name, (spark_type, _) in types.items()]
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


class ReadPlan(NamedTuple):
    """How an input query reads its connector.

    Attributes:
        ddl: the schema Spark reads with (None where the format takes none).
        in_order: one task sends each micro-batch in event-time order.
        read: "arrow": Spark lists the files and the writer reads them
            (`spark_ingest.files`); "spark": Spark reads the events.
    """

    ddl: str | None
    in_order: bool
    read: str = "spark"


def read_plan(feeds: list[tuple[DataflowSpec, SourceStep]], c: ConnectorSpec) -> ReadPlan:
    """How an input query that feeds `feeds` reads `c`. Raises what a subscriber's
    options or fields make impossible (`ShareConflict`, an unknown `cameo.order` or
    `cameo.read`, `cameo.read=arrow` where Spark must read)."""
    ddl = input_ddl([step for _, step in feeds], c) \
        if c.format in FILE_FORMATS or c.format in PERMISSIVE_FORMATS else None
    in_order = False
    for spec, step in feeds:  # every subscriber's own cameo.order checked
        in_order |= ordered(spec, step, split_options(connector_of(spec, "input", step.id))[1])
    spark_opts, tier = split_options(c)
    asked = tier.get("read", "auto")
    read, why = read_mode(asked, c.format, spark_opts,
                          [field for _, step in feeds for field in step.schema],
                          typed_time=tier.get("event_time_type") == "timestamp")
    if asked.lower() == "arrow" and read != "arrow":
        raise ValueError(f"connector option cameo.read=arrow: the writer cannot read this input "
                         f"as Spark would: {why}. Fix: leave cameo.read out (auto) or set spark")
    return ReadPlan(ddl, in_order, read)


#: The checkpoint folder's prefix of each role's query ("<kind>-<step>").
KINDS = {"input": "in", "output": "out", "errors": "errors"}


def connector_of(spec: DataflowSpec, role: str, step: str) -> ConnectorSpec:
    """The connector a query of `role` for `step` serves."""
    c = spec.errors if role == "errors" else getattr(spec.step(step), "connector", None)
    if c is None:
        raise ValueError(f"dataflow {spec.name!r}: no connector for the {role} of {step!r}")
    return c


