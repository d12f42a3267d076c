"""The pool's executors as the control plane sees them: which live, which restart,
which are gone or being emptied, their incarnations and how many activations each
hosts. Every manager reads membership here; recovery and reconfiguration change it."""

from __future__ import annotations

import threading
from typing import Any

from cameo_actors.errors import ReconfigConflict, ReconfigError
from cameo_actors.runtime._private.controller.gateway import ExecutorGateway
from cameo_actors.runtime._private.controller_api import ControllerAPI
from cameo_actors.runtime._private.executor_api import ExecutorAPI
from cameo_actors.runtime._private.placement import Placement
from cameo_actors.runtime.boundary import ExecutorStats
from cameo_actors.runtime.interface import ControlAPI, serves


class Pool:
    def __init__(self, gateway: ExecutorGateway, lock: threading.RLock) -> None:
        self.gateway = gateway
        self.lock = lock  # the controller's one lock: membership and registry change together
        #: executor index -> the incarnation it runs as (a restart changes it)
        self.incarnations: dict[int, str] = {}
        #: executors lost and waited for (the platform restarts them)
        self.restarting: set[int] = set()
        #: executor index -> why it is out of the pool (it died, or was removed)
        self.dead: dict[int, str] = {}
        #: executors being emptied before they are removed: no new work goes there
        self.draining: set[int] = set()
        #: executor index -> why its last removal failed (it stays in the pool)
        self.kept: dict[int, str] = {}
        #: executor index -> activations it hosts (placement's balance)
        self.load: dict[int, int] = {}
        #: empty executors kept warm: a lost executor's dataflows are restored on one at
        #: once (`Recovery.lost`), and the lost one, restarted, becomes a spare
        self.standby: set[int] = set()
        #: a lost executor -> the spare its instances are restored on (until it is back)
        self.replaced: dict[int, int] = {}

    def size(self) -> int:
        return self.gateway.size()

    def live(self) -> list[int]:
        """Executors not gone for good."""
        return [i for i in range(self.size()) if i not in self.dead]

    def usable(self) -> list[int]:
        """Executors new work may go to: alive, not being removed, not a spare."""
        return [i for i in self.live() if i not in self.draining and i not in self.standby]

    def keep_spares(self, n: int) -> None:
        """The last `n` live executors are spares (a pool just started: they host nothing)."""
        self.standby = set(self.live()[len(self.live()) - n:]) if n > 0 else set()

    def spare(self, lost: int) -> int | None:
        """A spare that answers, taken out of the standby to replace `lost`; None if none."""
        for s in sorted(self.standby):
            if s != lost and s in self.answering():
                self.standby.discard(s)
                self.replaced[lost] = s
                return s
        return None

    def answering(self) -> list[int]:
        """Executors expected to answer now: alive, not restarting, linked (one being
        added has no incarnation yet)."""
        return [i for i in self.live() if i not in self.restarting and i in self.incarnations]

    def link(self) -> None:
        """Tell every live executor the pool's executors and their incarnations."""
        live = self.live()
        for i, answer in zip(live, self.gateway.call(live, ExecutorAPI.ping), strict=True):
            self.incarnations[i] = answer.incarnation
        self.gateway.link(live, self.incarnations)

    def placed(self, old: Placement | None, new: Placement | None) -> None:
        """A dataflow's activations moved from `old` to `new` (None: none)."""
        for placement, sign in ((old, -1), (new, 1)):
            for ex in (placement.instances.values() if placement is not None else ()):
                self.load[ex] = self.load.get(ex, 0) + sign

    def check_executor(self, index: Any, where: str) -> None:
        """`index` names a live executor that is not being removed (else ReconfigError)."""
        known = self.live()
        if type(index) is not int or index not in known:
            why = f" ({self.dead[index]})" if type(index) is int and index in self.dead else ""
            raise ReconfigError(where, f"one of the pool's live executors {known}",
                                index, f"name a live executor{why}; see `cameo executors`")
        if index in self.draining:
            raise ReconfigConflict(where, "an executor that is not being removed", index,
                                   "name another executor")

    @serves(ControllerAPI.executor_handles)
    def handles(self) -> list[Any]:
        return self.gateway.handles()

    @serves(ControlAPI.executor_stats)
    def stats(self) -> list[ExecutorStats]:
        """Each executor's statistics; one gone or silent says so."""
        live = self.live()
        answers = self.gateway.call_each(live, ExecutorAPI.executor_stats)
        out: dict[int, ExecutorStats] = {i: a for i, a in zip(live, answers, strict=True) if a}
        for i in range(self.size()):
            if i not in out:
                out[i] = {"executor": i, "alive": i not in self.dead,
                          "faults": [self.dead.get(i, "did not answer in time")]}
        return [out[i] for i in sorted(out)]
