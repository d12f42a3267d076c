"""Live reconfiguration on a real local Ray: a keyed window scaled up and down, an
instance moved to an added executor, the pool rebalanced and an executor removed, all
while events flow and another tenant's latency-sensitive dataflow runs beside; results
must equal run_local's exactly. And every bad request refused with nothing changed.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from cameo_actors import Dataflow, count, max_, run_local, sum_
from cameo_actors.errors import ReconfigConflict, ReconfigError
from cameo_actors.examples import alerts_dataflow
from cameo_actors.runtime.boundary import FINISHED
from tests.integration.test_lifecycle import state_of, wait_for
from tests.shared.zoo import SCHEMA, canon, events

pytestmark = pytest.mark.integration

WINDOW = "counts"


def keyed_counts(name: str) -> Dataflow:
    return (Dataflow(name, latency_target_ms=1000, tenant="analytics")
            .source("s", schema=SCHEMA, event_time="ts", allowed_lateness_ms=40)
            .key_by("key").window(tumbling_ms=50, id=WINDOW)
            .aggregate(n=count(), total=sum_("value"), hi=max_("value")).sink("o"))


def alert_events(n: int) -> list[dict[str, Any]]:
    return [{"ts": i, "level": "ERROR" if i % 3 == 0 else "INFO", "key": f"h{i % 5}",
             "value": 95.0 if i % 2 else 10.0} for i in range(n)]


@contextmanager
def streaming(rt: Any, name: str, data: list[dict[str, Any]], alerts: str) -> Iterator[None]:
    """Push `data` to `name` and an alert stream to `alerts` in the background, steadily;
    on exit wait for both to end, close them and wait until they finished."""
    alert_data = alert_events(len(data) // 10)
    failures: list[BaseException] = []

    def feed(target: str, rows: list[dict[str, Any]], source: str, batch: int) -> None:
        try:
            for i in range(0, len(rows), batch):
                rt.push(target, source, rows[i:i + batch])
                time.sleep(0.005)
        except BaseException as e:  # reported by the test thread
            failures.append(e)

    threads = [threading.Thread(target=feed, args=(name, data, "s", 400)),
               threading.Thread(target=feed, args=(alerts, alert_data, "logs", 40))]
    for t in threads:
        t.start()
    try:
        yield
    finally:
        for t in threads:
            t.join()
    assert not failures, failures
    for n in (name, alerts):
        rt.close(n)
    for n in (name, alerts):
        wait_for(lambda n=n: state_of(rt, n) == FINISHED, f"{n} finished", 60)


def expected(flow: Dataflow, source: str, data: list[dict[str, Any]]) -> list[str]:
    return canon(run_local(flow, {source: data}).sinks[flow.spec.sinks[0].id])


def done(rt: Any, started: dict[str, Any]) -> dict[str, Any]:
    info: dict[str, Any] = rt.wait_migration(started["id"], 60)
    assert info["state"] == "done", info
    return info


def instances(rt: Any, name: str) -> dict[str, int]:
    hosts = rt.describe(name, refresh=True)["hosts"]
    return {aid: ex for aid, ex in hosts.items() if aid.startswith(f"{name}/{WINDOW}/")}


def deployed(rt: Any, name: str) -> tuple[Dataflow, Dataflow]:
    """The keyed counts `name` and, beside it, the alerts tenant's dataflow."""
    flow, alerts = keyed_counts(name), alerts_dataflow()
    rt.deploy(flow)
    rt.deploy(alerts)
    return flow, alerts


def test_a_keyed_window_scales_up_and_down_while_events_flow(pools: Any) -> None:
    rt = pools["elastic2"]
    flow, alerts = deployed(rt, "rc-scale")
    data = events(30_000, seed=5, keys=300)
    with streaming(rt, "rc-scale", data, "alerts"):
        time.sleep(0.3)
        up = done(rt, rt.scale("rc-scale", WINDOW, 2, strategy="batched", batch_bins=16))
        assert (up["from_parallelism"], up["to_parallelism"], up["bins_moved"]) == (1, 2, 128)
        assert up["epochs_done"] == up["epochs_total"] == 8 and up["bytes_moved"] > 0
        assert sorted(instances(rt, "rc-scale").values()) == [0, 1]  # the new one on the other
        down = done(rt, rt.scale("rc-scale", WINDOW, 1, strategy="all_at_once"))
        assert (down["bins_moved"], down["epochs_total"]) == (128, 1)
        assert list(instances(rt, "rc-scale")) == ["rc-scale/counts/0"]
        fluid = done(rt, rt.scale("rc-scale", WINDOW, 3, strategy="fluid"))
        assert fluid["epochs_total"] == fluid["bins_moved"] > 0
    assert canon(rt.results("rc-scale")) == expected(flow, "s", data)
    assert canon(rt.results("alerts")) == expected(alerts, "logs", alert_events(3_000))
    kept = [m["id"] for m in rt.migrations("rc-scale")]
    assert kept[-3:] == [up["id"], down["id"], fluid["id"]]
    for name in ("rc-scale", "alerts"):
        rt.cancel(name)


def test_an_instance_moves_to_an_added_executor_which_is_then_removed(pools: Any) -> None:
    rt = pools["elastic2"]
    flow, alerts = deployed(rt, "rc-pool")
    data = events(30_000, seed=6, keys=300)
    with streaming(rt, "rc-pool", data, "alerts"):
        [added] = rt.add_executors(1)
        assert added == 2 and [e["alive"] for e in rt.executor_stats()][added]
        moved = rt.migrate("rc-pool", WINDOW, instance=0, to_executor=added, wait=True)
        assert moved["state"] == "done"
        assert moved["kind"] == "move_instance" and moved["bins_moved"] == 256
        assert list(instances(rt, "rc-pool").values()) == [added]
        # Whatever the measured load asks for must keep results.
        assert all(m["state"] == "done" for m in rt.rebalance(wait=True))
        answer = rt.remove_executor(added, wait=True)  # returns once it is gone
        assert answer["state"] == "removed" and answer["error"] is None
        assert not rt.executor_stats()[added]["alive"]
        assert added not in instances(rt, "rc-pool").values()
        assert "removed" in rt.executor_stats()[added]["faults"][0]
    assert canon(rt.results("rc-pool")) == expected(flow, "s", data)
    assert canon(rt.results("alerts")) == expected(alerts, "logs", alert_events(3_000))
    for name in ("rc-pool", "alerts"):
        rt.cancel(name)


def test_bad_reconfigurations_are_refused_and_change_nothing(pools: Any) -> None:
    rt = pools["elastic2"]
    rt.deploy(keyed_counts("rc-bad"))
    unkeyed = (Dataflow("rc-unkeyed", latency_target_ms=100)
               .source("s", schema=SCHEMA, event_time="ts").window(tumbling_ms=10, id="w")
               .aggregate(n=count()).sink("o"))
    rt.deploy(unkeyed)
    before = rt.describe("rc-bad", refresh=True)["hosts"]
    bad: list[tuple[Any, str]] = [
        (lambda: rt.scale("rc-unkeyed", "w", 2), "keyed stream"),
        (lambda: rt.scale("rc-bad", "s", 2), "source"),
        (lambda: rt.scale("rc-bad", "nope", 2), "one of its steps"),
        (lambda: rt.scale("rc-bad", WINDOW, 0), "parallelism from 1 to 256"),
        (lambda: rt.scale("rc-bad", WINDOW, 257), "parallelism from 1 to 256"),
        (lambda: rt.scale("rc-bad", WINDOW, True), "parallelism"),
        (lambda: rt.scale("rc-bad", WINDOW, 2, strategy="warp"), "strategy"),
        (lambda: rt.scale("rc-bad", WINDOW, 2, batch_bins=0), "batch_bins"),
        (lambda: rt.migrate("rc-bad", WINDOW, instance=0, to_executor=99), "live executors"),
        (lambda: rt.migrate("rc-bad", WINDOW, instance=7, to_executor=1), "instances"),
        (lambda: rt.migrate("rc-bad", WINDOW, bins=[300], to_instance=0), "bin numbers"),
        (lambda: rt.migrate("rc-bad", WINDOW, instance=0), "either bins"),
        (lambda: rt.remove_executor(99), "live executors"),
    ]
    for call, needle in bad:
        with pytest.raises(ReconfigError) as e:
            call()
        assert needle in str(e.value) and "Fix:" in str(e.value), str(e.value)
        assert "rc-bad" in str(e.value) or "rc-unkeyed" in str(e.value) or "executor" in str(e.value)
    # A second migration of the same dataflow while one runs: a conflict.
    slow = rt.scale("rc-bad", WINDOW, 2, strategy="fluid")
    with pytest.raises(ReconfigConflict, match="under way"):
        rt.scale("rc-bad", WINDOW, 1)
    done(rt, slow)
    assert rt.describe("rc-bad", refresh=True)["hosts"] != before  # the good one did happen
    with pytest.raises(ReconfigConflict, match="last executor"):
        pools["fifo1"].remove_executor(0)
    for name in ("rc-bad", "rc-unkeyed"):
        rt.cancel(name)
