"""What one tenant cannot break for the others, against a real `cameo serve` on loopback:
a reader that never reads (429 at once, others unaffected), per-tenant request limits,
and an executor killed with SIGKILL (503 with the cause for its dataflows, the others go on).

One service for the module; the executor is killed in the last test.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest

from cameo_actors import Dataflow
from cameo_actors.service.client import Client, ServiceError
from cameo_actors.service.testing import ServiceProcess, fresh_dir

pytestmark = pytest.mark.integration

RUN_DIR = os.path.abspath(os.path.join(os.environ.get("CAMEO_RUN_DIR", ".run"),
                                       "test-service-limits"))
SCHEMA = {"ts": "int", "level": "str"}
#: Half of a dataflow's budget holds its result logs: about 10,000 unread rows here.
BUDGET = 8_000_000


def passthrough(name: str, tenant: str) -> Dataflow:
    return (Dataflow(name, latency_target_ms=100, tenant=tenant)
            .source("in", schema=SCHEMA, event_time="ts").filter("level != ''").sink("out"))


def batch(start: int, n: int) -> list[dict[str, Any]]:
    return [{"ts": start + i, "level": "INFO"} for i in range(n)]


def wait_for(check: Callable[[], bool], what: str, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {timeout_s} s")
        time.sleep(0.1)


def read_all(c: Client, name: str, want: int, timeout_s: float = 30.0) -> list[dict[str, Any]]:
    """Every result up to `want` rows, read and committed page by page."""
    rows: list[dict[str, Any]] = []
    deadline = time.monotonic() + timeout_s
    while len(rows) < want and time.monotonic() < deadline:
        page = c.results(name, limit=5_000)
        rows.extend(r["event"] for r in page["rows"])
        if page["rows"]:
            c.commit_results(name, page["cursor"])
        else:
            time.sleep(0.05)
    return rows


@pytest.fixture(scope="module")
def svc() -> Iterator[ServiceProcess]:
    service = ServiceProcess(fresh_dir(RUN_DIR), args=[
        "--address", "local", "--executors", "2", "--num-cpus", "4",
        "--state-budget-bytes", str(BUDGET), "--tenant-rate", "100000"])
    service.start()
    yield service
    service.stop()


def test_a_reader_that_never_reads_gets_429_and_nobody_else_notices(svc: ServiceProcess) -> None:
    admin = svc.client()
    hoarder = svc.client(admin.create_token("hoarders")["token"])
    steady = svc.client(admin.create_token("steady")["token"])
    hoarder.submit(passthrough("hoard", "hoarders"))
    steady.submit(passthrough("steady", "steady"))
    refused: ServiceError | None = None
    pushed = 0
    for i in range(200):  # never reads: the result log fills
        try:
            pushed += hoarder.push("hoard", "in", batch(i * 2_000, 2_000))["accepted"]
        except ServiceError as e:
            refused = e
            break
        # Meanwhile the other tenant pushes and reads, and is answered every time.
        steady.push("steady", "in", batch(i * 100, 100))
    assert refused is not None, f"no 429 after {pushed} unread results"
    assert refused.status == 429 and refused.code == "results_full", refused
    assert "cameo results hoard" in (refused.fix or "")
    got = read_all(steady, "steady", 100 * i)  # refused at push i: the steady pushed i batches
    assert sorted(e["ts"] for e in got) == list(range(100 * i))
    # The admin, health and metrics answer while the hoarder is held.
    assert httpx.get(svc.url + "/healthz").status_code == 200
    assert [d["name"] for d in admin.list(["running"])] == ["hoard", "steady"]
    assert "cameo_dataflow_transitions" in admin.metrics()
    # Reading and committing frees the log: the hoarder's pushes are accepted again.
    read_all(hoarder, "hoard", pushed)
    wait_for(lambda: _accepts(hoarder, "hoard"), "hoarder accepted again")
    for name in ("hoard", "steady"):
        assert admin.cancel(name)["state"] == "cancelled"


def _state(c: Client, name: str) -> str:
    """The state, or "unavailable" while the pool has not yet noticed the executor died
    (the service then answers 503 with the cause: never 500)."""
    try:
        return str(c.status(name)["state"])
    except ServiceError as e:
        assert e.status == 503 and "died" in str(e.got), e
        return "unavailable"


def _accepts(c: Client, name: str) -> bool:
    try:
        return bool(c.push(name, "in", batch(10**7, 10))["accepted"] == 10)
    except ServiceError as e:
        assert e.status == 429, e
        return False


def test_lifecycle_over_http_finishing_finished_then_results(svc: ServiceProcess) -> None:
    c = svc.client()
    c.submit(passthrough("closing", "ops"))
    c.push("closing", "in", batch(0, 500))
    c.close("closing")
    wait_for(lambda: c.status("closing")["state"] == "finished", "finished")
    s = c.status("closing")
    assert [h["state"] for h in s["history"]] == ["running", "finishing", "finished"]
    assert len(read_all(c, "closing", 500)) == 500  # a finished dataflow's results stay readable
    listed = svc.cli("list", "--json")
    assert '"finished"' in listed.stdout
    assert c.cancel("closing")["state"] == "finished"


def test_an_executor_killed_answers_503_for_its_dataflows_only(svc: ServiceProcess) -> None:
    c = svc.client()
    c.submit(passthrough("victim", "ops"))
    c.submit(passthrough("survivor", "ops"))
    victim_ex = c.status("victim")["executors"]
    survivor_ex = c.status("survivor")["executors"]
    assert not set(victim_ex) & set(survivor_ex), (victim_ex, survivor_ex)
    pid = next(e["pid"] for e in c.executors() if e["executor"] == victim_ex[0])
    os.kill(pid, signal.SIGKILL)
    wait_for(lambda: _state(c, "victim") == "failed", "victim failed")
    assert f"executor {victim_ex[0]} died" in c.status("victim")["cause"]
    with pytest.raises(ServiceError) as e:
        c.push("victim", "in", batch(0, 10))
    assert e.value.status == 503 and "died" in e.value.message
    assert c.push("survivor", "in", batch(0, 300))["accepted"] == 300
    assert len(read_all(c, "survivor", 300)) == 300
    assert "cameo_results" in c.metrics()
    assert c.cancel("victim")["state"] == "failed"
    run = svc.cli("executors", "--json")
    assert '"alive": false' in run.stdout
