"""The service on a two-node Ray cluster started on this machine with `ray start --head`
and `ray start --address` (1 and 2 CPUs, loopback addresses 127.0.0.2 and .3):
executors on both nodes, metrics from both, and dataflows that survive a crash and
a restart of the service process (the detached controller keeps them).

The cluster is started once for the module; the tests run in file order.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from cameo_actors import Dataflow
from cameo_actors.service.testing import LocalCluster, ServiceProcess, fresh_dir

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


@pytest.fixture(scope="module")
def service(cluster: LocalCluster) -> Iterator[ServiceProcess]:
    svc = ServiceProcess(os.path.join(cluster.run_dir, "service"), env=cluster.env,
                         args=["--address", cluster.address, "--executors", str(EXECUTORS),
                               "--pool", "two-nodes", "--drain-timeout", "5"])
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
