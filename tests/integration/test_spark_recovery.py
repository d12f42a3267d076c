"""The Spark tier under failure, on a real local Spark and a real local Ray: JSON files
land in a folder in steps, Spark feeds them into a keyed window, Spark writes its results
to Parquet; the executor hosting the window is SIGKILLed mid-stream. Ray restarts it, the
dataflow is restored from its last checkpoint (the ingress log replayed, the Spark
writer's unanswered calls sent again), and the Spark reader goes on from its own offsets:
the Parquet output is exactly run_local's over all the input, nothing twice or missing.
"""

from __future__ import annotations

import os
import shutil
import signal
import time
from collections import Counter
from typing import Any

import pytest

from cameo_actors import Dataflow, count, sum_
from cameo_actors.runtime.boundary import RECOVERING, RUNNING
from cameo_actors.testing import run_local
from spark_ingest.tier import SparkTier
from tests.integration.conftest import RUN_DIR
from tests.integration.test_spark import folder, land, parquet_rows, strip_meta, unique, wait_for
from tests.shared.zoo import SCHEMA, canon, events

pytestmark = pytest.mark.integration

STEPS = 6         # files landed one at a time, in event-time order
ROWS = 2_000      # events per file
KILL_AFTER = 3    # files processed (and results written) before the executor is killed


def window_flow(name: str, data: str, out: str) -> Dataflow:
    # A lateness above the events' disorder (< 30 ms) and files landed in event-time
    # order, each read before the next lands: windows fire (and results reach Parquet)
    # while the stream runs, and no event is late, whatever Spark's micro-batches are.
    d = Dataflow(name, latency_target_ms=1000, tenant="spark")
    (d.source("s", schema=SCHEMA, event_time="ts", allowed_lateness_ms=40,
              connector={"format": "json", "path": data, "trigger_ms": 100,
                         "cameo.batch_size": 256})
     .key_by("key").window(tumbling_ms=50, parallelism=2, id="w")
     .aggregate(n=count(), total=sum_("value"))
     .sink("o", connector={"format": "parquet", "path": out, "trigger_ms": 200}))
    return d


def diff(got: list[dict[str, Any]], want: list[str]) -> str:
    g, w = Counter(canon(got)), Counter(want)
    twice, missing = g - w, w - g
    return (f"{len(got)} rows, {len(want)} expected; {sum(twice.values())} extra or repeated "
            f"(e.g. {list(twice)[:2]}), {sum(missing.values())} missing (e.g. {list(missing)[:2]})")


def spans(rows: list[dict[str, Any]]) -> dict[str, tuple[int, int, int]]:
    """(first, last, count) of the result-log offsets read, per log."""
    by: dict[str, list[int]] = {}
    for r in rows:
        by.setdefault(r["_log"], []).append(r["_offset"])
    return {log: (min(o), max(o), len(o)) for log, o in sorted(by.items())}


def pid_of(rt: Any, index: int) -> int | None:
    return next((e.get("pid") for e in rt.executor_stats() if e["executor"] == index), None)


def test_an_executor_killed_under_the_spark_tier_loses_and_repeats_no_result(
        pools: Any, spark: Any) -> None:
    tier = SparkTier(pools["phoenix2"], spark)  # checkpoints every 0.5 s
    rt = tier.runtime
    name = unique("sr-window")
    data = folder(name)
    out = os.path.join(RUN_DIR, "spark-tests", "out", name)
    shutil.rmtree(out, ignore_errors=True)
    rows = events(STEPS * ROWS, seed=41)
    files = [rows[i * ROWS:(i + 1) * ROWS] for i in range(STEPS)]
    flow = window_flow(name, data, out)
    want = canon(run_local(flow, {"s": rows}).sinks["o"])
    assert want, "the reference produced nothing: the test data is off"
    tier.deploy(flow)
    try:
        for i in range(KILL_AFTER):
            land(data, f"part-{i}.json", files[i])
            wait_for(lambda i=i: rt.stats(name)["events_in"] == (i + 1) * ROWS,
                     f"file {i} in", tier)
        out_q = tier.queries[name].outputs["o"]
        wait_for(lambda: sum(p["numInputRows"] for p in out_q.recentProgress) > 0,
                 "results written to Parquet before the kill", tier)
        before = len(parquet_rows(spark, out))

        victim = rt.describe(name, refresh=True)["hosts"][f"{name}/w/0"]
        old_pid = pid_of(rt, victim)
        assert old_pid is not None, rt.executor_stats()
        # The next file lands and the executor dies while Spark may be pushing it.
        land(data, f"part-{KILL_AFTER}.json", files[KILL_AFTER])
        at = time.time()
        os.kill(old_pid, signal.SIGKILL)
        for i in range(KILL_AFTER + 1, STEPS):
            time.sleep(0.3)
            land(data, f"part-{i}.json", files[i])

        def recovered() -> bool:
            h = rt.describe(name, refresh=True)["history"]
            assert h[-1]["state"] not in ("failed", "cancelled"), h
            return h[-1]["state"] == RUNNING and any(
                t["state"] == RECOVERING and t["at"] >= at for t in h)
        wait_for(recovered, "the dataflow restored", tier, timeout_s=60)
        print(f"restored {time.time() - at:.2f} s after the kill; {before} rows in Parquet "
              "before it")
        assert pid_of(rt, victim) not in (None, old_pid)

        queries = tier.queries[name].all()
        tier.drain(name, close=True)
        # drain() skips a query that stopped with an error: none may have.
        assert not [q.exception() for q in queries if q.exception() is not None], \
            [str(q.exception())[:2000] for q in queries if q.exception() is not None]
        got = parquet_rows(spark, out)
        assert canon(strip_meta(got)) == want, (diff(strip_meta(got), want), spans(got))
        assert len({(r["_log"], r["_offset"]) for r in got}) == len(got)  # no row read twice

        info = rt.describe(name, refresh=True)
        states = [t["state"] for t in info["history"]]
        assert info["recoveries"] == 1, info["history"]
        k = states.index(RECOVERING)
        assert states[:k] == [RUNNING] and states[k + 1] == RUNNING, states
        assert states[-2:] == ["finishing", "finished"], states
        assert f"executor {victim} died" in str(info["history"][k]["reason"]), info["history"]
    finally:
        tier.stop_all()
        rt.cancel(name)
