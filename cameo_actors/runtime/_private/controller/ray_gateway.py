"""The executor gateway of a real pool: each executor is a detached Ray actor."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any, Concatenate, ParamSpec, TypeVar, cast

import ray

from cameo_actors.runtime._private.checkpoint.shared import storage_unseen
from cameo_actors.runtime._private.cluster import NAMESPACE, drain_node, executor_name, find_actor
from cameo_actors.runtime._private.controller.gateway import Call, ExecutorGateway
from cameo_actors.runtime._private.executor.actor import Executor
from cameo_actors.runtime._private.executor_api import ExecutorAPI
from cameo_actors.runtime._private.remote import Actor, Reply, answered, gather, gather_each, poll
from cameo_actors.runtime.config import RuntimeConfig

P = ParamSpec("P")
R = TypeVar("R")
logger = logging.getLogger(__name__)


class RayCall(Call[R]):
    __slots__ = ("reply",)

    def __init__(self, reply: Reply[R]) -> None:
        self.reply = reply


def _replies(calls: Sequence[Call[R]]) -> list[Reply[R]]:
    return [cast(RayCall[R], c).reply for c in calls]


class RayGateway(ExecutorGateway):
    def __init__(self, pool: str, config: RuntimeConfig) -> None:
        self.pool, self.config = pool, config
        self.actors: list[Actor[ExecutorAPI] | None] = []  # by index; None: gone for good

    def send(self, index: int, method: Callable[Concatenate[ExecutorAPI, P], R],
             *args: P.args, **kwargs: P.kwargs) -> Call[R]:
        actor = self.actors[index]
        if actor is None:
            raise IndexError(f"executor {index} was removed from the pool")
        return RayCall(actor.send(method, *args, **kwargs))

    def gather(self, calls: Sequence[Call[R]], timeout_s: float) -> list[R]:
        return gather(_replies(calls), timeout_s)

    def gather_each(self, calls: Sequence[Call[R]], timeout_s: float) -> list[R | None]:
        return gather_each(_replies(calls), timeout_s)

    def poll(self, calls: Sequence[Call[R]], timeout_s: float) -> list[R | Exception | None]:
        return poll(_replies(calls), timeout_s)

    def start(self, indices: Sequence[int]) -> None:
        for i in indices:
            # Detached: executors outlive a controller that dies (a restarted one adopts
            # them); Ray restarts one that dies, and recovery restores what it hosted.
            handle = Executor.options(  # type: ignore[attr-defined]
                name=executor_name(self.pool, i), namespace=NAMESPACE, lifetime="detached",
                max_restarts=-1, max_task_retries=0, num_cpus=self.config.executor_cpus,
                scheduling_strategy="SPREAD").remote(i, self.config.to_dict())
            self._put(i, Actor(handle))

    def adopt(self, index: int) -> bool:
        handle = find_actor(executor_name(self.pool, index))
        self._put(index, Actor(handle) if handle is not None else None)
        return handle is not None

    def _put(self, index: int, actor: Actor[ExecutorAPI] | None) -> None:
        if index < len(self.actors):
            self.actors[index] = actor
        else:
            self.actors.append(actor)

    def forget(self, index: int) -> None:
        self._put(index, None)

    def started(self, indices: Sequence[int], timeout_s: float) -> int:
        pings = [self.send(i, ExecutorAPI.ping) for i in indices]
        return len(answered(_replies(pings), len(pings), timeout_s))

    def abandon(self, indices: Sequence[int]) -> None:
        for i in sorted(indices, reverse=True):
            actor = self.actors[i]
            if actor is not None:
                ray.kill(actor.handle)
            if i == len(self.actors) - 1:
                self.actors.pop()

    def kill(self, index: int) -> None:
        actor = self.actors[index]
        if actor is not None:
            ray.kill(actor.handle)
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
        return storage_unseen(self.config, lambda token: zip(indices, self.call(
            indices, ExecutorAPI.marks_missing, token), strict=True))

    def handles(self) -> list[Any]:
        return [a.handle if a is not None else None for a in self.actors]
