"""What the service does, without HTTP and without Ray: tenancy, idempotent
submit, status with throughput, graceful stop.

`ServiceCore` drives any `RuntimeLike` (the runtime's one protocol): the Ray
runtime behind `cameo serve` (see `server.ServiceRuntime`), or an in-memory
fake in unit tests. Every refusal is an `ApiError` raised before anything changed.
"""

from __future__ import annotations

import builtins
import contextlib
import threading
from collections import deque
from collections.abc import Callable
from typing import Any

from cameo_actors.clock import Clock, SystemClock
from cameo_actors.dataflow.functions import FunctionResolver
from cameo_actors.dataflow.spec import DataflowSpec
from cameo_actors.errors import CameoError, SpecError
from cameo_actors.runtime.boundary import (
    DataflowInfo,
    DataflowStats,
    DataflowSummary,
    ExecutorStats,
    RuntimeLike,
)
from cameo_actors.runtime.exceptions import DataflowExists, DataflowNotFound
from cameo_actors.service.auth import Principal
from cameo_actors.service.errors import ApiError, not_found

#: Throughput is measured over status samples at most this old (ms) ...
RATE_WINDOW_MS = 30_000.0
#: ... and at least this far apart (ms); otherwise since the dataflow started.
RATE_MIN_SPAN_MS = 500.0
#: Names of recently cancelled dataflows kept, for clearer answers to a second cancel.
CANCELLED_KEPT = 256


def normalize(spec: dict[str, Any]) -> dict[str, Any]:
    """A spec's canonical dict form, so equal specs compare equal (40 == 40.0, defaults)."""
    return DataflowSpec.from_dict(spec).to_dict()


def spec_differences(running: dict[str, Any], submitted: dict[str, Any]) -> list[str]:
    """Human-readable differences between two normalized specs (first few)."""
    out: list[str] = []
    for key in ("tenant", "latency_target_ms", "scheduling", "errors", "version"):
        if running.get(key) != submitted.get(key):
            out.append(f"{key}: running {running.get(key)!r}, submitted {submitted.get(key)!r}")
    old = {s["id"]: s for s in running.get("steps", [])}
    new = {s["id"]: s for s in submitted.get("steps", [])}
    for sid in [s for s in old if s not in new]:
        out.append(f"step {sid!r}: running only")
    for sid in [s for s in new if s not in old]:
        out.append(f"step {sid!r}: submitted only")
    for sid in [s for s in new if s in old and new[s] != old[s]]:
        fields = sorted(k for k in set(old[sid]) | set(new[sid]) if old[sid].get(k) != new[sid].get(k))
        out.append(f"step {sid!r}: {', '.join(fields)} differ")
    if not out and running != submitted:
        out.append("step order differs")
    return out[:8]


class ServiceCore:
    """Tenancy, idempotency and bookkeeping around a runtime; safe to call from many threads.

    Args:
        runtime: the runtime (`RuntimeLike`).
        clock: physical time, for throughput.
        allowed_modules: module prefixes specs' functions may come from (None: any);
            checked before a replace cancels the running dataflow.
    """

    def __init__(self, runtime: RuntimeLike, *, clock: Clock | None = None,
                 allowed_modules: tuple[str, ...] | None = None) -> None:
        self.rt = runtime
        self.clock = clock or SystemClock()
        self.allowed_modules = allowed_modules
        self.stopping = False
        self._control = threading.Lock()  # submit / replace / cancel, one at a time
        # Events of one dataflow go in order (one pusher at a time); dataflows do not wait
        # for each other, so one tenant's backpressure never holds another's pushes.
        self._flow_locks: dict[str, threading.Lock] = {}
        self._locks_guard = threading.Lock()
        self._samples: dict[str, deque[tuple[float, int, int, int]]] = {}
        self._cancelled: dict[str, tuple[str, str]] = {}  # name -> (how it ended, tenant)

    # -- lookups -----------------------------------------------------------------------------
    def _entry(self, principal: Principal, name: str) -> DataflowSummary:
        """The controller's list entry of a dataflow this caller may access, else 404."""
        for d in self.rt.list():
            if d["name"] == name:
                if principal.can_access(d["tenant"]):
                    return d
                break
        gone = self._cancelled.get(name)
        if gone and principal.can_access(gone[1]):
            raise ApiError(404, "not_found", f"dataflow {name!r} was {gone[0]} already",
                           expected="the name of a running dataflow", got=name,
                           fix="nothing to do; `cameo list` shows what runs")
        raise not_found(name)

    def flow_lock(self, name: str) -> threading.Lock:
        """The lock that orders pushes and closes of one dataflow."""
        with self._locks_guard:
            return self._flow_locks.setdefault(name, threading.Lock())

    def _refuse_while_stopping(self) -> None:
        if self.stopping:
            raise ApiError(503, "stopping", "the service is shutting down",
                           expected="a running service", got="shutdown in progress",
                           fix="retry once the service is back")

    # -- operations --------------------------------------------------------------------------
    def submit(self, principal: Principal, data: Any, *, replace: bool = False
               ) -> tuple[int, dict[str, Any]]:
        """Start a dataflow from a spec (plain data). Returns (HTTP status, body):
        201 created (or replaced), 200 when the same spec runs already."""
        self._refuse_while_stopping()
        if not isinstance(data, dict):
            raise ApiError(422, "invalid_spec", "the spec is not an object",
                           expected="a JSON object / msgpack map (see docs/spec.md)",
                           got=type(data).__name__, fix="send the spec's dict form")
        data = dict(data)
        if not principal.admin:
            tenant = data.get("tenant")
            if tenant in (None, "default"):
                data["tenant"] = principal.tenant  # a tenant token submits into its own tenant
            elif tenant != principal.tenant:
                raise ApiError(403, "forbidden", f"this token acts for tenant {principal.tenant!r}",
                               expected=f"tenant {principal.tenant!r} (or no tenant field)",
                               got=tenant, fix="use the token of that tenant, or an admin token")
        try:
            spec = DataflowSpec.from_dict(data)
        except SpecError as e:
            raise ApiError.from_user_error(e) from None
        self._check_functions(spec)
        wanted = spec.to_dict()
        with self._control:
            replaced = False
            running = self._running_spec(spec.name)
            if running is not None:
                owner = running["tenant"]
                if not principal.can_access(owner):
                    raise ApiError(409, "name_taken", f"the name {spec.name!r} is taken",
                                   expected="a name no other tenant uses", got=spec.name,
                                   fix="choose another dataflow name")
                if running == wanted:
                    return 200, self._submitted(spec, created=False)
                if not replace:
                    diffs = spec_differences(running, wanted)
                    only_live = all(d.split(":")[0] in ("latency_target_ms", "scheduling")
                                    for d in diffs)
                    fix = ("change a running dataflow's target or weight with `cameo update` "
                           "(PATCH), or resubmit with replace" if only_live else
                           "resubmit with replace (`cameo submit --replace`, ?replace=true) to "
                           "cancel the running one and start this one, or pick another name")
                    raise ApiError(409, "spec_changed",
                                   f"a different dataflow runs under the name {spec.name!r}",
                                   expected="the running spec, or replace=true",
                                   got="; ".join(diffs), fix=fix)
                self._cancel_now(spec.name, "replaced", owner)
                replaced = True
            try:
                self.rt.deploy(wanted)
            except SpecError as e:
                raise ApiError.from_user_error(e) from None
            except DataflowExists:
                # Another client won a race for the name: answer as if we had come second.
                running = self._running_spec(spec.name)
                if running == wanted:
                    return 200, self._submitted(spec, created=False)
                raise ApiError(409, "spec_changed", f"a different dataflow runs under the name "
                               f"{spec.name!r}", expected="the running spec", got=spec.name,
                               fix="resubmit with replace, or pick another name") from None
            self._cancelled.pop(spec.name, None)
            self._samples.pop(spec.name, None)
            return 201, {**self._submitted(spec, created=True), "replaced": replaced}

    def _running_spec(self, name: str) -> dict[str, Any] | None:
        if not any(d["name"] == name for d in self.rt.list()):
            return None
        try:
            return normalize(self.rt.describe(name)["spec"])
        except DataflowNotFound:
            return None

    @staticmethod
    def _submitted(spec: DataflowSpec, *, created: bool) -> dict[str, Any]:
        return {"id": spec.name, "name": spec.name, "tenant": spec.tenant, "created": created,
                "replaced": False, "state": "running"}

    def _check_functions(self, spec: DataflowSpec) -> None:
        try:
            FunctionResolver(self.allowed_modules).check_spec(spec)
        except SpecError as e:
            raise ApiError.from_user_error(e) from None

    def list(self, principal: Principal) -> list[DataflowSummary]:
        return [d for d in self.rt.list() if principal.can_access(d["tenant"])]

    def status(self, principal: Principal, name: str) -> dict[str, Any]:
        self._entry(principal, name)
        try:
            info = self.rt.describe(name)
            s = self.rt.stats(name)
        except DataflowNotFound:
            raise not_found(name) from None
        spec = info["spec"]
        now = self.clock.now_ms()
        return {
            "name": name, "tenant": spec["tenant"],
            "state": "stopping" if self.stopping else info.get("state", "running"),
            "latency_target_ms": spec["latency_target_ms"],
            "weight": spec["scheduling"]["weight"],
            "latency": {k: s.get(k) for k in ("p50_ms", "p95_ms", "p99_ms", "max_ms", "mean_ms")},
            "within_target": s.get("within_target"),
            "results": s["results"], "events_in": s["events_in"], "events_out": s["events_out"],
            "throughput": self._throughput(name, now, info.get("submitted_at"), s),
            "backlog": s["backlog"], "errors": dict(s["errors"]),
            "failures": list(s.get("failures", []))[-10:],
            "executors": list(info.get("executors", [])),
            "sources": list(s.get("sources", [])),
            "submitted_at": info.get("submitted_at"),
        }

    def _throughput(self, name: str, now: float, submitted_at: float | None,
                    s: DataflowStats) -> dict[str, float]:
        cur = (now, int(s["events_in"]), int(s["events_out"]), int(s["results"]))
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

    def update(self, principal: Principal, name: str, *, latency_target_ms: float | None,
               weight: float | None) -> dict[str, Any]:
        self._refuse_while_stopping()
        self._entry(principal, name)
        try:
            return self.rt.update(name, latency_target_ms=latency_target_ms, weight=weight)
        except DataflowNotFound:
            raise not_found(name) from None

    def cancel(self, principal: Principal, name: str) -> dict[str, Any]:
        with self._control:
            entry = self._entry(principal, name)
            return self._cancel_now(name, "cancelled", entry["tenant"])

    def _cancel_now(self, name: str, how: str, tenant: str) -> dict[str, Any]:
        try:
            # Not under the dataflow's push lock: cancelling is what frees a push that
            # waits on a stuck dataflow's backpressure.
            result = self.rt.cancel(name)
        except DataflowNotFound:
            raise not_found(name) from None
        with self._locks_guard:
            self._flow_locks.pop(name, None)
        self._cancelled[name] = (how, tenant)
        while len(self._cancelled) > CANCELLED_KEPT:
            del self._cancelled[next(iter(self._cancelled))]
        self._samples.pop(name, None)
        return result

    def push(self, principal: Principal, name: str, source: str,
             events: builtins.list[dict[str, Any]]) -> int:
        self._refuse_while_stopping()
        info = self._describe_visible(principal, name)
        self._check_source(info, name, source)
        with self.flow_lock(name):
            self.rt.push(name, source, events)
        return len(events)

    def close(self, principal: Principal, name: str) -> None:
        """End every source of the dataflow: its windows fire, nothing more is expected."""
        self._describe_visible(principal, name)
        with self.flow_lock(name):
            self.rt.close(name)

    def _describe_visible(self, principal: Principal, name: str) -> DataflowInfo:
        try:
            info = self.rt.describe(name)
        except DataflowNotFound:
            raise not_found(name) from None
        if not principal.can_access(info["spec"]["tenant"]):
            raise not_found(name)
        return info

    @staticmethod
    def _check_source(info: DataflowInfo, name: str, source: str) -> None:
        sources = [s["id"] for s in info["spec"]["steps"] if s["op"] == "source"]
        if source not in sources:
            raise ApiError(404, "unknown_source", f"dataflow {name!r} has no source {source!r}",
                           expected=f"one of {sources}", got=source,
                           fix="push to one of the dataflow's sources")

    def executors(self, principal: Principal) -> builtins.list[ExecutorStats]:
        if not principal.admin:
            raise ApiError(403, "forbidden", "executor statistics are for the admin",
                           expected="the admin token", got=principal.label,
                           fix="ask the service operator")
        return self.rt.executor_stats()

    # -- shutdown ----------------------------------------------------------------------------
    def stop_all(self, drain_timeout_s: float, log: Callable[[str], None]) -> builtins.list[dict[str, Any]]:
        """Stop every dataflow cleanly: close sources (windows fire), let the backlog
        drain for up to `drain_timeout_s`, cancel, and say so for each one."""
        self.stopping = True
        running = self.rt.list()
        if not running:
            log("no dataflows were running")
            return []
        log(f"stopping {len(running)} dataflow(s): closing their sources, draining up to "
            f"{drain_timeout_s:g} s")
        for d in running:
            with self.flow_lock(d["name"]), contextlib.suppress(CameoError):
                self.rt.close(d["name"])  # CameoError: cancelled meanwhile
        drained = True
        try:
            self.rt.wait_idle(drain_timeout_s)
        except TimeoutError:
            drained = False
        stopped = []
        with self._control:
            for d in running:
                name = d["name"]
                try:
                    s = self.rt.stats(name)
                    result = self._cancel_now(name, "stopped at shutdown", d["tenant"])
                except ApiError:
                    continue
                within, target = s.get("within_target"), d["latency_target_ms"]
                share = (f"{100 * within:.1f}% within the {target:g} ms target"
                         if within is not None else f"target {target:g} ms")
                log(f"dataflow {name!r} (tenant {d['tenant']!r}) stopped cleanly: sources closed, "
                    + ("backlog drained" if drained else f"backlog not drained in {drain_timeout_s:g} s")
                    + f", {s['results']} results ({share}), "
                    f"{result.get('messages_dropped', 0)} messages dropped")
                stopped.append({"name": name, "results": s["results"], "drained": drained,
                                "messages_dropped": result.get("messages_dropped", 0)})
        return stopped
