"""The Spark tier: Spark Structured Streaming feeds dataflows and persists their results.

    from spark_ingest import SparkConfig, SparkTier, build_session
    spark = build_session(SparkConfig())          # local[*], UI off, files under .run/spark
    tier = SparkTier(runtime, spark)
    tier.deploy(dataflow)                          # the spec's connectors start Spark queries

or by hand: `df.writeStream.format("cameo")...` / `spark.readStream.format("cameo")...`
(see `spark_ingest.datasource`); `read_results(path)` reads the Parquet an output
query wrote back as the runtime's values (`spark_ingest.results`). Importing this package does not import Spark;
the pure parts (batching, offsets, schema, options) are unit-tested without it.
"""

from typing import Any

__all__ = ["CameoSparkError", "CheckpointConflict", "OptionError", "SparkConfig",
           "SparkQueryFailed", "SparkTier", "build_session", "read_results", "register",
           "stop_gracefully"]


def __getattr__(name: str) -> Any:
    if name in ("CameoSparkError", "CheckpointConflict", "OptionError", "SparkQueryFailed"):
        from spark_ingest import exceptions

        return getattr(exceptions, name)
    if name in ("SparkConfig", "build_session", "register", "stop_gracefully"):
        from spark_ingest import session

        return getattr(session, name)
    if name == "read_results":
        from spark_ingest.results import read_results

        return read_results
    if name == "SparkTier":
        from spark_ingest.tier import SparkTier

        return SparkTier
    raise AttributeError(name)
