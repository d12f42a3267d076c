"""What the service does, without HTTP and without Ray: tenancy, idempotent
submit, status with throughput, graceful stop.

`ServiceCore` drives any `CoreRuntime` (the part of the runtime's one protocol,
`RuntimeLike`, that the service calls): the Ray runtime behind `cameo serve` (through
`server.ServiceRuntime`), or an in-memory fake in unit tests. Every refusal is an `ApiError` raised before anything changed.
Who may call which method (a tenant, the admin) is the operations table's to say
(`operations.authorize`, before the call); the core keeps each tenant to its own dataflows.
"""

from __future__ import annotations

import builtins
import contextlib
import heapq
import threading
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Protocol

from cameo_actors.clock import Clock, SystemClock
from cameo_actors.dataflow.functions import FunctionResolver
from cameo_actors.dataflow.spec import DataflowSpec
from cameo_actors.errors import CameoError, ReconfigError, SpecError, UserError
from cameo_actors.operators.base import Event
from cameo_actors.operators.columns import ColumnsRefused, ResultsNotColumnar
from cameo_actors.runtime.boundary import (
    LIVE_STATES,
    RECOVERING,
    RUNNING,
    STATES,
    DataflowInfo,
    DataflowStats,
    DataflowSummary,
    ErrorLogOffsets,
    ExecutorStats,
    LogOffsets,
    MigrationInfo,
    Pressure,
    Rejected,
    ResultRow,
)
from cameo_actors.runtime.exceptions import (
    AdmissionRefused,
    DataflowEnded,
    DataflowExists,
    DataflowNotFound,
)
from cameo_actors.service import scaling as scaling_view
from cameo_actors.service.auth import Principal
from cameo_actors.service.errors import (
    ApiError,
    ended,
    not_columnar,
    not_found,
    reconfig_refused,
    refused_columns,
)
from cameo_actors.service.outputs import (
    DEFAULT_PAGE,
    ERRORS,
    MAX_PAGE,
    RESULTS,
    Cursor,
    below_committed,
    committed_rows,
    error_item,
    merge_tables,
    plan_page,
    result_item,
)
from cameo_actors.tracing.explain import redact

#: Throughput is measured over status samples at most this old (ms) ...
RATE_WINDOW_MS = 30_000.0
#: ... and at least this far apart (ms); otherwise since the dataflow started.
RATE_MIN_SPAN_MS = 500.0
#: Refused events a push answer describes (it counts them all).
REJECTIONS_SHOWN = 10
#: A dataflow's reconfigurations its status shows (the most recent).
MIGRATIONS_SHOWN = 20


class CoreRuntime(Protocol):
    """The runtime's calls the service makes: a part of `RuntimeLike`, with the same
    signatures (and `scaling.ScalingRuntime`'s two, where the runtime has them). What
    `server.ServiceRuntime` adapts, and what a test's fake implements."""

    # -- control
    def deploy(self, dataflow: Any) -> str: ...
    def predict(self, dataflow: Any = None) -> dict[str, Any]: ...
    def cancel(self, name: str) -> dict[str, Any]: ...
    def update(self, name: str, *, latency_target_ms: float | None = None,
               weight: float | None = None) -> dict[str, Any]: ...
    def list(self, states: Sequence[str] | None = None) -> builtins.list[DataflowSummary]: ...
    def describe(self, name: str, *, refresh: bool = False) -> DataflowInfo: ...
    def stats(self, name: str) -> DataflowStats: ...
    def executor_stats(self) -> builtins.list[ExecutorStats]: ...
    def wait_idle(self, timeout_s: float = 60.0, *,
                  dataflows: Sequence[str] | None = None) -> None: ...
    def explain(self, name: str | None = None, *, last_s: float = 60.0) -> dict[str, Any]: ...

    # -- live reconfiguration
    def scale(self, name: str, step: str, parallelism: int, *, strategy: str = "batched",
              batch_bins: int | None = None) -> MigrationInfo: ...
    def migrate(self, name: str, step: str, *, bins: Sequence[int] | None = None,
                to_instance: int | None = None, instance: int | None = None,
                to_executor: int | None = None, strategy: str = "batched",
                batch_bins: int | None = None) -> MigrationInfo: ...
    def migrations(self, name: str | None = None) -> builtins.list[MigrationInfo]: ...
    def rebalance(self, *, strategy: str = "batched") -> builtins.list[MigrationInfo]: ...
    def add_executors(self, n: int = 1) -> builtins.list[int]: ...
    def remove_executor(self, index: int, *, strategy: str = "batched") -> dict[str, Any]: ...
    def drain_node(self, node: str) -> dict[str, Any]: ...

    # -- input
    def pressure(self, name: str) -> Pressure: ...
    def push(self, name: str, source: str, events: Sequence[Event]) -> builtins.list[Rejected]: ...
    def close(self, name: str) -> None: ...

    # -- outputs
    def result_offsets(self, name: str, sink: str | None = None) -> dict[str, LogOffsets]: ...
    def read_results(self, name: str, sink_activation: str, start: int,
                     end: int | None = None) -> builtins.list[ResultRow]: ...
    def read_result_columns(self, name: str, sink_activation: str, start: int,
                            end: int | None = None) -> Any: ...
    def commit_results(self, name: str, sink_activation: str, offset: int) -> None: ...
    def error_offsets(self, name: str) -> dict[str, ErrorLogOffsets]: ...
    def read_errors(self, name: str, log: str, start: int, end: int | None = None
                    ) -> tuple[int, builtins.list[ResultRow]]: ...
    def commit_errors(self, name: str, log: str, offset: int) -> None: ...


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


def _deployment(info: DataflowInfo) -> str:
    """Names one deployment of a dataflow: a redeploy under the same name gets another
    (as the Spark tier's offsets do), so a replaced dataflow's cursors are refused."""
    return repr(info.get("submitted_at"))


class ServiceCore:
    """Tenancy, idempotency and bookkeeping around a runtime; safe to call from many threads.

    Args:
        runtime: the runtime (`CoreRuntime`).
        clock: physical time, for throughput.
        allowed_modules: module prefixes specs' functions may come from (None: any);
            checked before a replace cancels the running dataflow.
    """

    def __init__(self, runtime: CoreRuntime, *, clock: Clock | None = None,
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

    # -- lookups -----------------------------------------------------------------------------
    def _entry(self, principal: Principal, name: str) -> DataflowSummary:
        """The pool's list entry (live or ended) of a dataflow this caller may access, else 404."""
        for d in self.rt.list():
            if d["name"] == name:
                if principal.can_access(d["tenant"]):
                    return d
                break
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
    def _read_spec(self, principal: Principal, data: Any) -> DataflowSpec:
        """The spec a caller sent, checked: its tenant is the caller's (a tenant token
        submits into its own tenant), its functions may be imported."""
        if not isinstance(data, dict):
            raise ApiError(422, "invalid_spec", "the spec is not an object",
                           expected="a JSON object / msgpack map (see docs/spec.md)",
                           got=type(data).__name__, fix="send the spec's dict form")
        data = dict(data)
        if not principal.admin:
            tenant = data.get("tenant")
            if tenant in (None, "default"):
                data["tenant"] = principal.tenant
            elif tenant != principal.tenant:
                raise ApiError(403, "forbidden", f"this token acts for tenant {principal.tenant!r}",
                               expected=f"tenant {principal.tenant!r} (or no tenant field)",
                               got=tenant, fix="use the token of that tenant, or an admin token")
        try:
            spec = DataflowSpec.from_dict(data)
        except SpecError as e:
            raise ApiError.from_user_error(e) from None
        self._check_functions(spec)
        return spec

    def submit(self, principal: Principal, data: Any, *, replace: bool = False
               ) -> tuple[int, dict[str, Any]]:
        """Start a dataflow from a spec (plain data). Returns (HTTP status, body):
        201 created (or replaced), 200 when the same spec runs already; the body carries
        admission control's prediction (`admission`)."""
        self._refuse_while_stopping()
        spec = self._read_spec(principal, data)
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
                self._cancel_now(spec.name)
                replaced = True
            try:
                self.rt.deploy(wanted)
            except SpecError as e:
                raise ApiError.from_user_error(e) from None
            except AdmissionRefused as e:
                seen = self._visible(principal, e.prediction)
                raise ApiError(409, "admission_refused", f"the pool would not meet every target "
                               f"with {spec.name!r} admitted",
                               expected="a dataflow the pool can serve within every target",
                               got="; ".join(seen["warnings"]),
                               fix=str(e).split(" Fix: ", 1)[-1]) from None
            except DataflowExists:
                # Another client won a race for the name: answer as if we had come second.
                running = self._running_spec(spec.name)
                if running == wanted:
                    return 200, self._submitted(spec, created=False)
                raise ApiError(409, "spec_changed", f"a different dataflow runs under the name "
                               f"{spec.name!r}", expected="the running spec", got=spec.name,
                               fix="resubmit with replace, or pick another name") from None
            self._samples.pop(spec.name, None)
            admission = self.rt.describe(spec.name, refresh=True).get("admission")
            return 201, {**self._submitted(spec, created=True), "replaced": replaced,
                         "admission": admission and self._visible(principal, admission)}

    def check(self, principal: Principal, data: Any) -> dict[str, Any]:
        """Admission control's prediction for a spec, without starting it."""
        spec = self._read_spec(principal, data)
        try:
            prediction = self.rt.predict(spec.to_dict())
        except SpecError as e:
            raise ApiError.from_user_error(e) from None
        return self._visible(principal, prediction)

    def overload(self, principal: Principal) -> dict[str, Any]:
        """The pool's overload report: who misses or will miss, by how much, and whose
        load causes it (a tenant sees its own dataflows; others' tenants stay unnamed)."""
        return self._visible(principal, self.rt.predict())

    @staticmethod
    def _visible(principal: Principal, prediction: dict[str, Any]) -> dict[str, Any]:
        """A prediction as this caller may see it: a tenant sees its own dataflows, and of
        the others only how many would miss."""
        warnings = list(prediction.get("warnings", []))
        if principal.admin:
            return {**prediction, "warnings": warnings}
        own = principal.tenant
        mine = {o["name"] for o in prediction["outcomes"] if o["tenant"] == own}
        others = sum(1 for o in prediction["outcomes"]
                     if o["tenant"] != own and o["verdict"] == "misses")
        warnings = [w for w in warnings if w.split(":", 1)[0] in mine]
        if others:
            warnings.append(f"{others} dataflow(s) of other tenants would miss their targets")
        return {**prediction, "warnings": warnings,
                "outcomes": [o for o in prediction["outcomes"] if o["tenant"] == own],
                "causes": [{**c, "tenant": c["tenant"] if c["tenant"] == own else "another tenant"}
                           for c in prediction["causes"]]}

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

    def spec(self, principal: Principal, name: str) -> dict[str, Any]:
        """The spec of a dataflow this caller may see (its steps and their inputs), else 404."""
        self._entry(principal, name)
        try:
            return dict(self.rt.describe(name)["spec"])
        except DataflowNotFound:
            raise not_found(name) from None

    def _running_spec(self, name: str) -> dict[str, Any] | None:
        """The normalized spec of a live dataflow of that name (an ended one may be replaced)."""
        if not any(d["name"] == name for d in self.rt.list(LIVE_STATES)):
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

    def list(self, principal: Principal, states: builtins.list[str] | None = None
             ) -> builtins.list[DataflowSummary]:
        """The dataflows this caller may see, live and ended (or those in `states`)."""
        if states:
            unknown = sorted(set(states) - set(STATES))
            if unknown:
                raise ApiError(422, "invalid_request", "unknown dataflow state in the filter",
                               expected=f"states among {list(STATES)}", got=", ".join(unknown),
                               fix="e.g. ?state=running&state=failed")
        return [d for d in self.rt.list(states) if principal.can_access(d["tenant"])]

    def status(self, principal: Principal, name: str) -> dict[str, Any]:
        self._entry(principal, name)
        try:
            info = self.rt.describe(name, refresh=True)
            s: DataflowStats | dict[str, Any] = info.get("final") or {} if info.get("released") \
                else self.rt.stats(name)
        except DataflowNotFound:
            raise not_found(name) from None
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
            "held": list(s.get("held", [])),
            "migrations": self._migrations_of(name),
            "outlook": self._outlook(name) if state in LIVE_STATES else None,
            "scaling": self._scaling_of(name) if state in LIVE_STATES else None,
        }

    def _scaling_of(self, name: str) -> dict[str, Any] | None:
        """This dataflow's line of the scaling controller's view (None if the runtime
        cannot say now: the rest of the status still answers)."""
        if not isinstance(self.rt, scaling_view.ScalingRuntime):
            return None
        try:
            return scaling_view.summary(self.rt.scaling(name), name)
        except (CameoError, KeyError, TimeoutError):  # gone meanwhile, RuntimeUnavailable
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
            raise not_found(name) from None
        except DataflowEnded:
            info = self.rt.describe(name, refresh=True)
            failures = info.get("exceptions")
        return {"name": name, "state": info["state"], "cause": info.get("cause"),
                "exceptions": list(failures or [])[-10:]}

    def _throughput(self, name: str, now: float, submitted_at: float | None,
                    s: DataflowStats | dict[str, Any]) -> dict[str, float]:
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

    def update(self, principal: Principal, name: str, *, latency_target_ms: float | None,
               weight: float | None) -> dict[str, Any]:
        self._refuse_while_stopping()
        self._entry(principal, name)
        try:
            return self.rt.update(name, latency_target_ms=latency_target_ms, weight=weight)
        except DataflowNotFound:
            raise not_found(name) from None
        except DataflowEnded as e:
            raise ended(e) from None

    def cancel(self, principal: Principal, name: str) -> dict[str, Any]:
        """Cancel a live dataflow; for an ended one, free what it kept (a finished one's
        results) and answer its state: cancelling twice is not an error."""
        with self._control:
            self._entry(principal, name)
            return self._cancel_now(name)

    def _cancel_now(self, name: str) -> dict[str, Any]:
        try:
            # Not under the dataflow's push lock: cancelling is what frees a push that
            # waits on a stuck dataflow's backpressure.
            result = self.rt.cancel(name)
        except DataflowNotFound:
            raise not_found(name) from None
        with self._locks_guard:
            self._flow_locks.pop(name, None)
        self._samples.pop(name, None)
        return result

    def push(self, principal: Principal, name: str, source: str,
             events: builtins.list[dict[str, Any]] | Any, *, admitted: bool = False
             ) -> dict[str, Any]:
        """Hand events (rows, or an Arrow table) to a source: {"accepted": n, "rejected": m,
        "rejections": the first few}. An event msgpack cannot carry is refused alone (and goes to the error output);
        the rest go on, so a writer never retries a whole batch for one event."""
        if not admitted:  # the HTTP route admits first, before it reads the body
            self.admit_push(principal, name, source)
        with self._ending(name), self.flow_lock(name):
            try:
                rejected = self.rt.push(name, source, events)
            except ColumnsRefused as e:  # columns off the schema: nothing was sent
                raise refused_columns(422, e) from None
        return {"accepted": len(events) - len(rejected), "rejected": len(rejected),
                "rejections": rejected[:REJECTIONS_SHOWN]}

    def admit_push(self, principal: Principal, name: str, source: str) -> None:
        """Whether a push to `source` may go on now: the refusals of a push (404, 409, 429,
        503), answered before its body is even read."""
        self._refuse_while_stopping()
        info = self._describe_visible(principal, name)
        self._check_source(info, name, source)
        with self._ending(name):
            self._refuse_when_full(name)

    def close(self, principal: Principal, name: str) -> dict[str, str]:
        """End every source of the dataflow: its windows fire, nothing more is expected."""
        self._describe_visible(principal, name)
        with self._ending(name), self.flow_lock(name):
            self.rt.close(name)
        return {"name": name, "state": "sources closed"}

    @contextlib.contextmanager
    def _ending(self, name: str) -> Iterator[None]:
        """A dataflow that ended (or went) while a call was under way: the same answers as
        when it had ended before (409 / 503 / 404)."""
        try:
            yield
        except DataflowNotFound:
            raise not_found(name) from None
        except DataflowEnded as e:
            lost = bool(self.rt.describe(name, refresh=True).get("lost"))
            raise ended(e, lost=lost) from None

    def _describe_visible(self, principal: Principal, name: str, *, outputs: bool = False
                          ) -> DataflowInfo:
        """A dataflow this caller may access (else 404) that is running, or with `outputs`
        whose outputs are still kept (running, finishing or finished); else 409, or 503 if
        a part of the pool died under it."""
        try:
            info = self.rt.describe(name)
        except DataflowNotFound:
            raise not_found(name) from None
        if not principal.can_access(info["spec"]["tenant"]):
            raise not_found(name)
        # A recovering dataflow counts as running: the runtime waits for it (bounded).
        if info.get("released") if outputs else \
                info.get("state", RUNNING) not in (RUNNING, RECOVERING):
            raise ended(DataflowEnded(name, info["state"], info.get("cause")),
                        lost=bool(info.get("lost")))
        return info

    def _refuse_when_full(self, name: str) -> None:
        """429 before anything is sent when the dataflow cannot take more now: a request
        never waits on one dataflow's backpressure while holding a server worker."""
        p = self.rt.pressure(name)
        if p["full_sinks"]:
            raise ApiError(429, "results_full", f"dataflow {name!r} holds as many unread "
                           "results as it may: its pushes wait until a reader commits",
                           expected="results read and committed",
                           got=f"full result log(s) at {', '.join(p['full_sinks'])}",
                           fix=f"read and commit them (`cameo results {name}`, or GET "
                               f"/v1/dataflows/{name}/results then POST .../results/commit), "
                               "then push again", retry_after_s=1.0)
        waiting = p["waiting"]
        if waiting and all(n >= p["limit"] for n in waiting.values()):
            raise ApiError(429, "backpressure", f"dataflow {name!r} is not keeping up: its "
                           "sources have as many events waiting as they may",
                           expected=f"fewer than {p['limit']} events waiting per source instance",
                           got=f"{sum(waiting.values())} waiting",
                           fix="retry after the Retry-After seconds, push smaller batches, or "
                               "give the dataflow more parallelism", retry_after_s=1.0)

    @staticmethod
    def _check_source(info: DataflowInfo, name: str, source: str) -> None:
        sources = [s["id"] for s in info["spec"]["steps"] if s["op"] == "source"]
        if source not in sources:
            raise ApiError(404, "unknown_source", f"dataflow {name!r} has no source {source!r}",
                           expected=f"one of {sources}", got=source,
                           fix="push to one of the dataflow's sources")

    def executors(self, principal: Principal) -> builtins.list[ExecutorStats]:
        return self.rt.executor_stats()

    @staticmethod
    def whoami(principal: Principal) -> dict[str, Any]:
        return {"tenant": principal.tenant, "admin": principal.admin,
                "token_id": principal.token_id}

    # -- live reconfiguration: asynchronous, each answers with the migration(s) started ------
    # A tenant reconfigures its own dataflows; the pool (rebalance, executors) is the admin's:
    # `operations.authorize` refuses a tenant before these are called.
    def scale(self, principal: Principal, name: str, step: str, parallelism: int, *,
              strategy: str = "batched", batch_bins: int | None = None) -> MigrationInfo:
        """Change the parallelism of a keyed step while it runs; its key bins move to the
        new instances epoch by epoch. Returns the migration, running."""
        self._refuse_while_stopping()
        self._entry(principal, name)
        with self._reconfiguring(name):
            return self.rt.scale(name, step, parallelism, strategy=strategy,
                                 batch_bins=batch_bins)

    def migrate(self, principal: Principal, name: str, step: str, *,
                bins: Sequence[int] | None = None, to_instance: int | None = None,
                instance: int | None = None, to_executor: int | None = None,
                strategy: str = "batched", batch_bins: int | None = None) -> MigrationInfo:
        """Move key bins of a keyed step to another instance, or one of its instances to
        another executor. Returns the migration, running."""
        self._refuse_while_stopping()
        self._entry(principal, name)
        with self._reconfiguring(name):
            return self.rt.migrate(name, step, bins=bins, to_instance=to_instance,
                                   instance=instance, to_executor=to_executor,
                                   strategy=strategy, batch_bins=batch_bins)

    def migrations(self, principal: Principal, name: str | None = None
                   ) -> builtins.list[MigrationInfo]:
        """Reconfigurations (running and recent): of one dataflow, or of every dataflow this
        caller may see (the admin: all of them)."""
        if name is not None:
            self._entry(principal, name)
            try:
                return builtins.list(self.rt.migrations(name))
            except DataflowNotFound:  # gone meanwhile
                raise not_found(name) from None
            except DataflowEnded:  # its parts were freed, and its migrations with them
                return []
        every = builtins.list(self.rt.migrations())
        if principal.admin:
            return every
        mine = {d["name"] for d in self.rt.list() if principal.can_access(d["tenant"])}
        return [m for m in every if m["dataflow"] in mine]

    def rebalance(self, principal: Principal, *, strategy: str = "batched"
                  ) -> builtins.list[MigrationInfo]:
        """Even out the pool: instances and bins move to the executors with the least load."""
        self._refuse_while_stopping()
        with self._reconfiguring(None):
            return builtins.list(self.rt.rebalance(strategy=strategy))

    def add_executors(self, principal: Principal, count: int = 1) -> builtins.list[int]:
        """Start `count` executors; returns their indices (nothing moves to them until a
        rebalance, a migrate or a new dataflow)."""
        self._refuse_while_stopping()
        with self._reconfiguring(None):
            return builtins.list(self.rt.add_executors(count))

    def remove_executor(self, principal: Principal, index: int, *, strategy: str = "batched"
                        ) -> dict[str, Any]:
        """Drain an executor: its instances move elsewhere, then it stops. Returns
        {"executor", "moving": [instances], "state": "draining"}."""
        self._refuse_while_stopping()
        with self._reconfiguring(None):
            return self.rt.remove_executor(index, strategy=strategy)

    def drain_node(self, principal: Principal, node: str) -> dict[str, Any]:
        """Take a node's executors out of the pool before it goes: its dataflows are
        checkpointed and restored on the executors left. Returns {"node", "executors",
        "dataflows", "ray_refused", "seconds"} once done."""
        self._refuse_while_stopping()
        with self._reconfiguring(None):
            return self.rt.drain_node(node)

    # -- self-scaling: the controller's view, and a dataflow's own settings and pins ---------
    def scaling(self, principal: Principal, name: str | None = None) -> dict[str, Any]:
        """The scaling controller's status: of one dataflow, or pool-wide. The admin sees
        it all; a tenant its own dataflows (their steps, decisions, misses, failed actions),
        and not the pool's executors."""
        if name is not None:
            self._entry(principal, name)
        with self._scaling_call(name):
            status = self._scaler().scaling(name)
        if principal.admin:
            return scaling_view.visible(status, None)
        own = {name} if name is not None else \
            {d["name"] for d in self.rt.list() if principal.can_access(d["tenant"])}
        return scaling_view.visible(status, own)

    def set_scaling(self, principal: Principal, name: str, settings: dict[str, Any] | None,
                    pin: dict[str, int | None] | None = None) -> dict[str, Any]:
        """Give a dataflow its own scaling settings (over the pool's; None: the pool's
        again) and pin steps to a parallelism (None unpins). Returns its scaling status.
        A setting or pin the runtime refuses is 422 with its subject, expected, got, fix."""
        self._refuse_while_stopping()
        entry = self._entry(principal, name)
        if entry["state"] not in LIVE_STATES:  # its scaling ended with it
            raise ended(DataflowEnded(name, entry["state"], None))
        with self._scaling_call(name):
            status = self._scaler().set_scaling(name, settings, pin=pin or None)
        return scaling_view.visible(status, None if principal.admin else {name})

    def _scaler(self) -> scaling_view.ScalingRuntime:
        if not isinstance(self.rt, scaling_view.ScalingRuntime):
            raise ApiError(501, "not_supported", "this runtime has no scaling controller",
                           expected="a runtime with Runtime.scaling", got=type(self.rt).__name__,
                           fix="run the service on the cameo runtime (`cameo serve`)")
        return self.rt

    @contextlib.contextmanager
    def _scaling_call(self, name: str | None) -> Iterator[None]:
        """The runtime's refusals of a scaling call, as the API says them: 422 (a setting
        or pin it cannot take: ScalingConfigError), 404 (gone), 409 (ended)."""
        try:
            yield
        except UserError as e:
            raise ApiError.from_user_error(e, 422, "invalid_scaling") from None
        except DataflowNotFound as e:
            raise not_found(name or e.name) from None
        except DataflowEnded as e:
            raise ended(e) from None

    @contextlib.contextmanager
    def _reconfiguring(self, name: str | None) -> Iterator[None]:
        """The runtime's refusals of a reconfiguration, as the API says them: 404 (gone),
        409 (ended, or a conflict), 422 (cannot be done as asked)."""
        try:
            yield
        except ReconfigError as e:  # ReconfigConflict is one: 409
            raise reconfig_refused(e) from None
        except DataflowNotFound as e:
            raise not_found(name or e.name) from None
        except DataflowEnded as e:
            raise ended(e) from None

    # -- outputs: results and the error output, read with cursors ----------------------------
    # Only the runtime's read and commit calls, never a dataflow's push lock: a reader does
    # not wait for a pusher, and its commit is what frees a sink held on a full result log.
    def read_results(self, principal: Principal, name: str, *, sink: str | None = None,
                     cursor: str | None = None, limit: int = DEFAULT_PAGE,
                     columns: bool = False) -> dict[str, Any]:
        """At most `limit` results after `cursor` (none: after the committed rows), shared
        fairly among the sink's instances. Commits nothing.

        Returns {"rows", "cursor", "sink", "pending"}; each row {"event", "ingest_ms",
        "egress_ms"}, in egress order (one instance's rows in their order). With `columns`,
        "rows" is one Arrow table in that order: the results' columns, then `_ingest_ms`
        and `_egress_ms` (406 if the results do not form columns).
        """
        return self._read(principal, name, RESULTS, sink, cursor, limit, columns)

    def read_errors(self, principal: Principal, name: str, *, cursor: str | None = None,
                    limit: int = DEFAULT_PAGE) -> dict[str, Any]:
        """At most `limit` error-output records after `cursor`, over every executor's error
        log. Records the runtime dropped unread (beyond its capacity) are skipped and counted.

        Returns {"rows", "cursor", "pending", "skipped", "dropped"}; each row {"step", "kind",
        "message", "event", "ingest_ms", "egress_ms"}.
        """
        return self._read(principal, name, ERRORS, None, cursor, limit)

    def commit_results(self, principal: Principal, name: str, *, cursor: str,
                       sink: str | None = None) -> dict[str, Any]:
        """Let the runtime forget the results before `cursor` (a sink held on a full log
        resumes). Committing again, or an older cursor, frees nothing and is no error."""
        return self._commit(principal, name, RESULTS, sink, cursor)

    def commit_errors(self, principal: Principal, name: str, *, cursor: str) -> dict[str, Any]:
        """Let the runtime forget the error-output records before `cursor`."""
        return self._commit(principal, name, ERRORS, None, cursor)

    def _read(self, principal: Principal, name: str, output: str, sink: str | None,
              cursor: str | None, limit: int, columns: bool = False) -> dict[str, Any]:
        if not isinstance(limit, int) or not 1 <= limit <= MAX_PAGE:
            raise ApiError(422, "invalid_request", f"limit {limit!r} is out of range",
                           expected=f"1 to {MAX_PAGE} rows", got=limit,
                           fix=f"ask for at most {MAX_PAGE} rows and read on with the cursor")
        info = self._describe_visible(principal, name, outputs=True)
        at = Cursor.decode(cursor, output) if cursor is not None else None
        if output == RESULTS:
            sink = self._pick_sink(info, name, sink, at)
        available, dropped = self._available(name, output, sink)
        deployment = _deployment(info)
        if at is None:
            starts = {log: committed for log, (committed, _) in available.items()}
        else:
            at.check(name, deployment, sink, available)
            starts = dict(at.positions)
        below = below_committed(starts, available)
        skipped = 0
        if below and output == RESULTS:
            raise committed_rows(name, below, cursor or "")
        if below:  # the error output drops its oldest unread records beyond a capacity
            skipped = sum(c - s for s, c in below.values())
            starts.update({log: c for log, (_, c) in below.items()})
        stops = plan_page(starts, {log: end for log, (_, end) in available.items()}, limit)
        positions = dict(starts)
        pages: builtins.list[Any] = []
        with self._reading(name, cursor):
            for log, stop in stops.items():
                if stop <= starts[log]:
                    continue  # nothing new there: no call
                got: Any
                if columns:  # an Arrow table
                    first, got = starts[log], self.rt.read_result_columns(name, log, starts[log],
                                                                          stop)
                    pages.append(got)
                elif output == RESULTS:
                    first, got = starts[log], self.rt.read_results(name, log, starts[log], stop)
                    pages.append([result_item(r) for r in got])
                else:
                    first, got = self.rt.read_errors(name, log, starts[log], stop)
                    skipped += first - starts[log]
                    pages.append([error_item(r) for r in got])
                positions[log] = first + len(got)
            merged = merge_tables(pages) if columns else \
                list(heapq.merge(*pages, key=lambda r: r["egress_ms"]))
        page: dict[str, Any] = {
            "rows": merged,
            "cursor": Cursor(output, name, deployment, sink, positions).encode(),
            "pending": sum(max(0, end - positions[log]) for log, (_, end) in available.items())}
        if output == RESULTS:
            page["sink"] = sink
        else:
            page.update(skipped=skipped, dropped=dropped)
        return page

    def _commit(self, principal: Principal, name: str, output: str, sink: str | None,
                cursor: str) -> dict[str, Any]:
        info = self._describe_visible(principal, name, outputs=True)
        at = Cursor.decode(cursor, output)
        if output == RESULTS:
            sink = self._pick_sink(info, name, sink, at)
        available, _ = self._available(name, output, sink)
        at.check(name, _deployment(info), sink, available)
        freed = 0
        with self._reading(name, cursor):
            for log, offset in sorted(at.positions.items()):
                committed = available[log][0]
                if offset > committed:
                    if output == RESULTS:
                        self.rt.commit_results(name, log, offset)
                    else:
                        self.rt.commit_errors(name, log, offset)
                    freed += offset - committed
        pending = sum(max(0, end - max(at.positions[log], committed))
                      for log, (committed, end) in available.items())
        return {"cursor": cursor, "freed": freed, "pending": pending}

    def _available(self, name: str, output: str, sink: str | None
                   ) -> tuple[dict[str, tuple[int, int]], int]:
        """(log -> (committed, end), records dropped unread) of one output."""
        with self._reading(name):
            if output == RESULTS:
                return dict(self.rt.result_offsets(name, sink)), 0
            logs = self.rt.error_offsets(name)
        return ({log: (c, e) for log, (c, e, _) in logs.items()},
                sum(d for _, _, d in logs.values()))

    @staticmethod
    def _pick_sink(info: DataflowInfo, name: str, sink: str | None, at: Cursor | None) -> str:
        """The sink asked for, else the cursor's, else the only one; 422 / 404 otherwise."""
        sinks = [s["id"] for s in info["spec"]["steps"] if s["op"] == "sink"]
        sink = sink if sink is not None else at.sink if at is not None else None
        if sink is None:
            if len(sinks) == 1:
                return str(sinks[0])
            raise ApiError(422, "sink_required", f"dataflow {name!r} has {len(sinks)} sinks",
                           expected=f"sink= one of {sinks}", got="no sink",
                           fix="name the sink to read (?sink=NAME, `cameo results --sink NAME`)")
        if sink not in sinks:
            raise ApiError(404, "unknown_sink", f"dataflow {name!r} has no sink {sink!r}",
                           expected=f"one of {sinks}", got=sink,
                           fix="read one of the dataflow's sinks")
        return sink

    @contextlib.contextmanager
    def _reading(self, name: str, cursor: str | None = None) -> Iterator[None]:
        """The runtime's answers about a dataflow's outputs, as the API says them."""
        try:
            yield
        except DataflowEnded as e:  # cancelled or failed meanwhile: its outputs were freed
            raise ended(e) from None
        except KeyError:  # cancelled meanwhile (an executor forgot it before the controller)
            raise not_found(name) from None
        except ResultsNotColumnar as e:  # asked for Arrow: read them as JSON or msgpack
            raise not_columnar(e) from None
        except ValueError as e:  # the runtime refuses to read rows another reader committed
            raise ApiError(409, "cursor_committed", f"rows of dataflow {name!r} after this cursor "
                           f"were committed meanwhile by another reader ({e})",
                           expected="one reader per output", got=(cursor or "")[:80],
                           fix="read again without a cursor (from the committed rows)") from None

    # -- shutdown ----------------------------------------------------------------------------
    def stop_all(self, drain_timeout_s: float, log: Callable[[str], None]) -> builtins.list[dict[str, Any]]:
        """Stop every dataflow cleanly: close sources (windows fire), let the backlog
        drain for up to `drain_timeout_s`, cancel, and say so for each one."""
        self.stopping = True
        running = self.rt.list(LIVE_STATES)
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
                    result = self._cancel_now(name)
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
