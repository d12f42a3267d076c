"""The reliable push: a client's batches to a dataflow's sources, each applied once and in
order, through executor failures, restores and retired executors.

Each call of a client to a source activation carries the next number of that source's
sequence (`seq`); a source applies a client's calls in that order, once, and drops a
call it applied already, so a call may always be sent again. The session keeps the
calls not yet answered, per executor (`in_flight`), at most `MAX_IN_FLIGHT` of them
(one while the executor's answers say a source of it is pressed: backpressure), and
settles them in order:

- an answer is the events waiting at the source: at `PRESSED_SHARE` of its limit, the
  executor is pressed;
- a call that failed because an executor died or its dataflow is being restored
  (`RuntimeUnavailable`) means every call not answered there may fail too: they are all
  sent again, in order, once the dataflow runs (to wherever its sources are now);
- calls to a dataflow that ended meanwhile are dropped: it takes no more input, and its
  end must not fail the batches of others sharing the executor;
- a call that never answers, with its source hosted elsewhere meanwhile (its executor
  retired), counts as failed.

How calls travel (`IngestCalls`) and where a dataflow runs (`Placements`) are the
session's two collaborators: Ray and the controller in a `Runtime`, fakes in its unit
tests.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from cameo_actors.errors import CameoError
from cameo_actors.runtime.boundary import CALL_TIMEOUT_S, DataflowInfo
from cameo_actors.runtime.exceptions import DataflowEnded, DataflowNotFound, RuntimeUnavailable

#: Ingest calls in flight per executor before a push waits for one to return; only one
#: while that executor's answers say a source of it is pressed (`PRESSED_SHARE` full).
#: A call to a full source holds one of the executor's ingest threads until there is
#: room, so a writer that kept eight there would keep other tenants' batches out.
MAX_IN_FLIGHT = 8
PRESSED_SHARE = 0.5
#: How often a push waiting for its calls' answers asks whether their sources moved.
MOVED_CHECK_S = 1.0


class IngestCalls(Protocol):
    """How a session's ingest calls travel. A call is whatever `send` returns."""

    def send(self, host: int, client: str, seq: int, target: str, blob: bytes) -> Any:
        """Start `ExecutorAPI.ingest` on executor `host`."""

    def answered(self, calls: Sequence[Any], at_least: int, timeout_s: float) -> list[Any]:
        """The calls answered (or failed), once `at_least` are or after `timeout_s`."""

    def answer(self, call: Any) -> int:
        """An answered call's events waiting at its source; `RuntimeUnavailable` if it
        failed for want of an executor (or its source being restored)."""

    def finish(self, calls: Sequence[Any]) -> None:
        """Wait until each of `calls` answered or failed."""


class Placements(Protocol):
    """Where the session's dataflows run (the handle's `Dataflows`)."""

    def describe(self, name: str, *, refresh: bool = False) -> DataflowInfo: ...
    def await_recovered(self, name: str) -> DataflowInfo: ...
    def await_change(self, name: str) -> None: ...
    def retired(self, index: int) -> bool: ...


@dataclass(frozen=True, slots=True)
class InFlight:
    """An ingest call not yet answered, kept to be sent again after a failure."""

    call: Any
    dataflow: str
    deployment: str
    target: str
    seq: int
    blob: bytes


class PushSession:
    """One client's ingest calls: numbered per source, kept until answered, sent again.

    Args:
        client: names the calls (a writer that may push the same events again names
            them the same, and each source drops the calls it applied already).
        calls: how the calls travel.
        placements: where the dataflows run.
        ingress_events: the events a source may have waiting (`RuntimeConfig`).
        recovery_timeout_s: how long a failure is waited out before the push gives up.
    """

    def __init__(self, client: str, calls: IngestCalls, placements: Placements, *,
                 ingress_events: int, recovery_timeout_s: float) -> None:
        self.client = client
        self.calls, self.placements = calls, placements
        self.ingress_events, self.recovery_timeout_s = ingress_events, recovery_timeout_s
        #: the next call number per source activation
        self._seq: dict[str, itertools.count[int]] = {}
        #: the deployment each dataflow was pushed to (a redeploy's sources count from 0)
        self._deployments: dict[str, str] = {}
        #: calls not yet answered, per executor: kept to be sent again after a failure
        self.in_flight: dict[int, list[InFlight]] = {}
        #: executors whose last answers said a source of theirs was pressed
        self.pressed: set[int] = set()

    def forget(self, name: str) -> None:
        """The dataflow was deployed again, or cancelled: its sources count from 0."""
        self._deployments.pop(name, None)
        for target in [t for t in self._seq if t.startswith(f"{name}/")]:
            del self._seq[target]

    def send(self, name: str, target: str, blob: bytes) -> None:
        """The next call of this client to source activation `target`."""
        info = self.placements.describe(name)
        host = info["hosts"][target]
        if self.placements.retired(host):  # the dataflow runs elsewhere now
            info = self.placements.await_recovered(name)
            host = info["hosts"][target]
        pending = self.in_flight.setdefault(host, [])
        answered = len(self.calls.answered([p.call for p in pending], len(pending), 0.0)) \
            if pending else 0
        # The answered calls are taken in order (and any that failed sent again), so that a
        # failure is noticed by the next push, not left as a gap a source would wait on.
        most = 1 if host in self.pressed else MAX_IN_FLIGHT
        want = max(answered, len(pending) - most + 1)
        if want > 0:
            self.settle(host, want)
        deployment = self.placements.describe(name)["deployment"]
        if self._deployments.setdefault(name, deployment) != deployment:
            self.forget(name)
            self._deployments[name] = deployment
        # Numbered last, once nothing can fail before the call goes: a number taken and
        # never sent would be a gap its source waits on for good.
        seq = next(self._seq.setdefault(target, itertools.count()))
        self._call(host, InFlight(None, name, deployment, target, seq, blob))

    def _call(self, host: int, sent: InFlight) -> None:
        call = self.calls.send(host, self.client, sent.seq, sent.target, sent.blob)
        self.in_flight.setdefault(host, []).append(
            InFlight(call, sent.dataflow, sent.deployment, sent.target, sent.seq, sent.blob))

    def flush(self) -> None:
        """Wait until every call was accepted (written to its source's ingress log): until
        none is left anywhere, as settling one executor may send calls to another (their
        sources moved there)."""
        while any(self.in_flight.values()):
            for host in [h for h, calls in self.in_flight.items() if calls]:
                self.settle(host, len(self.in_flight[host]))

    def settle(self, host: int, n: int) -> None:
        """Wait for the oldest `n` calls to `host`. If one failed because an executor died
        or its dataflow is being restored, every call not answered there is sent again
        once the dataflow runs, and waited for (up to `recovery_timeout_s`)."""
        deadline = time.monotonic() + self.recovery_timeout_s
        while True:
            pending = self.in_flight.get(host, [])
            want = min(n, len(pending))
            done, moved = self._answered(host, pending, want)
            if len(done) < want and not moved:
                raise RuntimeUnavailable(f"executor {host} accepted no batch in "
                                         f"{CALL_TIMEOUT_S:g} s")
            failed = moved
            waiting = 0
            for call in done:
                try:
                    waiting = max(waiting, self.calls.answer(call))
                except RuntimeUnavailable:  # an executor died, or the source is being restored
                    failed = True
            if waiting >= PRESSED_SHARE * self.ingress_events:
                self.pressed.add(host)
            elif done:
                self.pressed.discard(host)
            if not failed:
                finished = {id(c) for c in done}
                self.in_flight[host] = [p for p in pending if id(p.call) not in finished]
                return
            if time.monotonic() > deadline:
                raise RuntimeUnavailable(f"batches to executor {host} were not accepted within "
                                         f"{self.recovery_timeout_s:g} s of a failure")
            self._send_again(host, pending, finish=not moved)
            n = len(self.in_flight.get(host, []))

    def _send_again(self, host: int, pending: list[InFlight], finish: bool) -> None:
        """Every call not answered yet may fail as well: all of them again, in order, to
        where their sources are now; but those to a dataflow that ended, or that was
        deployed again since (its sources count anew: the calls were for the one before)."""
        if finish:  # let them finish (or fail) first
            self.calls.finish([p.call for p in pending])
        self.in_flight[host] = []
        ended = set()
        for name in dict.fromkeys(p.dataflow for p in pending):
            try:
                self.placements.await_change(name)
            except (DataflowEnded, DataflowNotFound):
                ended.add(name)
        for sent in sorted(pending, key=lambda p: (p.target, p.seq)):
            if sent.dataflow in ended:
                continue
            info = self.placements.describe(sent.dataflow)
            if info["deployment"] == sent.deployment:
                self._call(info["hosts"][sent.target], sent)

    def _answered(self, host: int, pending: list[InFlight], want: int) -> tuple[list[Any], bool]:
        """The calls of `pending` (to `host`) answered once the oldest `want` are, or after
        `CALL_TIMEOUT_S`; with True as soon as a source they went to is hosted elsewhere
        (`host` was retired and its dataflows restored on the others: they never will be)."""
        calls = [p.call for p in pending]
        deadline = time.monotonic() + CALL_TIMEOUT_S
        while True:
            done = self.calls.answered(calls, want, MOVED_CHECK_S)
            if len(done) >= want or time.monotonic() > deadline:
                return done, False
            for name in dict.fromkeys(p.dataflow for p in pending):
                try:
                    hosts = self.placements.describe(name, refresh=True)["hosts"]
                except CameoError:  # ended, or the controller is busy: the deadline decides
                    continue
                if any(hosts.get(p.target, host) != host for p in pending if p.dataflow == name):
                    return done, True
