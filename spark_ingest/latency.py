"""Latency read back from the Parquet output: where the time of each result went.

Each output row carries `_ingest_ms` and `_egress_ms` (stamped by the runtime)
and, when its source added it, `landed_ms` (the input file's modification
time). The time the row reached Parquet is its output file's modification
time (Spark's `_metadata.file_modification_time`). So per row:

- Spark in:   landed_ms  -> _ingest_ms  (file landing -> runtime ingress)
- runtime:    _ingest_ms -> _egress_ms  (the runtime's own latency)
- Spark out:  _egress_ms -> written_ms  (runtime egress -> Parquet file written)
- end to end: landed_ms  -> written_ms

>>> summarize([5.0, 1.0, 3.0])["p50_ms"]
3.0
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

STAGES = (("spark_in", "landed_ms", "_ingest_ms"), ("runtime", "_ingest_ms", "_egress_ms"),
          ("spark_out", "_egress_ms", "written_ms"), ("end_to_end", "landed_ms", "written_ms"))


def summarize(values: Sequence[float]) -> dict[str, Any]:
    """Count, mean and percentiles (nearest rank) of latencies in ms."""
    xs = sorted(v for v in values if v is not None and math.isfinite(v))
    if not xs:
        return {"n": 0}

    def q(p: float) -> float:
        return xs[min(len(xs) - 1, max(0, math.ceil(p * len(xs)) - 1))]

    return {"n": len(xs), "mean_ms": sum(xs) / len(xs), "p50_ms": q(0.5), "p95_ms": q(0.95),
            "p99_ms": q(0.99), "max_ms": xs[-1]}


def read_output(spark: Any, path: str) -> Any:
    """The Parquet output as a pandas DataFrame with a `written_ms` column."""
    from pyspark.sql import functions as F

    df = spark.read.parquet(path)
    return df.withColumn("written_ms", F.unix_millis(F.col("_metadata.file_modification_time"))
                         .cast("double")).toPandas()


def stage_latencies(frame: Any) -> dict[str, dict[str, Any]]:
    """{stage: summary} for the stages whose columns the frame has."""
    out = {}
    for stage, a, b in STAGES:
        if a in frame.columns and b in frame.columns:
            out[stage] = summarize((frame[b] - frame[a]).tolist())
    return out


def format_summary(s: dict[str, Any]) -> str:
    if not s.get("n"):
        return "no rows"
    return (f"p50 {s['p50_ms']:7.1f}  p95 {s['p95_ms']:7.1f}  p99 {s['p99_ms']:7.1f}  "
            f"mean {s['mean_ms']:7.1f} ms  (n={s['n']})")
