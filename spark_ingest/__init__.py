"""The Spark tier: Spark Structured Streaming feeds dataflows and persists their results.

    from spark_ingest import SparkConfig, SparkTier, build_session
    spark = build_session(SparkConfig())          # local[*], UI off, files under .run/spark
    tier = SparkTier(runtime, spark)
    tier.deploy(dataflow)                          # the spec's connectors start Spark queries

or by hand: `df.writeStream.format("cameo")...` / `spark.readStream.format("cameo")...`
(see `spark_ingest.datasource`). Importing this package does not import Spark;
the pure parts (batching, offsets, schema, options) are unit-tested without it.
"""

from typing import Any

__all__ = ["CameoSparkError", "OptionError", "SparkConfig", "SparkTier", "build_session",
           "register", "stop_gracefully"]


def __getattr__(name: str) -> Any:
    if name in ("CameoSparkError", "OptionError"):
        from spark_ingest import exceptions

        return getattr(exceptions, name)
    if name in ("SparkConfig", "build_session", "register", "stop_gracefully"):
        from spark_ingest import session

        return getattr(session, name)
    if name == "SparkTier":
        from spark_ingest.tier import SparkTier

        return SparkTier
    raise AttributeError(name)
