"""Nexmark through the Spark tier: the shared stream as JSON files in, Parquet out, equal
to the DuckDB reference (as in-process and on Ray, tests/integration/test_nexmark.py).

The stream is written as files of 500 events (about 17 s of event time each) that Spark
reads one per micro-batch, in the order they were written (`maxFilesPerTrigger` 1, the
files' modification times one second apart), so events arrive in the stream's order and
its late events are late here too (a batch spans far less than the 50 s by which a late
event is late). The person, auction and bid fields each kind lacks are nulls in the
files, as a JSON writer of the union stream would leave them: the nullable types make
them the same None as a missing field.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import os
import shutil
import time
from typing import Any

import pytest

from cameo_actors.dataflow.spec import ConnectorSpec, DataflowSpec, SinkStep, SourceStep
from cameo_actors.nexmark.generator import SCHEMA
from cameo_actors.nexmark.queries import QUERIES
from spark_ingest.events import write_file
from spark_ingest.results import read_results
from spark_ingest.tier import SparkTier
from tests.integration.conftest import RUN_DIR
from tests.shared.nexmark import assert_matches, stream

pytestmark = pytest.mark.integration
FILE_EVENTS = 500
#: The join (interval), the keyed stateful function with timers, and session windows.
SPARK_QUERIES = ("q3", "q4", "q11")
_names = itertools.count()


def folder(*parts: str) -> str:
    path = os.path.join(RUN_DIR, "spark-tests", *parts)
    shutil.rmtree(path, ignore_errors=True)
    os.makedirs(path)
    return path


def write_stream(path: str) -> None:
    events = stream().events
    start = time.time() - len(events)
    for n, i in enumerate(range(0, len(events), FILE_EVENTS)):
        lines = [json.dumps({f: e.get(f) for f in SCHEMA}) for e in events[i:i + FILE_EVENTS]]
        name = f"part-{n:03d}.json"
        write_file(path, name, lines)
        os.utime(os.path.join(path, name), (start + n, start + n))  # Spark's order of files


def with_connectors(spec: DataflowSpec, data: str, out: str) -> DataflowSpec:
    def connect(step: Any) -> Any:
        if isinstance(step, SourceStep):
            return dataclasses.replace(step, connector=ConnectorSpec(
                "json", (("path", data), ("maxFilesPerTrigger", "1"))))
        if isinstance(step, SinkStep):
            return dataclasses.replace(step, connector=ConnectorSpec("parquet", (("path", out),)))
        return step

    return dataclasses.replace(spec, steps=tuple(connect(s) for s in spec.steps))


def test_queries_through_spark_equal_the_reference(pools: Any, spark: Any) -> None:
    base = f"nexmark-spark-{next(_names)}"
    data = folder("data", base)
    write_stream(data)
    tier = SparkTier(pools["cameo2"], spark)
    outs = {q: folder("out", base, q) for q in SPARK_QUERIES}
    names = []
    try:
        for q in SPARK_QUERIES:
            spec = QUERIES[q](name=f"{base}-{q}", parallelism=2).spec
            names.append(tier.deploy(with_connectors(spec, data, outs[q])))
        for name in names:
            tier.drain(name, close=True)
        for q in SPARK_QUERIES:
            rows = read_results(outs[q])
            # A step whose output fields are unknown (a user function's) is one JSON column.
            rows = [r["event"] if set(r) == {"event"} else r for r in rows]
            assert_matches(q, rows)
            errors = pools["cameo2"].stats(f"{base}-{q}")["errors"]
            assert {key.rpartition(":")[2] for key in errors} == {"late"}, errors
    finally:
        tier.stop_all()
        for name in names:
            pools["cameo2"].cancel(name)
