"""A dataflow's lifecycle and the limits that keep one dataflow from harming others,
on a real local Ray: finishing and finished, a state budget, windows per event, and an
executor killed with SIGKILL while dataflows run.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from typing import Any

import pytest

from cameo_actors import Dataflow, DataflowEnded, Runtime, SpecError, count, run_local
from cameo_actors.runtime.boundary import FINISHED, LIVE_STATES
from tests.shared.polling import wait_for

pytestmark = pytest.mark.integration

SCHEMA = {"ts": "int", "key": "str", "level": "str"}


def events(n: int, start: int = 0, keys: int = 4) -> list[dict[str, Any]]:
    return [{"ts": start + i, "key": f"k{(start + i) % keys}", "level": "ERROR" if i % 2 else "INFO"}
            for i in range(n)]


def errors_only(name: str, state_bytes: int | None = None) -> Dataflow:
    df = Dataflow(name, latency_target_ms=100, tenant="ops", state_bytes=state_bytes)
    return df.source("logs", schema=SCHEMA, event_time="ts").filter("level == 'ERROR'").sink("out")


def state_of(rt: Any, name: str) -> str:
    return str(rt.describe(name, refresh=True)["state"])


def test_a_closed_dataflow_finishes_keeps_its_results_and_can_run_again(pools: Any) -> None:
    rt = pools["watched2"]
    rt.deploy(errors_only("lc-finish"))
    rt.push("lc-finish", "logs", events(100))
    rt.close("lc-finish")
    assert state_of(rt, "lc-finish") in LIVE_STATES  # finishing until every activation drained
    wait_for(lambda: state_of(rt, "lc-finish") == FINISHED, "finished")
    info = rt.describe("lc-finish", refresh=True)
    assert [h["state"] for h in info["history"]] == ["running", "finishing", "finished"]
    assert info["ended_at"] >= info["submitted_at"]
    assert sorted(e["ts"] for e in rt.results("lc-finish")) == list(range(1, 100, 2))
    assert [d["state"] for d in rt.list(["finished"]) if d["name"] == "lc-finish"] == ["finished"]
    # Cancelling a finished dataflow frees its results; it stays finished.
    assert rt.cancel("lc-finish")["state"] == FINISHED
    with pytest.raises(DataflowEnded):
        rt.results("lc-finish")
    rt.deploy(errors_only("lc-finish"))  # a new run under the same name
    rt.push("lc-finish", "logs", events(10))
    rt.wait_idle()
    assert len(rt.results("lc-finish")) == 5
    rt.cancel("lc-finish")
    assert state_of(rt, "lc-finish") == "cancelled"


def test_a_dataflow_over_its_state_budget_fails_alone(pools: Any) -> None:
    rt = pools["watched2"]
    # A window that never closes, keyed by a new key per event: state grows with every event.
    hog = (Dataflow("lc-hog", latency_target_ms=1000, tenant="greedy", state_bytes=2_000_000)
           .source("logs", schema=SCHEMA, event_time="ts")
           .key_by("key").window(tumbling_ms=10**9).aggregate(n=count()).sink("out"))
    rt.deploy(hog)
    rt.deploy(errors_only("lc-calm"))
    for i in range(20):
        try:
            rt.push("lc-hog", "logs", events(2_000, start=i * 2_000, keys=10**9))
        except DataflowEnded:  # failed between the look below and this push
            break
        if state_of(rt, "lc-hog") == "failed":
            break
    wait_for(lambda: state_of(rt, "lc-hog") == "failed", "hog failed")
    info = rt.describe("lc-hog", refresh=True)
    assert "over its state budget" in info["cause"] and "2000000" in info["cause"]
    assert info["released"] and info["final"]["events_in"] > 0 and not info["lost"]
    with pytest.raises(DataflowEnded, match="failed"):
        rt.stats("lc-hog")
    # The other tenant noticed nothing.
    rt.push("lc-calm", "logs", events(200))
    rt.wait_idle()
    assert sorted(e["ts"] for e in rt.results("lc-calm")) == list(range(1, 200, 2))
    assert state_of(rt, "lc-calm") == "running"
    rt.cancel("lc-calm")


def test_batches_to_a_dataflow_that_ended_meanwhile_fail_no_other(pools: Any) -> None:
    rt = pools["watched2"]
    rt.deploy(errors_only("lc-gone"))
    rt.deploy(errors_only("lc-stays"))
    rt.push("lc-gone", "logs", events(10))
    rt.describe("lc-gone", refresh=True)  # this handle takes it as running for a while yet
    Runtime.connect(pool=rt.pool, address=None).cancel("lc-gone")
    # Sent before this handle learns that it ended (its look is a second old at most): the
    # executor refuses the batch, and the flush below meets the refusal.
    with contextlib.suppress(DataflowEnded):  # the cancel took longer than that
        rt.push("lc-gone", "logs", events(10, start=10))
    rt.push("lc-stays", "logs", events(100))
    rt.wait_idle()  # settles the refused batch beside the other tenant's
    assert sorted(e["ts"] for e in rt.results("lc-stays")) == list(range(1, 100, 2))
    with pytest.raises(DataflowEnded, match="cancelled"):
        rt.push("lc-gone", "logs", events(10, start=20))
    rt.cancel("lc-stays")


def test_windows_per_event_are_bounded_when_deployed(pools: Any) -> None:
    rt = pools["watched2"]
    day = 86_400_000
    huge = (Dataflow("lc-huge", latency_target_ms=1000).source("logs", schema=SCHEMA, event_time="ts")
            .key_by("key").window(sliding_ms=day, slide_ms=1).aggregate(n=count()).sink("out"))
    with pytest.raises(SpecError) as e:
        rt.deploy(huge)
    assert f"{day} windows per event" in str(e.value.got) and "slide_ms of at least" in e.value.fix
    assert "lc-huge" not in [d["name"] for d in rt.list()]
    with pytest.raises(SpecError, match="max_state_bytes"):
        rt.deploy(errors_only("lc-greedy", state_bytes=10**13))


def test_an_executor_killed_recovers_only_the_dataflows_it_hosted(pools: Any) -> None:
    rt = pools["doomed3"]
    rt.deploy(errors_only("lc-victim"))
    rt.deploy(errors_only("lc-survivor"))
    victim_ex = rt.describe("lc-victim", refresh=True)["executors"]
    survivor_ex = rt.describe("lc-survivor", refresh=True)["executors"]
    assert not set(victim_ex) & set(survivor_ex)  # isolated: one executor each
    before = events(50)
    rt.push("lc-victim", "logs", before)
    rt.wait_idle()  # processed, and checkpointed: the results so far are readable
    got = rt.results("lc-victim")
    pid = next(e["pid"] for e in rt.executor_stats() if e["executor"] == victim_ex[0])
    killed_at = time.time()
    os.kill(pid, signal.SIGKILL)

    def restored() -> bool:
        history = rt.describe("lc-victim", refresh=True)["history"]
        assert history[-1]["state"] != "failed", history[-1]
        return history[-1]["state"] == "running" and history[-1]["at"] > killed_at
    wait_for(restored, "victim restored", timeout_s=60)
    info = rt.describe("lc-victim", refresh=True)
    assert [h["state"] for h in info["history"]] == ["running", "recovering", "running"]
    assert f"executor {victim_ex[0]} died" in str(info["history"][1]["reason"])
    assert "restored from checkpoint" in str(info["history"][2]["reason"])
    assert info["recoveries"] == 1 and not info["lost"] and info["cause"] is None
    assert info["executors"] == victim_ex  # restored where it ran: Ray restarted the executor
    back = [e for e in rt.executor_stats() if e["executor"] == victim_ex[0]]
    assert back and back[0]["alive"] is not False and back[0]["pid"] != pid
    # Its results across the kill are exactly run_local's: nothing lost, nothing twice.
    after = events(300, start=50)
    rt.push("lc-victim", "logs", after)
    rt.wait_idle()
    got += rt.results("lc-victim")
    expected = run_local(errors_only("lc-victim"), {"logs": before + after})["out"]
    assert sorted(e["ts"] for e in got) == sorted(e["ts"] for e in expected)
    # The survivor never stopped, and its results are exactly run_local's too.
    batch = events(300)
    rt.push("lc-survivor", "logs", batch)
    rt.wait_idle()
    expected = run_local(errors_only("lc-survivor"), {"logs": batch})["out"]
    assert sorted(e["ts"] for e in rt.results("lc-survivor")) == sorted(e["ts"] for e in expected)
    survivor = rt.describe("lc-survivor", refresh=True)
    assert [h["state"] for h in survivor["history"]] == ["running"]
    assert survivor["recoveries"] == 0
    # A newcomer can be deployed (on the pool's third executor) and runs.
    rt.deploy(errors_only("lc-newcomer"))
    newcomer_ex = rt.describe("lc-newcomer", refresh=True)["executors"]
    assert not set(newcomer_ex) & (set(victim_ex) | set(survivor_ex))
    rt.push("lc-newcomer", "logs", events(20))
    rt.wait_idle()
    assert sorted(e["ts"] for e in rt.results("lc-newcomer")) == list(range(1, 20, 2))
    for name in ("lc-survivor", "lc-newcomer", "lc-victim"):
        rt.cancel(name)
