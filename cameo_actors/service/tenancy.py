"""What every part of the service's core shares: the runtime, a tenant's view of its
dataflows (a dataflow of another tenant is not there: 404), and the service's state
(stopping, the per-dataflow order of pushes, the push handles)."""

from __future__ import annotations

import contextlib
import logging
import threading
from collections import deque
from collections.abc import Iterator
from typing import Any

from cameo_actors.clock import Clock, SystemClock
from cameo_actors.runtime.boundary import (
    RECOVERING,
    RUNNING,
    DataflowInfo,
    DataflowSummary,
    PoolSnapshot,
    Pressure,
)
from cameo_actors.runtime.exceptions import (
    DataflowEnded,
    DataflowNotFound,
)
from cameo_actors.runtime.interface import RuntimeAPI
from cameo_actors.service.auth import Principal
from cameo_actors.service.errors import (
    ApiError,
    ended,
    not_found,
)
from cameo_actors.service.history import History

log = logging.getLogger("cameo.service")
#: How long the service trusts what it learnt of a dataflow's backpressure (seconds).
PRESSURE_TTL_S = 0.1


class Tenancy:
    """The state and lookups the core's parts share (`core.ServiceCore`).

    Args:
        runtime: the runtime (`RuntimeAPI`): a `Runtime` in `cameo serve`, a fake in tests.
        clock: physical time, for throughput.
        allowed_modules: module prefixes specs' functions may come from (None: any);
            checked before a replace cancels the running dataflow.
        history: where ended dataflows' records are kept (None: in memory, until the
            process ends).
    """

    def __init__(self, runtime: RuntimeAPI, *, clock: Clock | None = None,
                 allowed_modules: tuple[str, ...] | None = None,
                 history: History | None = None) -> None:
        self.rt = runtime
        self.history = history or History(None)
        self.clock = clock or SystemClock()
        self.allowed_modules = allowed_modules
        self.stopping = False
        self._control = threading.Lock()  # submit / replace / cancel, one at a time
        # Events of one dataflow go in order (one pusher at a time); dataflows do not wait
        # for each other, so one tenant's backpressure never holds another's pushes.
        self._flow_locks: dict[str, threading.Lock] = {}
        self._locks_guard = threading.Lock()
        self._samples: dict[str, deque[tuple[float, int, int, int]]] = {}
        #: a handle per dataflow for its events: a handle's batches are applied in order
        #: per executor, so a shared one would let one dataflow's backpressure hold back
        #: every other dataflow on the same executor
        self._pushers: dict[str, RuntimeAPI] = {}
        #: name -> (when asked, the runtime's answer, events pushed since)
        self._pressure: dict[str, tuple[float, Pressure, int]] = {}
        #: the pool's last snapshot (when, monotonic; it) and each executor's busy time
        #: seen in it (when, busy ms, its busy share since the one before)
        self._snapshot: tuple[float, PoolSnapshot | None] = (0.0, None)
        self._snapshot_lock = threading.Lock()
        #: the last snapshot and its dataflows by name (`Overview._by_name`)
        self._indexed: tuple[PoolSnapshot | None, dict[str, Any]] = (None, {})
        self._busy: dict[Any, tuple[float, float, float | None]] = {}

    # -- lookups -----------------------------------------------------------------------------
    def _entry(self, principal: Principal, name: str) -> DataflowSummary:
        """The pool's list entry (live or ended) of a dataflow this caller may access, else 404."""
        for d in self.rt.list():
            if d["name"] == name:
                if principal.can_access(d["tenant"]):
                    return d
                raise not_found(name)
        kept = self.history.get(name)  # gone from the pool: as the service last showed it
        if kept is not None and principal.can_access(kept["summary"]["tenant"]):
            return kept["summary"]  # type: ignore[no-any-return]
        raise not_found(name)

    def _kept(self, name: str, part: str) -> Any:
        """What the service last answered for an ended dataflow the pool forgot (the
        caller passed `_entry`), else 404."""
        kept = self.history.get(name)
        if kept is None:
            raise not_found(name)
        return kept[part]

    def flow_lock(self, name: str) -> threading.Lock:
        """The lock that orders pushes and closes of one dataflow."""
        with self._locks_guard:
            return self._flow_locks.setdefault(name, threading.Lock())

    def _refuse_while_stopping(self) -> None:
        if self.stopping:
            raise ApiError(503, "stopping", "the service is shutting down",
                           expected="a running service", got="shutdown in progress",
                           fix="retry once the service is back")

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

    def _forget(self, name: str) -> None:
        """A dataflow cancelled: its push order, handle and measurements go."""
        with self._locks_guard:
            self._flow_locks.pop(name, None)
            self._pushers.pop(name, None)
        self._pressure.pop(name, None)
        self._samples.pop(name, None)

    def _pusher(self, name: str) -> RuntimeAPI:
        """The handle that pushes to (and closes) dataflow `name`."""
        with self._locks_guard:
            pusher = self._pushers.get(name)
            if pusher is None:
                pusher = self._pushers[name] = self.rt.handle()
            return pusher

    def wait_idle(self, timeout_s: float) -> None:
        """Every pushed batch accepted, then the runtime drained (`RuntimeAPI.wait_idle`)."""
        with self._locks_guard:
            pushers = list(self._pushers.items())
        for name, handle in pushers:
            try:
                with self.flow_lock(name):
                    handle.flush()
            except Exception as e:  # a refused batch (e.g. cancelled meanwhile): drain the rest
                log.warning("a pushed batch was not accepted: %s", e)
        self.rt.wait_idle(timeout_s=timeout_s)
