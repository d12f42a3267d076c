"""An in-memory service for unit tests: a fake `RuntimeLike`, the real app over it,
and FastAPI's TestClient (no server, no Ray, no sleep)."""

from __future__ import annotations

import json
import warnings
from typing import Any

from cameo_actors import Dataflow
from cameo_actors.clock import FakeClock
from cameo_actors.runtime.exceptions import DataflowExists, DataflowNotFound
from cameo_actors.service.app import create_app
from cameo_actors.service.auth import TokenStore
from cameo_actors.service.client import Client
from cameo_actors.service.core import ServiceCore

with warnings.catch_warnings():
    # Starlette suggests its httpx fork for TestClient; the service pins httpx itself.
    warnings.simplefilter("ignore")
    from fastapi.testclient import TestClient

ADMIN = "admin-token-for-tests"
SCHEMA = {"ts": "int", "level": "str", "key": "str"}


class FakeRuntime:
    """A RuntimeLike in memory: every event pushed becomes one 5 ms result."""

    def __init__(self) -> None:
        self.flows: dict[str, dict[str, Any]] = {}
        self.deploys = 0
        self.closed: list[str] = []

    def _get(self, name: str) -> dict[str, Any]:
        if name not in self.flows:
            raise DataflowNotFound(name)
        return self.flows[name]

    def deploy(self, spec: dict[str, Any]) -> str:
        if spec["name"] in self.flows:
            raise DataflowExists(spec["name"])
        self.deploys += 1
        self.flows[spec["name"]] = {"spec": json.loads(json.dumps(spec)), "events": 0,
                                    "executors": [0, 1], "submitted_at": 100.0}
        return str(spec["name"])

    def cancel(self, name: str) -> dict[str, Any]:
        self._get(name)
        del self.flows[name]
        return {"name": name, "state": "cancelled", "messages_dropped": 0}

    def update(self, name: str, *, latency_target_ms: float | None,
               weight: float | None) -> dict[str, Any]:
        spec = self._get(name)["spec"]
        if latency_target_ms is not None:
            spec["latency_target_ms"] = latency_target_ms
        if weight is not None:
            spec["scheduling"]["weight"] = weight
        return {"name": name, "latency_target_ms": spec["latency_target_ms"],
                "weight": spec["scheduling"]["weight"]}

    def list(self) -> list[dict[str, Any]]:
        return [{"name": n, "tenant": f["spec"]["tenant"],
                 "latency_target_ms": f["spec"]["latency_target_ms"], "state": "running",
                 "executors": f["executors"]} for n, f in self.flows.items()]

    def describe(self, name: str) -> dict[str, Any]:
        f = self._get(name)
        return {"name": name, "spec": f["spec"], "executors": f["executors"], "state": "running",
                "submitted_at": f["submitted_at"]}

    def stats(self, name: str) -> dict[str, Any]:
        f = self._get(name)
        n = f["events"]
        return {"results": n, "within_target": 1.0 if n else None, "p50_ms": 5.0 if n else None,
                "p95_ms": 5.0 if n else None, "p99_ms": 5.0 if n else None,
                "max_ms": 5.0 if n else None, "mean_ms": 5.0 if n else None,
                "events_in": n, "events_out": n, "backlog": 0, "errors": {"s:malformed": 1},
                "failures": [], "sources": ["s"]}

    def push(self, name: str, source: str, events: list[dict[str, Any]]) -> None:
        self._get(name)["events"] += len(events)

    def close(self, name: str) -> None:
        self._get(name)
        self.closed.append(name)

    def executor_stats(self) -> list[dict[str, Any]]:
        return [{"executor": 0, "node": "n" * 40, "activations": 2, "backlog": 0, "executed": 9,
                 "slices": 3, "preempted": 1, "overdue": 0, "busy_ms": 1500.0, "overhead_ms": 2.0,
                 "overhead_us_per_message": 3.5, "held": 0, "faults": []}]

    def wait_idle(self, timeout_s: float) -> None:
        return None

    def snapshot(self) -> dict[str, Any]:
        dataflows = []
        for name, f in self.flows.items():
            n = f["events"]
            buckets = [0] * 14
            buckets[2] = n  # 5 ms
            dataflows.append({"name": name, "tenant": f["spec"]["tenant"],
                              "target_ms": f["spec"]["latency_target_ms"],
                              "weight": f["spec"]["scheduling"]["weight"], "results": n,
                              "within_target_count": n, "sum_ms": 5.0 * n, "buckets": buckets,
                              "p50_ms": 5.0 if n else None, "p95_ms": None, "p99_ms": None,
                              "events_in": n, "events_out": n, "backlog": 0,
                              "errors": {"s:malformed": 1}})
        return {"dataflows": dataflows, "executors": self.executor_stats()}


def flow(name: str, tenant: str = "ops", target: float = 50) -> Dataflow:
    return (Dataflow(name, latency_target_ms=target, tenant=tenant)
            .source("s", schema=SCHEMA, event_time="ts").filter("level == 'ERROR'").sink("o"))


class Service:
    def __init__(self) -> None:
        self.rt = FakeRuntime()
        self.clock = FakeClock(200_000.0)
        self.core = ServiceCore(self.rt, clock=self.clock, allowed_modules=("tests.",))
        self.tokens = TokenStore(ADMIN)
        self.app = create_app(self.core, self.tokens, max_spec_bytes=4096, max_body_bytes=8192,
                              snapshot=self.rt.snapshot, info=lambda: {"pool": "fake"})
        self.http = TestClient(self.app)

    def client(self, token: str | None) -> Client:
        return Client("http://testserver", token or "", http=TestClient(self.app))

    def tenant_token(self, tenant: str) -> str:
        return self.tokens.create(tenant)[0]


def auth(token: str = ADMIN) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}
