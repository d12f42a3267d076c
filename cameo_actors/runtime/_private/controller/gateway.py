"""How the control plane reaches the executors: one interface, two transports.

Every manager of the controller talks to executors through an `ExecutorGateway` and
nothing else: `RayGateway` (`ray_gateway.py`) sends each call to an executor actor;
the unit tests' gateway calls in-process executors (`executor.host.ExecutorHost`, the
same code). A call names its method by reference to `ExecutorAPI`, so a type checker
follows it to the executor:

    gateway.call(live, ExecutorAPI.cancel, name)                # every answer, or raise
    gateway.call_each(live, ExecutorAPI.usage)                  # None where one failed
    gateway.gather_each(gateway.send_all(live, ExecutorAPI.traces), timeout_s=10.0)

`send` starts a call and returns it to wait on; the waits either need every answer
(`gather`), take what comes (`gather_each`), or tell slow from gone (`poll`).
"""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from typing import Any, Concatenate, Generic, ParamSpec, TypeVar

from cameo_actors.runtime._private.executor_api import ExecutorAPI
from cameo_actors.runtime.boundary import CALL_TIMEOUT_S

P = ParamSpec("P")
R = TypeVar("R")


class Call(Generic[R]):
    """A call under way to one executor, whose answer will be an `R` (each transport
    keeps what it needs to wait for it)."""


class ExecutorGateway(ABC):
    """The executors of one pool, by index."""

    @abstractmethod
    def send(self, index: int, method: Callable[Concatenate[ExecutorAPI, P], R],
             *args: P.args, **kwargs: P.kwargs) -> Call[R]:
        """Start `method(*args, **kwargs)` on executor `index`; a call to wait on."""

    @abstractmethod
    def gather(self, calls: Sequence[Call[R]], timeout_s: float) -> list[R]:
        """Every call's answer, or the first failure: what the executor raised, or
        `RuntimeUnavailable` (an executor gone or silent for `timeout_s`)."""

    @abstractmethod
    def gather_each(self, calls: Sequence[Call[R]], timeout_s: float) -> list[R | None]:
        """Each call's answer, or None for one that failed or did not come in time."""

    @abstractmethod
    def poll(self, calls: Sequence[Call[R]], timeout_s: float) -> list[R | Exception | None]:
        """Each call's answer; the `RuntimeUnavailable` of an executor that is gone; or
        None if it did not answer in `timeout_s` (slow, perhaps not dead)."""

    # -- the pool's members ----------------------------------------------------------------
    @abstractmethod
    def start(self, indices: Sequence[int]) -> None:
        """Start new executors with these indices (restarted by the platform if they die)."""

    @abstractmethod
    def adopt(self, index: int) -> bool:
        """Take over executor `index` of an earlier controller, if it still runs."""

    @abstractmethod
    def forget(self, index: int) -> None:
        """No executor at `index` any more (it is gone for good; the index stays taken)."""

    @abstractmethod
    def started(self, indices: Sequence[int], timeout_s: float) -> int:
        """How many of these new executors answered within `timeout_s`."""

    @abstractmethod
    def abandon(self, indices: Sequence[int]) -> None:
        """End these new executors, which never joined the pool, and forget them."""

    @abstractmethod
    def kill(self, index: int) -> None:
        """End executor `index` for good (not restarted)."""

    @abstractmethod
    def request_cpus(self, cpus: float) -> None:
        """Ask the platform for `cpus` in all before executors are added (nothing
        where nothing can add machines)."""

    def storage_unseen(self, indices: Sequence[int]) -> str | None:
        """Which of these executors do not reach the pool's storage, or None. Nothing to
        check where executors have no nodes."""
        return None

    def drain_node(self, node: str, why: str) -> str | None:
        """Keep new executors off `node` (its id) from now on: why the platform did not,
        or None. Nothing to do where executors have no nodes."""
        return None

    @abstractmethod
    def handles(self) -> list[Any]:
        """What a client uses to reach the executors directly (pushes and reads), and
        what executors reach each other by (`ExecutorAPI.set_peers`)."""

    def size(self) -> int:
        """Executors the pool has had (indices from 0; the dead keep theirs)."""
        return len(self.handles())

    # -- calls to several executors ----------------------------------------------------------
    def send_all(self, indices: Sequence[int], method: Callable[Concatenate[ExecutorAPI, P], R],
                 *args: P.args, **kwargs: P.kwargs) -> list[Call[R]]:
        """`send` to each of `indices`."""
        return [self.send(i, method, *args, **kwargs) for i in indices]

    def call(self, indices: Sequence[int], method: Callable[Concatenate[ExecutorAPI, P], R],
             *args: P.args, **kwargs: P.kwargs) -> list[R]:
        """`method` on each of `indices`; every answer, or the first failure."""
        return self.gather(self.send_all(indices, method, *args, **kwargs), CALL_TIMEOUT_S)

    def call_each(self, indices: Sequence[int],
                  method: Callable[Concatenate[ExecutorAPI, P], R],
                  *args: P.args, **kwargs: P.kwargs) -> list[R | None]:
        """`method` on each of `indices`; None for one that failed or was late."""
        return self.gather_each(self.send_all(indices, method, *args, **kwargs), CALL_TIMEOUT_S)

    def link(self, indices: Sequence[int], incarnations: dict[int, str]) -> None:
        """Tell these executors every executor of the pool and its incarnation."""
        self.call(indices, ExecutorAPI.set_peers, self.handles(), incarnations)

    def relink(self, indices: Sequence[int], index: int, incarnation: str) -> None:
        """Tell these executors that `index` runs again, as `incarnation`."""
        self.call_each(indices, ExecutorAPI.relink, index, self.handles()[index], incarnation)


def in_thread(name: str, fn: Callable[..., None], *args: Any) -> None:
    """Run `fn(*args)` in a daemon thread of its own (how managers start long work; a
    unit test passes one that runs it at once)."""
    threading.Thread(target=fn, args=args, name=name, daemon=True).start()


#: How a manager starts long work: (thread name, function, its arguments).
Spawn = Callable[..., None]
