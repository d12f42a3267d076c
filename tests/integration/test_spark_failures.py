"""The Spark tier fails loudly (real local Spark and Ray, started once per session): a
query that died is reported by `status`, `stop` and `drain`, and a checkpoint of
another query (a dataflow name used before, with another input folder) is refused at
deploy, or started anew with `fresh_checkpoints=True`."""

from __future__ import annotations

import itertools
import json
import os
import shutil
import time
from typing import Any

import pytest

from cameo_actors import Dataflow
from spark_ingest import checkpoints
from spark_ingest.events import write_file
from spark_ingest.exceptions import CheckpointConflict, SparkQueryFailed
from spark_ingest.results import read_results
from spark_ingest.tier import SparkTier
from tests.integration.conftest import RUN_DIR

pytestmark = pytest.mark.integration
_names = itertools.count()


def folder(*parts: str) -> str:
    path = os.path.join(RUN_DIR, "spark-tests", *parts)
    shutil.rmtree(path, ignore_errors=True)
    os.makedirs(path)
    return path


def build(name: str, data: str, out: str) -> Dataflow:
    return (Dataflow(name, latency_target_ms=100)
            .source("s", schema={"id": "int"}, connector={"format": "json", "path": data})
            .sink("o", connector={"format": "parquet", "path": out}))


def land(data: str, ids: range) -> None:
    write_file(data, f"ids-{ids.start}.json", [json.dumps({"id": i}) for i in ids])


def ids(out: str) -> list[int]:
    return sorted(r["id"] for r in read_results(out))


@pytest.fixture
def tier(pools: Any, spark: Any) -> Any:
    t = SparkTier(pools["cameo2"], spark)
    yield t
    for name in list(t.queries):  # a test that failed midway: stop what it left
        t.cancel(name)


def first_run(tier: SparkTier, name: str, data: str, out: str) -> None:
    """A dataflow that read folder `data` once, and was cancelled: its checkpoints stay."""
    tier.deploy(build(name, data, out))
    land(data, range(0, 10))
    tier.drain(name, close=True)
    tier.cancel(name)
    assert ids(out) == list(range(10))


def test_a_checkpoint_of_another_input_is_refused_at_deploy(tier: SparkTier) -> None:
    rt = tier.runtime
    name = f"reuse-{next(_names)}"
    old, new, out = folder("data", name, "a"), folder("data", name, "b"), folder("out", name)
    first_run(tier, name, old, out)

    with pytest.raises(CheckpointConflict) as refused:
        tier.deploy(build(name, new, out))
    message = str(refused.value)
    assert f"in-s' of dataflow {name!r} (json at {new!r})" in message  # what this deploy wants
    assert f"(json at {old!r})" in message                              # what the checkpoint is
    assert "fresh_checkpoints=True" in message
    assert name not in [d.name for d in rt.list(states=["running"])]     # nothing deployed

    tier.deploy(build(name, new, out), fresh_checkpoints=True)
    try:
        land(new, range(100, 110))
        tier.drain(name, close=True)
        # The input started anew on the new folder; the output resumed on its own path.
        assert ids(out) == [*range(10), *range(100, 110)]
        marker, _ = checkpoints.read(os.path.join(tier.checkpoint_root, name, "in-s"))
        assert marker is not None and marker["where"] == new and not marker["adopted"]
    finally:
        tier.cancel(name)


def test_a_dead_input_query_is_reported_by_status_stop_and_drain(tier: SparkTier) -> None:
    """The user's report: the old checkpoint (here one from before markers, which the
    tier adopts) points at another folder, and the input query dies in Spark."""
    rt = tier.runtime
    name = f"dead-{next(_names)}"
    old, new, out = folder("data", name, "a"), folder("data", name, "b"), folder("out", name)
    first_run(tier, name, old, out)
    os.remove(os.path.join(tier.checkpoint_root, name, "in-s", checkpoints.MARKER))
    land(new, range(100, 110))

    tier.deploy(build(name, new, out))
    try:
        deadline = time.monotonic() + 90
        while not any(q.error for q in tier.status(name)):
            assert time.monotonic() < deadline, f"the input query did not fail: {tier.status(name)}"
            time.sleep(0.1)
        [state] = [q for q in tier.status(name) if q.error]
        assert (state.role, state.step, state.active) == ("input", "s", False)

        with pytest.raises(SparkQueryFailed) as stopped:
            tier.stop(name)
        failed = stopped.value
        assert (failed.dataflow, failed.query, failed.role) == (name, f"cameo-in-{name}-s", "input")
        assert failed.spark_message and failed.spark_message in str(failed)
        assert "fresh_checkpoints=True" in failed.fix, failed
        assert "=== Streaming Query ===" not in str(failed)

        tier.start(name)  # the same checkpoint: the input dies again; drain says so
        with pytest.raises(SparkQueryFailed, match=f"cameo-in-{name}-s"):
            tier.drain(name, close=True)
        assert rt.describe(name)["state"] == "running"  # not closed on part of its input
        assert name not in tier.queries

        tier.start(name, fresh_checkpoints=True)  # the fix the error offers
        tier.drain(name, close=True)
        assert ids(out) == [*range(10), *range(100, 110)]
    finally:
        tier.cancel(name)


def test_a_file_too_large_to_read_whole_fails_its_query_with_the_fix_and_loses_nothing(
        tier: SparkTier) -> None:
    """The writer reads each file whole (`cameo.read`): a file over the limit fails the
    input query, naming the file and the fix; with the limit raised, the query resumes
    from its checkpoint and every event arrives once."""
    spark, key = tier.spark, "spark.sql.sources.binaryFile.maxLength"
    name = f"large-{next(_names)}"
    data, out = folder("data", name), folder("out", name)
    land(data, range(0, 3))  # ~30 bytes
    land(data, range(100, 200))  # ~1,300 bytes: over the limit
    limit = spark.conf.get(key)
    # A query takes the session's settings as its thread starts: the limit stays low
    # until the query has failed on it.
    spark.conf.set(key, "200")
    try:
        tier.deploy(build(name, data, out))
        with pytest.raises(SparkQueryFailed) as failed:
            tier.drain(name, close=True)
    finally:
        spark.conf.set(key, limit)
    try:
        assert "ids-100.json" in failed.value.spark_message, failed.value
        assert "cameo.read=spark" in failed.value.fix and "max_file_bytes" in failed.value.fix

        tier.start(name)  # the fix: the limit raised (back to the tier's)
        tier.drain(name, close=True)
        assert ids(out) == [*range(0, 3), *range(100, 200)]
    finally:
        tier.cancel(name)
