"""The process boundaries, each declared once: the controller serves every call of its
interface through exactly one manager method of the same signature, the executor
answers every call of its own, a client's operation reaches its transport by name and
arguments, and no Ray call is made outside the typed-call modules."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path
from typing import Any

import pytest

from cameo_actors.runtime._private.controller.plane import routes
from cameo_actors.runtime._private.controller_api import ControllerAPI
from cameo_actors.runtime._private.executor.host import ExecutorHost
from cameo_actors.runtime._private.executor_api import ExecutorAPI
from cameo_actors.runtime.config import RuntimeConfig
from cameo_actors.runtime.interface import ControlAPI, operation_names, serves
from tests.shared.gateway import ControlPlane

PACKAGE = Path(__file__).resolve().parents[2] / "cameo_actors"
#: Where Ray calls to actors are made: the typed calls, and the controller's client.
RAY_CALLS = {"runtime/_private/remote.py", "runtime/_private/client/controller.py"}


def parameters(fn: Any) -> list[tuple[str, Any, Any]]:
    """(name, kind, default) of each parameter but the first (self); not the one Ray adds
    to an actor's methods once the actor class was made in this process (its tracing)."""
    return [(p.name, p.kind, p.default) for p in list(inspect.signature(fn).parameters.values())[1:]
            if not p.name.startswith("_ray")]


def plane(tmp_path: Path) -> ControlPlane:
    return ControlPlane(1, RuntimeConfig(checkpoint_url=str(tmp_path / "checkpoints"),
                                         ingress_log_dir=str(tmp_path / "ingress")))


def test_every_call_of_the_controller_is_served_once_with_its_declared_signature(
        tmp_path: Path) -> None:
    served = plane(tmp_path).routes
    assert sorted(served) == operation_names(ControllerAPI)
    for name, method in served.items():
        declared = getattr(ControllerAPI, name)
        assert parameters(declared) == [(p.name, p.kind, p.default) for p in
                                        inspect.signature(method).parameters.values()], name


def test_a_call_served_twice_or_not_at_all_is_refused_when_the_controller_is_built(
        tmp_path: Path) -> None:
    p = plane(tmp_path)

    class Again:
        @serves(ControlAPI.cancel)
        def cancel(self, name: str) -> Any:
            return None

    with pytest.raises(TypeError, match="cancel is served twice"):
        routes([p.lifecycle, Again()])
    with pytest.raises(TypeError, match="no manager serves"):
        routes([p.lifecycle])


def test_the_executor_answers_every_call_of_its_interface_as_declared() -> None:
    declared = [n for n in vars(ExecutorAPI) if callable(vars(ExecutorAPI)[n])
                and not n.startswith("_")]
    assert len(declared) > 40
    for name in declared:
        assert getattr(ExecutorHost, name) is not getattr(ExecutorAPI, name), name
        assert parameters(getattr(ExecutorHost, name)) == \
            parameters(getattr(ExecutorAPI, name)), name


def test_a_clients_operation_reaches_its_transport_by_name_and_arguments() -> None:
    sent: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = []

    class Client(ControlAPI):
        def _forward(self, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
            sent.append((name, args, kwargs))
            return name

    c = Client()
    assert c.scale("a", "win", 4, wait=True) == "scale"
    assert c.list() == "list"
    assert sent == [("scale", ("a", "win", 4), {"wait": True}), ("list", (), {})]
    assert getattr(ControlAPI.report_backlog, "one_way", False)
    assert inspect.signature(ControlAPI.scale).parameters["timeout_s"].default == 120.0
    with pytest.raises(NotImplementedError, match="does not do 'list'"):
        ControlAPI().list()


def test_ray_calls_to_actors_are_made_in_one_place() -> None:
    """`x.method.remote(...)` (a method named by its attribute, untyped) only in the typed
    calls; elsewhere actor classes are only declared (`ray.remote(...)`) and created
    (`X.options(...).remote(...)`)."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        where = path.relative_to(PACKAGE).as_posix()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                    and node.func.attr == "remote":
                receiver = node.func.value
                declares = isinstance(receiver, ast.Name) and receiver.id == "ray"
                creates = isinstance(receiver, ast.Call) \
                    and isinstance(receiver.func, ast.Attribute) and receiver.func.attr == "options"
                if not (declares or creates) and where not in RAY_CALLS:
                    found.append(f"{where}:{node.lineno}")
    assert found == []
