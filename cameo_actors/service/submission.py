"""Submitting and ending dataflows: a spec checked against its tenant, submitted once
per name (the same spec again is no error, another one is refused unless it replaces),
live settings changed, a dataflow cancelled, every dataflow stopped cleanly at shutdown."""

from __future__ import annotations

import builtins
import contextlib
from collections.abc import Callable
from typing import Any

from cameo_actors.dataflow.functions import FunctionResolver
from cameo_actors.dataflow.spec import DataflowSpec
from cameo_actors.errors import CameoError, SpecError
from cameo_actors.runtime.boundary import (
    LIVE_STATES,
    Cancelled,
    Updated,
)
from cameo_actors.runtime.exceptions import (
    AdmissionRefused,
    DataflowEnded,
    DataflowExists,
    DataflowNotFound,
)
from cameo_actors.service.auth import Principal
from cameo_actors.service.errors import (
    ApiError,
    ended,
    not_found,
)
from cameo_actors.service.tenancy import Tenancy


class Submission(Tenancy):
    """The core's part that starts and ends dataflows (`core.ServiceCore`)."""

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

    def update(self, principal: Principal, name: str, *, latency_target_ms: float | None,
               weight: float | None) -> Updated:
        self._refuse_while_stopping()
        self._entry(principal, name)
        try:
            return self.rt.update(name, latency_target_ms=latency_target_ms, weight=weight)
        except DataflowNotFound:
            raise not_found(name) from None
        except DataflowEnded as e:
            raise ended(e) from None

    def cancel(self, principal: Principal, name: str) -> Cancelled:
        """Cancel a live dataflow; for an ended one, free what it kept (a finished one's
        results) and answer its state: cancelling twice is not an error."""
        with self._control:
            self._entry(principal, name)
            return self._cancel_now(name)

    def _cancel_now(self, name: str) -> Cancelled:
        try:
            # Not under the dataflow's push lock: cancelling is what frees a push that
            # waits on a stuck dataflow's backpressure.
            result = self.rt.cancel(name)
        except DataflowNotFound:
            raise not_found(name) from None
        self._forget(name)
        return result

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
                self._pusher(d["name"]).close(d["name"])  # CameoError: cancelled meanwhile
        drained = True
        try:
            self.wait_idle(drain_timeout_s)
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
