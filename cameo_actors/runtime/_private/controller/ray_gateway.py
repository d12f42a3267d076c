"""The executor gateway of a real pool: each executor is a detached Ray actor."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import ray

from cameo_actors.runtime._private.checkpoint.shared import storage_unseen
from cameo_actors.runtime._private.cluster import (
    NAMESPACE,
    drain_node,
    executor_name,
    find_actor,
    get,
    get_each,
)
from cameo_actors.runtime._private.controller.gateway import ExecutorGateway
from cameo_actors.runtime._private.executor.actor import Executor
from cameo_actors.runtime.config import RuntimeConfig

logger = logging.getLogger(__name__)


class RayGateway(ExecutorGateway):
    def __init__(self, pool: str, config: RuntimeConfig) -> None:
        self.pool, self.config = pool, config
        self.actors: list[Any] = []  # by index; None for one gone for good

    def send(self, index: int, method: str, *args: Any) -> Any:
        return getattr(self.actors[index], method).remote(*args)

    def gather(self, replies: Sequence[Any], timeout_s: float) -> list[Any]:
        return list(get(list(replies), timeout_s=timeout_s))

    def gather_each(self, replies: Sequence[Any], timeout_s: float) -> list[Any]:
        return get_each(list(replies), timeout_s=timeout_s)

    def poll(self, replies: Sequence[Any], timeout_s: float) -> list[Any]:
        ready, _ = ray.wait(list(replies), num_returns=len(replies), timeout=timeout_s)
        done = set(ready)
        out: list[Any] = []
        for ref in replies:
            if ref not in done:
                out.append(None)  # slow, not dead: asked again next time
                continue
            try:
                out.append(ray.get(ref, timeout=0))
            except (ray.exceptions.RayActorError, ray.exceptions.ActorUnavailableError) as e:
                out.append(e)
        return out

    def start(self, indices: Sequence[int]) -> None:
        for i in indices:
            # Detached: executors outlive a controller that dies (a restarted one adopts
            # them); Ray restarts one that dies, and recovery restores what it hosted.
            actor = Executor.options(  # type: ignore[attr-defined]
                name=executor_name(self.pool, i), namespace=NAMESPACE, lifetime="detached",
                max_restarts=-1, max_task_retries=0, num_cpus=self.config.executor_cpus,
                scheduling_strategy="SPREAD").remote(i, self.config.to_dict())
            self._put(i, actor)

    def adopt(self, index: int) -> bool:
        actor = find_actor(executor_name(self.pool, index))
        self._put(index, actor)
        return actor is not None

    def _put(self, index: int, actor: Any) -> None:
        if index < len(self.actors):
            self.actors[index] = actor
        else:
            self.actors.append(actor)

    def forget(self, index: int) -> None:
        self._put(index, None)

    def started(self, indices: Sequence[int], timeout_s: float) -> int:
        refs = [self.actors[i].ping.remote() for i in indices]
        ready, _ = ray.wait(refs, num_returns=len(refs), timeout=timeout_s)
        return len(ready)

    def abandon(self, indices: Sequence[int]) -> None:
        for i in sorted(indices, reverse=True):
            ray.kill(self.actors[i])
            if i == len(self.actors) - 1:
                self.actors.pop()

    def kill(self, index: int) -> None:
        if self.actors[index] is not None:
            ray.kill(self.actors[index])
        # No handle of it is handed on: one of an actor of a job that has ended (the
        # service that made the pool, before an upgrade) cannot be read by another job.
        self.forget(index)

    def request_cpus(self, cpus: float) -> None:
        try:
            from ray.autoscaler.sdk import request_resources

            request_resources(num_cpus=int(cpus + 0.999))
        except Exception:  # no autoscaler here: the executors start where CPUs are free
            logger.debug("no autoscaler to ask for %s CPUs", cpus, exc_info=True)

    def drain_node(self, node: str, why: str) -> str | None:
        return drain_node(node, why)

    def storage_unseen(self, indices: Sequence[int]) -> str | None:
        return storage_unseen(self.config, lambda token: zip(indices, get(
            [self.actors[i].marks_missing.remote(token) for i in indices]), strict=True))

    def link(self, indices: Sequence[int], incarnations: dict[int, str]) -> None:
        get([self.actors[i].set_peers.remote(self.actors, incarnations) for i in indices])

    def relink(self, indices: Sequence[int], index: int, incarnation: str) -> None:
        get_each([self.actors[i].relink.remote(index, self.actors[index], incarnation)
                  for i in indices])

    def handles(self) -> list[Any]:
        return list(self.actors)

