"""Unit tests run the pure layers only: Ray, Spark and sleeping are blocked."""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from typing import Any

import pytest

from tests.shared.service_fakes import Service


def _no_sleep(*_args: object) -> None:
    raise RuntimeError("unit tests must not sleep: inject a FakeClock and advance() it")


@pytest.fixture(autouse=True)
def _pure(monkeypatch: pytest.MonkeyPatch) -> None:
    # None in sys.modules makes `import ray` raise ImportError inside the test.
    for name in ("ray", "pyspark"):
        monkeypatch.setitem(sys.modules, name, None)
    monkeypatch.setattr(time, "sleep", _no_sleep)


@pytest.fixture()
def svc() -> Iterator[Service]:
    """The real app over an in-memory runtime (tests/shared/service_fakes.py)."""
    s = Service()
    yield s
    s.http.close()


@pytest.fixture()
def run_cli(svc: Service, monkeypatch: pytest.MonkeyPatch,
            capsys: pytest.CaptureFixture[str]) -> Any:
    """`cameo ARGS` run in-process against the in-memory service as the admin: (exit
    code, stdout, stderr); `.client` is its client."""
    from tests.shared.service_fakes import ADMIN

    return cli_runner(svc.client(ADMIN), monkeypatch, capsys)


def cli_runner(client: Any, monkeypatch: pytest.MonkeyPatch,
               capsys: pytest.CaptureFixture[str]) -> Any:
    """`cameo ARGS` in-process with `client`: (exit code, stdout, stderr)."""
    from cameo_actors.service import cli

    monkeypatch.setattr(cli, "_client", lambda args: client)

    def run(*argv: str) -> tuple[int, str, str]:
        with pytest.raises(SystemExit) as done:
            cli.main(list(argv))
        out = capsys.readouterr()
        return int(done.value.code or 0), out.out, out.err
    run.client = client  # type: ignore[attr-defined]
    return run
