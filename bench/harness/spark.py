"""A pool with Spark in front of it, for the Spark tier's benchmarks: started
together, stopped together (queries, session, pool) whatever happens."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from cameo_actors.runtime import Runtime, RuntimeConfig
from spark_ingest.session import SparkConfig, build_session
from spark_ingest.tier import SparkTier


@contextmanager
def spark_on_pool(pool: str, run_dir: str, executors: int, **spark_settings: Any
                  ) -> Iterator[tuple[Runtime, Any, SparkTier]]:
    """(runtime, SparkSession, SparkTier) on a new pool of `executors`, all files under
    `run_dir`; `spark_settings` go to `SparkConfig`."""
    rt = Runtime.start(RuntimeConfig(num_executors=executors), pool=pool, run_dir=run_dir)
    config = SparkConfig(run_dir=run_dir, log_level="ERROR", **spark_settings)
    spark = build_session(config)
    tier = SparkTier(rt, spark, config)
    try:
        yield rt, spark, tier
    finally:
        tier.stop_all()
        spark.stop()
        rt.shutdown()
