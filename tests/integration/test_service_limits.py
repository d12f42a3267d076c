"""What one tenant cannot break for the others, against a real `cameo serve` on loopback:
a reader that never reads (429 at once, others unaffected), per-tenant request limits,
and an executor killed with SIGKILL (its dataflows are restored from their last checkpoint
while pushes to them wait, the others go on).

One service for the module; the executor is killed in the last test.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from cameo_actors import Dataflow
from cameo_actors.service.client import Client, ServiceError
from cameo_actors.service.testing import ServiceProcess, fresh_dir
from tests.shared.polling import wait_for

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


def read_on(c: Client, name: str, cursor: str | None, want: int, timeout_s: float = 30.0
            ) -> tuple[list[dict[str, Any]], str | None]:
    """`want` results after `cursor` (None: after the committed rows), read and committed
    page by page; the rows and the cursor to read on from. A reader that keeps its cursor
    reads every row once, across a recovery (which restores the committed offsets of the
    last checkpoint, maybe from before a commit)."""
    rows: list[dict[str, Any]] = []
    deadline = time.monotonic() + timeout_s
    while len(rows) < want and time.monotonic() < deadline:
        page = c.results(name, cursor=cursor, limit=5_000)
        rows.extend(r["event"] for r in page["rows"])
        cursor = page["cursor"]
        if page["rows"]:
            c.commit_results(name, cursor)
        else:
            time.sleep(0.05)
    return rows, cursor


def read_page(c: Client, name: str) -> list[dict[str, Any]]:
    """The results readable now (one page), committed."""
    page = c.results(name, limit=5_000)
    if page["rows"]:
        c.commit_results(name, page["cursor"])
    return [r["event"] for r in page["rows"]]


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
    assert [d["name"] for d in admin.list(["running"])] == ["hoard", "steady"], \
        admin.status("hoard")
    assert "cameo_dataflow_transitions" in admin.metrics()
    # Reading and committing frees the log: the hoarder's pushes are accepted again.
    read_all(hoarder, "hoard", pushed)
    wait_for(lambda: _accepts(hoarder, "hoard"), "hoarder accepted again")
    for name in ("hoard", "steady"):
        assert admin.cancel(name)["state"] == "cancelled"


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


def test_an_executor_killed_recovers_its_dataflows_and_spares_the_others(
        svc: ServiceProcess) -> None:
    c = svc.client()
    c.submit(passthrough("victim", "ops"))
    c.submit(passthrough("survivor", "ops"))
    victim_ex = c.status("victim")["executors"]
    survivor_ex = c.status("survivor")["executors"]
    assert not set(victim_ex) & set(survivor_ex), (victim_ex, survivor_ex)
    # Results before the kill, read and committed (readable once a checkpoint completed).
    assert c.push("victim", "in", batch(0, 300))["accepted"] == 300
    victim_got, cursor = read_on(c, "victim", None, 300)
    assert len(victim_got) == 300
    old_pid = next(e["pid"] for e in c.executors() if e["executor"] == victim_ex[0])

    # Meanwhile: GET status is asked every 0.15 s (from threads of their own: a status may
    # wait for the victim's executors), the survivor is pushed to and read as if nothing
    # happened (another thread), and the victim takes pushes: one waits while the victim
    # is restored, bounded by the pool's recovery timeout.
    stop = threading.Event()
    seen: list[tuple[float, float, str, str | None]] = []  # (asked, answered, state, cause)
    survivor = {"pushed": 0}
    survivor_slowest_s = [0.0]
    survivor_got: list[dict[str, Any]] = []
    failures: list[BaseException] = []

    def ask_status() -> None:
        t0 = time.time() - killed_at
        st = svc.client().status("victim")
        seen.append((t0, time.time() - killed_at, st["state"], st["cause"]))

    def watch() -> None:
        asking: list[threading.Thread] = []
        while not stop.is_set():
            asking = [t for t in asking if t.is_alive()]
            if len(asking) < 4:  # a few at a time: they hold server threads while they wait
                asking.append(threading.Thread(target=guarded(ask_status), daemon=True))
                asking[-1].start()
            time.sleep(0.15)
        for t in asking:
            t.join(60)

    def feed_survivor() -> None:
        s = svc.client()
        while not stop.is_set():
            t0 = time.monotonic()
            assert s.push("survivor", "in", batch(survivor["pushed"], 50))["accepted"] == 50
            survivor_slowest_s[0] = max(survivor_slowest_s[0], time.monotonic() - t0)
            survivor["pushed"] += 50
            survivor_got.extend(read_page(s, "survivor"))
            time.sleep(0.05)

    victim = {"pushed": 300}
    pushes: list[tuple[float, float]] = []  # (s after the kill, s it took)
    allot = threading.Lock()

    def push_victim() -> None:
        with allot:  # each push its own events
            first = victim["pushed"]
            victim["pushed"] += 50
        t0 = time.time()
        assert svc.client().push("victim", "in", batch(first, 50))["accepted"] == 50
        pushes.append((t0 - killed_at, time.time() - t0))

    def feed_victim() -> None:
        # Pushes start every 0.1 s whether or not the earlier ones returned: some start
        # before the pool noticed, some while the victim is restored, some after.
        sending: list[threading.Thread] = []
        while not stop.is_set():
            sending = [t for t in sending if t.is_alive()]
            if len(sending) < 4:
                sending.append(threading.Thread(target=guarded(push_victim), daemon=True))
                sending[-1].start()
            time.sleep(0.1)
        for t in sending:
            t.join(90)

    def guarded(fn: Callable[[], None]) -> Callable[[], None]:
        def run() -> None:
            try:
                fn()
            except BaseException as e:  # reported by the test
                failures.append(e)
        return run

    threads = [threading.Thread(target=guarded(f), daemon=True)
               for f in (watch, feed_survivor, feed_victim)]
    killed_at = time.time()
    os.kill(old_pid, signal.SIGKILL)
    for t in threads:
        t.start()
    try:
        # The pool's list answers from the controller alone: never waits on an executor.
        def restored() -> bool:
            assert not failures, failures
            return [d["state"] for d in c.list() if d["name"] == "victim"] == ["running"] \
                and any(h["state"] == "recovering" for h in c.status("victim")["history"])
        wait_for(restored, "victim restored", 90)
    finally:
        stop.set()
        for t in threads:
            t.join(60)
        assert not [t for t in threads if t.is_alive()], "a push or a status hangs"
    assert not failures, failures
    history = c.status("victim")["history"]
    print(f"victim history {[(h['state'], round(h['at'] - killed_at, 2)) for h in history]}; "
          f"pushes (s after the kill, s taken) {[(round(a, 2), round(b, 2)) for a, b in pushes]}; "
          f"survivor's slowest push {survivor_slowest_s[0]:.2f} s; status answers (asked, "
          f"answered, state) {[(round(a, 2), round(b, 2), st) for a, b, st, _ in sorted(seen)]}")
    assert [h["state"] for h in history] == ["running", "recovering", "running"], history
    assert f"executor {victim_ex[0]} died" in str(history[1]["reason"]), history
    assert max(took for _, took in pushes) < 60, pushes  # waited, bounded
    # A status answered while the victim recovers names the cause. (Ray restarts an
    # executor in about as long as the pool takes to notice its death, so `recovering`
    # may last only the restore, tens of ms: no answer need fall into it.)
    assert all(f"executor {victim_ex[0]} died" in (cause or "")
               for *_, state, cause in seen if state == "recovering"), sorted(seen)
    new_pid = next(e["pid"] for e in c.executors() if e["executor"] == victim_ex[0])
    assert new_pid not in (None, old_pid)

    # After the recovery: more pushes, then every result exactly once.
    pushed = victim["pushed"]
    assert c.push("victim", "in", batch(pushed, 300))["accepted"] == 300
    pushed += 300
    c.close("victim")
    more, cursor = read_on(c, "victim", cursor, pushed - len(victim_got))
    victim_got += more
    got_ts = sorted(e["ts"] for e in victim_got)
    missing = sorted(set(range(pushed)) - set(got_ts))
    assert got_ts == list(range(pushed)), (
        f"{len(got_ts)} results for {pushed} events pushed: {len(got_ts) - len(set(got_ts))} "
        f"repeated, {len(missing)} missing (from {missing[:1]}); pushes after the kill "
        f"(s after it, s taken): {[(round(a, 2), round(b, 2)) for a, b in pushes]}")
    wait_for(lambda: c.status("victim")["state"] == "finished", "victim finished")

    # The survivor never noticed.
    survivor_got += read_all(c, "survivor", survivor["pushed"] - len(survivor_got))
    assert sorted(e["ts"] for e in survivor_got) == list(range(survivor["pushed"]))
    assert [h["state"] for h in c.status("survivor")["history"]] == ["running"]
    recoveries = {s.labels["dataflow"]: s.value
                  for f in text_string_to_metric_families(c.metrics())
                  if f.name == "cameo_recoveries" for s in f.samples}
    assert recoveries == {"victim": 1, "survivor": 0}, recoveries
    for name in ("victim", "survivor"):
        c.cancel(name)
    run = svc.cli("executors", "--json")
    assert '"alive": false' not in run.stdout, run.stdout  # restarted: alive again
