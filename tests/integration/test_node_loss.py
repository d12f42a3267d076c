"""Nodes lost without grace on a three-node Ray cluster on this machine (`ray start`
processes on loopback: a head and two workers), with `cameo serve` joined to it: a
worker node's raylet, workers and agents SIGKILLed at once, as when machines die.
Every dataflow with an activation there is restored from its last checkpoint: first
where Ray restarts the lost executor (the head has a CPU to spare), then, with no room
left, on the executors left (the lost one retired), then on a node added meanwhile.
Pushes and reads through the API go on; a tenant elsewhere produces results throughout;
and then the head's processes (the pool's controller, the service) are killed and
started again. The results equal `run_local`'s, each exactly once.

Then a node is added, work placed on it, and it is drained before it goes: its
dataflows are restored on the executors left from checkpoints taken then. Last, the
upgrade procedure's steps within one version: the service replaced, the controller
killed, each worker node drained, stopped and started again.

One cluster for the module (the tests run in file order); its storage is a folder every node of it sees (one machine),
named explicitly as a real cluster must.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from cameo_actors import Dataflow, count, run_local, sum_
from cameo_actors.service.testing import LocalCluster, ServiceProcess, fresh_dir, processes_under
from tests.integration.test_service_cluster import wait_until
from tests.integration.test_service_limits import read_on
from tests.shared.zoo import SCHEMA, canon, events

pytestmark = pytest.mark.integration

RUN_DIR = os.path.abspath(os.path.join(os.environ.get("CAMEO_RUN_DIR", ".run"), "test-nodes"))
EXECUTORS = 3  # SPREAD: one per node; the head has a CPU to spare for one restarted there
REPLACE_AFTER_S = 8.0  # a lost executor not restarted by then (Ray: 3-4 s here) is retired
VICTIMS = ("win", "filt")


def keyed_window(name: str = "win", parallelism: int = EXECUTORS) -> Dataflow:
    d = Dataflow(name, latency_target_ms=1000, tenant="a")
    (d.source("s", schema=SCHEMA, event_time="ts", allowed_lateness_ms=40, parallelism=parallelism)
     .key_by("key").window(tumbling_ms=50, parallelism=parallelism)
     .aggregate(n=count(), total=sum_("value")).sink("o"))
    return d


def a_filter() -> Dataflow:
    d = Dataflow("filt", latency_target_ms=1000, tenant="b")
    (d.source("s", schema=SCHEMA, event_time="ts", parallelism=EXECUTORS)
     .filter("level == 'ERROR'").sink("o"))
    return d


def bystander() -> Dataflow:
    d = Dataflow("bystander", latency_target_ms=1000, tenant="c")
    d.source("s", schema=SCHEMA, event_time="ts").filter("value > 0").sink("o")
    return d


@pytest.fixture(scope="module")
def cluster() -> Iterator[LocalCluster]:
    c = LocalCluster(fresh_dir(RUN_DIR), cpus=(2, 1, 1))
    c.start()
    yield c
    c.stop()


@pytest.fixture(scope="module")
def service(cluster: LocalCluster) -> Iterator[ServiceProcess]:
    storage = os.path.join(cluster.run_dir, "shared")
    svc = ServiceProcess(os.path.join(cluster.run_dir, "service"), env=cluster.env, args=[
        "--address", cluster.address, "--executors", str(EXECUTORS), "--pool", "nodes",
        "--checkpoint-interval", "0.5", "--checkpoint-url", os.path.join(storage, "checkpoints"),
        "--ingress-log-dir", os.path.join(storage, "ingress"),
        "--replace-lost-after", str(REPLACE_AFTER_S)])
    svc.start()
    yield svc
    svc.stop()


class Bystander(threading.Thread):
    """Pushes to the bystander and reads its results, every 0.2 s, until stopped;
    remembers when each result arrived."""

    def __init__(self, svc: ServiceProcess) -> None:
        super().__init__(daemon=True)
        self.client = svc.client()
        self.stopped = threading.Event()
        self.pushed = 0
        self.results: list[tuple[float, dict[str, Any]]] = []
        self.failures: list[str] = []

    def run(self) -> None:
        cursor = None
        data = events(50_000, seed=3)
        while not self.stopped.is_set():
            try:
                if self.pushed < len(data):
                    self.client.push("bystander", "s", data[self.pushed:self.pushed + 200])
                    self.pushed += 200
                page = self.client.results("bystander", cursor=cursor, limit=5_000)
                if page["rows"]:
                    cursor = page["cursor"]
                    self.client.commit_results("bystander", cursor)
                    now = time.monotonic()
                    self.results += [(now, r["event"]) for r in page["rows"]]
            except Exception as e:  # noqa: BLE001 - recorded and asserted on
                self.failures.append(repr(e)[:300])
            self.stopped.wait(0.2)

    def since(self, t: float) -> int:
        return sum(1 for at, _ in self.results if at >= t)


def pusher(c: Any, name: str, data: list[dict[str, Any]], part: int = 4_000
           ) -> Callable[[], None]:
    """A call that pushes the next `part` events of `data` to source "s" of `name`."""
    starts = iter(range(0, len(data), part))

    def push_next() -> None:
        i = next(starts)
        assert c.push(name, "s", data[i:i + part], batch_size=2_000) == len(data[i:i + part])
    return push_next


def hosting(svc: ServiceProcess, names: tuple[str, ...]) -> set[str]:
    """The addresses of the nodes whose executors host an activation of `names`."""
    c = svc.client()
    where = {e["executor"]: e.get("address") for e in c.executors()}
    return {where[i] for name in names for i in c.status(name)["executors"]}


def kill_a_worker(cluster: LocalCluster, svc: ServiceProcess) -> tuple[str, bool]:
    """Kill a worker node that hosts the victims, one that spares the bystander if there
    is one; (its address, whether the bystander was spared)."""
    spared = hosting(svc, ("bystander",))
    hit = hosting(svc, VICTIMS)
    workers = [n for n in sorted(cluster.nodes) if n and cluster.node_ip(n) in hit]
    number = next((n for n in workers if cluster.node_ip(n) not in spared), workers[0])
    cluster.kill_node(number)
    return cluster.node_ip(number), cluster.node_ip(number) not in spared


def recovered(svc: ServiceProcess, lost: str, times: int) -> bool:
    """The victims run again, restored `times` times in all, on executors that answer
    (or were retired), none on `lost`."""
    c = svc.client()
    executors = c.executors()
    return all(c.status(n)["state"] == "running" and c.status(n)["recoveries"] == times
               for n in VICTIMS) and all(e.get("address") or e.get("alive") is False
                                         for e in executors) \
        and lost not in hosting(svc, VICTIMS)


def test_worker_nodes_lost_twice_then_the_heads_processes_killed_nothing_lost(
        cluster: LocalCluster, service: ServiceProcess) -> None:
    c = service.client()
    flows = {"win": keyed_window(), "filt": a_filter()}
    for flow in (*flows.values(), bystander()):
        c.submit(flow)
    assert len({e["address"] for e in c.executors()}) == 3  # one executor per node
    data = events(24_000)
    want = {name: canon(run_local(flow, {"s": data})["o"]) for name, flow in flows.items()}
    got: dict[str, list[dict[str, Any]]] = {name: [] for name in flows}
    cursors: dict[str, str | None] = dict.fromkeys(flows)

    def push_and_read(part: list[dict[str, Any]]) -> None:
        for name in flows:
            assert c.push(name, "s", part, batch_size=2_000) == len(part)
        for name in flows:
            rows, cursors[name] = read_on(c, name, cursors[name], 1, timeout_s=10.0)
            got[name] += rows

    side = Bystander(service)
    side.start()
    try:
        push_and_read(data[:6_000])
        # A worker node dies: the victims recover on the nodes left, the bystander goes on.
        # (Of two workers, at least one spares the bystander.)
        t_lost = time.monotonic()
        lost, spared = kill_a_worker(cluster, service)
        assert spared
        push_and_read(data[6_000:12_000])  # taken while they recover (a push waits)
        wait_until(lambda: recovered(service, lost, 1), f"recovered without node {lost}", 120)
        assert side.since(t_lost) > 0, "the bystander produced nothing while the others recovered"

        # The other worker dies, and no node has room for its executor: its instances
        # are restored on the head's executors, and it is retired. (The bystander may be
        # on it: then it recovers too.)
        t_lost = time.monotonic()
        lost, spared_again = kill_a_worker(cluster, service)
        push_and_read(data[12_000:18_000])
        wait_until(lambda: recovered(service, lost, 2), f"recovered without node {lost}", 120)
        assert side.since(t_lost) > 0
        retired = [e for e in c.executors() if e.get("alive") is False]
        assert len(retired) == 1 and "restored on the executors left" in retired[0]["faults"][0]
        assert hosting(service, VICTIMS) == {cluster.head_ip}
        side.stopped.set()
        side.join(30)

        # The head's processes: the pool's controller (Ray restarts it) and the service.
        controller = next(pid for pid, (_, command) in processes_under(cluster.nodes[0].pid)
                          .items() if command.startswith("ray::Controller"))
        os.kill(controller, signal.SIGKILL)
        service.kill()
        service.start()
        push_and_read(data[18_000:])
        for name in flows:
            c.close(name)
        wait_until(lambda: all(c.status(n)["state"] == "finished" for n in flows), "finished", 120)
        for name in flows:
            rows, cursors[name] = read_on(c, name, cursors[name], len(want[name]) - len(got[name]),
                                          timeout_s=60.0)
            got[name] += rows
            assert not c.results(name, cursor=cursors[name])["rows"]  # nothing more
    finally:
        side.stopped.set()
        side.join(30)
    for name in flows:
        g, w = Counter(canon(got[name])), Counter(want[name])
        assert g == w, (f"{name}: {len(got[name])} results, {len(want[name])} expected: "
                        f"{sum((g - w).values())} extra or repeated, "
                        f"{sum((w - g).values())} missing")
    assert not side.failures, side.failures[:3]
    expected = canon([e for e in events(50_000, seed=3)[:side.pushed] if e["value"] > 0])
    assert Counter(canon([e for _, e in side.results])) <= Counter(expected)
    history = [h["state"] for h in c.status("bystander")["history"]]
    assert history == (["running"] if spared_again else ["running", "recovering", "running"])


def test_a_node_added_then_drained_before_it_goes_loses_nothing(
        cluster: LocalCluster, service: ServiceProcess) -> None:
    c = service.client()
    number = cluster.add_node(2)
    address = cluster.node_ip(number)
    added = c.add_executors(2)
    assert {e["address"] for e in c.executors() if e["executor"] in added} == {address}
    flow = keyed_window("moved", parallelism=4)
    c.submit(flow)
    assert address in hosting(service, ("moved",))
    data = events(12_000, seed=8)
    want = canon(run_local(flow, {"s": data})["o"])
    assert c.push("moved", "s", data[:6_000], batch_size=2_000) == 6_000
    got, cursor = read_on(c, "moved", None, 1, timeout_s=10.0)

    spare = cluster.node_ip(cluster.add_node(1))
    nodes = c.info()["ray"]["nodes"]

    drained = c.drain_node(address)
    assert drained["executors"] == sorted(added) and "moved" in drained["dataflows"]
    assert drained["ray_refused"] == {}  # drained at Ray too
    assert address not in hosting(service, ("moved",))
    gone = [e for e in c.executors() if e["executor"] in added]
    assert all(e["alive"] is False and "drained" in e["faults"][0] for e in gone), gone
    # Ray places nothing new on the drained node (it has the most free CPUs), and its
    # raylet leaves once idle.
    new = c.add_executors(1)
    assert {e["address"] for e in c.executors() if e["executor"] in new} == {spare}
    wait_until(lambda: c.info()["ray"]["nodes"] == nodes - 1, "the drained node left Ray", 60)
    cluster.stop_node(number)  # the node goes: nothing of the pool was left on it

    assert c.push("moved", "s", data[6_000:], batch_size=2_000) == 6_000
    c.close("moved")
    wait_until(lambda: c.status("moved")["state"] == "finished", "finished", 120)
    more, cursor = read_on(c, "moved", cursor, len(want) - len(got), timeout_s=60.0)
    got += more
    assert Counter(canon(got)) == Counter(want)
    status = c.status("moved")
    assert status["recoveries"] == 1 and "drained" in status["history"][1]["reason"]


def test_a_rolling_upgrade_service_controller_then_node_by_node_loses_nothing(
        cluster: LocalCluster, service: ServiceProcess) -> None:
    """The steps of the upgrade procedure of docs/service.md within one version (across
    two: test_upgrade.py): the service replaced (SIGTERM with --on-shutdown keep, a new
    one started; the controller runs the same code, so it is kept), the controller
    killed (Ray starts it again), then each worker node drained, stopped and started
    again, its executors added back; a dataflow runs and is pushed to meanwhile."""
    c = service.client()
    workers = [cluster.add_node(1), cluster.add_node(1)]
    c.add_executors(2)
    flow = keyed_window("rolled", parallelism=4)
    c.submit(flow)
    data = events(16_000, seed=10)
    want = canon(run_local(flow, {"s": data})["o"])
    push_next = pusher(c, "rolled", data)
    push_next()
    service.kill()  # (to start it again with --on-shutdown keep: the upgrade's setting)
    service.args += ["--on-shutdown", "keep"]
    service.start()
    assert service.stop() == 0  # the old service leaves the dataflows running
    service.args = service.args[:-2]
    service.start()  # the new one finds them
    found = next(line for line in service.log().splitlines() if "still running: " in line)
    assert "rolled (tenant a)" in found, found
    controller = next(pid for pid, (_, command) in processes_under(cluster.nodes[0].pid)
                      .items() if command.startswith("ray::Controller"))
    os.kill(controller, signal.SIGKILL)  # Ray starts it again: the code installed now
    push_next()
    for number in workers:
        c.drain_node(cluster.node_ip(number))
        cluster.stop_node(number)
        cluster.add_node(1)  # the node back, upgraded
        c.add_executors(1)
        push_next()
    c.close("rolled")
    wait_until(lambda: c.status("rolled")["state"] == "finished", "finished", 120)
    got, _ = read_on(c, "rolled", None, len(want), timeout_s=60.0)
    assert Counter(canon(got)) == Counter(want)
    assert c.status("rolled")["recoveries"] <= 2  # one per drained node it was on
