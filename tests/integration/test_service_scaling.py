"""The scaling controller through a real `cameo serve` (embedded Ray): a dataflow's
scaling policy set over HTTP, read back, shown by the CLI and scraped; refusals as 422
with the runtime's fields; another tenant's dataflow out of reach."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from cameo_actors import Dataflow, count
from cameo_actors.service.client import ServiceError
from cameo_actors.service.testing import ServiceProcess, fresh_dir
from tests.shared.polling import wait_for

pytestmark = pytest.mark.integration

RUN_DIR = os.path.abspath(os.path.join(os.environ.get("CAMEO_RUN_DIR", ".run"),
                                       "test-service-scaling"))
SCHEMA = {"ts": "int", "key": "str", "value": "float"}


def keyed(name: str, tenant: str) -> Dataflow:
    """source -> key_by -> a tumbling window "win" (its scalable step) -> sink."""
    return (Dataflow(name, latency_target_ms=1000, tenant=tenant)
            .source("s", schema=SCHEMA, event_time="ts").key_by("key", id="kb")
            .window(tumbling_ms=100, id="win").aggregate(n=count()).sink("o"))


@pytest.fixture(scope="module")
def svc() -> Iterator[ServiceProcess]:
    # The pool scales nothing by itself (policy off); it measures every second.
    service = ServiceProcess(fresh_dir(RUN_DIR), args=[
        "--address", "local", "--executors", "2", "--num-cpus", "4", "--drain-timeout", "2",
        "--scaling", "policy=off,interval_s=0.5,rate_window_s=2,max_parallelism=4"])
    service.start()
    yield service
    service.stop()


def test_a_tenant_sets_its_dataflows_policy_and_reads_it_back(svc: ServiceProcess) -> None:
    admin = svc.client()
    ops = svc.client(admin.create_token("ops")["token"])
    other = svc.client(admin.create_token("analytics")["token"])
    ops.submit(keyed("scaled", "ops"))
    other.submit(keyed("theirs", "analytics"))
    ops.push("scaled", "s", [{"ts": i, "key": f"k{i % 8}", "value": 1.0} for i in range(2000)])
    got = ops.set_scaling("scaled", {"policy": "ds2", "max_parallelism": 3, "warmup_s": 60},
                          pin={"win": None})
    assert got["executors"] is None  # the pool's layout is the admin's
    status = wait_for(lambda: (
        lambda s: s if "scaled" in s["dataflows"] else None)(ops.scaling("scaled")),
        "the controller measures the dataflow")
    flow = status["dataflows"]["scaled"]
    assert flow["policy"] == "ds2"
    assert flow["steps"]["win"]["scalable"] is True and flow["steps"]["win"]["parallelism"] >= 1
    # The tenant's pool-wide view holds its own dataflow only.
    assert set(ops.scaling()["dataflows"]) <= {"scaled"}
    pool = admin.scaling()
    assert pool["policy"] == "off" and pool["enabled"] is True and pool["executors"] >= 2
    # The CLI shows it; the status page has its scalable step's line.
    out = svc.cli("scaling", "scaled").stdout
    assert "scaled  policy ds2" in out and "win" in out
    assert "scaling     policy ds2" in svc.cli("status", "scaled", "--once").stdout
    # /metrics: the step's parallelism, labelled by dataflow and step only.
    text = wait_for(lambda: (
        lambda t: t if 'cameo_step_parallelism{dataflow="scaled",step="win"}' in t else None)(
        admin.metrics()), "the step's parallelism in /metrics")
    assert "cameo_scaling_decisions_total" in text and "cameo_scaling_misses" in text
    assert "instance=" not in "".join(line for line in text.splitlines()
                                      if line.startswith("cameo_step_"))
    # Back to the pool's settings.
    assert ops.set_scaling("scaled", None)["dataflows"].get("scaled", {}).get(
        "policy", "off") == "off"


@pytest.mark.parametrize(("settings", "subject", "got"), [
    ({"min_parallelism": 3, "max_parallelism": 2}, "min_parallelism", 3),
    ({"policy": "warp"}, "policy", "warp"),
])
def test_settings_the_runtime_refuses_are_422(svc: ServiceProcess, settings: dict[str, Any],
                                              subject: str, got: Any) -> None:
    admin = svc.client()
    admin.submit(keyed("refused", "ops"))
    headers = {"Authorization": f"Bearer {svc.admin_token}"}
    r = httpx.put(f"{svc.url}/v1/dataflows/refused/scaling", json={"settings": settings},
                  headers=headers)
    assert r.status_code == 422, r.text
    e = r.json()["error"]
    assert e["code"] == "invalid_scaling" and subject in e["message"]
    assert e["got"] == got and e["expected"] and e["fix"]
    with pytest.raises(ServiceError) as refused:
        admin.set_scaling("refused", settings)
    assert refused.value.status == 422
    run = svc.cli("scaling", "set", "refused", *(f"--setting={k}={v}" for k, v in
                                                  settings.items()), check=False)
    assert run.returncode == 1 and "HTTP 422 invalid_scaling" in run.stderr


def test_pins_and_other_tenants(svc: ServiceProcess) -> None:
    admin = svc.client()
    admin.submit(keyed("pinned", "ops"))
    with pytest.raises(ServiceError) as e:  # the sink cannot scale
        admin.set_scaling("pinned", None, pin={"o": 2})
    assert e.value.status == 422 and e.value.code == "invalid_scaling" and e.value.got == "o"
    assert admin.set_scaling("pinned", None, pin={"win": 2})["policy"] == "off"
    stranger = svc.client(admin.create_token("strangers")["token"])
    for call in (lambda: stranger.scaling("pinned"),
                 lambda: stranger.set_scaling("pinned", {"policy": "ds2"})):
        with pytest.raises(ServiceError) as e:
            call()
        assert e.value.status == 404
