"""The Spark tier on a real local Spark and a real local Ray (both started once per session):
files in -> Spark -> dataflows -> Spark -> Parquet out."""

from __future__ import annotations

import itertools
import json
import os
import shutil
import time
from typing import Any

import pytest

from cameo_actors import Dataflow, avg, count, max_, min_, sum_
from cameo_actors.testing import run_local
from spark_ingest.events import BAD_ROWS, write_file
from spark_ingest.tier import SparkTier
from tests.integration.conftest import RUN_DIR
from tests.shared.zoo import SCHEMA, canon, events

pytestmark = pytest.mark.integration
_names = itertools.count()
META = ("_log", "_offset", "_ingest_ms", "_egress_ms")
#: Spark runs a micro-batch's files as parallel tasks, so a dataflow sees them in any
#: order; a lateness above the data's event-time span makes results independent of it.
LATE_OK = 10**7


def unique(prefix: str) -> str:
    return f"{prefix}-{next(_names)}"


def folder(name: str) -> str:
    path = os.path.join(RUN_DIR, "spark-tests", "data", name)
    shutil.rmtree(path, ignore_errors=True)
    os.makedirs(path)
    return path


def land(path: str, name: str, rows: list[dict[str, Any]], extra: tuple[str, ...] = ()) -> None:
    write_file(path, name, [json.dumps(r) for r in rows] + list(extra))


def parquet_rows(spark: Any, path: str) -> list[dict[str, Any]]:
    return [r.asDict() for r in spark.read.parquet(path).collect()]


def strip_meta(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{k: v for k, v in r.items() if k not in META} for r in rows]


def wait_for(cond: Any, what: str, tier: SparkTier, timeout_s: float = 90) -> None:
    deadline = time.monotonic() + timeout_s
    while not cond():
        tier.raise_if_failed()
        if time.monotonic() > deadline:
            raise TimeoutError(f"waited {timeout_s} s for {what}")
        time.sleep(0.05)


@pytest.fixture
def tier(pools: Any, spark: Any) -> Any:
    t = SparkTier(pools["cameo2"], spark)
    yield t
    t.stop_all()


def test_files_to_parquet_equal_run_local(tier: SparkTier, spark: Any) -> None:
    rt = tier.runtime
    base = unique("eq")
    data = folder(base)
    rows = events(3000, seed=11)
    for i in range(3):
        land(data, f"part-{i}.json", rows[i * 1000:(i + 1) * 1000])
    out = os.path.join(RUN_DIR, "spark-tests", "out", base)
    shutil.rmtree(out, ignore_errors=True)

    def src(d: Dataflow) -> Any:
        return d.source("s", schema=SCHEMA, event_time="ts", allowed_lateness_ms=LATE_OK,
                        connector={"format": "json", "path": data, "cameo.batch_size": 128})

    filt = Dataflow(f"{base}-filter", latency_target_ms=100)
    (src(filt).filter("level == 'ERROR' and value > 50").map({"ts": "ts", "v": "value * 2"})
     .sink("o", connector={"format": "parquet", "path": f"{out}/filter"}))
    win = Dataflow(f"{base}-window", latency_target_ms=1000)
    (src(win).key_by("key").window(tumbling_ms=50, parallelism=2)
     .aggregate(n=count(), total=sum_("value"), lo=min_("value"), hi=max_("value"), mean=avg("value"))
     .sink("o", connector={"format": "parquet", "path": f"{out}/window", "trigger_ms": 200}))
    for d in (filt, win):
        tier.deploy(d)
    try:
        for d in (filt, win):
            tier.drain(d.name, close=True)
            expected = run_local(d, {"s": rows}).sinks["o"]
            got = parquet_rows(spark, f"{out}/{d.name.rsplit('-', 1)[1]}")
            assert expected, "the reference produced nothing: the test data is off"
            assert canon(strip_meta(got)) == canon(expected), d.name
            assert all(r["_egress_ms"] >= r["_ingest_ms"] > 0 for r in got)
            assert len({(r["_log"], r["_offset"]) for r in got}) == len(got)
            marks = rt.input_batches(d.name)
            assert len(marks) == 1 and min(marks.values()) >= 0  # Spark's batch id reached it
    finally:
        for d in (filt, win):
            rt.cancel(d.name)


def test_restarting_the_queries_loses_and_repeats_nothing(tier: SparkTier, spark: Any) -> None:
    rt = tier.runtime
    name = unique("restart")
    data = folder(name)
    out = os.path.join(RUN_DIR, "spark-tests", "out", name)
    shutil.rmtree(out, ignore_errors=True)
    d = (Dataflow(name, latency_target_ms=100)
         .source("s", schema={"id": "int", "ts": "int"}, event_time="ts",
                 connector={"format": "json", "path": data, "trigger_ms": 100})
         .filter("id >= 0")
         .sink("o", connector={"format": "parquet", "path": out, "trigger_ms": 100,
                               "cameo.max_rows_per_batch": 700}))
    ids = itertools.count()

    def land_round(r: int) -> int:
        for f in range(2):
            land(data, f"r{r}-{f}.json", [{"id": next(ids), "ts": 0} for _ in range(600)])
        return 1200 * (r + 1)

    tier.deploy(d)
    try:
        total = land_round(0)
        wait_for(lambda: rt.stats(name)["events_in"] == total, "round 0 in", tier)
        out_q = tier.queries[name].outputs["o"]
        wait_for(lambda: any(p["numInputRows"] for p in out_q.recentProgress), "output", tier)
        tier.stop(name)          # both queries, between micro-batches, mid-stream
        total = land_round(1)    # lands while Spark is down
        tier.start(name)         # resume from the checkpoints
        wait_for(lambda: rt.stats(name)["events_in"] == total, "round 1 in", tier)
        tier.stop(name)
        total = land_round(2)
        tier.start(name)
        tier.drain(name)
        assert rt.stats(name)["events_in"] == total  # every file read exactly once
        got = [r["id"] for r in parquet_rows(spark, out)]
        assert len(got) == total, f"{len(got)} rows for {total} events"
        assert sorted(got) == list(range(total))  # no loss, no duplicate
        committed, end = rt.result_offsets(name)[f"{name}/o/0"]
        assert end == total and committed <= end
    finally:
        rt.cancel(name)


def test_schema_mismatch_rows_reach_the_error_output(tier: SparkTier, spark: Any) -> None:
    rt = tier.runtime
    name = unique("bad")
    data = folder(name)
    out = os.path.join(RUN_DIR, "spark-tests", "out", name)
    shutil.rmtree(out, ignore_errors=True)
    good = [{"ts": i, "level": "INFO", "key": "k", "value": 1.0} for i in range(20)]
    missing = '{"ts": 21, "level": "INFO", "key": "k"}'
    land(data, "mixed.json", good, extra=(*BAD_ROWS, missing))
    d = (Dataflow(name, latency_target_ms=100, errors={"format": "json", "path": f"{out}/errors"})
         .source("s", schema={"ts": "int", "level": "str", "key": "str", "value": "float"},
                 event_time="ts", connector={"format": "json", "path": data})
         .sink("o", connector={"format": "parquet", "path": f"{out}/results"}))
    tier.deploy(d)
    try:
        tier.drain(name)
        assert len(parquet_rows(spark, f"{out}/results")) == 20
        assert rt.stats(name)["errors"] == {"s:malformed": 3}
        errors = [r.asDict() for r in spark.read.json(f"{out}/errors").collect()]
        assert len(errors) == 3 and {e["kind"] for e in errors} == {"malformed"}
        texts = " ".join(e["event"] for e in errors)
        assert "not a number" in texts and '{\\"ts\\": 5' in texts  # the raw rows are kept
        assert any("field 'value'" in e["message"] for e in errors)
    finally:
        rt.cancel(name)


def test_backpressure_and_commit_carry_more_than_the_runtime_holds(pools: Any, spark: Any) -> None:
    """A pool that holds 100 events at a source and 300 results per sink: the writer must
    block and the reader's commits must free the results, or 3000 events never get out."""
    tier = SparkTier(pools["tiny_credits"], spark)
    rt = tier.runtime
    name = unique("bp")
    data = folder(name)
    out = os.path.join(RUN_DIR, "spark-tests", "out", name)
    shutil.rmtree(out, ignore_errors=True)
    land(data, "all.json", [{"id": i} for i in range(3000)])
    d = (Dataflow(name, latency_target_ms=100)
         .source("s", schema={"id": "int"}, connector={"format": "json", "path": data,
                                                       "cameo.batch_size": 50})
         .sink("o", connector={"format": "parquet", "path": out, "trigger_ms": 100}))
    tier.deploy(d)
    try:
        tier.drain(name)
        got = sorted(r["id"] for r in parquet_rows(spark, out))
        assert got == list(range(3000))
    finally:
        tier.stop_all()
        rt.cancel(name)


def test_bad_options_give_errors_that_name_the_option(pools: Any, spark: Any) -> None:
    from pyspark.errors import PySparkException
    from pyspark.errors.exceptions.captured import StreamingQueryException

    rt = pools["cameo2"]

    def reader() -> Any:  # a DataStreamReader keeps the options set on it: a new one each time
        return spark.readStream.format("cameo").option("pool", rt.pool)

    with pytest.raises(PySparkException, match="cameo option 'address'"):
        reader().option("dataflow", "x").option("address", "127.0.0.1:9").load()
    with pytest.raises(PySparkException, match="cameo option 'pool'"):
        reader().option("dataflow", "x").option("address", rt.address).option("pool", "nope").load()
    with pytest.raises(PySparkException, match="cameo option 'dataflow'"):
        reader().option("dataflow", "no-such-dataflow").option("address", rt.address).load()
    name = unique("opts")
    rt.deploy(Dataflow(name, latency_target_ms=10).source("s", schema={"id": "int"}).sink("o"))
    try:
        with pytest.raises(PySparkException, match="cameo option 'sink'"):
            (spark.readStream.format("cameo").option("dataflow", name).option("sink", "nope")
             .option("address", rt.address).option("pool", rt.pool).load())
        data = folder(name)
        land(data, "a.json", [{"id": 1}])
        query = (spark.readStream.format("json").schema("id BIGINT").load(data)
                 .writeStream.format("cameo").option("dataflow", "no-such-dataflow")
                 .option("address", rt.address).option("pool", rt.pool)
                 .option("checkpointLocation", os.path.join(data, "_ck")).start())
        with pytest.raises(StreamingQueryException, match="cameo option 'dataflow'"):
            query.awaitTermination(60)
    finally:
        rt.cancel(name)


def test_dataflows_on_one_input_share_its_query_each_exactly_once(tier: SparkTier,
                                                                   spark: Any) -> None:
    """Two dataflows name one input: Spark reads it with one query, each gets its own
    columns of every row, and a restart of the tier (the first subscriber back brings
    the other along) loses and repeats nothing for either."""
    rt = tier.runtime
    base = unique("shared")
    data = folder(base)
    out = os.path.join(RUN_DIR, "spark-tests", "out", base)
    shutil.rmtree(out, ignore_errors=True)
    rows = events(3000, seed=7)
    share = {"format": "json", "path": data, "trigger_ms": 200, "cameo.input": base}
    filt = Dataflow(f"{base}-filter", latency_target_ms=100)
    (filt.source("s", schema=SCHEMA, event_time="ts", allowed_lateness_ms=LATE_OK,
                 connector={**share, "maxFilesPerTrigger": "1"})
     .filter("level == 'ERROR' and value > 50").map({"ts": "ts", "v": "value * 2"})
     .sink("o", connector={"format": "parquet", "path": f"{out}/filter"}))
    win = Dataflow(f"{base}-window", latency_target_ms=1000)
    (win.source("s", schema={"ts": "int", "key": "str", "value": "float"}, event_time="ts",
                allowed_lateness_ms=LATE_OK, connector=share)
     .key_by("key").window(tumbling_ms=50).aggregate(n=count(), total=sum_("value"))
     .sink("o", connector={"format": "parquet", "path": f"{out}/window", "trigger_ms": 200}))
    for d in (filt, win):
        tier.deploy(d)
    try:
        query = tier.queries[filt.name].inputs["s"]
        assert query is tier.queries[win.name].inputs["s"] and query.name == f"cameo-input-{base}"
        assert [q.name for q in spark.streams.active].count(query.name) == 1
        land(data, "part-0.json", rows[:1000])
        wait_for(lambda: all(rt.stats(d.name)["events_in"] == 1000 for d in (filt, win)),
                 "the first file in both", tier)
        tier.stop_all()  # every query between micro-batches
        for i in (1, 2):  # land while Spark is down
            land(data, f"part-{i}.json", rows[i * 1000:(i + 1) * 1000])
        tier.start(filt.name)  # its input query starts for both: win is owed these files too
        tier.start(win.name)
        assert tier.queries[win.name].inputs["s"] is tier.queries[filt.name].inputs["s"]
        for d in (filt, win):
            tier.drain(d.name, close=True)  # filt leaves first: the query goes on for win
            expected = run_local(d, {"s": rows}).sinks["o"]
            got = parquet_rows(spark, f"{out}/{d.name.rsplit('-', 1)[1]}")
            assert expected, "the reference produced nothing: the test data is off"
            assert canon(strip_meta(got)) == canon(expected), d.name
            assert rt.stats(d.name)["events_in"] == 3000  # every row once, to each
    finally:
        for d in (filt, win):
            rt.cancel(d.name)
