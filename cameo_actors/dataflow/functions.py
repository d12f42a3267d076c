"""Python functions referenced by import path ("pkg.mod:fn") in specs.

Specs arrive over RPC, so a path is imported only if its module lies under a
prefix the operator of the service allowed. In-process use (run_local, the
embedded runtime) allows everything: the code is the user's own.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence
from typing import Any

from cameo_actors.dataflow.spec import DataflowSpec
from cameo_actors.errors import SpecError


class FunctionResolver:
    """Imports functions by path, from allowed module prefixes only.

    Args:
        allowed_prefixes: module prefixes (e.g. ("myjobs.", "shared.udfs")); None allows all.

    >>> FunctionResolver(None).resolve("math:sqrt", "m1")(9.0)
    3.0
    """

    def __init__(self, allowed_prefixes: Sequence[str] | None = None) -> None:
        self.allowed_prefixes = tuple(allowed_prefixes) if allowed_prefixes is not None else None

    def check(self, path: str, step: str) -> None:
        """Refuse a path whose module is not under an allowed prefix (nothing is imported)."""
        module_name = path.partition(":")[0]
        if self.allowed_prefixes is not None and not any(
                module_name == p.rstrip(".") or module_name.startswith(p) for p in self.allowed_prefixes):
            raise SpecError(step, f"a function from an allowed module {list(self.allowed_prefixes)}",
                            path, "ask the service operator to allow the module (cameo serve "
                                  "--allow-module), or use a safe expression")

    def check_spec(self, spec: DataflowSpec) -> None:
        """`check` every function a spec names, before anything is deployed."""
        for step in spec.steps:
            path = getattr(step, "function", None)
            if path:
                self.check(path, step.id)

    def resolve(self, path: str, step: str) -> Callable[..., Any]:
        self.check(path, step)
        module_name, _, attr = path.partition(":")
        try:
            module = importlib.import_module(module_name)
        except ImportError as e:
            raise SpecError(step, "an importable module", module_name,
                            "install the module on the cluster (every node) or fix the path") from e
        fn: object = getattr(module, attr, None)
        if not callable(fn):
            raise SpecError(step, f"a function named {attr!r} in {module_name}", fn,
                            "check the function name after ':'")
        return fn
