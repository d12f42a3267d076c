"""Events into a dataflow's sources: a push refused before its body is read when the
dataflow cannot take it (ended, unknown, full: 4xx at once), then handed to the
dataflow's own push handle, in order, and answered once it is in its sources' ingress
logs (it survives a failure from then on)."""

from __future__ import annotations

import builtins
from typing import Any

from cameo_actors.operators.exceptions import ColumnsRefused
from cameo_actors.runtime.boundary import (
    DataflowInfo,
    Pressure,
)
from cameo_actors.service.auth import Principal
from cameo_actors.service.errors import (
    ApiError,
    refused_columns,
)
from cameo_actors.service.tenancy import PRESSURE_TTL_S, Tenancy

#: Refused events a push answer describes (it counts them all).
REJECTIONS_SHOWN = 10


class Inputs(Tenancy):
    """The core's part that takes events in (`core.ServiceCore`)."""

    def push(self, principal: Principal, name: str, source: str,
             events: builtins.list[dict[str, Any]] | Any, *, admitted: bool = False
             ) -> dict[str, Any]:
        """Hand events (rows, or an Arrow table) to a source: {"accepted": n, "rejected": m,
        "rejections": the first few}. An event msgpack cannot carry is refused alone (and goes to the error output);
        the rest go on, so a writer never retries a whole batch for one event."""
        if not admitted:  # the HTTP route admits first, before it reads the body
            self.admit_push(principal, name, source)
        with self._ending(name), self.flow_lock(name):
            pusher = self._pusher(name)
            try:
                rejected = pusher.push(name, source, events)
            except ColumnsRefused as e:  # columns off the schema: nothing was sent
                raise refused_columns(422, e) from None
            pusher.flush()  # answered once the events are in their sources' ingress logs
            cached = self._pressure.get(name)  # one push at a time per dataflow: no race
            if cached is not None:
                self._pressure[name] = (cached[0], cached[1], cached[2] + len(events))
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
            self._pusher(name).close(name)  # after that dataflow's events, in order
        return {"name": name, "state": "sources closed"}

    def _refuse_when_full(self, name: str) -> None:
        """429 before anything is sent when the dataflow cannot take more now: a request
        never waits on one dataflow's backpressure while holding a server worker."""
        p = self.pressure(name)
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

    def pressure(self, name: str) -> Pressure:
        """The runtime's answer, reused for `PRESSURE_TTL_S`: a push asks before sending,
        and a burst of pushes should not each cost a round of calls. The events pushed
        since the answer count against its sinks' room, so that a burst cannot fill a
        log past its bytes before the answer is renewed."""
        now = self.clock.now_ms() / 1000.0
        cached = self._pressure.get(name)
        if cached is None or now - cached[0] > PRESSURE_TTL_S:
            cached = self._pressure[name] = (now, self.rt.pressure(name), 0)
        _, answer, pushed = cached
        if not pushed:
            return answer
        full = {s for s, room in answer["rooms"].items() if room <= pushed}
        return {**answer, "full_sinks": sorted(full | set(answer["full_sinks"]))}
