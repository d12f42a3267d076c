"""What a handle knows of the pool's dataflows, and how it calls the executors hosting
one: from the dataflow's record (cached a moment), again from its new record after a
recovery moved its instances, and with `DataflowEnded` once it ended.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, TypeVar

from cameo_actors.dataflow.spec import DataflowSpec
from cameo_actors.errors import CameoError
from cameo_actors.runtime._private.client.controller import RemoteController
from cameo_actors.runtime._private.executor_api import ExecutorAPI
from cameo_actors.runtime._private.remote import Actor
from cameo_actors.runtime.boundary import RECOVERING, ActivationId, DataflowInfo
from cameo_actors.runtime.config import RuntimeConfig
from cameo_actors.runtime.exceptions import DataflowEnded, RuntimeUnavailable

T = TypeVar("T")
#: How long a handle trusts what it knows of a dataflow (placement, state) before asking again.
DESCRIBE_TTL_S = 1.0
#: How often a wait for a dataflow's recovery asks the controller again.
RECOVERY_POLL_S = 0.05
#: How long a call that failed for want of an executor waits before it looks again.
CHANGE_WAIT_S = 0.1


class Dataflows:
    """One handle's view of the pool: its controller, its executors, the records.

    Args:
        controller: the pool's controller.
        config: the pool's configuration.
        executors: each executor's Ray handle, by index (None: retired for good).
    """

    def __init__(self, controller: RemoteController, config: RuntimeConfig,
                 executors: list[Any]) -> None:
        self.controller, self.config = controller, config
        self.executors = executors
        self._described: dict[str, tuple[float, DataflowInfo]] = {}  # name -> (when, info)
        #: name -> (the spec's dict form, the spec parsed): parsed once, not on every push
        self._specs: dict[str, tuple[Any, DataflowSpec]] = {}

    def describe(self, name: str, *, refresh: bool = False) -> DataflowInfo:
        """The dataflow's record, cached for up to `DESCRIBE_TTL_S` (so that pushes cost no
        extra call and still learn within a second that it ended); `refresh` asks now."""
        now = time.monotonic()
        cached = self._described.get(name)
        if refresh or cached is None or now - cached[0] > DESCRIBE_TTL_S:
            cached = self._described[name] = (now, self.controller.describe(name))
            if max(cached[1]["executors"], default=-1) >= len(self.executors):
                self.refresh_executors()  # placed on an executor added since
        return cached[1]

    def forget(self, name: str) -> None:
        """Ask for the record again next time (the dataflow changed)."""
        self._described.pop(name, None)

    def refresh_executors(self) -> None:
        self.executors = self.controller.executor_handles()

    def executor(self, index: int) -> Actor[ExecutorAPI]:
        """Executor `index`. One retired for good has none (a handle of an actor whose job
        ended cannot be read): RuntimeUnavailable, as for a dead one, so that the call is
        made again from the dataflow's new record."""
        if index >= len(self.executors):
            self.refresh_executors()
        handle = self.executors[index]
        if handle is None:
            raise RuntimeUnavailable(f"executor {index} was retired: its dataflows were "
                                     "restored on the executors left")
        return Actor(handle)

    def retired(self, index: int) -> bool:
        return index < len(self.executors) and self.executors[index] is None

    def at(self, info: DataflowInfo, aid: str) -> Actor[ExecutorAPI]:
        """The executor hosting activation `aid`."""
        return self.executor(info["hosts"][aid])

    def spec(self, name: str) -> DataflowSpec:
        """The running dataflow's spec, parsed again only when its record's spec changed
        (parsing one validates it and compiles its expressions: about 0.8 ms, more than
        a push of a few events costs otherwise)."""
        data = self.live(name)["spec"]
        parsed = self._specs.get(name)
        if parsed is None or (parsed[0] is not data and parsed[0] != data):
            parsed = self._specs[name] = (data, DataflowSpec.from_dict(data))
        return parsed[1]

    def source_instances(self, name: str, source: str) -> list[str]:
        spec = self.spec(name)
        try:
            step = spec.step(source)
        except KeyError:
            raise CameoError(f"dataflow {name!r} has no source {source!r}; sources: "
                             f"{[s.id for s in spec.sources]}") from None
        return [str(a) for a in ActivationId.of_step(name, step.id, step.parallelism)]

    # -- following a dataflow across recoveries ------------------------------------------
    def live(self, name: str) -> DataflowInfo:
        """The dataflow's record, if its parts still run on the executors (else
        DataflowEnded); while it is recovering, waits (up to `recovery_timeout_s`)."""
        info = self.describe(name)
        if info["state"] == RECOVERING:
            info = self.await_recovered(name)
        if info["released"]:
            raise DataflowEnded(name, info["state"], info["cause"])
        return info

    def await_recovered(self, name: str) -> DataflowInfo:
        """Wait until `name` is no longer recovering; its fresh record."""
        deadline = time.monotonic() + self.config.recovery_timeout_s
        while True:
            info = self.describe(name, refresh=True)
            if info["state"] != RECOVERING:
                return info
            if time.monotonic() > deadline:
                raise RuntimeUnavailable(f"dataflow {name!r} is still recovering after "
                                         f"{self.config.recovery_timeout_s:g} s ({info['cause']})")
            time.sleep(RECOVERY_POLL_S)

    def await_change(self, name: str) -> None:
        """After a call failed for want of an executor: wait until the controller noticed
        (the dataflow recovers) and it is done, or a moment if it noticed nothing."""
        time.sleep(CHANGE_WAIT_S)
        self.describe(name, refresh=True)
        self.live(name)

    def call(self, name: str, calls: Callable[[DataflowInfo], T]) -> tuple[DataflowInfo, T]:
        """`calls(record)`: calls to the executors hosting `name`, made from its record and
        waited for; made again from its new record after a recovery, which may have moved
        its instances. One that ended meanwhile (an executor no longer knows it: KeyError)
        raises DataflowEnded with its state and cause; one that failed because an
        executor died is made again once the dataflow was restored (after
        `recovery_timeout_s`, RuntimeUnavailable)."""
        deadline = time.monotonic() + self.config.recovery_timeout_s
        while True:
            try:
                info = self.live(name)
                return info, calls(info)
            except KeyError:
                self.describe(name, refresh=True)  # DataflowNotFound if it is gone altogether
                self.live(name)  # DataflowEnded if it ended
                if time.monotonic() > deadline:
                    raise
                self.await_change(name)  # live: an executor restarted, not restored yet
            except RuntimeUnavailable:
                if time.monotonic() > deadline:
                    raise
                self.await_change(name)

    def ask(self, name: str, calls: Callable[[DataflowInfo], T]) -> T:
        """`call`'s answers alone."""
        return self.call(name, calls)[1]
