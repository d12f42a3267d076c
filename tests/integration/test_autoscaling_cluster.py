"""Executors asked for on a Ray cluster that has no room for them: Ray's autoscaler
(its fake multi-node provider, which starts worker nodes on this machine, on
loopback) brings up a node, the executors start there, and work placed on them runs
exactly as `run_local` says. The scaling loop adds executors by the same call
(`Reconfiguration.add_executors`, which asks the autoscaler for the CPUs first).
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Iterator

import pytest

from cameo_actors import run_local
from cameo_actors.service.testing import LocalCluster, ServiceProcess, fresh_dir
from tests.integration.test_node_loss import hosting, keyed_window
from tests.integration.test_service_cluster import shared_storage, wait_until
from tests.integration.test_service_limits import read_on
from tests.shared.zoo import canon, events

pytestmark = pytest.mark.integration

RUN_DIR = os.path.abspath(os.path.join(os.environ.get("CAMEO_RUN_DIR", ".run"), "test-autoscale"))


@pytest.fixture(scope="module")
def service() -> Iterator[ServiceProcess]:
    cluster = LocalCluster(fresh_dir(RUN_DIR), cpus=(1,), autoscale=(2, 1))  # a head of 1 CPU
    cluster.start()
    svc = ServiceProcess(os.path.join(cluster.run_dir, "service"), env=cluster.env, args=[
        "--address", cluster.address, "--executors", "1", "--pool", "grows",
        *shared_storage(cluster)])
    try:
        svc.start()
        yield svc
    finally:
        svc.stop()
        cluster.stop()


def test_executors_asked_for_bring_up_a_node_through_rays_autoscaler(
        service: ServiceProcess) -> None:
    c = service.client()
    assert [e["address"] for e in c.executors()] == ["127.0.0.2"]  # the head, full
    added = c.add_executors(2)  # 2 CPUs more: a worker node of 2
    new = {e["address"] for e in c.executors() if e["executor"] in added}
    assert len(added) == 2 and new == {"127.0.0.1"}, c.executors()
    assert c.info()["ray"]["nodes"] == 2

    flow = keyed_window("grown", parallelism=3)
    c.submit(flow)
    assert hosting(service, ("grown",)) == {"127.0.0.2", "127.0.0.1"}
    data = events(6_000, seed=9)
    assert c.push("grown", "s", data, batch_size=2_000) == 6_000
    c.close("grown")
    wait_until(lambda: c.status("grown")["state"] == "finished", "finished", 120)
    want = canon(run_local(flow, {"s": data})["o"])
    got, _ = read_on(c, "grown", None, len(want), timeout_s=60.0)
    assert Counter(canon(got)) == Counter(want)
