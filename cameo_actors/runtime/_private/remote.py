"""Typed calls to Ray actors: a call names its method by reference to the interface the
actor implements (`ExecutorAPI.cancel`, `ControllerAPI.settling`), never by a string,
so that a type checker follows every call across a process boundary, its arguments
and its answer included. Every Ray call of the runtime to its actors is made here.

>>> Actor[ExecutorAPI](handle).send(ExecutorAPI.cancel, "alerts").get()  # doctest: +SKIP
3

A client's view of the controller as a whole is `client.controller.RemoteController`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Concatenate, Generic, ParamSpec, TypeVar, cast

import ray

from cameo_actors.runtime._private import cluster
from cameo_actors.runtime.boundary import CALL_TIMEOUT_S

P = ParamSpec("P")
R = TypeVar("R")
API = TypeVar("API")


class Reply(Generic[R]):
    """A call under way: its answer, once it comes, is an `R`."""

    __slots__ = ("ref",)

    def __init__(self, ref: Any) -> None:
        self.ref = ref

    def get(self, timeout_s: float = CALL_TIMEOUT_S) -> R:
        """The answer; what the actor raised; or `RuntimeUnavailable` (the actor is gone,
        or silent for `timeout_s`)."""
        return cast(R, cluster.get(self.ref, timeout_s))


class Actor(Generic[API]):
    """A Ray actor that implements the interface `API`."""

    __slots__ = ("handle",)

    def __init__(self, handle: Any) -> None:
        self.handle = handle

    def send(self, method: Callable[Concatenate[API, P], R], *args: P.args,
             **kwargs: P.kwargs) -> Reply[R]:
        """Start `method(*args, **kwargs)` on the actor; a reply to wait on."""
        return Reply(getattr(self.handle, method.__name__).remote(*args, **kwargs))


def gather(replies: Sequence[Reply[R]], timeout_s: float = CALL_TIMEOUT_S) -> list[R]:
    """Every reply's answer, or the first failure (as `Reply.get`)."""
    return cast(list[R], cluster.get([r.ref for r in replies], timeout_s))


def gather_each(replies: Sequence[Reply[R]], timeout_s: float = CALL_TIMEOUT_S
                ) -> list[R | None]:
    """Each reply's answer, or None for one that failed or did not come in time."""
    return cast(list[R | None], cluster.get_each([r.ref for r in replies], timeout_s))


def answered(replies: Sequence[Reply[R]], at_least: int, timeout_s: float) -> list[Reply[R]]:
    """The replies whose answers came, once `at_least` did (or after `timeout_s`)."""
    if not replies:
        return []
    by_ref = {r.ref: r for r in replies}
    done, _ = ray.wait(list(by_ref), num_returns=min(at_least, len(replies)), timeout=timeout_s)
    return [by_ref[ref] for ref in done]


def poll(replies: Sequence[Reply[R]], timeout_s: float) -> list[R | Exception | None]:
    """Each reply's answer; the `RuntimeUnavailable` of an actor that is gone; or None
    for one that did not answer in `timeout_s` (slow, perhaps not dead)."""
    done = {id(r) for r in answered(replies, len(replies), timeout_s)}
    out: list[R | Exception | None] = []
    for reply in replies:
        if id(reply) not in done:
            out.append(None)  # slow, not dead: asked again next time
            continue
        try:
            out.append(reply.get(timeout_s=0))
        except TimeoutError as e:  # RuntimeUnavailable: the actor died
            out.append(e)
    return out
