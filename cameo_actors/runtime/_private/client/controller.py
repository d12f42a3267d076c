"""The controller as a client sees it: `ControllerAPI`, each call a Ray call."""

from __future__ import annotations

import inspect
from typing import Any

from cameo_actors.runtime._private import cluster
from cameo_actors.runtime._private.controller_api import ControllerAPI
from cameo_actors.runtime.boundary import CALL_TIMEOUT_S


class RemoteController(ControllerAPI):
    """The controller as a client sees it: each of its calls a Ray call of the same name,
    answered before it returns (a `one_way` one only sent). A call with a `timeout_s`
    is waited for that long beyond `CALL_TIMEOUT_S` (None: `recovery_wait_s`)."""

    def __init__(self, handle: Any, *, recovery_wait_s: float = 0.0) -> None:
        self.handle = handle
        self.recovery_wait_s = recovery_wait_s

    def _forward(self, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        declared = getattr(ControllerAPI, name)
        ref = getattr(self.handle, name).remote(*args, **kwargs)
        if getattr(declared, "one_way", False):
            return None
        timeout_s = CALL_TIMEOUT_S
        signature = inspect.signature(declared)
        if "timeout_s" in signature.parameters:  # a call that waits says how long
            bound = signature.bind(self, *args, **kwargs)
            bound.apply_defaults()
            waited = bound.arguments["timeout_s"]
            timeout_s += self.recovery_wait_s if waited is None else float(waited)
        return cluster.get(ref, timeout_s)
