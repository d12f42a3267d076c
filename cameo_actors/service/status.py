"""What a caller may see of the dataflows: the list, a dataflow's status with its
throughput, its spec, why it failed, why it missed its target (`explain`); and of the pool,
its executors."""

from __future__ import annotations

import builtins
from collections import deque
from collections.abc import Mapping
from typing import Any

from cameo_actors.errors import CameoError
from cameo_actors.runtime.boundary import (
    LIVE_STATES,
    RUNNING,
    STATES,
    DataflowStats,
    DataflowSummary,
    ExecutorStats,
    MigrationInfo,
)
from cameo_actors.runtime.exceptions import (
    DataflowEnded,
    DataflowNotFound,
)
from cameo_actors.service import scaling as scaling_view
from cameo_actors.service.auth import Principal
from cameo_actors.service.errors import (
    ApiError,
    ended,
    not_found,
)
from cameo_actors.service.tenancy import Tenancy
from cameo_actors.tracing.explain import redact

#: Throughput is measured over status samples at most this old (ms) ...
RATE_WINDOW_MS = 30_000.0
#: ... and at least this far apart (ms); otherwise since the dataflow started.
RATE_MIN_SPAN_MS = 500.0
#: A dataflow's reconfigurations its status shows (the most recent).
MIGRATIONS_SHOWN = 20


class Status(Tenancy):
    """The core's part that answers what a caller may see (`core.ServiceCore`)."""

    def list(self, principal: Principal, states: builtins.list[str] | None = None
             ) -> builtins.list[DataflowSummary]:
        """The dataflows this caller may see, live and ended (or those in `states`)."""
        if states:
            unknown = sorted(set(states) - set(STATES))
            if unknown:
                raise ApiError(422, "invalid_request", "unknown dataflow state in the filter",
                               expected=f"states among {list(STATES)}", got=", ".join(unknown),
                               fix="e.g. ?state=running&state=failed")
        pool = self.rt.list()  # one call: its names also keep the history's copies out
        listed = [d for d in pool if not states or d["state"] in states]
        names = {d["name"] for d in pool}
        kept = [k for k in self.history.summaries()  # ended ones the pool forgot
                if k["name"] not in names and (not states or k["state"] in states)]
        return [d for d in [*listed, *kept] if principal.can_access(d["tenant"])]

    def spec(self, principal: Principal, name: str) -> dict[str, Any]:
        """The spec of a dataflow this caller may see (its steps and their inputs), else 404."""
        self._entry(principal, name)
        try:
            return dict(self.rt.describe(name)["spec"])
        except DataflowNotFound:
            return dict(self._kept(name, "spec"))

    def status(self, principal: Principal, name: str) -> dict[str, Any]:
        self._entry(principal, name)
        try:
            info = self.rt.describe(name, refresh=True)
            s: DataflowStats | dict[str, Any] = info.get("final") or {} if info.get("released") \
                else self.rt.stats(name)
        except DataflowNotFound:
            return dict(self._kept(name, "status"))
        except DataflowEnded:  # ended between the two calls: its last statistics
            info = self.rt.describe(name, refresh=True)
            s = info.get("final") or {}
        spec = info["spec"]
        now = self.clock.now_ms()
        state = info.get("state", RUNNING)
        return {
            "name": name, "tenant": spec["tenant"],
            "state": "stopping" if self.stopping and state in LIVE_STATES else state,
            "latency_target_ms": spec["latency_target_ms"],
            "weight": spec["scheduling"]["weight"],
            "latency": {k: s.get(k) for k in ("p50_ms", "p95_ms", "p99_ms", "max_ms", "mean_ms")},
            "within_target": s.get("within_target"),
            "results": s.get("results", 0), "events_in": s.get("events_in", 0),
            "events_out": s.get("events_out", 0),
            "throughput": self._throughput(name, now, info.get("submitted_at"), s),
            "backlog": s.get("backlog", 0), "errors": dict(s.get("errors", {})),
            "failures": list(s.get("failures", []))[-10:],
            "executors": list(info.get("executors", [])),
            "sources": list(s.get("sources", [])),
            "submitted_at": info.get("submitted_at"),
            "ended_at": info.get("ended_at"),
            "cause": info.get("cause"),
            "exceptions": list(info.get("exceptions") or [])[-10:],
            "history": list(info.get("history") or []),
            "recoveries": info.get("recoveries", 0),
            "state_bytes": info.get("state_bytes", 0),
            "state_disk_bytes": info.get("state_disk_bytes", 0),
            "held": list(s.get("held", [])),
            "connectors": dict(s.get("connectors", {})),
            "migrations": self._migrations_of(name),
            "outlook": self._outlook(name) if state in LIVE_STATES else None,
            "scaling": self._scaling_of(name) if state in LIVE_STATES else None,
        }

    def _throughput(self, name: str, now: float, submitted_at: float | None,
                    s: Mapping[str, Any]) -> dict[str, float]:
        """Events in and out and results per second over the recent samples of the
        dataflow's counters `s` (since it started, before the first)."""
        cur = (now, int(s.get("events_in", 0)), int(s.get("events_out", 0)),
               int(s.get("results", 0)))
        samples = self._samples.setdefault(name, deque(maxlen=64))
        while samples and now - samples[0][0] > RATE_WINDOW_MS:
            samples.popleft()
        base = next((x for x in samples if now - x[0] >= RATE_MIN_SPAN_MS), None)
        if base is None:  # no earlier sample: the average since the dataflow started
            start = submitted_at * 1000.0 if submitted_at else now
            base = (min(start, now), 0, 0, 0)
        samples.append(cur)
        span_s = max((now - base[0]) / 1000.0, 1e-3)
        return {"events_in_per_s": (cur[1] - base[1]) / span_s,
                "events_out_per_s": (cur[2] - base[2]) / span_s,
                "results_per_s": (cur[3] - base[3]) / span_s, "window_s": span_s}

    def _scaling_of(self, name: str) -> dict[str, Any] | None:
        """This dataflow's line of the scaling controller's view (None if the runtime
        cannot say now: the rest of the status still answers)."""
        try:
            return scaling_view.summary(self.rt.scaling(name), name)
        except (CameoError, KeyError, TimeoutError, NotImplementedError):
            # gone meanwhile, RuntimeUnavailable, or a runtime without a scaling controller
            return None

    def _outlook(self, name: str) -> dict[str, Any] | None:
        """This dataflow's line of the pool's overload report (None if the runtime cannot
        say now: the rest of the status still answers)."""
        try:
            report = self.rt.predict()
        except CameoError:
            return None
        return next((o for o in report["outcomes"] if o["name"] == name), None)

    def _migrations_of(self, name: str) -> builtins.list[MigrationInfo]:
        """A dataflow's reconfigurations, running and recent (none once it is gone, or when
        the runtime cannot say now: the rest of the status still answers)."""
        try:
            return builtins.list(self.rt.migrations(name))[-MIGRATIONS_SHOWN:]
        except (CameoError, KeyError):  # DataflowNotFound, DataflowEnded, RuntimeUnavailable
            return []

    def exceptions(self, principal: Principal, name: str) -> dict[str, Any]:
        """Why a dataflow failed and its last operator failures (like Flink's
        /jobs/{id}/exceptions)."""
        self._entry(principal, name)
        try:
            info = self.rt.describe(name, refresh=True)
            failures = info.get("exceptions") if info.get("released") \
                else self.rt.stats(name).get("failures", [])
        except DataflowNotFound:
            return dict(self._kept(name, "exceptions"))
        except DataflowEnded:
            info = self.rt.describe(name, refresh=True)
            failures = info.get("exceptions")
        return {"name": name, "state": info["state"], "cause": info.get("cause"),
                "exceptions": list(failures or [])[-10:]}

    def explain(self, principal: Principal, name: str | None = None, *,
                last_s: float = 60.0) -> dict[str, Any]:
        """Why a dataflow (None: the pool) missed or met its target over the last `last_s`
        seconds: its critical path, ranked, with the words for people (`Runtime.explain`).

        A dataflow of another tenant answers 404, as its status does. A tenant sees the
        names of its own tenant's dataflows only: every other one reads "another tenant",
        also where its dataflow waited behind theirs.
        """
        if name is not None:
            self._entry(principal, name)
        try:
            explanation = self.rt.explain(name, last_s=last_s)
        except DataflowNotFound:
            raise not_found(name or "") from None
        except DataflowEnded as e:
            raise ended(e) from None
        if principal.admin:
            return explanation
        own = {d["name"] for d in self.rt.list() if principal.can_access(d["tenant"])}
        return redact(explanation, own.__contains__)

    def executors(self, principal: Principal) -> builtins.list[ExecutorStats]:
        return self.rt.executor_stats()

    @staticmethod
    def whoami(principal: Principal) -> dict[str, Any]:
        return {"tenant": principal.tenant, "admin": principal.admin,
                "token_id": principal.token_id}
