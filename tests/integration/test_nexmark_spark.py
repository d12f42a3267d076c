"""Nexmark through the Spark tier: the shared stream as JSON files in, Parquet out, equal
to the DuckDB reference (as in-process and on Ray, tests/integration/test_nexmark.py),
while another tenant keeps the pool busy, with the default `SparkConfig`.

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
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from cameo_actors import Dataflow, count
from cameo_actors.dataflow.spec import ConnectorSpec, DataflowSpec, SinkStep, SourceStep
from cameo_actors.nexmark.generator import SCHEMA
from cameo_actors.nexmark.queries import QUERIES
from spark_ingest.events import write_file
from spark_ingest.results import read_results
from spark_ingest.tier import SparkTier
from tests.integration.conftest import RUN_DIR
from tests.shared.nexmark import assert_matches, stream
from tests.shared.zoo import SCHEMA as ZOO_SCHEMA
from tests.shared.zoo import events

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


@contextmanager
def busy_pool(rt: Any) -> Iterator[None]:
    """Another tenant keeps the pool's executors busy meanwhile: a keyed window on both
    executors, pushed flat out (and read, so that it never waits for a reader)."""
    busy = (Dataflow("busy-beside", latency_target_ms=1000, tenant="neighbour")
            .source("s", schema=ZOO_SCHEMA, event_time="ts").key_by("key")
            .window(tumbling_ms=100, parallelism=2).aggregate(n=count()).sink("o"))
    rt.deploy(busy)
    stop = threading.Event()
    failures: list[BaseException] = []

    def feed() -> None:
        h, data, shift = rt.handle(), events(10_000, seed=9, keys=500), 0
        try:
            while not stop.is_set():
                h.push(busy.name, "s", [{**e, "ts": e["ts"] + shift} for e in data])
                shift += 5_000
                h.results(busy.name)
        except BaseException as e:  # reported by the test
            failures.append(e)

    feeder = threading.Thread(target=feed, daemon=True)
    feeder.start()
    try:
        yield
    finally:
        stop.set()
        feeder.join(60)
        rt.cancel(busy.name)
    assert not failures, failures
    assert rt.describe(busy.name)["final"]["events_in"] > 0


def test_queries_through_spark_beside_a_busy_pool_equal_the_reference(pools: Any,
                                                                       spark: Any) -> None:
    base = f"nexmark-spark-{next(_names)}"
    data = folder("data", base)
    write_stream(data)
    tier = SparkTier(pools["cameo2"], spark)  # the default SparkConfig (the session's)
    outs = {q: folder("out", base, q) for q in SPARK_QUERIES}
    names = []
    with busy_pool(pools["cameo2"]):
        run_queries(tier, base, data, outs, names)
    for q in SPARK_QUERIES:
        rows = read_results(outs[q])
        # A step whose output fields are unknown (a user function's) is one JSON column.
        rows = [r["event"] if set(r) == {"event"} else r for r in rows]
        assert_matches(q, rows)


def run_queries(tier: SparkTier, base: str, data: str, outs: dict[str, str],
                names: list[str]) -> None:
    try:
        for q in SPARK_QUERIES:
            spec = QUERIES[q](name=f"{base}-{q}", parallelism=2).spec
            names.append(tier.deploy(with_connectors(spec, data, outs[q])))
        for name in names:
            tier.drain(name, close=True)
        for q in SPARK_QUERIES:
            errors = tier.runtime.stats(f"{base}-{q}")["errors"]
            assert {key.rpartition(":")[2] for key in errors} == {"late"}, errors
    finally:
        tier.stop_all()
        for name in names:
            tier.runtime.cancel(name)
