"""How the control plane reaches the executors: one interface, two transports.

Every manager of the controller talks to executors through an `ExecutorGateway`
and nothing else: `RayGateway` (`ray_gateway.py`) sends each call to an
executor actor; an in-process gateway calls `ExecutorCore`s directly, so the
managers can be driven in a unit test without Ray. The interface is Ray's own
shape, narrowed: `send` starts a call and returns a reply to wait on, and the
waits either need every answer (`call`) or take what comes (`call_each`,
`poll`).
"""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from typing import Any

from cameo_actors.runtime.boundary import CALL_TIMEOUT_S


class ExecutorGateway(ABC):
    """The executors of one pool, by index."""

    @abstractmethod
    def send(self, index: int, method: str, *args: Any) -> Any:
        """Start `method(*args)` on executor `index`; a reply to wait on."""

    @abstractmethod
    def gather(self, replies: Sequence[Any], timeout_s: float) -> list[Any]:
        """Every reply's answer, or the first failure: what the executor raised, or
        `RuntimeUnavailable` (an executor gone or silent for `timeout_s`)."""

    @abstractmethod
    def gather_each(self, replies: Sequence[Any], timeout_s: float) -> list[Any]:
        """Each reply's answer, or None for one that failed or did not come in time."""

    @abstractmethod
    def poll(self, replies: Sequence[Any], timeout_s: float) -> list[Any]:
        """Each reply's answer; the `RuntimeUnavailable` of an executor that is gone;
        or None if it did not answer in `timeout_s` (slow, perhaps not dead)."""

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
    def link(self, indices: Sequence[int], incarnations: dict[int, str]) -> None:
        """Tell these executors every executor of the pool and its incarnation."""

    @abstractmethod
    def relink(self, indices: Sequence[int], index: int, incarnation: str) -> None:
        """Tell these executors that `index` runs again, as `incarnation`."""

    @abstractmethod
    def handles(self) -> list[Any]:
        """What a client uses to reach the executors directly (pushes and reads)."""

    def size(self) -> int:
        """Executors the pool has had (indices from 0; the dead keep theirs)."""
        return len(self.handles())

    # -- calls to several executors ----------------------------------------------------------
    def call(self, indices: Sequence[int], method: str, *args: Any,
             timeout_s: float = CALL_TIMEOUT_S) -> list[Any]:
        """`method(*args)` on each of `indices`; every answer, or the first failure."""
        return self.gather([self.send(i, method, *args) for i in indices], timeout_s)

    def call_each(self, indices: Sequence[int], method: str, *args: Any,
                  timeout_s: float = CALL_TIMEOUT_S) -> list[Any]:
        """`method(*args)` on each of `indices`; None for one that failed or was late."""
        return self.gather_each([self.send(i, method, *args) for i in indices], timeout_s)


def in_thread(name: str, fn: Callable[..., None], *args: Any) -> None:
    """Run `fn(*args)` in a daemon thread of its own (how managers start long work; a
    unit test passes one that runs it at once)."""
    threading.Thread(target=fn, args=args, name=name, daemon=True).start()


#: How a manager starts long work: (thread name, function, its arguments).
Spawn = Callable[..., None]
