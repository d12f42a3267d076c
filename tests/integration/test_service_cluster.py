"""The service on a two-node Ray cluster started on this machine with `ray start --head`
and `ray start --address` (1 and 2 CPUs, loopback addresses 127.0.0.2 and .3):
executors on both nodes, metrics from both, and dataflows that survive a crash and
a restart of the service process (the detached controller keeps them). And a service on
an embedded Ray, killed with it and started again: it restores its dataflows from their
checkpoints (the controller's registry is kept in the checkpoint storage).

The cluster is started once for the module (the last test does not use it); the tests
run in file order.
"""

from __future__ import annotations

import os
import signal
import time
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from cameo_actors import Dataflow, count, run_local, sum_
from cameo_actors.service.client import ServiceError
from cameo_actors.service.testing import (
    LocalCluster,
    ServiceProcess,
    fresh_dir,
    proc_stat,
    processes_under,
)
from tests.integration.test_service_limits import read_on
from tests.shared import zoo

pytestmark = pytest.mark.integration

RUN_DIR = os.path.abspath(os.path.join(os.environ.get("CAMEO_RUN_DIR", ".run"), "test-cluster"))
SCHEMA = {"seq": "int", "key": "str"}
EXECUTORS = 3  # 1 CPU on the head + 2 on the worker: every node gets executors


def spread_flow() -> Dataflow:
    # Parallelism 3 places an instance of each step on each of the 3 executors.
    return (Dataflow("spread", latency_target_ms=200, tenant="ops")
            .source("s", schema=SCHEMA, parallelism=EXECUTORS)
            .map({"seq": "seq", "key": "key"}, parallelism=EXECUTORS).sink("o"))


def batch(start: int, n: int) -> list[dict[str, Any]]:
    return [{"seq": start + i, "key": f"k{i % 7}"} for i in range(n)]


@pytest.fixture(scope="module")
def cluster() -> Iterator[LocalCluster]:
    c = LocalCluster(fresh_dir(RUN_DIR), cpus=(1, 2))
    c.start()
    yield c
    c.stop()


def shared_storage(cluster: LocalCluster) -> list[str]:
    """Storage every node of the cluster reaches (one machine: any folder), named."""
    shared = os.path.join(cluster.run_dir, "shared")
    return ["--checkpoint-url", os.path.join(shared, "checkpoints"),
            "--ingress-log-dir", os.path.join(shared, "ingress")]


@pytest.fixture(scope="module")
def service(cluster: LocalCluster) -> Iterator[ServiceProcess]:
    svc = ServiceProcess(os.path.join(cluster.run_dir, "service"), env=cluster.env,
                         args=["--address", cluster.address, "--executors", str(EXECUTORS),
                               "--pool", "two-nodes", "--drain-timeout", "5",
                               *shared_storage(cluster)])
    svc.start()
    yield svc
    svc.stop()


def wait_results(svc: ServiceProcess, at_least: int, timeout_s: float = 60.0) -> int:
    deadline = time.monotonic() + timeout_s
    while True:
        n = int(svc.client().status("spread")["results"])
        if n >= at_least:
            return n
        assert time.monotonic() < deadline, f"only {n} of {at_least} results after {timeout_s} s"
        time.sleep(0.3)


def test_a_pool_on_two_nodes_left_node_local_storage_is_refused(cluster: LocalCluster) -> None:
    svc = ServiceProcess(os.path.join(cluster.run_dir, "refused"), env=cluster.env,
                         args=["--address", cluster.address, "--pool", "local-storage"])
    with pytest.raises(TimeoutError) as refused:
        svc.start(timeout_s=60)
    assert svc.proc is not None and svc.proc.wait(10) == 1
    log = svc.log()
    assert "Ray cluster of 2 nodes: expected storage every node reaches" in log, log[-2000:]
    assert "--checkpoint-url" in log and "--ingress-log-dir" in log and "Fix: name them" in log
    assert "exit code 1" in str(refused.value)


def test_a_pool_whose_storage_is_each_nodes_own_is_refused(cluster: LocalCluster) -> None:
    """Storage named, but a folder of that name is a disk of each node's own (a third
    node sees a tmpfs of its own there): the executor on it does not find the mark the
    service left, and the service refuses to start, naming the node and the folders."""
    own = os.path.join(cluster.run_dir, "not-shared")
    node = cluster.add_node(1, own=own)
    try:
        svc = ServiceProcess(os.path.join(cluster.run_dir, "not-shared-service"), env=cluster.env,
                             args=["--address", cluster.address, "--pool", "not-shared",
                                   "--executors", "4",
                                   "--checkpoint-url", os.path.join(own, "checkpoints"),
                                   "--ingress-log-dir", os.path.join(own, "ingress")])
        with pytest.raises(TimeoutError):
            svc.start(timeout_s=90)
        assert svc.proc is not None and svc.proc.wait(10) == 1
        log = svc.log()
        assert "expected storage every node reaches, got folders that are each node's own" in log, \
            log[-2000:]
        assert f"on node {cluster.node_ip(node)} does not find a mark left in checkpoint_url" \
            f" {own}/checkpoints, ingress_log_dir {own}/ingress" in log, log[-2000:]
        assert "127.0.0.2 does not find" not in log  # the nodes that share it do
        marks = os.path.join(own, "checkpoints", "_marks")
        assert not os.path.exists(marks) or not os.listdir(marks)  # the marks were removed
    finally:
        cluster.stop_node(node)


def test_executors_on_both_nodes_and_metrics_from_both(service: ServiceProcess) -> None:
    info = service.client().info()
    assert info["ray"]["nodes"] == 2 and not info["ray"]["embedded"]
    assert info["ray"]["token_auth"] is True and info["executors"] == EXECUTORS
    c = service.client()
    assert c.submit(spread_flow())["created"]
    assert c.push("spread", "s", batch(0, 3000), batch_size=500) == 3000
    wait_results(service, 3000)

    executors = c.executors()
    nodes = {e["node"] for e in executors}
    assert len(nodes) == 2, executors
    assert all(e["executed"] > 0 for e in executors), executors  # every executor did work

    fams = {f.name: f for f in text_string_to_metric_families(c.metrics())}
    busy = fams["cameo_executor_busy_seconds"].samples
    assert len({s.labels["node"] for s in busy}) == 2
    assert all(s.value > 0 for s in busy), busy
    executed = {s.labels["executor"]: s.value for s in fams["cameo_executor_messages"].samples}
    assert set(executed) == {"0", "1", "2"} and all(v > 0 for v in executed.values())
    results = {s.labels["dataflow"]: s.value for s in fams["cameo_results"].samples}
    assert results["spread"] == 3000  # summed over the sinks on both nodes
    count = [s for s in fams["cameo_result_latency_seconds"].samples
             if s.name.endswith("_count") and s.labels["dataflow"] == "spread"]
    assert count[0].value == 3000


def test_an_executor_added_on_a_node_whose_storage_is_its_own_is_refused(
        cluster: LocalCluster, service: ServiceProcess) -> None:
    """A node joins later whose folder of the pool's storage is a disk of its own: the
    executor started there does not find the marks left from the controller, so it is
    not added, the error names the node, and the pool is as it was."""
    shared = os.path.join(cluster.run_dir, "shared")
    node = cluster.add_node(1, own=shared)  # the only free CPU: the new executor goes there
    try:
        c = service.client()
        before = [(e["executor"], e["alive"]) for e in c.executors()]
        with pytest.raises(ServiceError) as e:
            c.add_executors(1)
        assert (e.value.status, e.value.code) == (422, "bad_reconfiguration"), e.value
        assert f"on node {cluster.node_ip(node)} does not find a mark left in checkpoint_url " \
            f"{shared}/checkpoints, ingress_log_dir {shared}/ingress" in str(e.value), e.value
        assert "a folder every node mounts" in str(e.value)  # the fix
        assert [(x["executor"], x["alive"]) for x in c.executors()] == before
        c.push("spread", "s", batch(3000, 100))  # the pool goes on
    finally:
        cluster.stop_node(node)
    wait_results(service, 3100)


def test_dataflows_outlive_a_crash_of_the_service(service: ServiceProcess) -> None:
    before = wait_results(service, 3000)
    service.kill()  # SIGKILL: no shutdown at all
    service.start()
    assert "found 1 dataflow(s) still running: spread (tenant ops)" in service.log()
    assert [d["name"] for d in service.client().list()] == ["spread"]
    service.client().push("spread", "s", batch(3000, 1000))
    assert wait_results(service, before + 1000) == before + 1000


def test_sigterm_stops_cleanly_or_keeps_dataflows_for_the_next_service(
        service: ServiceProcess) -> None:
    # The default, --on-shutdown stop: SIGTERM drains and cancels the dataflow, and says so.
    assert service.stop() == 0
    assert "dataflow 'spread' (tenant 'ops') stopped cleanly" in service.log()
    # --on-shutdown keep: SIGTERM leaves the dataflow running in the detached controller ...
    service.args += ["--on-shutdown", "keep"]
    service.start()
    assert "still running" not in service.log()  # the stop above had cancelled it
    service.client().submit(spread_flow())
    service.client().push("spread", "s", batch(0, 500))
    wait_results(service, 500)
    assert service.stop() == 0
    assert "leaving 1 dataflow(s) running in pool 'two-nodes'" in service.log()
    # ... and the next service finds it, still running.
    service.args = service.args[:-2]
    service.start()
    assert "found 1 dataflow(s) still running: spread (tenant ops)" in service.log()
    service.client().push("spread", "s", batch(500, 500))
    assert wait_results(service, 1000) == 1000


# -- an embedded service (its own private Ray), killed and started again ---------------------
def window_flow() -> Dataflow:
    return (Dataflow("restart-window", latency_target_ms=1000, tenant="ops")
            .source("s", schema=zoo.SCHEMA, event_time="ts", allowed_lateness_ms=40)
            .key_by("key").window(tumbling_ms=50, parallelism=2)
            .aggregate(n=count(), total=sum_("value")).sink("o"))


#: Ray's per-node agents: they leave on their own about a minute after their raylet died.
RAY_AGENTS = ("ray::DashboardAgent", "ray::RuntimeEnvAgent")


def still_running(procs: dict[int, tuple[str, str]], *, agents: bool = True) -> list[str]:
    """The command lines of those of `procs` that run (the same processes: same start
    times; not zombies), Ray's agents left out unless `agents`."""
    return [command[:80] for pid, (start, command) in procs.items()
            if (agents or not command.startswith(RAY_AGENTS))
            and (stat := proc_stat(pid)) is not None and stat[19] == start and stat[0] != "Z"]


def wait_until(check: Callable[[], bool], what: str | Callable[[], str],
               timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, \
            f"{what() if callable(what) else what}: not within {timeout_s:.0f} s"
        time.sleep(0.2)


def test_an_embedded_service_killed_and_started_again_restores_its_dataflows() -> None:
    run_dir = fresh_dir(os.path.join(os.path.dirname(RUN_DIR), "test-embedded-restart"))
    svc = ServiceProcess(run_dir, args=["--address", "local", "--executors", "2",
                                        "--num-cpus", "4", "--checkpoint-interval", "0.5",
                                        "--drain-timeout", "5"])
    name = "restart-window"
    flow = window_flow()
    data = zoo.events(20_000, seed=51)
    want = zoo.canon(run_local(flow, {"s": data}).sinks["o"])
    svc.start()
    ray_procs: dict[int, tuple[str, str]] = {}
    try:
        c = svc.client()
        assert c.submit(flow)["created"]
        assert c.push(name, "s", data[:10_000], batch_size=2_000) == 10_000
        # Results are readable once a checkpoint after them completed: wait for some.
        got, cursor = read_on(c, name, None, 200, timeout_s=60.0)
        assert len(got) >= 200, f"only {len(got)} results before the kill"
        ray_procs = processes_under(svc.proc.pid)  # type: ignore[union-attr]
        executors = {e["pid"] for e in c.executors()}
        assert executors <= set(ray_procs), (executors, ray_procs)

        svc.kill()  # SIGKILL: the embedded Ray goes with the service
        wait_until(lambda: not still_running(ray_procs, agents=False),
                   lambda: f"the embedded Ray ended (left: {still_running(ray_procs)})", 30)
        first_ray = ray_procs
        svc.start()
        assert f"found 1 dataflow(s) still running: {name} (tenant ops)" in svc.log()
        c = svc.client()
        wait_until(lambda: [(d["name"], d["state"]) for d in c.list()] == [(name, "running")],
                   "the dataflow listed, running")
        history = c.status(name)["history"]
        assert [h["state"] for h in history] == ["running", "recovering", "running"], history
        assert c.push(name, "s", data[10_000:], batch_size=2_000) == 10_000
        c.close(name)
        wait_until(lambda: c.status(name)["state"] == "finished", "the dataflow finished")
        more, cursor = read_on(c, name, cursor, len(want) - len(got), timeout_s=60.0)
        got += more
        assert not c.results(name, cursor=cursor)["rows"]  # nothing more
        g, w = Counter(zoo.canon(got)), Counter(want)
        assert g == w, (f"{len(got)} results, {len(want)} expected: {sum((g - w).values())} "
                        f"extra or repeated, {sum((w - g).values())} missing")
        states = [h["state"] for h in c.status(name)["history"]]
        assert states == ["running", "recovering", "running", "finishing", "finished"], states
        ray_procs = processes_under(svc.proc.pid)  # type: ignore[union-attr]
    finally:
        svc.stop()
    # The second service's Ray ends with it too (SIGTERM, the default --on-shutdown stop).
    wait_until(lambda: not still_running(ray_procs, agents=False),
               lambda: f"the embedded Ray ended (left: {still_running(ray_procs)})", 30)
    # Ray's agents of the killed service leave by themselves about a minute after it;
    # no need to wait for them here.
    for pid, (start, command) in first_ray.items():
        if command.startswith(RAY_AGENTS) and still_running({pid: (start, command)}):
            os.kill(pid, signal.SIGKILL)
